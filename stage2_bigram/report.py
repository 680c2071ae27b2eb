"""What a training run reports: its parts as it starts; its files, and whether its loss is
normal, when it ends.

Is my loss normal? ``references/<stage>.json`` at the top of the repository holds, for this stage,
the results of the runs the course shows (each with the settings that decide its
numbers) and a tolerance: how far the final val loss moved between seeds. At the
end of training the harness prints whether this run landed in that range and,
when it did not, the likely causes. With no reference for exactly these
settings, it names the nearest one and the flags that differ.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import torch

from .plots import plot_losses

REFERENCES = Path(__file__).resolve().parents[1] / "references" / f"{__package__}.json"
GUIDE = "docs/troubleshooting.md (中文: docs/zh/troubleshooting.md)"


def param_breakdown(model: torch.nn.Module) -> dict[str, int]:
    """Parameter counts by part of the model (``transformer.wte``, ..., ``lm_head``), and
    the total. A weight that two parts share (tied) counts once, under the first."""
    parts: dict[str, int] = {}
    for name, p in model.named_parameters():  # lists a shared tensor only once
        part = ".".join(name.split(".")[: 2 if name.startswith("transformer.") else 1])
        parts[part] = parts.get(part, 0) + p.numel()
    return {**parts, "total": sum(parts.values())}


def describe(run, model: torch.nn.Module) -> list[str]:
    """What trains, as a run starts: the parameters (part by part when there are several),
    the vocabulary, the data, the device."""
    c, parts = run.corpus, param_breakdown(model)
    lines = [f"{__package__}: {parts['total']:,} parameters, vocab {run.vocab_size}, train "
             f"{len(c.train):,} / val {len(c.val):,} tokens, device {run.device}"]
    width = max(20, max(map(len, parts)) + 2)
    return lines + [f"  {name:<{width}}{n:>12,}" for name, n in parts.items() if len(parts) > 2]


def sample_text(run) -> str:
    """``--sample-tokens`` characters after a newline, with dropout off."""
    tokenizer, model, device = run.corpus.tokenizer, run.model, run.device
    start = "\n" if "\n" in tokenizer.stoi else tokenizer.chars[0]
    model.eval()
    out = model.generate(torch.tensor([tokenizer.encode(start)], device=device),
                         run.args.sample_tokens,
                         generator=torch.Generator(device).manual_seed(run.args.seed))
    model.train()
    return tokenizer.decode(out[0, 1:].tolist())


def write_results(run, losses: dict) -> dict:
    """A finished run's files (vocab.json, loss.png, metrics.json with a sample), printed
    with their paths, and whether the loss is normal; returns the metrics."""
    args, out = run.args, run.out
    metrics = {
        "stage": __package__, "data": args.data, "params": run.params, "steps": run.step,
        "batch_size": args.batch_size, "block_size": args.block_size,
        "train_loss": losses["train"], "val_loss": losses["val"],
        "best_val_loss": run.best_val, "best_val_step": run.best_step,
        "train_seconds": round(run.wall, 2), "interrupted": run.step < args.max_iters,
    }
    print(f"best val loss {run.best_val:.4f} at step {run.best_step}; "
          f"{run.wall:.1f} s of training")
    run.corpus.tokenizer.save(out / "vocab.json")
    png = plot_losses(run.history, out / "loss.png", title=f"{__package__} on {run.args.data}")
    metrics["sample"] = sample_text(run)
    print(f"\nsample after training:\n{metrics['sample']}\n")
    (out / "metrics.json").write_text(json.dumps(metrics, ensure_ascii=False, indent=2),
                                      encoding="utf-8")
    print(f"checkpoint: {run.ckpt_path} (best: {out / 'best.pt'})\n"
          f"log:        {out / 'log.jsonl'}\nloss curve: {png}\n"
          f"metrics:    {out / 'metrics.json'}")
    settings = run_settings(run.args, run.resumed, run.corpus.text)
    for line in reference_report(metrics, settings, run.device, bool(run.resume)):
        print(line)
    return metrics


def run_settings(args: argparse.Namespace, flags: tuple[str, ...], text: str) -> dict:
    """What decides a run's numbers: the flags ``--resume`` restores and --max-iters,
    with the corpus named by the sha256 of its text rather than by --data."""
    settings = {k: getattr(args, k) for k in flags if k != "data"}
    settings = json.loads(json.dumps({**settings, "max_iters": args.max_iters}, default=str))
    settings["corpus_sha256"] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return settings


def differences(settings: dict, ref: dict, data: str) -> list[str]:
    """The flags in which a run's ``settings`` differ from a reference's, as a reader types them."""
    out = []
    for key in sorted(set(settings) | set(ref["settings"])):
        here, there = settings.get(key), ref["settings"].get(key)
        if here == there:
            continue
        if key == "corpus_sha256":
            out.append(f"--data ({data} here, {ref['data']} there)")
        else:
            out.append(f"--{key.replace('_', '-')} ({here} here, {there} there)")
    return out


def reference_report(metrics: dict, settings: dict, device: str, resumed: bool = False,
                     path: Path | None = None) -> list[str]:
    """The lines to print about a finished run: [] without a reference file; else the
    reference for these settings, the verdict and, outside the range, the likely causes;
    or, when no reference has these settings, the nearest one and what differs.
    Never raises for a missing or broken file."""
    path = path or REFERENCES
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        refs = data["references"]
        ref = next((r for r in refs if r["settings"] == settings), None)
        if ref is not None:
            return compare_to_reference(metrics, ref, data, device, resumed)
        if not refs:
            return []
        near = min(refs, key=lambda r: len(differences(settings, r, metrics["data"])))
        return [f"is this loss normal? no reference for exactly these settings; the nearest is "
                f"'{near['name']}' ({near['command']}), which differs in "
                + ", ".join(differences(settings, near, metrics["data"]))
                + f". Every reference is listed in {GUIDE}"]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        return [f"is this loss normal? {path.name} is unreadable ({type(e).__name__}: {e}); "
                "no comparison"]


def compare_to_reference(metrics: dict, ref: dict, data: dict, device: str,
                         resumed: bool) -> list[str]:
    val, tol, here = ref["val_loss"], ref["tolerance"], metrics["val_loss"]
    lines = [f"is this loss normal? reference for these settings ({ref['name']}): val loss "
             f"{val:.4f} +- {tol:.4f}, best {ref['best_val_loss']:.4f}, "
             f"{ref['train_seconds']:.1f} s of training",
             f"  from {data['made_by']}: torch {data['torch']} on {data['device']}"
             + (f", {ref['precision']}" if ref.get("precision") else "")
             + f"; the range is {data['tolerance_is']}"]
    if metrics["interrupted"]:
        return lines + [f"  this run stopped at step {metrics['steps']}, before the end: "
                        "no verdict"]
    if abs(here - val) <= tol:
        lines.append(f"  this run: val loss {here:.4f}, within the expected range")
    else:
        side = "above" if here > val else "below"
        lines.append(f"  this run: val loss {here:.4f}, {abs(here - val) - tol:.4f} {side} the "
                     f"expected range {val - tol:.4f} to {val + tol:.4f}. Likely causes:")
        if device.split(":")[0] != data["device"]:
            lines.append(f"  - it trained on {device}, the reference on {data['device']}: other "
                         "hardware sums in another order and rounds differently, and over "
                         "thousands of steps the two runs drift apart")
        if torch.__version__.split("+")[0] != data["torch"].split("+")[0]:
            lines.append(f"  - torch {torch.__version__} here, {data['torch']} for the "
                         "reference: kernels change between versions")
        if ref.get("precision"):
            lines.append(f"  - the reference computed in {ref['precision']}; if this run's "
                         "'precision:' line says otherwise, the numbers differ")
        lines.append("  - otherwise: a change to the code or the data; `git status` and `git "
                     f"diff` show what changed. More in {GUIDE}")
    seconds = metrics["train_seconds"]
    if not resumed and seconds > 2 * ref["train_seconds"]:
        lines.append(f"  time: {seconds:.1f} s, {seconds / ref['train_seconds']:.1f}x the "
                     "reference's: a slower CPU, or a busy machine (other programs on the "
                     "cores). The 'threads:' line says how many threads the run timed and "
                     "kept; --threads N pins the count")
    return lines
