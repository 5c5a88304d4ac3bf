"""Verdicts, power and multiplicity on synthetic data whose answer is known: equal arms are
`equivalent` once the test set is large and `inconclusive` when small, a planted difference is
`better`, the minimum detectable effect shrinks as 1/sqrt(seeds) when seeds dominate, Holm matches a
hand computation; and the macro-F1 class set is fixed by the data."""

from __future__ import annotations

import math

import numpy as np
import pytest

from minisci.metrics.scores import classification_scores
from minisci.report.bootstrap import (
    equivalence_p,
    holm,
    minimum_detectable_effect,
    seed_bootstrap,
    seeds_for_margin,
    verdict,
)


def accuracy(c: np.ndarray) -> np.ndarray:
    return c[..., 0] / np.maximum(c[..., 1], 1e-12)


def arm(rng: np.random.Generator, n: int, p: float, seeds: int) -> list[np.ndarray]:
    """Per seed, per example [correct, 1] with P(correct) = p, independently drawn."""
    return [np.stack([rng.random(n) < p, np.ones(n)], axis=1).astype(float) for _ in range(seeds)]


def compare(n: int, p_a: float, p_b: float, margin: float = 0.01, seeds: int = 3) -> dict:
    rng = np.random.default_rng(7)
    a, b = arm(rng, n, p_a, seeds), arm(rng, n, p_b, seeds)
    boot = seed_bootstrap(a, b, accuracy, 1000, 13, margin=margin)
    return {**boot, "verdict": verdict(boot)}


def test_equal_arms_are_equivalent_when_large_and_inconclusive_when_small():
    large = compare(60_000, 0.85, 0.85)
    assert large["verdict"] == "equivalent" and large["p_equivalence"] < 0.05
    small = compare(300, 0.85, 0.85)
    assert small["verdict"] == "inconclusive" and small["p_equivalence"] > 0.05


def test_planted_difference_is_better_and_its_reverse_worse():
    assert compare(3000, 0.80, 0.88)["verdict"] == "better"
    assert compare(3000, 0.88, 0.80)["verdict"] == "worse"


def test_an_interval_that_excludes_0_with_p_at_alpha_claims_nothing():
    """The committed retrieval edge: [-0.0273, -0.0005] with p = 0.0505 read "worse" beside its own p."""
    edge = {"ci_low": -0.0273, "ci_high": -0.0005, "p_value": 0.0505, "p_equivalence": 0.4}
    assert verdict(edge) == "inconclusive"
    assert verdict({**edge, "p_value": 0.0495}) == "worse"
    up = {"ci_low": 0.0005, "ci_high": 0.0273, "p_value": 0.0505, "p_equivalence": 0.4}
    assert verdict(up) == "inconclusive" and verdict({**up, "p_value": 0.01}) == "better"
    # an interval inside the margin with an edge p is still equivalent: TOST decides that, not p
    assert verdict({"ci_low": 0.0001, "ci_high": 0.002, "p_value": 0.06, "p_equivalence": 0.01}) == "equivalent"


def test_tost_p_is_the_larger_one_sided_tail():
    diffs = np.linspace(-0.02, 0.02, 999)  # 999 replicates, evenly spread
    below, above = np.sum(diffs <= -0.015), np.sum(diffs >= 0.015)
    assert equivalence_p(diffs, 0.015) == round((max(below, above) + 1) / 1000, 4)
    assert equivalence_p(diffs, 0.05) == round(1 / 1000, 4)  # every replicate inside the margin


def test_minimum_detectable_effect_shrinks_as_one_over_sqrt_seeds():
    # seed variance only: the MDE halves when the seeds quadruple
    mde3 = minimum_detectable_effect(0.0, 4e-5, 3, 1000, 1000)
    mde12 = minimum_detectable_effect(0.0, 4e-5, 12, 1000, 1000)
    assert mde3 / mde12 == pytest.approx(2.0)
    assert mde3 == pytest.approx((1.959964 + 0.841621) * math.sqrt(4e-5 / 3), rel=1e-5)
    # the test-sample part does not shrink with seeds, but with test size
    assert minimum_detectable_effect(1e-5, 0.0, 3, 1000, 1000) == minimum_detectable_effect(1e-5, 0.0, 30, 1000, 1000)
    assert minimum_detectable_effect(1e-5, 0.0, 3, 4000, 1000) * 2 == pytest.approx(
        minimum_detectable_effect(1e-5, 0.0, 3, 1000, 1000)
    )


def test_observed_variances_give_the_mde_that_shrinks_with_seeds():
    rng = np.random.default_rng(3)
    n, offsets = 2000, rng.normal(0, 0.01, size=12)  # seed effects of sd 1 point on a shared test set

    def runs(k):
        base = rng.random(n) < 0.8
        return [np.stack([base | (rng.random(n) < 0.5 + 40 * o), np.ones(n)], 1).astype(float) for o in offsets[:k]]

    boot = seed_bootstrap(runs(6), runs(6), accuracy, 500, 13, margin=0.01)
    assert boot["seed_var"] > 0 and boot["example_var"] > 0 and boot["examples"] == n
    mdes = [minimum_detectable_effect(boot["example_var"], boot["seed_var"], s, n, n) for s in (1, 3, 12, 48)]
    assert mdes == sorted(mdes, reverse=True)
    floor = (1.959964 + 0.841621) * math.sqrt(boot["example_var"])
    assert mdes[-1] > floor  # never below the test sample's own noise


def test_seeds_for_margin_is_the_fewest_that_reach_it():
    ex, sv, margin = 1e-6, 4e-5, 0.01
    need = seeds_for_margin(margin, ex, sv)
    assert minimum_detectable_effect(ex, sv, need, 1, 1) <= margin < minimum_detectable_effect(ex, sv, need - 1, 1, 1)
    assert seeds_for_margin(margin, 2e-5, sv) is None  # the test sample alone exceeds the margin
    assert seeds_for_margin(margin, ex, None) is None  # one seed: seed variance unknown


def test_holm_matches_a_hand_computed_case():
    # sorted: 0.005 x4 = 0.02; 0.01 x3 = 0.03; 0.03 x2 = 0.06; 0.04 x1 = 0.04 -> 0.06 (monotone)
    assert holm([0.01, 0.04, 0.03, 0.005]) == [0.03, 0.06, 0.06, 0.02]
    assert holm([0.6, 0.7]) == [1.0, 1.0]  # capped at 1
    assert holm([0.2]) == [0.2]


def test_macro_f1_averages_over_the_classes_present_in_test_for_every_model():
    labels = ["a", "b", "c"]
    gold = ["a", "a", "b", "b"]
    never_c, predicts_c = ["a", "a", "b", "a"], ["a", "c", "b", "b"]
    s1, s2 = classification_scores(gold, never_c, labels), classification_scores(gold, predicts_c, labels)
    # both over {a, b}: predicting the absent class c costs a its recall, and adds no 0.00 for c
    assert s1["macro_f1"] == round((0.8 + 2 / 3) / 2, 4)
    assert s2["macro_f1"] == round((2 / 3 + 1.0) / 2, 4)
    assert s2["per_class"]["c"] == {"precision": 0.0, "recall": None, "f1": None, "support": 0, "absent": True}
    # all classes present (SciCite): the same number as averaging over the classes seen anywhere
    full = ["a", "b", "c", "a"]
    from sklearn.metrics import f1_score

    pred = ["a", "c", "c", "b"]
    assert classification_scores(full, pred, labels)["macro_f1"] == round(f1_score(full, pred, average="macro"), 4)
