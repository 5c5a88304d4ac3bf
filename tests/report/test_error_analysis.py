"""Error analysis on hand-labelled toy predictions: NER error kinds, missed and spurious strings,
most confident classification errors, and what one arm gets right and the other wrong."""

from __future__ import annotations

import pytest

from minisci.report.error_analysis import (
    arm_differences,
    confident_errors,
    conll_text,
    entity_judgements,
    example_judgements,
    ner_error_kinds,
    ner_errors,
    read_conll_predictions,
)

# (gold, predicted, hand-labelled kinds): each case is labelled by reading the tags
TOY = [
    # exact match
    (["B-Chem", "O"], ["B-Chem", "O"], {"correct": 1}),
    # nothing predicted: a false negative
    (["B-Chem", "I-Chem", "O"], ["O", "O", "O"], {"false_negative": 1}),
    # a span where there is none: a false positive
    (["O", "O"], ["O", "B-Dis"], {"false_positive": 1}),
    # same boundaries, other type
    (["B-Chem", "I-Chem"], ["B-Dis", "I-Dis"], {"wrong_type": 1}),
    # too short ("liver" of "liver damage"): wrong boundary
    (["B-Dis", "I-Dis", "O"], ["B-Dis", "O", "O"], {"wrong_boundary": 1}),
    # too long and another type: still a boundary error (overlap without equal boundaries)
    (["O", "B-Chem", "O"], ["B-Dis", "I-Dis", "O"], {"wrong_boundary": 1}),
    # one prediction spans two gold entities: one boundary error, the other gold entity missed
    (["B-Chem", "B-Chem", "O"], ["B-Chem", "I-Chem", "O"], {"wrong_boundary": 1, "false_negative": 1}),
    # one right, one spurious, one missed
    (
        ["B-Chem", "O", "O", "B-Dis"],
        ["B-Chem", "O", "B-Dis", "O"],
        {"correct": 1, "false_positive": 1, "false_negative": 1},
    ),
]
KINDS = ("correct", "false_positive", "false_negative", "wrong_type", "wrong_boundary")


@pytest.mark.parametrize(("gold", "pred", "expected"), TOY)
def test_error_kinds_match_the_hand_labels(gold, pred, expected):
    got = ner_error_kinds(gold, pred)
    assert {k: got[k] for k in KINDS if got[k]} == expected


def test_kinds_add_up_to_the_gold_and_predicted_entities():
    rows = [{"tokens": [f"w{i}" for i in range(len(g))], "gold": g, "pred": p} for g, p, _ in TOY]
    k = ner_errors(rows, top=3)["kinds"]
    assert k["correct"] + k["wrong_type"] + k["wrong_boundary"] + k["false_negative"] == 9  # gold entities
    assert k["correct"] + k["wrong_type"] + k["wrong_boundary"] + k["false_positive"] == 8  # predicted entities


def test_missed_and_spurious_strings_are_counted_by_surface_form():
    rows = [
        {"tokens": ["liver", "damage", "."], "gold": ["B-D", "I-D", "O"], "pred": ["B-D", "O", "O"]},
        {"tokens": ["liver", "damage", "."], "gold": ["B-D", "I-D", "O"], "pred": ["O", "O", "O"]},
        {"tokens": ["aspirin", "x"], "gold": ["B-C", "O"], "pred": ["B-C", "B-C"]},
    ]
    e = ner_errors(rows, top=5)
    assert e["missed"] == [("liver damage", 2)]
    assert e["spurious"] == [("liver", 1), ("x", 1)]


def test_tied_strings_come_in_string_order_whatever_the_hash_seed():
    """Ties are listed in string order, so the report's bytes do not depend on Python's per-process
    string hashing (the spans of a sentence are sets). Checked in processes of different hash seeds."""
    import json
    import os
    import subprocess
    import sys

    words = [f"w{i:02d}" for i in range(12)]
    rows = [{"tokens": words, "gold": ["B-X"] * 12, "pred": ["O"] * 12}]
    expected = [(w, 1) for w in words[:10]]
    assert ner_errors(rows, top=10)["missed"] == expected
    code = (
        "import json, sys; from minisci.report.error_analysis import ner_errors; "
        "print(json.dumps(ner_errors(json.loads(sys.argv[1]), 10)['missed']))"
    )
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", code, json.dumps(rows)], env=env, capture_output=True, text=True)
        assert [tuple(x) for x in json.loads(out.stdout)] == expected, out.stderr


def test_conll_text_round_trips():
    rows = [
        {"tokens": ["a", "b"], "gold": ["B-X", "O"], "pred": ["O", "O"]},
        {"tokens": ["c"], "gold": ["O"], "pred": ["B-X"]},
    ]
    text = conll_text(rows)
    assert text == "a B-X O\nb O O\n\nc O B-X\n\n"
    assert read_conll_predictions(text) == ([["B-X", "O"], ["O"]], [["O", "O"], ["B-X"]])


def test_most_confident_errors_come_first_with_their_texts():
    labels = ["x", "y"]
    rows = [
        {"i": 0, "gold": "x", "pred": "y", "probs": [0.4, 0.6]},
        {"i": 1, "gold": "x", "pred": "x", "probs": [0.99, 0.01]},
        {"i": 2, "gold": "y", "pred": "x", "probs": [0.95, 0.05]},
    ]
    out = confident_errors(rows, ["t0", "t1", "t2"], labels, top=5)
    assert [(e["i"], e["confidence"], e["text"]) for e in out] == [(2, 0.95, "t2"), (0, 0.6, "t0")]


def test_arm_differences_judge_each_arm_by_the_majority_of_its_seeds():
    def row(i, gold, *seed_preds):
        return {"i": i, "gold": gold, "pred": seed_preds[0], "preds": {str(s): p for s, p in enumerate(seed_preds)}}

    a = [row(0, "x", "x", "x", "y"), row(1, "x", "y", "y", "x"), row(2, "y", "y", "y", "y")]
    b = [row(0, "x", "y", "y", "x"), row(1, "x", "x", "x", "x"), row(2, "y", "y", "x", "y")]
    d = arm_differences(example_judgements, a, b, ["t0", "t1", "t2"], top=5)
    assert (d["baseline_only"], d["adapted_only"], d["both"], d["neither"]) == (1, 1, 1, 0)
    assert d["baseline_only_sample"] == [{"item": "[x] t0", "at": 0}]
    ner_a = [{"sentence": 0, "tokens": ["a", "b"], "gold": ["B-C", "B-C"], "pred": ["B-C", "O"]}]
    ner_b = [{"sentence": 0, "tokens": ["a", "b"], "gold": ["B-C", "B-C"], "pred": ["O", "B-C"]}]
    d = arm_differences(entity_judgements, ner_a, ner_b, None, top=5)
    assert d["baseline_only_sample"] == [{"item": "a (C)", "at": 0}]
    assert d["adapted_only_sample"] == [{"item": "b (C)", "at": 0}]
