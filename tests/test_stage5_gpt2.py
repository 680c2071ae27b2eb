"""GPT-2's weights map onto stage 5 name by name (stage5_gpt/gpt2.py), shown on a GPT-2
state dict built here, in GPT-2's own layout: Conv1D weights (in, out), a q/k/v bias,
mask buffers, no lm_head. Nothing is downloaded."""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from stage5_gpt.gpt2 import config_for, from_gpt2, mapping
from stage5_gpt.model import GPT

V, T, C, L = 11, 8, 64, 2  # head size 64, as in GPT-2: n_head = C // 64


def gpt2_state(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: 0.1 * torch.randn(*shape, generator=g)  # noqa: E731
    s = {"transformer.wte.weight": r(V, C), "transformer.wpe.weight": r(T, C),
         "transformer.ln_f.weight": 1 + r(C), "transformer.ln_f.bias": r(C)}
    for i in range(L):
        p = f"transformer.h.{i}."
        s.update({p + "ln_1.weight": 1 + r(C), p + "ln_1.bias": r(C),
                  p + "attn.c_attn.weight": r(C, 3 * C), p + "attn.c_attn.bias": torch.zeros(3 * C),
                  p + "attn.c_proj.weight": r(C, C), p + "attn.c_proj.bias": r(C),
                  p + "attn.bias": torch.ones(1, 1, T, T).tril(), p + "attn.masked_bias": torch.tensor(-1e4),
                  p + "ln_2.weight": 1 + r(C), p + "ln_2.bias": r(C),
                  p + "mlp.c_fc.weight": r(C, 4 * C), p + "mlp.c_fc.bias": r(4 * C),
                  p + "mlp.c_proj.weight": r(4 * C, C), p + "mlp.c_proj.bias": r(C)})
    return s


def gpt2_forward(s: dict[str, torch.Tensor], idx: torch.Tensor) -> torch.Tensor:
    """GPT-2's forward pass written from its weights alone: Conv1D is x @ W + b."""
    B, t = idx.shape
    x = s["transformer.wte.weight"][idx] + s["transformer.wpe.weight"][:t]
    ln = lambda x, p: F.layer_norm(x, (C,), s[p + ".weight"], s[p + ".bias"])  # noqa: E731
    for i in range(L):
        p = f"transformer.h.{i}."
        q, k, v = (ln(x, p + "ln_1") @ s[p + "attn.c_attn.weight"]
                   + s[p + "attn.c_attn.bias"]).split(C, dim=-1)
        heads = lambda z: z.view(B, t, C // 64, 64).transpose(1, 2)  # noqa: E731
        att = heads(q) @ heads(k).transpose(-2, -1) / math.sqrt(64)
        att = att.masked_fill(s[p + "attn.bias"][0, 0, :t, :t] == 0, float("-inf")).softmax(-1)
        y = (att @ heads(v)).transpose(1, 2).reshape(B, t, C)
        x = x + y @ s[p + "attn.c_proj.weight"] + s[p + "attn.c_proj.bias"]
        h = F.gelu(ln(x, p + "ln_2") @ s[p + "mlp.c_fc.weight"] + s[p + "mlp.c_fc.bias"])
        x = x + h @ s[p + "mlp.c_proj.weight"] + s[p + "mlp.c_proj.bias"]
    return ln(x, "transformer.ln_f") @ s["transformer.wte.weight"].T  # the tied head


def test_a_gpt2_state_dict_loads_and_computes_the_same_logits():
    state = gpt2_state()
    model = GPT(config_for(state))
    ours, notes = from_gpt2(state)
    model.load_state_dict(ours)  # strict: every name maps, none is left over
    assert notes == []
    idx = torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(idx)[0], gpt2_forward(state, idx))


def test_a_q_k_v_bias_that_is_not_zero_is_named():
    state = gpt2_state()
    state["transformer.h.1.attn.c_attn.bias"] += 0.5
    _, notes = from_gpt2(state)
    assert notes == ["transformer.h.1.attn.c_attn.bias: GPT-2's q, k, v bias is not zero; "
                     "ours has none"]


def test_the_mapping_lists_every_weight_of_a_block_once():
    rows = mapping(config_for(gpt2_state()))
    names = [name for name, _, _ in rows]
    assert "transformer.h.0.attn.c_attn.weight" in names and "transformer.h.1.ln_1.weight" not in names
    transposed = {name for name, _, their in rows if "transposed" in their}
    assert transposed == {f"transformer.h.0.{w}.weight" for w in
                          ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")}
