"""Entity-level NER scores as an ``evaluate`` metric: micro/macro precision, recall and F1 in strict
IOB2 (seqeval), per-type scores and token accuracy, as :func:`minisci.metrics.scores.ner_scores`
computes them (its docstring says how). Load it offline by path:
``evaluate.load(minisci.metrics.ner_f1.__file__)``.
"""

from __future__ import annotations

import datasets
import evaluate

from minisci.metrics.scores import ner_scores


class NerF1(evaluate.Metric):
    """``compute(predictions=[[tag, ...], ...], references=[[tag, ...], ...])`` -> flat scores,
    rounded to 4 digits, with ``per_type`` {type: {precision, recall, f1, support}}."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=__doc__,
            citation="seqeval (Nakayama 2018), strict IOB2 mode",
            inputs_description=self.__doc__,
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Value("string")),
                    "references": datasets.Sequence(datasets.Value("string")),
                }
            ),
        )

    def _compute(self, predictions: list[list[str]], references: list[list[str]]) -> dict:
        return ner_scores(references, predictions)
