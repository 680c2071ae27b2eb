"""Stage 5 is GPT-2: tested against the reference implementation, Hugging Face
``transformers``' GPT2LMHeadModel, built here from a GPT2Config with random weights
(nothing is downloaded). Loaded through ``from_gpt2``, our GPT gives the same logits,
loss and greedy tokens (with and without its KV cache); ``--init-from FOLDER`` runs the
whole path on a folder written by ``save_pretrained``, in GPT-2's own layout."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import run_module as run_cli
from transformers import GPT2Config, GPT2LMHeadModel

from stage5_gpt import gpt2
from stage5_gpt.bpe import BPETokenizer
from stage5_gpt.errors import UserError
from stage5_gpt.gpt2 import config_from_hf, from_gpt2, init_from, load_gpt2, mapping
from stage5_gpt.model import GPT, GPTConfig

# (vocab, positions, layers, heads, width, dropout): three sizes, the last with dropout,
# which eval mode turns off in both models.
SIZES = [(100, 64, 1, 1, 16, 0.0), (257, 80, 3, 4, 48, 0.0), (1000, 96, 4, 8, 64, 0.1)]


def reference(V: int, T: int, L: int, H: int, C: int, p: float, seed: int = 0) -> GPT2LMHeadModel:
    """transformers' GPT-2 at these sizes, random weights (biases and LayerNorms too)."""
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=V, n_positions=T, n_layer=L, n_head=H, n_embd=C,
                        resid_pdrop=p, embd_pdrop=p, attn_pdrop=p, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
    with torch.no_grad():  # GPT-2 initialises biases and LayerNorms to 0 and 1: move them
        for t in model.parameters():
            if t.dim() == 1:
                t.add_(0.1 * torch.randn_like(t))
    return model.eval()


def ours_from(hf: GPT2LMHeadModel) -> GPT:
    model = GPT(config_from_hf(hf.config.to_dict()))
    model.load_state_dict(from_gpt2(hf.state_dict()))  # strict: every name maps, none is left
    return model.eval()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"V{s[0]}-L{s[2]}-H{s[3]}-C{s[4]}-p{s[5]}")
def test_our_gpt_computes_what_transformers_gpt2_computes(size):
    hf = reference(*size)
    ours = ours_from(hf)
    V, T = size[0], size[1]
    g = torch.Generator().manual_seed(1)
    idx, targets = torch.randint(0, V, (3, T), generator=g), torch.randint(0, V, (3, T), generator=g)
    with torch.no_grad():
        ref = hf(idx, labels=None)
        logits, loss = ours(idx, targets)
        ref_loss = torch.nn.functional.cross_entropy(ref.logits.view(-1, V), targets.view(-1))
    assert (logits - ref.logits).abs().max().item() <= 1e-5
    assert abs(loss.item() - ref_loss.item()) <= 1e-5


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"V{s[0]}-L{s[2]}-H{s[3]}-C{s[4]}-p{s[5]}")
def test_50_greedy_tokens_equal_transformers_with_and_without_the_kv_cache(size):
    hf = reference(*size, seed=2)
    ours = ours_from(hf)
    prompt = torch.randint(0, size[0], (2, 7), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        theirs = hf.generate(prompt, max_new_tokens=50, do_sample=False, pad_token_id=0,
                             attention_mask=torch.ones_like(prompt))
    assert theirs.shape == (2, 57)
    for use_cache in (True, False):
        assert torch.equal(ours.generate(prompt, 50, temperature=0, use_cache=use_cache), theirs)


def test_the_gelu_is_gpt2s_tanh_form_not_the_exact_one():
    """The reference differs from our model with the exact GELU: the tanh form matters."""
    hf = reference(*SIZES[1])
    with torch.no_grad():  # pre-activations of size ~1, where the two forms differ most
        for block in hf.transformer.h:
            block.mlp.c_fc.weight.mul_(30)
    ours = ours_from(hf)
    idx = torch.randint(0, SIZES[1][0], (2, 40), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        same = (ours(idx)[0] - hf(idx).logits).abs().max().item()
        for block in ours.transformer.h:
            block.mlp.act = torch.nn.GELU()
        exact = (ours(idx)[0] - hf(idx).logits).abs().max().item()
    assert same <= 1e-5 < exact


def test_our_layout_is_gpt2s_name_for_name_with_the_four_projections_transposed():
    hf = reference(*SIZES[1])
    ours = GPT(config_from_hf(hf.config.to_dict()))
    theirs = {k: v for k, v in hf.state_dict().items() if not k.endswith(".attn.bias")}
    assert set(ours.state_dict()) == set(theirs) | {"lm_head.weight"}
    for name, t in ours.state_dict().items():
        want = theirs.get(name, theirs["transformer.wte.weight"])
        assert t.shape == (want.T.shape if name.endswith(gpt2.TRANSPOSED) else want.shape), name
    assert ours.lm_head.bias is None and ours.lm_head.weight is ours.transformer.wte.weight
    assert all(block.attn.c_attn.bias is not None for block in ours.transformer.h)


def test_a_checkpoint_without_the_transformer_prefix_and_with_mask_buffers_loads():
    """OpenAI's own file names its tensors h.0.attn.c_attn.weight ... and keeps the causal
    mask as h.N.attn.bias: both are handled."""
    hf = reference(*SIZES[0])
    state = {k.removeprefix("transformer."): v for k, v in hf.state_dict().items()
             if k != "lm_head.weight"}
    state["h.0.attn.bias"] = torch.ones(1, 1, 64, 64).tril()
    model = GPT(config_from_hf(hf.config.to_dict()))
    model.load_state_dict(from_gpt2(state))
    idx = torch.randint(0, 100, (1, 20), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert (model.eval()(idx)[0] - hf(idx).logits).abs().max().item() <= 1e-5


@pytest.mark.parametrize("key, value", [("activation_function", "relu"),
                                        ("layer_norm_epsilon", 1e-6),
                                        ("scale_attn_by_inverse_layer_idx", True)])
def test_a_config_this_gpt_cannot_compute_is_refused_by_name(key, value):
    hf = GPT2Config(vocab_size=10, n_positions=8, n_layer=1, n_head=1, n_embd=8).to_dict()
    hf[key] = value
    with pytest.raises(UserError, match=key):
        config_from_hf(hf)


def test_the_mapping_lists_every_weight_of_one_block_and_names_gpt2s_transposed_ones():
    rows = mapping(GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16))
    names = [name for name, _, _ in rows]
    assert "transformer.h.0.attn.c_attn.bias" in names and "transformer.h.1.ln_1.weight" not in names
    assert "lm_head.weight" not in names  # tied: it is transformer.wte.weight
    transposed = {name for name, _, theirs in rows if "transposed" in theirs}
    assert transposed == {f"transformer.h.0.{w}.weight" for w in
                          ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")}


def test_gpt2_small_has_124_million_parameters_as_its_config_gives():
    """GPT-2 small from its sizes, counted by formula: wte, wpe, 12 blocks and ln_f."""
    V, T, L, C = 50257, 1024, 12, 768
    block = 2 * 2 * C + (C * 3 * C + 3 * C) + (C * C + C) + (C * 4 * C + 4 * C) + (4 * C * C + C)
    with torch.device("meta"):
        n = sum(p.numel() for p in GPT(GPTConfig(**gpt2.SMALL)).parameters())
    assert n == V * C + T * C + L * block + 2 * C == 124_439_808


def test_python_m_gpt2_prints_the_mapping_and_the_parameter_count():
    r = run_cli("stage5_gpt.gpt2")
    assert r.returncode == 0, r.stderr
    assert "transformer.h.0.mlp.c_fc.weight" in r.stdout and "(768, 3072), transposed" in r.stdout
    assert "124,439,808 parameters" in r.stdout


# --- --init-from FOLDER: the whole path on a folder in GPT-2's layout ------------------------


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory):
    """A small random GPT-2 saved by transformers' save_pretrained, with a BPE vocabulary
    trained here, in GPT-2's vocab.json / merges.txt format: GPT-2 small's layout."""
    folder = tmp_path_factory.mktemp("gpt2")
    text = "Hello, I'm a language model, and I like the cat on the mat.\n" * 20
    tokenizer = BPETokenizer.train(text, 40)
    tokenizer.save(folder)
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(vocab_size=tokenizer.vocab_size, n_positions=64, n_layer=2,
                                    n_head=2, n_embd=32, bos_token_id=0, eos_token_id=0))
    hf.save_pretrained(folder)
    assert {p.name for p in folder.iterdir()} >= set(gpt2.FILES)
    return folder, hf.eval(), tokenizer


def test_load_gpt2_reads_the_folder_into_our_gpt_and_bpe(gpt2_folder):
    folder, hf, tokenizer = gpt2_folder
    model, tok = load_gpt2(folder)
    ids = torch.tensor([tok.encode("Hello, I'm a language model")])
    assert tok.encode("the cat") == tokenizer.encode("the cat")
    with torch.no_grad():
        assert (model(ids)[0] - hf(ids).logits).abs().max().item() <= 1e-5


def test_init_from_gpt2_downloads_each_pinned_file_once_into_the_cache(tmp_path, monkeypatch,
                                                                       gpt2_folder):
    """--init-from gpt2 fetches the four files from the pinned revision (here from a folder
    standing in for huggingface.co) and checks each against its pinned sha256."""
    folder, _, _ = gpt2_folder
    from stage5_gpt.download import file_sha256
    monkeypatch.setenv("GPT_STAGES_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(gpt2, "URL", folder.as_uri() + "/{name}")
    monkeypatch.setattr(gpt2, "FILES", {n: file_sha256(folder / n) for n in gpt2.FILES})
    model, _ = init_from("gpt2")
    cached = tmp_path / "cache" / f"gpt2-{gpt2.REVISION[:12]}"
    assert sorted(p.name for p in cached.iterdir()) == sorted(gpt2.FILES)
    assert model.config.n_layer == 2
    monkeypatch.setattr(gpt2, "URL", "http://127.0.0.1:9/{name}")  # the network is gone
    init_from("gpt2")  # the cache answers


def test_init_from_gpt2_offline_names_init_from_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("GPT_STAGES_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(gpt2, "URL", "http://127.0.0.1:9/{name}")
    with pytest.raises(UserError, match="--init-from FOLDER"):
        init_from("gpt2")


def test_a_download_that_is_not_the_pinned_file_is_refused(tmp_path, monkeypatch, gpt2_folder):
    folder, _, _ = gpt2_folder
    monkeypatch.setenv("GPT_STAGES_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(gpt2, "URL", folder.as_uri() + "/{name}")  # not GPT-2's real files
    with pytest.raises(UserError, match="sha256"):
        init_from("gpt2")


@pytest.mark.parametrize("module", ["sample", "visualize", "lens", "inspect"])
def test_every_tool_runs_with_init_from_a_gpt2_folder(module, gpt2_folder, tmp_path):
    folder, _, _ = gpt2_folder
    extra = {"sample": ["--tokens", "12", "--temperature", "0"],
             "visualize": ["--out-dir", str(tmp_path)], "lens": ["--out-dir", str(tmp_path)],
             "inspect": []}[module]
    r = run_cli(f"stage5_gpt.{module}", "--init-from", str(folder), "--prompt", "Hello, the cat",
                *extra, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    if module == "sample":
        assert r.stdout.startswith("Hello, the cat")


def test_sample_with_init_from_equals_transformers_greedy_text(gpt2_folder, tmp_path):
    folder, hf, tokenizer = gpt2_folder
    prompt = "Hello, I'm a language model,"
    ids = torch.tensor([tokenizer.encode(prompt)])
    with torch.no_grad():
        theirs = hf.generate(ids, max_new_tokens=20, do_sample=False, pad_token_id=0,
                             attention_mask=torch.ones_like(ids))
    r = run_cli("stage5_gpt.sample", "--init-from", str(folder), "--prompt", prompt,
                "--tokens", "20", "--temperature", "0", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip("\n") == tokenizer.decode(theirs[0].tolist())


@pytest.mark.parametrize("make, message", [
    (lambda f: (f / "model.safetensors").unlink(), "lacks model.safetensors"),
    (lambda f: (f / "config.json").write_text("{not json"), "cannot read"),
    (lambda f: (f / "config.json").write_text(json.dumps({"n_layer": 1})), "config.json has no"),
])
def test_a_broken_gpt2_folder_is_one_error_line(make, message, gpt2_folder, tmp_path):
    import shutil
    folder = tmp_path / "copy"
    shutil.copytree(gpt2_folder[0], folder)
    make(folder)
    r = run_cli("stage5_gpt.sample", "--init-from", str(folder), cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("error: ") and message in r.stderr
    assert "Traceback" not in r.stderr


def test_init_from_a_path_that_is_not_a_folder_says_what_to_give(tmp_path):
    r = run_cli("stage5_gpt.sample", "--init-from", str(tmp_path / "nope"), cwd=tmp_path)
    assert r.returncode == 2 and "not a folder" in r.stderr and "gpt2" in r.stderr
