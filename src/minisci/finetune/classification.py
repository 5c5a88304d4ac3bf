"""The ``finetune_classification`` task: any single-label text classification set of the catalogue
(SciCite citation intent by default) as sequence classification. The epoch is chosen on dev by
macro-F1; test is scored once with the chosen weights.

Macro-F1 averages over the labels that occur in gold or predictions (a class absent from a split
and never predicted would otherwise add a meaningless 0); micro-F1 and accuracy are reported too.
"""

from __future__ import annotations

from pathlib import Path

from minisci.config import FinetuneClassificationConfig
from minisci.data.readers import Example, Prepared, load_prepared
from minisci.finetune.common import (
    FinetuneResult,
    SeedRun,
    Task,
    class_weights,
    fit_and_select,
    load_metric,
    load_task_model,
    run_seeds,
    sorted_logits,
)
from minisci.metrics import classification_f1


def encode(examples: list[Example], tokenizer, label2id: dict[str, int], max_length: int) -> list[dict]:
    """Texts tokenised with truncation at ``max_length`` (the stage reports how many test texts
    were cut at the configured length)."""
    enc = tokenizer([e.text for e in examples], truncation=True, max_length=max_length)["input_ids"]
    return [{"input_ids": ids, "labels": label2id[e.label]} for ids, e in zip(enc, examples)]


def classification_metrics(gold: list[str], pred: list[str], labels: list[str]) -> dict:
    """Accuracy, macro/micro-F1, per-class scores and confusion matrix, computed by the package's own
    ``evaluate`` module (:mod:`minisci.metrics.classification_f1`)."""
    return load_metric(classification_f1).compute(predictions=pred, references=gold, labels=labels)


def predict(
    model, tokenizer, texts: list[str], id2label: dict[int, str], max_length: int, batch_size: int
) -> tuple[list[str], list[list[float]]]:
    from transformers import DataCollatorWithPadding

    feats = [{"input_ids": ids} for ids in tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]]
    logits = sorted_logits(model, feats, DataCollatorWithPadding(tokenizer), batch_size)
    probs = [lg.softmax(-1).tolist() for lg in logits]
    return [id2label[max(range(len(p)), key=p.__getitem__)] for p in probs], probs


def evaluate(model, tokenizer, examples: list[Example], id2label: dict[int, str], cfg: FinetuneClassificationConfig):
    pred, probs = predict(model, tokenizer, [e.text for e in examples], id2label, cfg.max_length, cfg.eval_batch_size)
    return classification_metrics([e.label for e in examples], pred, list(id2label.values())), pred, probs


def train_one_seed(
    model_dir: Path, tokenizer, data: Prepared, cfg: FinetuneClassificationConfig, seed: int, work_dir: Path
) -> SeedRun:
    import datasets
    from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding, set_seed

    set_seed(seed)
    splits = data.splits
    id2label = dict(enumerate(data.labels))
    label2id = {l: i for i, l in id2label.items()}
    model = load_task_model(
        AutoModelForSequenceClassification,
        model_dir,
        "finetune_classification",
        num_labels=len(id2label),
        id2label=id2label,
        label2id=label2id,
    )
    train_ds = datasets.Dataset.from_list(encode(splits["train"], tokenizer, label2id, cfg.max_length))
    weights = class_weights([e.label for e in splits["train"]], list(data.labels), cfg.loss, cfg.beta)
    best, dev_history, log_history = fit_and_select(
        model,
        tokenizer,
        train_ds,
        DataCollatorWithPadding(tokenizer),
        weights,
        lambda m: evaluate(m, tokenizer, splits["dev"], id2label, cfg)[0],
        TASK.selection_key,
        cfg,
        seed,
        work_dir,
        model_dir,
        data=[(e.text, e.label) for sp in ("train", "dev") for e in splits[sp]],
    )
    test_metrics, pred, probs = evaluate(model, tokenizer, splits["test"], id2label, cfg)
    metrics = {
        "best_epoch": best["epoch"],
        "dev": best["metrics"],
        "test": test_metrics,
        "dev_per_epoch": [
            {k: v for k, v in h.items() if k not in ("per_class", "confusion_matrix")} for h in dev_history
        ],
    }
    return SeedRun(model, metrics, list(zip(pred, probs)), log_history)


def describe(data: Prepared, cfg: FinetuneClassificationConfig, tokenizer) -> dict:
    test = [e.text for e in data.splits["test"]]
    return {
        "train_examples": len(data.splits["train"]),
        **data.meta.get("train_quality", {}),
        "test_truncated_texts": sum(len(ids) > cfg.max_length for ids in tokenizer(test)["input_ids"]),
    }


def prediction_rows(data: Prepared, predictions: list[tuple[str, list[float]]]) -> list[dict]:
    return [
        {"i": i, "gold": e.label, "pred": p, "probs": [round(x, 5) for x in pr]}
        for i, (e, (p, pr)) in enumerate(zip(data.splits["test"], predictions))
    ]


TASK = Task("classification", "macro_f1", ("accuracy", "macro_f1"), train_one_seed, describe, prediction_rows)


def run_finetune_classification(
    data_dir: str | Path, model_dir: str | Path, cfg: FinetuneClassificationConfig, work_dir: str | Path
) -> FinetuneResult:
    """Fine-tune on a prepared classification dataset (``prepare_data`` output) once per seed."""
    return run_seeds(TASK, load_prepared(data_dir, task="classification"), model_dir, cfg, work_dir)
