"""The ``finetune_scicite`` stage: citation intent (background / method / result) as sequence
classification. Epoch chosen on dev by macro-F1; test scored once with the chosen weights."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from sklearn.metrics import accuracy_score, confusion_matrix, f1_score, precision_recall_fscore_support

from minisci.config import FinetuneSciciteConfig
from minisci.data.readers import SCICITE_LABELS, CitationExample, load_scicite_split
from minisci.finetune.common import aggregate_seeds, class_weights, fit_and_select, sorted_logits, subsample


def encode(examples: list[CitationExample], tokenizer, label2id: dict[str, int], max_length: int) -> list[dict]:
    """Texts tokenised with truncation at ``max_length`` (SciCite's longest text, 228 words, fits
    in 512 pieces; the stage reports how many were cut at the configured length)."""
    enc = tokenizer([e.text for e in examples], truncation=True, max_length=max_length)["input_ids"]
    return [{"input_ids": ids, "labels": label2id[e.label]} for ids, e in zip(enc, examples)]


def classification_metrics(gold: list[str], pred: list[str], labels: tuple[str, ...] = SCICITE_LABELS) -> dict:
    p, r, f, support = precision_recall_fscore_support(gold, pred, labels=list(labels), zero_division=0)
    return {
        "accuracy": round(float(accuracy_score(gold, pred)), 4),
        "macro_f1": round(float(f1_score(gold, pred, labels=list(labels), average="macro", zero_division=0)), 4),
        "per_class": {
            lab: {
                "precision": round(float(p[i]), 4),
                "recall": round(float(r[i]), 4),
                "f1": round(float(f[i]), 4),
                "support": int(support[i]),
            }
            for i, lab in enumerate(labels)
        },
        "confusion_matrix": confusion_matrix(gold, pred, labels=list(labels)).tolist(),
    }


def predict(
    model, tokenizer, texts: list[str], id2label: dict[int, str], max_length: int, batch_size: int
) -> tuple[list[str], list[list[float]]]:
    from transformers import DataCollatorWithPadding

    feats = [{"input_ids": ids} for ids in tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]]
    logits = sorted_logits(model, feats, DataCollatorWithPadding(tokenizer), batch_size)
    probs = [lg.softmax(-1).tolist() for lg in logits]
    return [id2label[max(range(len(p)), key=p.__getitem__)] for p in probs], probs


def evaluate(model, tokenizer, examples: list[CitationExample], id2label, cfg: FinetuneSciciteConfig):
    pred, probs = predict(model, tokenizer, [e.text for e in examples], id2label, cfg.max_length, cfg.eval_batch_size)
    return classification_metrics([e.label for e in examples], pred), pred, probs


@dataclasses.dataclass
class SciciteResult:
    model: object
    tokenizer: object
    metrics: dict
    test_predictions: list[dict]
    log_history: list[dict]


def train_one_seed(model_dir: Path, tokenizer, splits: dict, cfg: FinetuneSciciteConfig, seed: int, work_dir: Path):
    import datasets
    from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding, set_seed

    set_seed(seed)
    id2label = dict(enumerate(SCICITE_LABELS))
    label2id = {l: i for i, l in id2label.items()}
    model = AutoModelForSequenceClassification.from_pretrained(
        model_dir,
        num_labels=len(id2label),
        id2label=id2label,
        label2id=label2id,
        use_safetensors=True,
        local_files_only=True,
        trust_remote_code=False,
    )
    train_ds = datasets.Dataset.from_list(encode(splits["train"], tokenizer, label2id, cfg.max_length))
    weights = class_weights([e.label for e in splits["train"]], list(SCICITE_LABELS), cfg.loss, cfg.beta)
    best, dev_history, log_history = fit_and_select(
        model,
        tokenizer,
        train_ds,
        DataCollatorWithPadding(tokenizer),
        weights,
        lambda m: evaluate(m, tokenizer, splits["dev"], id2label, cfg)[0],
        "macro_f1",
        cfg,
        seed,
        work_dir,
        model_dir,
        data=[(e.text, e.label) for sp in ("train", "dev") for e in splits[sp]],
    )
    test_metrics, pred, probs = evaluate(model, tokenizer, splits["test"], id2label, cfg)
    return (
        model,
        {
            "best_epoch": best["epoch"],
            "dev": best["metrics"],
            "test": test_metrics,
            "dev_per_epoch": [
                {k: v for k, v in h.items() if k not in ("per_class", "confusion_matrix")} for h in dev_history
            ],
        },
        (pred, probs),
        log_history,
    )


def run_finetune_scicite(
    data_dir: str | Path, model_dir: str | Path, cfg: FinetuneSciciteConfig, work_dir: str | Path
) -> SciciteResult:
    from transformers import AutoTokenizer

    start = time.perf_counter()
    splits = {sp: load_scicite_split(sp, data_dir) for sp in ("train", "dev", "test")}
    splits["train"] = subsample(splits["train"], cfg.max_train_examples, cfg.seeds[0])
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True, trust_remote_code=False)
    truncated = sum(len(ids) > cfg.max_length for ids in tokenizer([e.text for e in splits["test"]])["input_ids"])
    per_seed, first = {}, None
    for seed in cfg.seeds:
        model, m, pred, history = train_one_seed(
            Path(model_dir), tokenizer, splits, cfg, seed, Path(work_dir) / f"seed{seed}"
        )
        per_seed[seed] = m
        if first is None:
            first = (model, pred, history)
    model, (pred, probs), history = first
    head = per_seed[cfg.seeds[0]]
    metrics = {
        "labels": list(SCICITE_LABELS),
        "seeds": list(cfg.seeds),
        "train_examples": len(splits["train"]),
        "best_epoch": head["best_epoch"],
        "dev": head["dev"],
        "test": head["test"],
        "dev_per_epoch": head["dev_per_epoch"],
        "test_truncated_texts": truncated,
        "wall_seconds": round(time.perf_counter() - start, 1),
    }
    if len(cfg.seeds) > 1:
        metrics["per_seed"] = {
            str(s): {
                "best_epoch": m["best_epoch"],
                "dev_macro_f1": m["dev"]["macro_f1"],
                "accuracy": m["test"]["accuracy"],
                "macro_f1": m["test"]["macro_f1"],
            }
            for s, m in per_seed.items()
        }
        metrics["test_over_seeds"] = aggregate_seeds(
            {s: m["test"] for s, m in per_seed.items()}, ("accuracy", "macro_f1")
        )
    rows = [
        {"i": i, "gold": e.label, "pred": p, "probs": [round(x, 5) for x in pr]}
        for i, (e, p, pr) in enumerate(zip(splits["test"], pred, probs))
    ]
    return SciciteResult(model, tokenizer, metrics, rows, history)
