"""The grader fails exactly the wrong exercise: a mutation suite (``make test-slow``).

For every exercise, the mistakes learners really make (an off-by-one window, the missing
1/sqrt(d_k), the mask after the softmax, temperature after the softmax, a forgotten
residual, an unscaled init, ...) are planted, one at a time, in a workbook whose every
exercise is otherwise the solution's. ``make grade`` must then report that exercise, and
only that one, FAILED, with a message in plain words (no tensor dumps, no object
addresses, no raw error of torch or Python), the section of the docs to read, and, where
the mistake lists them, the words that name it. Besides the mistakes in the numbers, each
family of the grader's old blind spots is planted several ways: a dropout missing or in
the wrong place, a device ignored, a division that overflows, an argument not passed on or
passed to the wrong place, a loop that never ends, a syntax error, a raw error of torch
(shapes that do not fit, ``view`` without ``contiguous``, None compared with a number).
Run whole, the suite also checks that every test of the exercises' own files fails for at
least one planted mistake: a test that cannot fail is a defect. The suite writes a table
(exercise, mistake, result) to ``mutations.md`` in pytest's temporary folder, the grader's
reports beside it, and prints the table and its path. ``WORKBOOK_MUTATIONS=4.1,5.3`` runs
a part.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import REPO_ROOT

_spec = importlib.util.spec_from_file_location("workbook", REPO_ROOT / "tools" / "workbook.py")
W = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("workbook", W)
_spec.loader.exec_module(W)

# A loop that never ends meets the grader's own limits (not the suite's longer time limit,
# kept for a busy machine), and a smaller memory limit, to fail in seconds.
LOOP = {"time_limit": W.TIME_LIMIT, "memory_limit": 2.0}


def _names(expect: str, **limits) -> dict:
    """A mistake's options: ``expect``, a pattern its message must match (the words that
    name the mistake); ``limits``: the grader's time and memory limits for it."""
    return {"expect": expect, **limits}


# exercise id -> [(mistake, text in the solution's code, what the learner wrote instead,
# and maybe its options: see _names)]
# The temperature's division in sample_next (5.3), which the overflow mistakes replace.
SCALE = ("    scale = min(1.0 / temperature, torch.finfo(logits.dtype).max)\n"
         "    logits = (logits - logits.max(dim=-1, keepdim=True).values) * scale")
MUTATIONS: dict[str, list[tuple]] = {
    "1.1": [
        ("unknown characters silently become id 0",
         "return [self.stoi[c] for c in text]", "return [self.stoi.get(c, 0) for c in text]"),
        ("the raw KeyError leaks (no UserError)",
         "except KeyError:", "except ZeroDivisionError:"),
        ("only the first unknown character is reported",
         "raise self._unknown_error(unknown[:10], len(unknown))",
         "raise self._unknown_error(unknown[:1], 1)"),
        ("positions counted from 1",
         "for i, c in enumerate(text) if", "for i, c in enumerate(text, 1) if"),
        ("a tensor instead of a list",
         "return [self.stoi[c] for c in text]",
         "return torch.tensor([self.stoi[c] for c in text])",
         _names("the name torch is not defined here: misspelled, or used without its import")),
        ("every unknown character shown (no cap at 10)",
         "unknown[:10], len(unknown)", "unknown, len(unknown)"),
        ("a while loop that never moves on (i += 1 forgotten)",
         "return [self.stoi[c] for c in text]",
         "ids, i = [], 0\n            while i < len(text):\n"
         "                ids.append(self.stoi[text[i]])\n            return ids",
         _names(r"the loop `while i < len\(text\):`", **LOOP)),
        ("a line indented too far (syntax)",
         "            unknown = [(i, c)", "                unknown = [(i, c)",
         _names(r"syntax error at stage1_data/tokenizer.py line .*indentation of this line")),
    ],
    "1.2": [
        ("off-by-one range check (id == vocab_size passes)",
         "not 0 <= i < self.vocab_size", "not 0 <= i <= self.vocab_size"),
        ("negative ids are not checked", "not 0 <= i < self.vocab_size", "not i < self.vocab_size"),
        ("tensors of ids are not converted to ints", "ids = [int(i) for i in ids]", "ids = list(ids)"),
        ("an iterator is read twice", "ids = [int(i) for i in ids]", "ids = (int(i) for i in ids)"),
        ("characters joined with spaces", 'return "".join(', 'return " ".join('),
        ("no range check at all", "if bad:", "if False:"),
    ],
    "1.3": [
        ("y is not shifted (y == x)",
         "y = torch.stack([data[i + 1 : i + block_size + 1] for i in ix])",
         "y = torch.stack([data[i : i + block_size] for i in ix])"),
        ("a window can run off the end (randint one too far)",
         "torch.randint(len(data) - block_size,", "torch.randint(len(data) - block_size + 1,",
         _names("torch.stack got tensors of different shapes")),
        ("the last window is never drawn (randint one too short)",
         "torch.randint(len(data) - block_size,", "torch.randint(len(data) - block_size - 1,"),
        ("y shifted by two", "data[i + 1 : i + block_size + 1]", "data[i + 2 : i + block_size + 2]"),
        ("the generator is ignored", "(batch_size,), generator=generator)", "(batch_size,))"),
        ("the data's dtype is kept (not torch.long)",
         "return x.to(device, torch.long), y.to(device, torch.long)", "return x.to(device), y.to(device)"),
        ("no check of batch_size", "if batch_size < 1:", "if batch_size < 0:"),
        ("the device ignored",
         "return x.to(device, torch.long), y.to(device, torch.long)", "return x.long(), y.long()",
         _names("the device it is given is ignored")),
        ("only x moved to the device",
         "return x.to(device, torch.long), y.to(device, torch.long)",
         "return x.to(device, torch.long), y.long()", _names("y is on cpu: move y too")),
        ("moved only when the device is called 'cuda'",
         "return x.to(device, torch.long), y.to(device, torch.long)",
         'x, y = x.long(), y.long()\n    if device == "cuda":\n        x, y = x.cuda(), y.cuda()\n'
         "    return x, y", _names("the device it is given is ignored")),
        ("always back to the CPU",
         "return x.to(device, torch.long), y.to(device, torch.long)",
         'return x.to("cpu", torch.long), y.to("cpu", torch.long)',
         _names("the device it is given is ignored")),
    ],
    "2.1": [
        ("softmax before cross_entropy",
         "F.cross_entropy(logits.view(B * T, V),", "F.cross_entropy(F.softmax(logits.view(B * T, V), -1),"),
        ("flattened logits returned", "        return logits, loss", "        return logits.view(B * T, V), loss"),
        ("summed instead of averaged", "targets.view(B * T))", "targets.view(B * T), reduction=\"sum\")"),
        ("nll_loss on raw logits", "loss = F.cross_entropy(", "loss = F.nll_loss("),
        ("targets shifted once more", "targets.view(B * T))", "targets.roll(-1, 1).reshape(B * T))"),
        ("the loss of the last position only",
         "F.cross_entropy(logits.view(B * T, V), targets.view(B * T))",
         "F.cross_entropy(logits[:, -1], targets[:, -1])"),
        ("probabilities, not logits (a softmax on the table's rows)",
         "logits = self.token_embedding_table(idx)",
         "logits = F.softmax(self.token_embedding_table(idx), dim=-1)",
         _names("yours are probabilities")),
        ("without targets, a loss of 0 instead of None", "return logits, None",
         "return logits, torch.tensor(0.0)", _names("without targets the loss should be None")),
        ("cross_entropy on the (B, T, V) logits, not flattened",
         "F.cross_entropy(logits.view(B * T, V), targets.view(B * T))",
         "F.cross_entropy(logits, targets)", _names(r"flatten the logits to \(B\*T, V\)")),
        ("a misspelled return (syntax)",
         "        return logits, loss", "        retrun logits, loss",
         _names("syntax error at stage2_bigram/model.py line")),
    ],
    "2.2": [
        ("the first position's logits, not the last",
         "logits = logits[:, -1, :]", "logits = logits[:, 0, :]",
         _names("the logits of the first position")),
        ("the context never grows", "idx = torch.cat((idx, idx_next), dim=1)", "idx = idx"),
        ("one token too many", "for _ in range(max_new_tokens):", "for _ in range(max_new_tokens + 1):"),
        ("temperature and top_k not passed on",
         "sample_next(logits, temperature, top_k, generator)",
         "sample_next(logits, generator=generator)",
         _names("temperature was not passed on")),
        ("the whole sequence yielded", "yield idx_next", "yield idx",
         _names("stream yielded the whole context each time")),
        ("the generator not passed on",
         "sample_next(logits, temperature, top_k, generator)",
         "sample_next(logits, temperature, top_k)",
         _names("generator was not passed on")),
        ("top_k not passed on",
         "sample_next(logits, temperature, top_k, generator)",
         "sample_next(logits, temperature, generator=generator)",
         _names("top_k was not passed on")),
        ("temperature and top_k passed the wrong way round",
         "sample_next(logits, temperature, top_k, generator)",
         "sample_next(logits, top_k, temperature, generator)", _names("the wrong way round")),
        ("the generator passed where top_k goes",
         "sample_next(logits, temperature, top_k, generator)",
         "sample_next(logits, temperature, generator)",
         _names("top_k=Generator: the settings went to the wrong places")),
        ("a loop that never ends (while True), the context growing",
         "for _ in range(max_new_tokens):", "while True:",
         _names("does (it|that loop) ever end", **LOOP)),
        ("a counter never counted up (n += 1 forgotten)",
         "for _ in range(max_new_tokens):", "n = 0\n        while n < max_new_tokens:",
         _names("does (it|that loop) ever end", **LOOP)),
        ("the loop counts the prompt's tokens too",
         "for _ in range(max_new_tokens):", "while idx.size(1) < max_new_tokens:",
         _names("3 new tokens, not 5")),
    ],
    "2.3": [
        ("not divided by N (a sum, not a mean)", "return grad / N", "return grad",
         _names("not divided by N")),
        ("divided by V, not by N", "return grad / N", "return grad / logits.shape[1]",
         _names("divided by V = 5")),
        ("divided by every logit (N * V)", "return grad / N", "return grad / logits.numel()",
         _names(r"divided by N \* V = 20")),
        ("the sign flipped (onehot - softmax)", "return grad / N", "return -grad / N",
         _names("the sign is flipped")),
        ("the one-hot never subtracted", "    grad[torch.arange(N), targets] -= 1", "    pass",
         _names("is not subtracted")),
        ("softmax over the examples (dim 0)", "F.softmax(logits, dim=-1)",
         "F.softmax(logits, dim=0)", _names("over the wrong dimension")),
        ("log_softmax, not softmax", "F.softmax(logits, dim=-1)", "F.log_softmax(logits, dim=-1)",
         _names("log_softmax, not softmax")),
        ("the 1 subtracted in every row at every target", "grad[torch.arange(N), targets] -= 1",
         "grad[:, targets] -= 1", _names(r"in every row at every example's target")),
        ("the 1 subtracted at the likeliest character", "grad[torch.arange(N), targets] -= 1",
         "grad[torch.arange(N), logits.argmax(-1)] -= 1", _names("likeliest character")),
        ("the true character set to -1 (=- 1 for -= 1)", "grad[torch.arange(N), targets] -= 1",
         "grad[torch.arange(N), targets] =- 1", _names(r"set to -1")),
        ("a one-hot only as wide as the largest target", "    grad[torch.arange(N), targets] -= 1",
         "    grad = grad - F.one_hot(targets)", _names(r"num_classes=V")),
        ("the softmax by hand, in place on the logits", "grad = F.softmax(logits, dim=-1)",
         "grad = logits.exp_()\n    grad /= grad.sum(-1, keepdim=True)",
         _names("changed the logits it was given")),
        ("the softmax by hand, exp without the shift (overflows)",
         "grad = F.softmax(logits, dim=-1)",
         "grad = logits.exp() / logits.exp().sum(-1, keepdim=True)",
         _names(r"exp\(300\) is too big")),
        ("a bracket too many (syntax)", "return grad / N", "return grad / N)",
         _names(r"syntax error at stage2_bigram/backward.py line .*closing \) with no opening")),
    ],
    "3.1": [
        ("sin and cos swapped",
         "pe[:, 0::2] = torch.sin(angle)\n    pe[:, 1::2] = torch.cos(angle[:, : n_embd // 2])",
         "pe[:, 0::2] = torch.cos(angle)\n    pe[:, 1::2] = torch.sin(angle[:, : n_embd // 2])"),
        ("exponent i/C instead of 2i/C", "(two_i / n_embd)", "(two_i / 2 / n_embd)"),
        ("positions counted from 1", "pos = torch.arange(block_size,", "pos = torch.arange(1, block_size + 1,"),
        ("an odd n_embd breaks the cos columns",
         "torch.cos(angle[:, : n_embd // 2])", "torch.cos(angle)",
         _names(r"values of shape \(5, 3\) were put where shape \(5, 2\) goes")),
        ("base 1000 instead of 10000", "10000.0 **", "1000.0 **"),
        ("multiplied by the frequency instead of divided", "angle = pos /", "angle = pos *"),
    ],
    "3.2": [
        ("no 1/sqrt(d_k) scale", " / math.sqrt(k.size(-1))", ""),
        ("divided by d_k, not sqrt(d_k)", "math.sqrt(k.size(-1))", "k.size(-1)"),
        ("mask not applied", "if self.causal:", "if False:"),
        ("mask applied after the softmax",
         '            wei = wei.masked_fill(self.tril[:T, :T] == 0, float("-inf"))  # no peeking ahead\n'
         "        wei = F.softmax(wei, dim=-1)  # each row sums to 1",
         "            pass\n        wei = F.softmax(wei, dim=-1)\n"
         "        if self.causal:\n            wei = wei.masked_fill(self.tril[:T, :T] == 0, 0.0)"),
        ("softmax over the wrong dimension", "F.softmax(wei, dim=-1)", "F.softmax(wei, dim=-2)"),
        ("the mask hides the diagonal too (off by one)",
         "self.tril[:T, :T] == 0", "self.tril[:T, :T].tril(-1) == 0"),
        ("k q^T instead of q k^T", "wei = q @ k.transpose(-2, -1)", "wei = k @ q.transpose(-2, -1)"),
        ("the causal switch ignored", "if self.causal:", "if True:"),
        ("k not transposed (q @ k)", "wei = q @ k.transpose(-2, -1)", "wei = q @ k",
         _names(r"transpose\(-2, -1\) missing")),
        ("a parenthesis left open (syntax)",
         "wei = F.softmax(wei, dim=-1)", "wei = F.softmax(wei, dim=-1",
         _names("syntax error at stage3_attention/model.py line .*inside exercise 3.2")),
    ],
    "3.3": [
        ("no position embeddings", "x = tok_emb + self.positions(T, idx.device)", "x = tok_emb"),
        ("no block_size check", "if T > self.config.block_size:", "if T > 10**9:"),
        ("the attention head skipped", "x = self.sa_head(x)", "x = x"),
        ("the loss of the last position only",
         "F.cross_entropy(logits.view(B * T, V), targets.view(B * T))",
         "F.cross_entropy(logits[:, -1], targets[:, -1])"),
        ("positions of the whole block, not of T",
         "self.positions(T, idx.device)", "self.positions(self.config.block_size, idx.device)",
         _names("tensors of different shapes were combined")),
        ("lm_head reads the token embeddings", "logits = self.lm_head(x)", "logits = self.lm_head(tok_emb)"),
    ],
    "4.1": [
        ("no 1/sqrt(d_k) scale", " / math.sqrt(hs)", ""),
        ("scaled by sqrt(n_embd), not sqrt(head_size)", "math.sqrt(hs)", "math.sqrt(C)"),
        ("mask not applied", '        wei = wei.masked_fill(self.tril[:T, :T] == 0, float("-inf"))\n', ""),
        ("mask applied after the softmax",
         '        wei = wei.masked_fill(self.tril[:T, :T] == 0, float("-inf"))\n'
         "        wei = F.softmax(wei, dim=-1)",
         "        wei = F.softmax(wei, dim=-1)\n"
         "        wei = wei.masked_fill(self.tril[:T, :T] == 0, 0.0)"),
        ("softmax over the wrong dimension", "F.softmax(wei, dim=-1)", "F.softmax(wei, dim=-2)"),
        ("heads split without the transpose",
         "q = q.view(B, T, nh, hs).transpose(1, 2)\n        k = k.view(B, T, nh, hs).transpose(1, 2)\n"
         "        v = v.view(B, T, nh, hs).transpose(1, 2)",
         "q = q.view(B, nh, T, hs)\n        k = k.view(B, nh, T, hs)\n        v = v.view(B, nh, T, hs)"),
        ("heads joined without transposing back",
         "y = y.transpose(1, 2).contiguous().view(B, T, C)", "y = y.contiguous().view(B, T, C)"),
        ("no output projection", "self.resid_dropout(self.c_proj(y))", "self.resid_dropout(y)"),
        ("no dropout on the attention weights", "y = self.attn_dropout(wei) @ v", "y = wei @ v",
         _names("self.attn_dropout was never called")),
        ("no dropout on the output (resid_dropout)", "self.resid_dropout(self.c_proj(y))",
         "self.c_proj(y)", _names("self.resid_dropout was never called")),
        ("the output's dropout before c_proj", "self.resid_dropout(self.c_proj(y))",
         "self.c_proj(self.resid_dropout(y))",
         _names("resid_dropout got the heads side by side, before c_proj")),
        ("dropout on the scores, before the softmax",
         "        wei = F.softmax(wei, dim=-1)\n        self.last_attention = wei.detach()\n"
         "        y = self.attn_dropout(wei) @ v",
         "        wei = F.softmax(self.attn_dropout(wei), dim=-1)\n"
         "        self.last_attention = wei.detach()\n        y = wei @ v",
         _names("attn_dropout got the scores, before the softmax")),
        ("dropout on v, not on the weights", "y = self.attn_dropout(wei) @ v",
         "y = wei @ self.attn_dropout(v)", _names("attn_dropout got v, the values")),
        ("dropout on the heads' output, after they multiplied v", "y = self.attn_dropout(wei) @ v",
         "y = self.attn_dropout(wei @ v)", _names(r"attn_dropout got the heads' output")),
        ("F.dropout, which drops in eval mode too", "y = self.attn_dropout(wei) @ v",
         "y = F.dropout(wei, self.attn_dropout.p) @ v", _names("in eval mode")),
        ("what attn_dropout returns thrown away", "y = self.attn_dropout(wei) @ v",
         "self.attn_dropout(wei)\n        y = wei @ v",
         _names("what self.attn_dropout returned is not used")),
        ("what resid_dropout returns thrown away",
         "        return self.resid_dropout(self.c_proj(y))",
         "        self.resid_dropout(self.c_proj(y))\n        return self.c_proj(y)",
         _names("not what self.resid_dropout returned")),
        ("view without contiguous", "y = y.transpose(1, 2).contiguous().view(B, T, C)",
         "y = y.transpose(1, 2).view(B, T, C)", _names(r"call \.contiguous\(\) before \.view\(\)")),
        ("k not transposed (q @ k)", "wei = q @ k.transpose(-2, -1) / math.sqrt(hs)",
         "wei = q @ k / math.sqrt(hs)", _names(r"transpose\(-2, -1\) missing")),
        ("the mask of the whole block, not cut to T", "self.tril[:T, :T] == 0", "self.tril == 0",
         _names("dimension 3 is 8 in one and 5 in the other")),
    ],
    "4.2": [
        ("no non-linearity (nn.Identity)",
         'self.act = nn.ReLU() if config.activation == "relu" else nn.GELU()', "self.act = nn.Identity()"),
        ("always ReLU",
         'self.act = nn.ReLU() if config.activation == "relu" else nn.GELU()', "self.act = nn.ReLU()"),
        ("ReLU and GELU swapped",
         'nn.ReLU() if config.activation == "relu" else nn.GELU()',
         'nn.GELU() if config.activation == "relu" else nn.ReLU()'),
        ("a hidden layer of C, not 4C",
         "self.c_fc = nn.Linear(C, 4 * C)\n        self.act", "self.c_fc = nn.Linear(C, C)\n        self.act"),
        ("dropout ignores config.dropout", "nn.Dropout(config.dropout)", "nn.Dropout(0.0)"),
        ("no bias in the first layer", "nn.Linear(C, 4 * C)", "nn.Linear(C, 4 * C, bias=False)"),
    ],
    "4.3": [
        ("no residual around the attention", "x = x + self.attn(self.ln_1(x))", "x = self.attn(self.ln_1(x))"),
        ("no residual around the MLP", "x = x + self.mlp(self.ln_2(x))", "x = self.mlp(self.ln_2(x))"),
        ("post-LN instead of pre-LN",
         "x = x + self.attn(self.ln_1(x))  # (B, T, C)\n        x = x + self.mlp(self.ln_2(x))",
         "x = self.ln_1(x + self.attn(x))\n        x = self.ln_2(x + self.mlp(x))"),
        ("ln_1 before both branches", "self.mlp(self.ln_2(x))", "self.mlp(self.ln_1(x))"),
        ("the MLP before the attention",
         "x = x + self.attn(self.ln_1(x))  # (B, T, C)\n        x = x + self.mlp(self.ln_2(x))",
         "x = x + self.mlp(self.ln_2(x))\n        x = x + self.attn(self.ln_1(x))"),
        ("the residual adds the normalised x",
         "x = x + self.attn(self.ln_1(x))", "x = self.ln_1(x)\n        x = x + self.attn(x)"),
        ("both branches read the same x",
         "x = x + self.attn(self.ln_1(x))  # (B, T, C)\n        x = x + self.mlp(self.ln_2(x))",
         "x = x + self.attn(self.ln_1(x)) + self.mlp(self.ln_2(x))"),
    ],
    "5.1": [
        ("c_proj std not scaled", "std=0.02 / math.sqrt(2 * self.config.n_layer)", "std=0.02"),
        ("scaled by sqrt(n_layer), forgetting the 2",
         "std=0.02 / math.sqrt(2 * self.config.n_layer)",
         "std=0.02 / math.sqrt(self.config.n_layer)"),
        ("scaled by 2 * n_layer, without the square root",
         "std=0.02 / math.sqrt(2 * self.config.n_layer)", "std=0.02 / (2 * self.config.n_layer)"),
        ("the weights never tied", "if self.config.tie_weights:", "if False:"),
        ("tied by copying the values, not by sharing the tensor",
         "self.lm_head.weight = self.transformer.wte.weight",
         "self.lm_head.weight.data = self.transformer.wte.weight.data",
         _names("should be the very tensor")),
        ("c_proj biases drawn too", 'name.endswith("c_proj.weight")', '"c_proj" in name'),
        ("biases left at nn.Linear's default",
         '            elif name.endswith("bias"):\n                nn.init.zeros_(p)', "",
         _names("should start at 0")),
        ("LayerNorm gains zeroed with the biases", 'elif name.endswith("bias"):', "else:",
         _names(r"ln_.*should start at 1")),
        ("the embeddings left at N(0, 1)", "elif p.dim() == 2:",
         'elif p.dim() == 2 and "wte" not in name and "wpe" not in name:',
         _names("should start with std 0.02")),
        ("every parameter drawn, LayerNorm gains too", "elif p.dim() == 2:", "elif True:"),
    ],
    "5.2": [
        ("warmup off by one (lr 0 at step 0)",
         "args.lr * (step + 1) / args.warmup_iters", "args.lr * step / args.warmup_iters"),
        ("the cosine ends at 0, not at min_lr",
         "return args.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (args.lr - args.min_lr)",
         "return 0.5 * (1.0 + math.cos(math.pi * progress)) * args.lr"),
        ("the cosine counted from step 0, not from the end of warmup",
         "progress = (step - args.warmup_iters) / max(1, decay_iters - args.warmup_iters)",
         "progress = step / max(1, decay_iters)"),
        ("--lr-decay-iters ignored",
         "decay_iters = args.lr_decay_iters or max(args.max_iters, 1)",
         "decay_iters = max(args.max_iters, 1)"),
        ("back to --lr after the decay", "        return args.min_lr\n", "        return args.lr\n"),
        ("a whole cosine period (2 pi)", "math.cos(math.pi * progress)", "math.cos(2 * math.pi * progress)"),
        ("linear decay instead of cosine",
         "0.5 * (1.0 + math.cos(math.pi * progress))", "(1.0 - progress)"),
        ("warmup one step too long", "if step < args.warmup_iters:", "if step <= args.warmup_iters:"),
        ("a colon missing after the if (syntax)",
         "if step < args.warmup_iters:", "if step < args.warmup_iters",
         _names("syntax error at stage5_gpt/train.py line .*inside exercise 5.2")),
    ],
    "5.3": [
        ("temperature applied after the softmax",
         "logits = (logits - logits.max(dim=-1, keepdim=True).values) * scale",
         "logits = logits - logits.max(dim=-1, keepdim=True).values"),
        ("top-k keeps k + 1", "torch.topk(logits, min(top_k, logits.size(-1)))",
         "torch.topk(logits, min(top_k + 1, logits.size(-1)))"),
        ("top-k masks with 0 instead of -inf", 'logits.masked_fill(logits < kth, float("-inf"))',
         "logits.masked_fill(logits < kth, 0.0)"),
        ("softmax over the batch", "probs = F.softmax(logits, dim=-1)", "probs = F.softmax(logits, dim=0)"),
        ("multiplied by the temperature", "scale = min(1.0 / temperature,", "scale = min(temperature,"),
        ("the generator ignored", "num_samples=1, generator=generator)", "num_samples=1)"),
        ("temperature 0 divides by zero", "    if temperature == 0:\n", "    if False:\n"),
        ("top-k drops the k-th itself (<=)", "logits < kth,", "logits <= kth,"),
        ("negative temperatures accepted", "if not temperature >= 0:", "if temperature != temperature:"),
        ("nan temperatures accepted", "if not temperature >= 0:", "if temperature < 0:",
         _names("nan fails every comparison")),
        ("the logits divided by the temperature, no guard against overflow", SCALE,
         "    logits = logits / temperature", _names("dividing the logits by it overflowed")),
        ("shifted, then divided: 0 / a temperature that is 0 in float32 is nan", SCALE,
         "    logits = (logits - logits.max(dim=-1, keepdim=True).values) / temperature",
         _names("dividing the logits by it overflowed")),
        ("1 / temperature capped, the logits not shifted", SCALE,
         "    scale = min(1.0 / temperature, torch.finfo(logits.dtype).max)\n"
         "    logits = logits * scale", _names("dividing the logits by it overflowed")),
        ("shifted, then times an uncapped 1 / temperature", SCALE,
         "    logits = (logits - logits.max(dim=-1, keepdim=True).values) * (1.0 / temperature)",
         _names("dividing the logits by it overflowed")),
        ("the temperature clamped at 1e-8: float16 logits still overflow", SCALE,
         "    logits = logits / max(temperature, 1e-8)",
         _names(r"float16 logits\) sampling should be greedy, but dividing the logits by it "
                "overflowed")),
        ("top_k compared with 1 while it is None", "if top_k is not None and top_k < 1:",
         "if top_k < 1:", _names(r"None was compared with a number \(None < an int\)")),
        ("top-k applied also for top_k=None", "    if top_k is not None:\n        kth",
         "    if True:\n        kth", _names("None was compared with a number")),
        ("= for == in a condition (syntax)", "if temperature == 0:", "if temperature = 0:",
         _names("syntax error at stage5_gpt/model.py line .*inside exercise 5.3")),
    ],
}
# What a plain message never holds: object addresses, pytest's `where` lines, tensor dumps,
# and the raw errors of torch and Python (the grader says them in plain words).
NOT_PLAIN = re.compile(r"<built-in|<function|<bound method| at 0x[0-9a-f]|\+\s+where|"
                       r"tensor\(\[[^\]]{40}")
RAW_ERROR = re.compile("|".join(re.escape(x) for x in (
    "view size is not compatible", "is invalid for input of size", "mat1 and mat2 shapes",
    "must match the size of tensor", "Expected size for first two dimensions",
    "stack expects each tensor", "stack expects a non-empty", "The expanded size",
    "not supported between instances of",
    "unsupported operand type", "probability tensor contains", "Dimension out of range",
    "index out of range in self", "Expected target size", "random_ expects",
    "not NoneType", "meta tensor", "Expected all tensors to be on the same device",
    "' is not defined",
    "is not on the expected device", "Boolean value of Tensor", "does not have a grad_fn")))
SAME_NUMBERS = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?(?:e-?\d+)?) == \1(?![\w.])")


def planted(ex_id: str, k: int) -> tuple[str, str, str, dict]:
    """Mistake ``k`` of exercise ``ex_id``: its name, the solution's text, the learner's,
    and its options (see _names)."""
    mistake, old, new, *options = MUTATIONS[ex_id][k]
    return mistake, old, new, (options[0] if options else {})


def mutate(folder: Path, ex, old: str, new: str) -> None:
    """Plant a mistake: replace ``old`` by ``new`` inside exercise ``ex``'s code."""
    path = folder / ex.package / ex.file
    text = path.read_text(encoding="utf-8")
    first, last = W.exercise_span(text, ex)
    lines = text.splitlines(keepends=True)
    code = "".join(lines[first:last])
    assert code.count(old) == 1, f"{ex.id}: {old!r} is not once in {ex.qualname}"
    path.write_text("".join(lines[:first]) + code.replace(old, new) + "".join(lines[last:]),
                    encoding="utf-8")


def grade_one(tmp: Path, ex_id: str, k: int) -> dict:
    ex = W.BY_ID[ex_id]
    mistake, old, new, options = planted(ex_id, k)
    folder = tmp / f"m{ex_id.replace('.', '_')}_{k}"
    W.make(ex.stage, folder, holes=[])
    mutate(folder, ex, old, new)
    result = W.run_tests(folder, [ex.stage], time_limit=options.get("time_limit", 300),
                         memory_limit=options.get("memory_limit", W.MEMORY_LIMIT))
    rows = W.judge(result, ex.stage, folder / ex.package)
    lines, ok = W.summary(result, rows)
    failing = {t["nodeid"] for t in result["tests"]
               if t["verdicts"].get(ex_id, {}).get("outcome") == "failed"}
    return {"ex": ex_id, "mistake": mistake, "rows": rows, "report": "\n".join(lines), "ok": ok,
            "expect": options.get("expect"), "failing": failing}


def verdict(run: dict) -> str:
    """'FAILED: <message>' when the grader got it right, else what went wrong."""
    mine = next(r for r in run["rows"] if r["id"] == run["ex"])
    others = [f"{r['id']} {r['status'].upper()}" for r in run["rows"]
              if r["id"] != run["ex"] and r["status"] != "passed"]
    problems = []
    if mine["status"] != "failed":
        problems.append(f"{run['ex']} {mine['status'].upper()}")
    problems += others
    message = mine["message"]
    if NOT_PLAIN.search(message) or SAME_NUMBERS.search(message):
        problems.append("message not plain")
    if RAW_ERROR.search(message):
        problems.append("a raw error of torch or Python, not said in plain words")
    if run.get("expect") and not re.search(run["expect"], message):
        problems.append(f"the message does not name the mistake ({run['expect']!r})")
    line = next(x for x in run["report"].splitlines() if x.startswith(f"  {run['ex']}  "))
    if " 0 of " in line:
        problems.append("FAILED, yet '0 of' its tests fail")
    if f"read: {W.BY_ID[run['ex']].docs}" not in run["report"]:
        problems.append("no docs section to read")
    detail = line.split("FAILED", 1)[-1].strip()
    if problems:
        return "MISSED (" + ", ".join(problems) + "): " + message
    return f"FAILED ({detail}): {message}"


def exercise_tests() -> dict[str, list[str]]:
    """Every test function of the exercises' own files, by exercise id (the ``# --- 4.1``
    section it is in)."""
    found: dict[str, list[str]] = {}
    for stage in sorted(W.STAGES):
        path = REPO_ROOT / f"tests/test_stage{stage}_exercises.py"
        text = path.read_text(encoding="utf-8")
        sections = [(m.start(), m[1]) for m in re.finditer(r"^# -+ (\d\.\d) ", text, flags=re.M)]
        for node in ast.parse(text).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                offset = len("".join(text.splitlines(keepends=True)[:node.lineno - 1]))
                ex_id = [ex for start, ex in sections if start < offset][-1]
                found.setdefault(ex_id, []).append(f"{path.relative_to(REPO_ROOT).as_posix()}::"
                                                   f"{node.name}")
    return found


def test_every_mutation_hits_a_real_line():
    """Quick: every mistake above is planted in the code it names (the stage code moves)."""
    for ex_id, mistakes in MUTATIONS.items():
        ex = W.BY_ID[ex_id]
        text = W.solution_text(ex)
        first, last = W.exercise_span(text, ex)
        code = "".join(text.splitlines(keepends=True)[first:last])
        assert len(mistakes) >= 5, f"exercise {ex_id} has only {len(mistakes)} mistakes"
        for k in range(len(mistakes)):
            mistake, old, new, options = planted(ex_id, k)
            assert code.count(old) == 1, f"{ex_id} {mistake!r}: {old!r} is not once in {ex.qualname}"
            assert set(options) <= {"expect", "time_limit", "memory_limit"}, (ex_id, mistake)
            re.compile(options.get("expect", ""))
        assert len({m[0] for m in mistakes}) == len(mistakes), f"{ex_id}: two mistakes, one name"
    assert set(MUTATIONS) == set(W.BY_ID)
    assert set(exercise_tests()) == set(W.BY_ID)


@pytest.mark.slow
def test_each_planted_mistake_fails_that_exercise_and_only_it(tmp_path):
    jobs = [(ex_id, k) for ex_id in MUTATIONS for k in range(len(MUTATIONS[ex_id]))]
    only = os.environ.get("WORKBOOK_MUTATIONS")  # e.g. "4.1,5.3": a part of the suite
    if only:
        jobs = [j for j in jobs if j[0] in only.split(",")]
    workers = max(1, min(4, (os.cpu_count() or 2) // 2))
    with ThreadPoolExecutor(workers) as pool:
        runs = list(pool.map(lambda job: grade_one(tmp_path, *job), jobs))
    table = ["| Exercise | Mistake | Result |", "|---|---|---|"]
    for run in runs:
        cell = verdict(run).replace("|", "\\|")
        table.append(f"| {run['ex']} | {run['mistake']} | {cell} |")
    path = tmp_path / "mutations.md"
    path.write_text("\n".join(table) + "\n", encoding="utf-8")
    reports = tmp_path / "mutations-reports.txt"  # what `make grade` printed, for each
    reports.write_text("\n\n".join(f"== {r['ex']}: {r['mistake']}\n{r['report']}" for r in runs)
                       + "\n", encoding="utf-8")
    print("\n".join(table))
    print(f"\nthe table: {path}\nthe grader's reports: {reports}")
    missed = [f"{r['ex']} {r['mistake']}: {verdict(r)}\n{r['report']}" for r in runs
              if not verdict(r).startswith("FAILED")]
    # A test of the exercises' own files that no planted mistake fails cannot fail: a defect.
    failing = {nodeid.split("[")[0] for r in runs for nodeid in r["failing"]}
    ran = {ex_id for ex_id, _ in jobs}
    idle = [t for ex_id, tests in exercise_tests().items() if ex_id in ran for t in tests
            if t not in failing]
    assert not missed and not idle, "\n\n".join(
        missed + ([f"no planted mistake fails these tests of the exercises: {idle}"] if idle
                  else []))
