"""Single-label classification scores as an ``evaluate`` metric: accuracy, macro- and micro-F1,
per-class precision/recall/F1 and the confusion matrix (scikit-learn).

Macro- and micro-F1 average over one fixed class set: the dataset's labels that occur in the gold
labels of the split scored. The set depends on the data only, never on a model's predictions, so two
models scored on one split always average over the same classes. A class absent from the split has
no F1 (recall is undefined): it is reported as absent (``support`` 0, ``absent`` true, recall and F1
null), not as 0.00, and left out of the averages; predicting it is still an error, because it costs
the gold class its recall. Per-class scores and the confusion matrix keep every declared label, in
the declared order. Load it offline by path:
``evaluate.load(minisci.metrics.classification_f1.__file__)``.
"""

from __future__ import annotations

import datasets
import evaluate
from sklearn.metrics import accuracy_score, confusion_matrix, f1_score, precision_recall_fscore_support

from minisci.tasks.counting import scored_labels


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


def _per_class(p: float, r: float, f: float, support: int) -> dict:
    if not support:  # absent from the split: recall and F1 do not exist
        return {"precision": round(float(p), 4), "recall": None, "f1": None, "support": 0, "absent": True}
    return {"precision": round(float(p), 4), "recall": round(float(r), 4), "f1": round(float(f), 4), "support": support}


def classification_scores(gold: list[str], pred: list[str], labels: list[str]) -> dict:
    present = scored_labels(gold, labels)
    p, r, f, support = precision_recall_fscore_support(gold, pred, labels=labels, zero_division=0)
    return {
        "accuracy": round(float(accuracy_score(gold, pred)), 4),
        "macro_f1": round(float(f1_score(gold, pred, labels=present, average="macro", zero_division=0)), 4),
        "micro_f1": round(float(f1_score(gold, pred, labels=present, average="micro", zero_division=0)), 4),
        "per_class": {lab: _per_class(p[i], r[i], f[i], int(support[i])) for i, lab in enumerate(labels)},
        "confusion_matrix": confusion_matrix(gold, pred, labels=labels).tolist(),
    }
