"""The fastest the default run's training stages could be on this CPU: a lower bound per stage.

Any exact (float32) implementation has to do the model's matrix products. This script counts them
for the work each stage of the params does, on the real data (the prepared datasets, the pretraining
examples, the embeddings benchmark as the stage builds it), and divides by the fastest float32
matrix product this CPU runs (`roofline.py`, measured at the start and at the end; the higher
counts). Counted, over each sequence's real length (no padding):

- training: the encoder's products forward and backward (3x the forward's), every epoch, every seed;
  pretraining adds its MLM head at the expected masked positions;
- evaluation: one forward pass per dev scoring (each epoch from ``eval_delay`` on, and the last) and
  one over test, per seed; the embeddings benchmark's dev and test splits once per dense model.

Not counted (so the bound stays below any real run): layer norm, softmax, GELU, dropout, the
optimizer, embeddings, tokenisation, data loading, the interpreter's start and every small head.
The committed run's seconds beside it say how far eager PyTorch is from the bound. ``--at`` prints
the bound at other rates too (for example a CPU measured elsewhere).

Usage: python benchmarks/run_floor.py [--root PROJECT] [--at 159 380]
(from the repository root after ``dvc repro``: it reads data/, models/baseline and metrics/)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import roofline  # noqa: E402
from machine import HelpFormatter, positive_rate, print_machine  # noqa: E402
from roofline import encoder_flops  # noqa: E402

from minisci.stage import run_command  # noqa: E402

BUDGETS = {"finetune_embeddings": 10 * 60, "default run": 90 * 60}  # the targets, seconds, on 2 cores


def training_flops(config, lengths, epochs: float = 1.0) -> float:
    """Forward and backward matrix products of training on sequences of these lengths: the backward
    pass computes two products (the input's and the weight's gradient) for each forward one."""
    return 3 * epochs * encoder_flops(config, lengths)


def mlm_head_flops(config, masked: float, vocab: int) -> float:
    """The MLM head at the masked positions only (the stage's sparse logits), forward and backward:
    its transform (d x d) and its decoder over the vocabulary (d x vocab)."""
    d = config.hidden_size
    return 3 * 2 * masked * (d * d + d * vocab)


def dev_scorings(epochs: float, delay: int) -> int:
    """How many times a fine-tuning seed scores dev: each epoch end from ``delay`` on, and the last."""
    last = math.ceil(epochs)
    return sum(1 for e in range(1, last + 1) if e >= delay or e == last)


def windowed_lengths(tokenizer, texts: list[str], max_length: int) -> list[int]:
    """The lengths of the windows minisci's ``embed`` encodes (each with [CLS] and [SEP])."""
    from minisci.batching import windows_of

    pieces = tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
    return [len(w) + 2 for ids in pieces for w in windows_of(ids, max_length - 2)]


def cut_lengths(tokenizer, texts: list[str], max_length: int) -> list[int]:
    """Lengths as sentence-transformers trains on them: cut at ``max_length`` with the specials."""
    return [
        min(len(ids) + 2, max_length) for ids in tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
    ]


def pretrain_floor(config, params: dict, root: Path) -> float:
    import datasets

    cfg = params["pretrain"]
    train = [len(x) for x in datasets.load_from_disk(str(root / "data/pretrain/train"))["input_ids"]]
    heldout = [len(x) for x in datasets.load_from_disk(str(root / "data/pretrain/heldout"))["input_ids"]]
    special = 3 if cfg["nsp"] else 2
    masked = cfg["mlm_probability"] * sum(n - special for n in train)  # the expected number
    manifest = json.loads((root / "data/pretrain/manifest.json").read_text(encoding="utf-8"))
    vocab = manifest["base_vocab_size"] + len(manifest["vocab"]["words"])  # and the words it added
    epochs = cfg["epochs"] if cfg["max_steps"] < 0 else cfg["max_steps"] * cfg["batch_size"] / len(train)
    flops = training_flops(config, train, epochs) + epochs * mlm_head_flops(config, masked, vocab)
    return flops + 2 * encoder_flops(config, heldout)  # the held-out score before and after


def finetune_floor(config, tokenizer, section: dict, task: str, dataset: str, root: Path) -> float:
    from minisci.data.readers import load_prepared
    from minisci.finetune.common import subsample
    from minisci.tasks import registry

    kind = registry.get(task)
    data = load_prepared(root / "data/prepared" / dataset, task)
    label2id = {label: i for i, label in enumerate(kind.model_labels(data.labels))}

    def lengths(split: str, n: int) -> list[int]:
        examples = subsample(data.splits[split], n, section["seeds"][0])  # the stage's own subset
        return [len(f["input_ids"]) for f in kind.encode(examples, tokenizer, label2id, section["max_length"])]

    train = lengths("train", section["max_train_examples"])
    dev, test = (lengths(sp, section["max_eval_examples"]) for sp in ("dev", "test"))
    per_seed = (
        training_flops(config, train, section["epochs"])
        + dev_scorings(section["epochs"], section["eval_delay"]) * encoder_flops(config, dev)
        + encoder_flops(config, test)
    )
    return len(section["seeds"]) * per_seed


def embeddings_floor(config, tokenizer, root: Path) -> dict[str, float]:
    from minisci.config import FinetuneEmbeddingsConfig, load_corpora, load_section
    from minisci.finetune.embeddings import training_starts
    from minisci.finetune.retrieval_benchmark import build_benchmark, pair_training_examples

    cfg = load_section(FinetuneEmbeddingsConfig, "finetune_embeddings", root / "params.yaml")
    bench = build_benchmark(load_corpora(root / "data/corpora.yaml"), root / "data/corpus/documents.jsonl", cfg, root)
    pairs = pair_training_examples(bench, cfg.hard_negatives)
    columns = [c for c in ("anchor", "positive", "negative") if c in pairs[0]]
    train = [n for c in columns for n in cut_lengths(tokenizer, [p[c] for p in pairs], cfg.max_length)]
    starts = training_starts(cfg.encoder)
    dense_models = 1 + len(starts)  # the shipped model and each fine-tuned one, on dev and on test

    def split_lengths(split) -> list[int]:
        texts = [c["text"] for c in split.candidates] + [t for qs in split.queries.values() for t, _ in qs]
        return windowed_lengths(tokenizer, texts, cfg.eval_max_length)

    parts = {f"training ({len(starts)} starts)": len(starts) * training_flops(config, train, cfg.epochs)}
    for name, split in (("dev", bench.dev), ("test", bench.test)):
        parts[f"{name} ({dense_models} dense models)"] = dense_models * encoder_flops(config, split_lengths(split))
    return parts


def committed_seconds(root: Path) -> dict[str, float]:
    """Each stage's wall time in the committed run (its metrics' ``wall_seconds``)."""
    m = root / "metrics"

    def read(path: Path) -> float:
        return json.loads(path.read_text(encoding="utf-8"))["wall_seconds"]

    out = {"finetune_embeddings": read(m / "finetune_embeddings.json")}
    out |= {f"pretrain@{p.stem}": read(p) for p in sorted((m / "pretrain").glob("*.json"))}
    for stage in ("finetune_ner", "finetune_classification"):
        for p in sorted((m / stage).glob("*/*.json")):
            out[f"{stage}@{p.parent.name}-{p.stem}"] = read(p)
    for name in ("sample_corpus", "make_pairs", "pretrain_data"):  # no model work: their time is their floor
        out[name] = read(m / f"{name}.json")
    return out


def committed_machines(root: Path) -> list[str]:
    """The CPUs the committed training stages ran on (their metrics' ``environment``), e.g. ``AMD EPYC (avx2)``."""
    seen = []
    for path in sorted((root / "metrics").rglob("*.json")):
        env = json.loads(path.read_text(encoding="utf-8")).get("environment")
        if isinstance(env, dict) and env.get("cpu"):
            name = f"{env['cpu']} ({env.get('cpu_flags') or 'no listed flags'})"
            seen += [name] if name not in seen else []
    return seen


def machines_line(committed: list[str], here: str) -> str:
    """Where the committed seconds come from, and whether that is this CPU."""
    line = f"committed s: the committed run's wall times, measured on {', '.join(committed) or 'an unrecorded CPU'}"
    if here and not any(name.startswith(f"{here} (") for name in committed):
        line += f"; not this CPU ({here}), so `committed / floor` sets those times against this CPU's floor"
    return line


def check_outputs(root: Path, params: dict) -> None:
    """Everything this reads, before any work: a fresh clone has none of it until ``dvc repro``."""
    from minisci.errors import MinisciError

    needed = [
        "models/baseline/config.json",
        "data/pretrain/train",
        "data/pretrain/heldout",
        "data/pretrain/manifest.json",
    ]
    needed += ["data/corpus/documents.jsonl", "data/corpora.yaml", "metrics/finetune_embeddings.json"]
    needed += [f"metrics/{name}.json" for name in ("sample_corpus", "make_pairs", "pretrain_data")]
    needed += [f"metrics/pretrain/{seed}.json" for seed in params["pretrain"]["seeds"]]
    for stage in ("finetune_ner", "finetune_classification"):
        for ds in params[stage]["datasets"]:
            needed += [f"data/prepared/{ds}"] + [f"metrics/{stage}/{ds}/{arm}.json" for arm in ("baseline", "adapted")]
    missing = [n for n in needed if not (root / n).exists()]
    if missing:
        more = f" and {len(missing) - 1} more of the default run's outputs" if len(missing) > 1 else ""
        raise MinisciError(f"{root}: no {missing[0]}{more}; run `dvc repro` there first")


def seconds_cell(s: float) -> str:
    """Whole seconds, or two significant digits below 10 s (a tiny project's floors)."""
    return f"{s:.0f}" if s >= 10 else f"{s:.2g}"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("--root", type=Path, default=REPO, help="a project after dvc repro: this checkout")
    p.add_argument("--at", type=positive_rate, nargs="*", default=[], help="also print the bound at these GFLOP/s")
    args = p.parse_args(argv)

    import torch
    from transformers import AutoConfig, AutoTokenizer

    print_machine()
    root = args.root.resolve()
    from minisci.config import load_params

    params = load_params(root / "params.yaml")
    check_outputs(root, params)
    base = root / "models/baseline"
    config = AutoConfig.from_pretrained(base, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    # the peak at the start and at the end, and the higher one counts: on a shared VM it moves by 20%
    # from one minute to the next, and a bound must use the fastest rate the CPU reaches
    first = {name: roofline.peak_matmul_flops(config, dtype, windows=20) for name, dtype in dtypes.items()}
    flops = {f"pretrain@{s}": pretrain_floor(config, params, root) for s in params["pretrain"]["seeds"]}
    for stage, task in (("finetune_ner", "ner"), ("finetune_classification", "classification")):
        for ds in params[stage]["datasets"]:
            f = finetune_floor(config, tokenizer, params[stage], task, ds, root)
            flops |= {f"{stage}@{ds}-{arm}": f for arm in ("baseline", "adapted")}
    parts = embeddings_floor(config, tokenizer, root)
    flops["finetune_embeddings"] = sum(parts.values())
    peaks = {
        name: max(first[name], roofline.peak_matmul_flops(config, dtype, windows=20)) for name, dtype in dtypes.items()
    }
    print(", ".join(f"peak {k} {v / 1e9:.0f} GFLOP/s" for k, v in peaks.items()) + " (the higher of two measurements)")
    peaks |= {f"--at {r:g}": r * 1e9 for r in args.at}
    print(
        "finetune_embeddings: "
        + ", ".join(f"{k} {v / 1e12:.1f} TFLOP ({v / peaks['fp32'] / 60:.1f} min)" for k, v in parts.items())
        + " at the fp32 peak"
    )
    seconds = committed_seconds(root)
    from minisci.training import cpu_info

    print(machines_line(committed_machines(root), cpu_info()[0]))
    floors = {
        stage: {k: (flops[stage] / v if stage in flops else s) for k, v in peaks.items()}
        for stage, s in seconds.items()
    }
    total = {k: sum(f[k] for f in floors.values()) for k in peaks}
    print("\n| stage | matrix products (TFLOP) | committed s | floor s at the fp32 peak | committed / floor |")
    print("|---|---|---|---|---|")
    for stage, s in seconds.items():
        if stage in flops:
            f = floors[stage]["fp32"]
            print(f"| {stage} | {flops[stage] / 1e12:.1f} | {s:.0f} | {seconds_cell(f)} | {s / f:.1f}x |")
        else:  # no model work: its own time is its floor
            print(f"| {stage} | | {s:.0f} | {s:.0f} | |")
    run = sum(seconds.values())
    print(
        f"| total | {sum(flops.values()) / 1e12:.1f} | {run:.0f} | {total['fp32']:.0f} | {run / total['fp32']:.1f}x |\n"
    )
    for k, v in peaks.items():
        print(
            f"floor at {k} ({v / 1e9:.0f} GFLOP/s): finetune_embeddings {floors['finetune_embeddings'][k] / 60:.1f} min "
            f"(target {BUDGETS['finetune_embeddings'] / 60:g}), default run {total[k] / 60:.1f} min "
            f"(target {BUDGETS['default run'] / 60:g})"
        )


if __name__ == "__main__":
    sys.exit(run_command(main))  # a missing output or params file: one line, exit 1
