"""The classification task kind: one label per text (SciCite citation intent by default).

Texts are tokenised with truncation at ``max_length`` (the stage reports how many test texts were
cut). The epoch is chosen on dev by macro-F1. Macro-F1 averages over one fixed class set: the
dataset's labels that occur in the test gold (:func:`minisci.tasks.counting.scored_labels`),
so a class only one model predicts cannot change the average. Counts: per example and class,
``[tp, predicted, gold]``; the headline is the mean over the classes of their F1 (macro).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from minisci.data.readers import Example
from minisci.tasks import facts
from minisci.tasks.kind import TaskKind

if TYPE_CHECKING:
    import numpy as np


def encode(examples: list[Example], tokenizer, label2id: dict[str, int], max_length: int) -> list[dict]:
    """Texts tokenised with truncation at ``max_length`` (the stage reports how many test texts
    were cut at the configured length)."""
    enc = tokenizer([e.text for e in examples], truncation=True, max_length=max_length)["input_ids"]
    return [{"input_ids": ids, "labels": label2id[e.label]} for ids, e in zip(enc, examples)]


def collator(tokenizer):
    from minisci.batching import pad_collator

    return pad_collator(tokenizer)


def classification_metrics(gold: list[str], pred: list[str], labels: list[str]) -> dict:
    """Accuracy, macro/micro-F1, per-class scores and confusion matrix
    (:func:`minisci.metrics.scores.classification_scores`, what the ``evaluate`` metric
    ``classification_f1`` computes)."""
    from minisci.metrics.scores import classification_scores

    return classification_scores(gold, pred, labels)


def text_features(texts: list[str], tokenizer, max_length: int) -> list[dict]:
    """Model inputs of texts, truncated at ``max_length``, as :func:`predict` scores them."""
    return [{"input_ids": ids} for ids in tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]]


def predict(
    model,
    tokenizer,
    texts: list[str],
    id2label: dict[int, str],
    max_length: int,
    batch_size: int,
    feats: list[dict] | None = None,
) -> tuple[list[str], list[list[float]]]:
    """Each text's label and every label's probability; ``feats``: :func:`text_features` of the texts,
    when already encoded."""
    from minisci.batching import pad_collator, sorted_logits

    feats = text_features(texts, tokenizer, max_length) if feats is None else feats
    logits = sorted_logits(model, feats, pad_collator(tokenizer), batch_size)
    probs = [lg.softmax(-1).tolist() for lg in logits]
    return [id2label[max(range(len(p)), key=p.__getitem__)] for p in probs], probs


def predictions(
    model, tokenizer, examples: list[Example], id2label: dict[int, str], cfg, features: list[dict] | None = None
) -> list[tuple]:
    """(label, every label's probability) per example."""
    texts = [e.text for e in examples]
    pred, probs = predict(model, tokenizer, texts, id2label, cfg.max_length, cfg.eval_batch_size, features)
    return list(zip(pred, probs))


def describe(data, cfg, tokenizer) -> dict:
    test = [e.text for e in data.splits["test"]]
    return {
        "train_examples": len(data.splits["train"]),
        **data.meta.get("train_quality", {}),
        # verbose=False: texts longer than the model are counted here (and truncated when encoded), not fed
        # whole, so transformers' "will result in indexing errors" warning would mislead
        "test_truncated_texts": sum(len(ids) > cfg.max_length for ids in tokenizer(test, verbose=False)["input_ids"]),
    }


def prediction_rows(examples: list[Example], predictions: list[tuple[str, list[float]]]) -> list[dict]:
    return [
        {"i": i, "gold": e.label, "pred": p, "probs": [round(x, 5) for x in pr]}
        for i, (e, (p, pr)) in enumerate(zip(examples, predictions))
    ]


def count_items(gold: list[str], preds: list[list[str]], labels: list[str]) -> list[str]:
    """The classes scored: the labels with gold support in label order (then any other gold label,
    sorted), one fixed set for every prediction list."""
    in_gold = set(gold)
    return [lab for lab in labels if lab in in_gold] + sorted(in_gold - set(labels))


def count(gold: list[str], pred: list[str], items: list[str]) -> np.ndarray:
    """Per example and class: [true positive, predicted, gold]."""
    import numpy as np

    g, p = np.array(gold, dtype=object), np.array(pred, dtype=object)
    cols = []
    for lab in items:
        gl, pl = g == lab, p == lab
        cols += [gl & pl, pl, gl]
    return np.stack(cols, axis=1).astype(float) if cols else np.zeros((len(gold), 0))


def scores(n_items: int) -> dict:
    """Macro precision, recall and F1 over the classes, and accuracy (summed true positives / summed gold)."""
    from minisci.tasks import counting

    return {name: counting.macro(f, n_items) for name, f in counting.SCORES.items()} | {
        "accuracy": counting.micro(counting.recall, n_items)
    }


def _labels_scored(arms: dict, preds: dict) -> list[str]:
    """Labels with test support, in label order: the fixed set the stages' macro-F1 averages over."""
    from minisci.tasks.counting import scored_labels

    return scored_labels([r["gold"] for r in preds["baseline"]], arms["baseline"]["labels"])


CLASSIFICATION = TaskKind(
    **dataclasses.asdict(facts.CLASSIFICATION),
    title="classification",
    head="ForSequenceClassification",
    auto_class="AutoModelForSequenceClassification",
    pipeline_tag="text-classification",
    command="cite",
    needs="a sequence-classification (citation intent) model",
    size_unit="examples",
    feature_unit="texts",
    valid_labels=lambda labels: True,
    selection_key="macro_f1",
    seed_keys=("accuracy", "macro_f1"),
    model_labels=list,
    values=lambda split: [e.label for e in split],
    encode=encode,
    collate=collator,
    features=lambda examples, tokenizer, cfg: text_features([e.text for e in examples], tokenizer, cfg.max_length),
    predict=predictions,
    decode=lambda predictions: [p for p, _ in predictions],
    score=lambda examples, pred, labels: classification_metrics([e.label for e in examples], pred, labels),
    describe=describe,
    rows=prediction_rows,
    identity=lambda e: (e.text, e.label),
    trim_dev=lambda m: {key: v for key, v in m.items() if key not in ("per_class", "confusion_matrix")},
    weights_in_metrics=False,
    items=count_items,
    count=count,
    scores=scores,
    metric="macro_f1",
    metric_label="macro-F1",
    score_word="macro-F1",
    average="macro",
    summary_keys=("accuracy", "macro_f1"),
    columns=(("accuracy", "accuracy"), ("macro-F1", "macro_f1"), ("micro-F1", "micro_f1")),
    breakdown="per_class",
    item_word="class",
    curves=("dev_macro_f1", "loss"),
    report_labels=_labels_scored,
    label_counts="per_label",
    errors="examples",
)
