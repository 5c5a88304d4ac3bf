"""The seed-aware bootstrap: one seed is the paired bootstrap; on synthetic data with a known
answer, no difference gives p-values close to uniform and a planted difference is found."""

import numpy as np
import pytest
from helpers import ner_counts, ner_rows
from scipy.stats import kstest

from minisci.report.bootstrap import paired_bootstrap, seed_bootstrap
from minisci.tasks.classification import CLASSIFICATION
from minisci.tasks.counting import f1 as f1_from_counts


def synthetic_arms(rng, n=1000, seeds=3, seed_sd=0.02, effect=0.0):
    """Per-seed NER-style counts (one gold, one predicted entity per example; F1 = accuracy).

    Examples differ in difficulty, the adapted arm has per-example gains and losses that average
    ``effect`` over the population of examples, and each run gets its own seed offset: the regime
    of BERT fine-tuning, where seed-to-seed variation exceeds one run's example noise.
    """
    difficulty = rng.beta(4, 1.5, size=n)
    gain = rng.normal(effect, 0.1, size=n)
    arms = []
    for arm in (0, 1):
        runs = []
        for _ in range(seeds):
            p = np.clip(difficulty + arm * gain + rng.normal(0, seed_sd), 0, 1)
            tp = (rng.random(n) < p).astype(float)
            runs.append(np.stack([tp, np.ones(n), np.ones(n)], axis=1))
        arms.append(runs)
    return arms


def test_one_seed_is_the_paired_bootstrap_bit_for_bit():
    a, b = ner_counts(ner_rows(150, 0.7, 1)), ner_counts(ner_rows(150, 0.8, 2))
    paired = paired_bootstrap(a, b, f1_from_counts, 450, seed=7)  # 450: a partial last chunk too
    seeded = seed_bootstrap([a], [b], f1_from_counts, 450, seed=7)
    assert {k: seeded[k] for k in paired} == paired
    assert seeded["seeds"] == 1 and seeded["sd_a"] == 0.0 and seeded["seed_differences"] == [paired["difference"]]


def test_summary_per_seed_and_per_arm():
    rows = [{"gold": "x", "pred": "x"}, {"gold": "y", "pred": "x"}, {"gold": "y", "pred": "y"}]
    worse = [dict(r, pred="x") for r in rows]
    a = [CLASSIFICATION.counts(worse, ["x", "y"]), CLASSIFICATION.counts(rows, ["x", "y"])]
    b = [CLASSIFICATION.counts(rows, ["x", "y"])] * 2
    macro_f1 = CLASSIFICATION.headline(2)
    res = seed_bootstrap(a, b, macro_f1, 200, seed=0)
    f_worse, f_rows = (float(macro_f1(x.sum(0))) for x in a)
    assert res["seed_differences"] == [round(f_rows - f_worse, 4), 0.0]
    assert res["seeds_b_better"] == 1 and res["mean_b"] == round(f_rows, 4)
    assert res["sd_a"] == round(float(np.std([f_worse, f_rows], ddof=1)), 4)
    assert res["difference"] == round((f_rows - f_worse) / 2, 4)


def test_no_difference_gives_uniform_p_values():
    rng = np.random.default_rng(0)
    p = np.array([seed_bootstrap(*synthetic_arms(rng), f1_from_counts, 200, seed=r)["p_value"] for r in range(200)])
    assert 0.01 <= np.mean(p < 0.05) <= 0.1
    assert 0.12 <= np.mean(p < 0.2) <= 0.28
    assert kstest(p, "uniform").pvalue > 0.01


def test_planted_difference_is_detected():
    a, b = synthetic_arms(np.random.default_rng(1), effect=0.1)
    res = seed_bootstrap(a, b, f1_from_counts, 1000, seed=0)
    assert res["p_value"] < 0.05 and res["ci_low"] > 0 and res["seeds_b_better"] == 3
    assert res["ci_low"] <= res["difference"] <= res["ci_high"]


def test_seed_variance_widens_the_interval():
    """The same test examples with noisier seeds: a one-seed bootstrap cannot see it, this one does."""
    calm = seed_bootstrap(*synthetic_arms(np.random.default_rng(2), seed_sd=0.0), f1_from_counts, 500, seed=0)
    noisy = seed_bootstrap(*synthetic_arms(np.random.default_rng(2), seed_sd=0.05), f1_from_counts, 500, seed=0)
    assert noisy["ci_high"] - noisy["ci_low"] > 1.5 * (calm["ci_high"] - calm["ci_low"])


@pytest.mark.parametrize(
    ("a", "b", "match"),
    [
        ([np.ones((3, 3))], [np.ones((3, 3))] * 2, "same seeds"),
        ([], [], "same seeds"),
        ([np.ones((3, 3))], [np.ones((4, 3))], "same examples"),
    ],
)
def test_mismatched_runs_raise(a, b, match):
    with pytest.raises(ValueError, match=match):
        seed_bootstrap(a, b, f1_from_counts, 100, seed=0)
