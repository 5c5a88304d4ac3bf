"""What is behind a score: the errors of each fine-tuned arm, and where the two arms differ.

Everything here reads the test predictions the fine-tuning stages save (``test_predictions.jsonl``:
one row per test example, the first seed's prediction in ``pred``, every seed's in ``preds``), so
that the analysis needs no model and sees both arms at once, which is what the arm-against-arm
comparison needs.

NER error kinds, per sentence, over entity spans (type, start, end) of the IOB2 tags:

1. a predicted span equal to a gold span in type and both boundaries is correct;
2. **wrong type**: a predicted span with the boundaries of a gold span and another type;
3. **wrong boundary**: a predicted span that overlaps a gold span without the same boundaries (its
   type may also differ); each gold span is matched at most once, the first overlapping one in
   sentence order;
4. **false positive**: a predicted span that overlaps no unmatched gold span;
5. **false negative**: a gold span that no predicted span matched.

So gold entities = correct + wrong type + wrong boundary + false negatives, and predicted entities =
correct + wrong type + wrong boundary + false positives; strict F1 counts every kind but "correct" as
an error. Missed and spurious strings are the gold and predicted spans that are not correct.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable

from minisci.data.readers import spans

NER_KINDS = ("false_positive", "false_negative", "wrong_type", "wrong_boundary")


# 1. NER --------------------------------------------------------------------------------------------------


def ner_error_kinds(gold_tags: list[str], pred_tags: list[str]) -> Counter:
    """Counts of ``correct`` and of each of :data:`NER_KINDS` in one sentence (module docstring)."""
    gold, pred = spans(gold_tags), spans(pred_tags)
    exact = set(gold) & set(pred)
    out = Counter(correct=len(exact))
    gold_left = [g for g in gold if g not in exact]
    for _ptype, ps, pe in (p for p in pred if p not in exact):
        same = next((g for g in gold_left if (g[1], g[2]) == (ps, pe)), None)
        overlap = same or next((g for g in gold_left if g[1] < pe and ps < g[2]), None)
        if overlap is None:
            out["false_positive"] += 1
            continue
        gold_left.remove(overlap)
        out["wrong_type" if same else "wrong_boundary"] += 1
    out["false_negative"] += len(gold_left)
    return out


def _text(tokens: list[str], span: tuple[str, int, int]) -> str:
    return " ".join(tokens[span[1] : span[2]])


def ner_errors(rows: list[dict], top: int) -> dict:
    """Error kinds over a test set (the rows' ``pred``), and the ``top`` most frequent missed (gold,
    not found exactly) and spurious (predicted, not gold exactly) entity strings with their counts."""
    kinds, missed, spurious = Counter(), Counter(), Counter()
    for r in rows:
        kinds.update(ner_error_kinds(r["gold"], r["pred"]))
        gold, pred = set(spans(r["gold"])), set(spans(r["pred"]))
        missed.update(_text(r["tokens"], g) for g in gold - pred)
        spurious.update(_text(r["tokens"], p) for p in pred - gold)
    return {
        "kinds": {k: kinds[k] for k in ("correct", *NER_KINDS)},
        "missed": _most_common(missed, top),
        "spurious": _most_common(spurious, top),
    }


def _most_common(counts: Counter, top: int) -> list[tuple[str, int]]:
    """The ``top`` most frequent strings, ties in string order: ``Counter.most_common`` keeps ties in
    insertion order, which here is the iteration order of sets of spans, and that changes with
    Python's per-process string hashing, so the report's bytes would too."""
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]


def conll_text(rows: list[dict]) -> str:
    """Word-level test predictions, one ``token gold predicted`` line per word and a blank line after
    each sentence (the CoNLL evaluation layout; seqeval and conlleval read it)."""
    return "".join("".join(f"{w} {g} {p}\n" for w, g, p in zip(r["tokens"], r["gold"], r["pred"])) + "\n" for r in rows)


def read_conll_predictions(text: str) -> tuple[list[list[str]], list[list[str]]]:
    """Gold and predicted tag sequences back from :func:`conll_text` (for checks and users)."""
    gold, pred, g, p = [], [], [], []
    for line in text.splitlines() + [""]:
        if line.strip():
            _w, gt, pt = line.rsplit(" ", 2)
            g.append(gt)
            p.append(pt)
        elif g:
            gold.append(g)
            pred.append(p)
            g, p = [], []
    return gold, pred


# 2. classification -----------------------------------------------------------------------------------------


def confident_errors(rows: list[dict], texts: list[str], labels: list[str], top: int) -> list[dict]:
    """The ``top`` wrong predictions with the highest predicted probability (rows' ``probs``, in
    ``labels`` order), with their texts: where the model is sure and wrong (often label noise)."""
    wrong = [r for r in rows if r["pred"] != r["gold"] and r.get("probs")]
    wrong.sort(key=lambda r: (-r["probs"][labels.index(r["pred"])], r["i"]))
    return [
        {
            "i": r["i"],
            "gold": r["gold"],
            "pred": r["pred"],
            "confidence": r["probs"][labels.index(r["pred"])],
            "text": texts[r["i"]],
        }
        for r in wrong[:top]
    ]


# 3. baseline against adapted ------------------------------------------------------------------------------


def _seed_preds(row: dict) -> list:
    return list(row["preds"].values()) if "preds" in row else [row["pred"]]


def _majority(hits: list[bool]) -> bool:
    """Right in more than half of the seeds: one seed's luck does not make an example change sides."""
    return 2 * sum(hits) > len(hits)


def ner_found(row: dict) -> dict:
    """Each gold entity of a row -> found (exact typed span) by a majority of the seeds."""
    found = {g: [] for g in spans(row["gold"])}
    for pred in _seed_preds(row):
        predicted = set(spans(pred))
        for g in found:
            found[g].append(g in predicted)
    return {g: _majority(h) for g, h in found.items()}


def entity_judgements(ra: dict, rb: dict, texts: list[str] | None) -> list[tuple]:
    """Each gold entity of a test sentence: (entity, found by a, found by b, what, where)."""
    fa, fb = ner_found(ra), ner_found(rb)
    return [(g, fa[g], fb[g], f"{_text(ra['tokens'], g)} ({g[0]})", ra["sentence"]) for g in fa]


def example_judgements(ra: dict, rb: dict, texts: list[str] | None) -> list[tuple]:
    """A test example: (None, a right, b right, what, where)."""
    right_a = _majority([p == ra["gold"] for p in _seed_preds(ra)])
    right_b = _majority([p == rb["gold"] for p in _seed_preds(rb)])
    text = texts[ra["i"]] if texts else ""
    return [(None, right_a, right_b, f"[{ra['gold']}] {text}", ra["i"])]


def arm_differences(judge, rows_a: list[dict], rows_b: list[dict], texts: list[str] | None, top: int) -> dict:
    """Test items (``judge``: :func:`entity_judgements` or :func:`example_judgements`) that one arm gets
    right and the other wrong, each arm judged by the majority of its seeds: counts both ways and the
    first ``top`` of each."""
    a_only, b_only, both, neither = [], [], 0, 0
    for ra, rb in zip(rows_a, rows_b):
        for _key, ok_a, ok_b, what, where in judge(ra, rb, texts):
            both += ok_a and ok_b
            neither += not ok_a and not ok_b
            if ok_a != ok_b:
                (a_only if ok_a else b_only).append({"item": what, "at": where})
    return {
        "baseline_only": len(a_only),
        "adapted_only": len(b_only),
        "both": both,
        "neither": neither,
        "baseline_only_sample": a_only[:top],
        "adapted_only_sample": b_only[:top],
    }


# 4. the analyses a task kind names (its ``errors``) ------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Analysis:
    """How the errors of one kind of prediction are analysed."""

    judge: Callable  # (row a, row b, texts) -> the judged test items, for arm_differences
    judged: str  # what those items are, in the report
    arm_errors: Callable  # (test rows, texts or None, labels, top) -> an arm's errors, or None
    needs_texts: bool  # whether it shows the test texts (read from the prepared data)
    word_predictions: Callable | None  # (test rows) -> word-level predictions (CoNLL text), or None


ANALYSES = {
    "spans": Analysis(
        entity_judgements, "gold entities", lambda rows, texts, labels, top: ner_errors(rows, top), False, conll_text
    ),
    "examples": Analysis(
        example_judgements,
        "test examples",
        lambda rows, texts, labels, top: (
            {"confident": confident_errors(rows, texts, labels, top)} if texts is not None else None
        ),
        True,
        None,
    ),
}
