"""The scores the fine-tuning stages and reports compute, as plain functions (the ``evaluate`` metrics
:mod:`minisci.metrics.ner_f1` and :mod:`minisci.metrics.classification_f1` wrap them for users).

NER: entity-level micro/macro precision, recall and F1 in strict IOB2 (seqeval), per-type scores and
token accuracy. Strict mode counts an entity only when its type and both boundaries match, as the
CoNLL scorer does. The scores are seqeval's own: its ``precision_recall_fscore_support`` does the
arithmetic, the four times its ``classification_report`` would. Only where the entities come from
differs: when every sequence is valid IOB2 (what the fine-tuning stages score: gold from the readers,
predictions repaired to IOB2), an entity is a ``B-X`` and the ``I-X`` after it, which
:func:`minisci.data.readers.spans` reads in one pass, about seven times faster than seqeval's
token-by-token pattern matching (a stage scores dev every epoch). Any other sequence goes through
seqeval's own entity reader, so the result is seqeval's in every case (``tests/metrics``).

Classification: accuracy, macro- and micro-F1, per-class precision/recall/F1 and the confusion
matrix (scikit-learn). Macro- and micro-F1 average over one fixed class set: the dataset's labels that
occur in the gold labels of the split scored. The set depends on the data only, never on a model's
predictions, so two models scored on one split always average over the same classes. A class absent
from the split has no F1 (recall is undefined): it is reported as absent (``support`` 0, ``absent``
true, recall and F1 null), not as 0.00, and left out of the averages; predicting it is still an
error, because it costs the gold class its recall. Per-class scores and the confusion matrix keep
every declared label, in the declared order.

Importing this module imports scikit-learn, which draws from Python's global random state: the
fine-tuning stages import it before any seed is set.
"""

from __future__ import annotations

from seqeval.metrics import accuracy_score as token_accuracy
from seqeval.metrics.v1 import check_consistent_length, precision_recall_fscore_support
from seqeval.scheme import IOB2, Entities
from sklearn import metrics as sk

from minisci.data.readers import spans
from minisci.tasks.counting import scored_labels

_AVERAGES = ("micro avg", "macro avg", "weighted avg")


class _SpanEntities:
    """seqeval's ``Entities`` of valid IOB2 sequences, read by :func:`spans`: per type, the set of
    ``(sentence, start, end)`` (what seqeval's ``Entity`` compares), and the types."""

    def __init__(self, sequences: list[list[str]]):
        self.by_type: dict[str, set] = {}
        for i, tags in enumerate(sequences):
            for etype, start, end in spans(tags):
                self.by_type.setdefault(etype, set()).add((i, start, end))

    def filter(self, tag_name: str) -> set:
        return self.by_type.get(tag_name, set())

    @property
    def unique_tags(self) -> set[str]:
        return set(self.by_type)


def _valid_iob2(sequences: list[list[str]]) -> bool:
    """Every tag ``O``, ``B-X`` or ``I-X`` (X as seqeval reads it: no leading or trailing ``-``), and
    every ``I-X`` right after ``B-X`` or ``I-X``."""
    for tags in sequences:
        prev = "O"
        for tag in tags:
            if tag != "O":
                etype = tag[2:]
                if tag[:2] not in ("B-", "I-") or not etype or etype != etype.strip("-"):
                    return False
                if tag[0] == "I" and (prev == "O" or prev[2:] != etype):
                    return False
            prev = tag
    return True


def entities(gold: list[list[str]], pred: list[list[str]]) -> tuple:
    """seqeval's strict IOB2 entities of ``gold`` and ``pred``: read by :func:`spans` when both are valid
    IOB2, else by seqeval itself (both alike: the two sides' entities are compared with each other)."""
    if _valid_iob2(gold) and _valid_iob2(pred):
        return _SpanEntities(gold), _SpanEntities(pred)
    return Entities(gold, IOB2), Entities(pred, IOB2)


def strict_report(gold: list[list[str]], pred: list[list[str]]) -> dict:
    """seqeval's ``classification_report(gold, pred, mode="strict", scheme=IOB2, output_dict=True,
    zero_division=0)``, with the entities from :func:`entities`."""
    check_consistent_length(gold, pred)  # before the entities, as seqeval does
    true, predicted = entities(gold, pred)
    kw = {"scheme": IOB2, "zero_division": 0, "entities_true": true, "entities_pred": predicted}
    names = sorted(true.unique_tags | predicted.unique_tags)
    report = {}
    for row in zip(names, *precision_recall_fscore_support(gold, pred, average=None, **kw)):
        report[row[0]] = dict(zip(("precision", "recall", "f1-score", "support"), row[1:]))
    for average in ("micro", "macro", "weighted"):
        row = precision_recall_fscore_support(gold, pred, average=average, **kw)
        report[f"{average} avg"] = dict(zip(("precision", "recall", "f1-score", "support"), row))
    return report


def ner_scores(gold: list[list[str]], pred: list[list[str]]) -> dict:
    """Entity-level micro/macro P/R/F1 (strict IOB2), per-type P/R/F1, token accuracy."""
    report = strict_report(gold, pred)
    out = {
        "precision": report["micro avg"]["precision"],
        "recall": report["micro avg"]["recall"],
        "f1": report["micro avg"]["f1-score"],
        "macro_precision": report["macro avg"]["precision"],
        "macro_recall": report["macro avg"]["recall"],
        "macro_f1": report["macro avg"]["f1-score"],
        "token_accuracy": token_accuracy(gold, pred),
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


def _per_class(p: float, r: float, f: float, support: int) -> dict:
    if not support:  # absent from the split: recall and F1 do not exist
        return {"precision": round(float(p), 4), "recall": None, "f1": None, "support": 0, "absent": True}
    return {"precision": round(float(p), 4), "recall": round(float(r), 4), "f1": round(float(f), 4), "support": support}


def classification_scores(gold: list[str], pred: list[str], labels: list[str]) -> dict:
    present = scored_labels(gold, labels)
    p, r, f, support = sk.precision_recall_fscore_support(gold, pred, labels=labels, zero_division=0)
    return {
        "accuracy": round(float(sk.accuracy_score(gold, pred)), 4),
        "macro_f1": round(float(sk.f1_score(gold, pred, labels=present, average="macro", zero_division=0)), 4),
        "micro_f1": round(float(sk.f1_score(gold, pred, labels=present, average="micro", zero_division=0)), 4),
        "per_class": {lab: _per_class(p[i], r[i], f[i], int(support[i])) for i, lab in enumerate(labels)},
        "confusion_matrix": sk.confusion_matrix(gold, pred, labels=labels).tolist(),
    }
