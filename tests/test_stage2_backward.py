"""Stage 2's backward pass by hand (stage2_bigram/backward.py): the gradient of the mean
cross-entropy is (softmax - onehot) / N, equal to autograd's; the bigram's table collects
it by row; a row whose probabilities are the counts' frequencies gets no gradient."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from stage2_bigram import backward, train
from stage2_bigram.backward import logits_grad, table_grad
from stage2_bigram.model import LanguageModel, ModelConfig


@pytest.mark.parametrize("N, V", [(1, 2), (7, 5), (256, 65)])
def test_the_formula_is_autograds_gradient_of_the_mean_cross_entropy(N, V):
    g = torch.Generator().manual_seed(N)
    logits = (3 * torch.randn(N, V, generator=g)).requires_grad_()
    targets = torch.randint(V, (N,), generator=g)
    F.cross_entropy(logits, targets).backward()
    torch.testing.assert_close(logits_grad(logits.detach(), targets), logits.grad)
    # Each row sums to 0 (probabilities sum to 1, minus the 1 at the target), over N.
    torch.testing.assert_close(logits_grad(logits.detach(), targets).sum(1), torch.zeros(N))


def test_the_formula_does_not_change_its_input():
    logits = torch.randn(4, 3)
    before = logits.clone()
    logits_grad(logits, torch.tensor([0, 1, 2, 0]))
    assert torch.equal(logits, before)


def test_the_tables_gradient_is_the_examples_gradients_summed_by_row():
    torch.manual_seed(0)
    model = LanguageModel(ModelConfig(vocab_size=6))
    x, y = torch.randint(6, (4, 5)), torch.randint(6, (4, 5))
    model(x, y)[1].backward()
    table = model.token_embedding_table.weight
    by_hand = table_grad(x.view(-1), logits_grad(table[x.view(-1)].detach(), y.view(-1)), 6)
    torch.testing.assert_close(by_hand, table.grad)
    unread = sorted(set(range(6)) - set(x.view(-1).tolist()))
    assert all(torch.equal(table.grad[a], torch.zeros(6)) for a in unread)


def test_a_row_that_predicts_the_counts_frequencies_gets_no_gradient():
    """Why the trained table approaches the counts: on the whole text, row a's gradient is
    (m_a / N) (softmax(W[a]) - c_a / m_a), zero at the frequencies."""
    text = torch.tensor([0, 1, 0, 2, 0, 1, 1, 2, 0, 1, 2, 2, 0])
    inputs, targets = text[:-1], text[1:]
    counts = torch.zeros(3, 3).index_put_((inputs, targets), torch.ones(len(inputs)),
                                          accumulate=True)
    W = (counts / counts.sum(1, keepdim=True)).log()  # softmax(W[a]) = the frequencies
    grad = table_grad(inputs, logits_grad(W[inputs], targets), 3)
    torch.testing.assert_close(grad, torch.zeros(3, 3))
    moved = W.clone()
    moved[0, 1] += 0.5  # too likely now: its gradient is positive, a step lowers it
    assert table_grad(inputs, logits_grad(moved[inputs], targets), 3)[0, 1] > 0


def test_the_command_prints_both_gradients_equal_and_a_row_beside_its_counts(tmp_path,
                                                                             tiny_corpus, capsys):
    out = tmp_path / "run"
    train.main([str(a) for a in ("--data", tiny_corpus, "--out-dir", out, "--max-iters", 20,
                                 "--eval-interval", 10, "--eval-iters", 1, "--sample-tokens", 0,
                                 "--threads", 1)])
    capsys.readouterr()
    backward.main(["--ckpt", str(out / "best.pt")])
    lines = capsys.readouterr().out.splitlines()
    diffs = [float(line.rsplit("= ", 1)[1]) for line in lines if "max |by hand - autograd|" in line]
    assert len(diffs) == 3 and max(diffs) < 1e-6  # logits, every weight, the table by row
    assert any("softmax(W[a])" in line and "c_a / m_a" in line for line in lines)


def test_the_command_without_a_checkpoint_says_to_train_first(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        backward.main(["--ckpt", str(tmp_path / "none.pt")])
    assert e.value.code == 2 and capsys.readouterr().err.startswith("error: no checkpoint")
