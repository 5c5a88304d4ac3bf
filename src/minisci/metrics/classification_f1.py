"""Single-label classification scores as an ``evaluate`` metric: accuracy, macro- and micro-F1,
per-class precision/recall/F1 and the confusion matrix (scikit-learn).

Macro- and micro-F1 average over the labels that occur in gold or predictions (a class absent from
a split and never predicted would otherwise add a meaningless 0); per-class scores and the
confusion matrix keep every declared label, in the declared order. Load it offline by path:
``evaluate.load(minisci.metrics.classification_f1.__file__)``.
"""

from __future__ import annotations

import datasets
import evaluate
from sklearn.metrics import accuracy_score, confusion_matrix, f1_score, precision_recall_fscore_support


class ClassificationF1(evaluate.Metric):
    """``compute(predictions=[label, ...], references=[label, ...], labels=[declared labels])`` ->
    accuracy, macro_f1, micro_f1 (4 digits), ``per_class`` and ``confusion_matrix`` (rows: gold)."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=__doc__,
            citation="scikit-learn (Pedregosa et al. 2011)",
            inputs_description=self.__doc__,
            features=datasets.Features(
                {"predictions": datasets.Value("string"), "references": datasets.Value("string")}
            ),
        )

    def _compute(self, predictions: list[str], references: list[str], labels: list[str]) -> dict:
        return classification_scores(references, predictions, labels)


def classification_scores(gold: list[str], pred: list[str], labels: list[str]) -> dict:
    present = [lab for lab in labels if lab in set(gold) | set(pred)]  # declared order
    p, r, f, support = precision_recall_fscore_support(gold, pred, labels=labels, zero_division=0)
    return {
        "accuracy": round(float(accuracy_score(gold, pred)), 4),
        "macro_f1": round(float(f1_score(gold, pred, labels=present, average="macro", zero_division=0)), 4),
        "micro_f1": round(float(f1_score(gold, pred, labels=present, average="micro", zero_division=0)), 4),
        "per_class": {
            lab: {
                "precision": round(float(p[i]), 4),
                "recall": round(float(r[i]), 4),
                "f1": round(float(f[i]), 4),
                "support": int(support[i]),
            }
            for i, lab in enumerate(labels)
        },
        "confusion_matrix": confusion_matrix(gold, pred, labels=labels).tolist(),
    }
