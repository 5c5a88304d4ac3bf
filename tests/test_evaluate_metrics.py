"""The stages score through the package's own ``evaluate`` modules, loaded by path offline, and get
exactly what the direct seqeval / scikit-learn code gave before (a frozen copy of it below)."""

import random

import pytest
from seqeval.metrics import accuracy_score, classification_report
from seqeval.scheme import IOB2
from sklearn import metrics as skm

from minisci.data.readers import spans, to_iob2
from minisci.tasks.classification import classification_metrics
from minisci.tasks.ner import ner_metrics


def old_ner_metrics(gold, pred):
    """``finetune/ner.py``'s ner_metrics before the move to ``evaluate``, verbatim."""
    report = classification_report(gold, pred, mode="strict", scheme=IOB2, output_dict=True, zero_division=0)
    out = {
        "precision": report["micro avg"]["precision"],
        "recall": report["micro avg"]["recall"],
        "f1": report["micro avg"]["f1-score"],
        "macro_precision": report["macro avg"]["precision"],
        "macro_recall": report["macro avg"]["recall"],
        "macro_f1": report["macro avg"]["f1-score"],
        "token_accuracy": accuracy_score(gold, pred),
        "entities_gold": int(report["micro avg"]["support"]),
        "entities_predicted": sum(len(spans(p)) for p in pred),
    }
    out = {k: round(float(v), 4) if isinstance(v, float) else v for k, v in out.items()}
    out["per_type"] = {
        t: {
            "precision": round(float(r["precision"]), 4),
            "recall": round(float(r["recall"]), 4),
            "f1": round(float(r["f1-score"]), 4),
            "support": int(r["support"]),
        }
        for t, r in sorted(report.items())
        if t not in ("micro avg", "macro avg", "weighted avg")
    }
    return out


def old_classification_metrics(gold, pred, labels):
    """``finetune/classification.py``'s classification_metrics before the move, verbatim."""
    present = [lab for lab in labels if lab in set(gold) | set(pred)]
    p, r, f, support = skm.precision_recall_fscore_support(gold, pred, labels=labels, zero_division=0)
    return {
        "accuracy": round(float(skm.accuracy_score(gold, pred)), 4),
        "macro_f1": round(float(skm.f1_score(gold, pred, labels=present, average="macro", zero_division=0)), 4),
        "micro_f1": round(float(skm.f1_score(gold, pred, labels=present, average="micro", zero_division=0)), 4),
        "per_class": {
            lab: {
                "precision": round(float(p[i]), 4),
                "recall": round(float(r[i]), 4),
                "f1": round(float(f[i]), 4),
                "support": int(support[i]),
            }
            for i, lab in enumerate(labels)
        },
        "confusion_matrix": skm.confusion_matrix(gold, pred, labels=labels).tolist(),
    }


def random_tags(rng, n, types):
    """Valid IOB2 sequences (what the stage scores: gold from the reader, predictions repaired)."""
    tags = ["O"] + [f"{p}-{t}" for t in types for p in "BI"]
    return list(to_iob2([rng.choice(tags) for _ in range(n)]))


@pytest.mark.parametrize("seed", range(5))
def test_ner_metrics_through_evaluate_equal_the_direct_computation(seed):
    rng = random.Random(seed)
    types = ["Chemical", "Disease", "Gene"][: 1 + seed % 3]
    lengths = [rng.randint(1, 25) for _ in range(60)]
    gold = [random_tags(rng, n, types) for n in lengths]
    pred = [random_tags(rng, n, types) if rng.random() < 0.6 else list(g) for n, g in zip(lengths, gold)]
    assert ner_metrics(gold, pred) == old_ner_metrics(gold, pred)


@pytest.mark.parametrize("seed", range(5))
def test_classification_metrics_through_evaluate_equal_the_direct_computation(seed):
    rng = random.Random(seed)
    labels = ["background", "method", "result", "never"]
    gold = [rng.choice(labels[:3]) for _ in range(200)]
    pred = [g if rng.random() < 0.5 else rng.choice(labels[:3]) for g in gold]
    expected = old_classification_metrics(gold, pred, labels)
    # by design since the fixed class set: a class absent from gold is reported absent, not as F1 0.00
    expected["per_class"]["never"] = {"precision": 0.0, "recall": None, "f1": None, "support": 0, "absent": True}
    assert classification_metrics(gold, pred, labels) == expected


def test_metric_modules_load_by_path_offline(monkeypatch):
    import evaluate

    from minisci.metrics import classification_f1, ner_f1

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for module in (ner_f1, classification_f1):
        metric = evaluate.load(module.__file__, keep_in_memory=True)
        assert isinstance(metric, evaluate.Metric)
    combined = evaluate.load(ner_f1.__file__, keep_in_memory=True).compute(
        predictions=[["B-X", "I-X"]], references=[["B-X", "I-X"]]
    )
    assert combined["f1"] == 1.0 and combined["per_type"]["X"]["support"] == 1
