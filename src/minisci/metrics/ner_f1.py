"""Entity-level NER scores as an ``evaluate`` metric: micro/macro precision, recall and F1 in strict
IOB2 (seqeval), per-type scores and token accuracy.

Strict mode counts an entity only when its type and both boundaries match, as the CoNLL scorer
does. Load it offline by path: ``evaluate.load(minisci.metrics.ner_f1.__file__)``.
"""

from __future__ import annotations

import datasets
import evaluate
from seqeval.metrics import accuracy_score, classification_report
from seqeval.scheme import IOB2

from minisci.data.readers import spans

_AVERAGES = ("micro avg", "macro avg", "weighted avg")


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


def ner_scores(gold: list[list[str]], pred: list[list[str]]) -> dict:
    """Entity-level micro/macro P/R/F1 (strict IOB2), per-type P/R/F1, token accuracy."""
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
        if t not in _AVERAGES
    }
    return out
