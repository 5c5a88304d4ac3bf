"""Single-label classification scores as an ``evaluate`` metric: accuracy, macro- and micro-F1,
per-class precision/recall/F1 and the confusion matrix, as
:func:`minisci.metrics.scores.classification_scores` computes them (its docstring says over which
classes). Load it offline by path: ``evaluate.load(minisci.metrics.classification_f1.__file__)``.
"""

from __future__ import annotations

import datasets
import evaluate

from minisci.metrics.scores import classification_scores


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
