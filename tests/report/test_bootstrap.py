import numpy as np
import pytest
from helpers import ner_counts, ner_rows

from minisci.report.bootstrap import paired_bootstrap
from minisci.tasks.classification import CLASSIFICATION
from minisci.tasks.counting import f1 as f1_from_counts


def test_identical_predictions_difference_zero_p_one():
    rows = ner_rows(300, 0.8, 0)
    c = ner_counts(rows)
    b = paired_bootstrap(c, c.copy(), f1_from_counts, 500, seed=1)
    assert b["difference"] == 0.0 and b["ci_low"] == 0.0 and b["ci_high"] == 0.0 and b["p_value"] == 1.0


def test_clearly_better_system_small_p():
    gold_rows = ner_rows(400, 1.0, 0)
    weak, strong = ner_rows(400, 0.6, 1), ner_rows(400, 0.95, 2)
    b = paired_bootstrap(ner_counts(weak), ner_counts(strong), f1_from_counts, 1000, seed=3)
    assert b["difference"] > 0.2 and b["ci_low"] > 0 and b["p_value"] < 0.01
    assert f1_from_counts(ner_counts(gold_rows).sum(0)) == 1.0


def test_tiny_noise_is_not_significant():
    a = ner_rows(300, 0.8, 5)
    b = [dict(r) for r in a]
    b[0] = {"gold": a[0]["gold"], "pred": a[0]["gold"]}  # one sentence differs
    res = paired_bootstrap(ner_counts(a), ner_counts(b), f1_from_counts, 1000, seed=0)
    assert res["p_value"] > 0.2 and res["ci_low"] <= res["difference"] <= res["ci_high"]


def test_deterministic_for_a_seed():
    a, b = ner_counts(ner_rows(100, 0.7, 1)), ner_counts(ner_rows(100, 0.8, 2))
    assert paired_bootstrap(a, b, f1_from_counts, 300, 7) == paired_bootstrap(a, b, f1_from_counts, 300, 7)


def test_classification_counts_and_macro_f1():
    labels = ["x", "y"]
    rows = [{"gold": "x", "pred": "x"}, {"gold": "x", "pred": "y"}, {"gold": "y", "pred": "y"}]
    c = CLASSIFICATION.counts(rows, labels).sum(0)
    # x: tp 1, predicted 1, gold 2 -> F1 2/3; y: tp 1, predicted 2, gold 1 -> F1 2/3
    assert list(c) == [1, 1, 2, 1, 2, 1] and CLASSIFICATION.headline(2)(c) == pytest.approx(2 / 3)
    assert CLASSIFICATION.scores(2)["accuracy"](c) == pytest.approx(2 / 3)


def test_mismatched_examples_raise():
    with pytest.raises(ValueError, match="same examples"):
        paired_bootstrap(np.zeros((3, 3)), np.zeros((4, 3)), f1_from_counts, 100, 0)
