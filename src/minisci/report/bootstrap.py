"""Paired bootstraps: is the adapted model's difference from the baseline real?

One fine-tuning seed per arm (:func:`paired_bootstrap`): both systems are scored on the same
resampled test sets (examples drawn with replacement), which keeps the pairing. The 95% interval is
the percentile interval of the resampled differences; the two-sided p-value uses the bootstrap
distribution shifted to the null (difference 0): p = P(|d* - mean(d*)| >= |d_observed|). Identical
systems give d* = 0 everywhere and p = 1.

Several fine-tuning seeds per arm (:func:`seed_bootstrap`): the quantity compared is the mean over
seeds of each arm's test score, and its uncertainty has two sources, the test sample and the
fine-tuning seed. Seeds are paired by index (seed s of the baseline and seed s of the adapted arm
share the seed value, hence data order and head initialisation). Each bootstrap replicate

1. draws one multiset of test examples with replacement (multinomial multiplicities), and
2. draws S seed indices with replacement (S = number of seeds),

then scores both arms of each drawn seed on the drawn examples and averages the per-seed
differences. The examples are drawn once per replicate, for every seed and both arms, because every
seed is evaluated on the *same* test set: its sampling error is common to all seeds and does not
shrink with more seeds (drawing examples independently per seed would treat S seeds as S test sets
and understate the interval). Interval and p-value are computed from the replicates exactly as in
the one-seed case. With one seed, step 2 always draws that seed and the result is
:func:`paired_bootstrap`'s, bit for bit (the seed draws use their own random stream).

Calibration (checked on synthetic data in tests/report/test_seed_bootstrap.py): resampling both levels
counts the per-run example noise twice (once through the examples, once through the spread of the
per-seed scores), while the spread of S resampled seeds has divisor S, not S - 1. When seed-to-seed
variation is larger than a single run's example noise, as for BERT fine-tuning (0.3-0.5 F1 between
seeds on BC5CDR, against a per-run bootstrap sd of ~0.2), the two roughly cancel and p-values under
no difference are close to uniform; when it is smaller, the test is conservative. With 3 seeds only
10 distinct seed multisets exist, so the report also gives the per-seed differences and the number of seeds
the adapted model won.

Verdicts (:func:`verdict`): a difference is ``better`` or ``worse`` when its 95% interval excludes 0,
``equivalent`` when two one-sided tests (TOST) on the same bootstrap replicates reject both
"the difference is <= -m" and ">= +m" for the declared margin m (:func:`equivalence_p`; at
alpha = 0.05 this is the 90% percentile interval lying inside (-m, +m)), and ``inconclusive``
otherwise: "not significant" alone is not evidence of no effect.

The design's power (:func:`minimum_detectable_effect`): the standard error of the mean-over-seeds
difference is modelled as sqrt(v_ex * n0 / n + v_seed / S), where v_ex is the variance of the
replicates' seed-mean difference under example resampling alone (the test sample, shared by all
seeds, so it does not shrink with seeds) at the observed test size n0, and v_seed the sample
variance of the per-seed differences (seed-to-seed variation; it includes each seed's own example
noise, so the model is slightly conservative). The minimum detectable effect at power 1 - beta and
two-sided alpha is (z_{1-alpha/2} + z_{1-beta}) * SE (normal approximation). With one seed v_seed is
unknown and the estimate covers the test sample only.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np


def _interval(diffs: np.ndarray, observed: float) -> dict:
    """The observed difference, the 95% percentile interval of the resampled ones, and the two-sided
    p-value of the bootstrap distribution shifted to the null."""
    centred = np.abs(diffs - diffs.mean())
    p = float((np.sum(centred >= abs(observed) - 1e-12) + 1) / (len(diffs) + 1))
    return {
        "difference": round(observed, 4),
        "ci_low": round(float(np.percentile(diffs, 2.5)), 4),
        "ci_high": round(float(np.percentile(diffs, 97.5)), 4),
        "p_value": round(min(1.0, p), 4),
        "resamples": len(diffs),
    }


def paired_bootstrap(counts_a: np.ndarray, counts_b: np.ndarray, metric, n_resamples: int, seed: int) -> dict:
    """Difference metric(b) - metric(a) on the test set, its 95% interval and two-sided p-value.

    ``counts_*`` are per-example additive statistics; ``metric`` maps summed counts to a score.
    """
    if counts_a.shape != counts_b.shape:
        raise ValueError(f"paired bootstrap needs the same examples: {counts_a.shape} vs {counts_b.shape}")
    n = len(counts_a)
    rng = np.random.default_rng(seed)
    observed = float(metric(counts_b.sum(0)) - metric(counts_a.sum(0)))
    diffs = np.empty(n_resamples)
    for start in range(0, n_resamples, 200):  # chunks keep memory at 200 x n multiplicities
        m = rng.multinomial(n, np.full(n, 1.0 / n), size=min(200, n_resamples - start)).astype(float)
        diffs[start : start + len(m)] = metric(m @ counts_b) - metric(m @ counts_a)
    return _interval(diffs, observed)


def _resampled_scores(per_seed: list[np.ndarray], weights: np.ndarray, metric) -> np.ndarray:
    """Scores [n_resamples, n_seeds] of each seed's counts under each row of example weights."""
    return np.stack([metric(weights @ c) for c in per_seed], axis=1)


def seed_bootstrap(
    counts_a: list[np.ndarray],
    counts_b: list[np.ndarray],
    metric,
    n_resamples: int,
    seed: int,
    margin: float | None = None,
) -> dict:
    """Mean-over-seeds difference metric(b) - metric(a), its 95% interval and two-sided p-value
    from a hierarchical bootstrap over seeds and test examples (see the module docstring).

    ``counts_*`` hold one per-example count array per fine-tuning seed (as
    :meth:`minisci.tasks.kind.TaskKind.counts` returns), paired by index between the arms. Besides the keys of
    :func:`paired_bootstrap`: ``seeds``, each arm's mean and sample sd over seeds, the per-seed
    differences, ``seeds_b_better`` (seeds where b scores strictly higher), the variance components
    ``example_var`` and ``seed_var`` and the test size ``examples`` (:func:`minimum_detectable_effect`),
    and with a ``margin`` the TOST p-value ``p_equivalence`` (:func:`equivalence_p`).
    """
    if len(counts_a) != len(counts_b) or not counts_a:
        raise ValueError(f"seed bootstrap needs the same seeds in both arms: {len(counts_a)} vs {len(counts_b)}")
    shapes = {c.shape for c in (*counts_a, *counts_b)}
    if len(shapes) != 1:
        raise ValueError(f"seed bootstrap needs the same examples in every run: shapes {sorted(shapes)}")
    n, n_seeds = len(counts_a[0]), len(counts_a)
    rng = np.random.default_rng(seed)  # the example draws: the same stream as paired_bootstrap's
    seed_rng = np.random.default_rng([seed, 1])  # the seed draws, apart so that one seed changes nothing
    score_a = np.array([float(metric(c.sum(0))) for c in counts_a])
    score_b = np.array([float(metric(c.sum(0))) for c in counts_b])
    per_seed = score_b - score_a
    observed = float(score_b.mean() - score_a.mean())
    diffs = np.empty(n_resamples)
    example_only = np.empty(n_resamples)  # the seed-mean difference with the seeds kept: test-sample noise
    for start in range(0, n_resamples, 200):  # chunks keep memory at 200 x n multiplicities
        m = rng.multinomial(n, np.full(n, 1.0 / n), size=min(200, n_resamples - start)).astype(float)
        delta = _resampled_scores(counts_b, m, metric) - _resampled_scores(counts_a, m, metric)
        drawn = seed_rng.integers(n_seeds, size=delta.shape)
        diffs[start : start + len(m)] = np.take_along_axis(delta, drawn, axis=1).mean(axis=1)
        example_only[start : start + len(m)] = delta.mean(axis=1)
    sd = 1 if n_seeds > 1 else 0  # sample sd; 0 for a single seed
    extra = {} if margin is None else {"margin": margin, "p_equivalence": equivalence_p(diffs, margin)}
    return {
        **_interval(diffs, observed),
        **extra,
        "seeds": n_seeds,
        "mean_a": round(float(score_a.mean()), 4),
        "sd_a": round(float(score_a.std(ddof=sd)), 4),
        "mean_b": round(float(score_b.mean()), 4),
        "sd_b": round(float(score_b.std(ddof=sd)), 4),
        "seed_differences": [round(float(d), 4) for d in per_seed],
        "seeds_b_better": int(np.sum(per_seed > 0)),
        "examples": n,
        "example_var": float(example_only.var(ddof=1)),
        "seed_var": float(per_seed.var(ddof=1)) if n_seeds > 1 else None,
    }


# verdicts, power and multiplicity ------------------------------------------------------------------------

ALPHA = 0.05  # two-sided level of every test and interval in the report
POWER = 0.8  # the power the minimum detectable effect is quoted at (Cohen's convention)


def equivalence_p(diffs: np.ndarray, margin: float) -> float:
    """TOST p-value from bootstrap replicates of the difference: the larger of the two one-sided
    p-values P*(d <= -margin) and P*(d >= +margin) (each with the +1 correction of a permutation-style
    p-value). Below alpha, both "worse by at least the margin" and "better by at least it" are
    rejected: equivalent within +-margin."""
    n = len(diffs)
    low = (np.sum(diffs <= -margin) + 1) / (n + 1)
    high = (np.sum(diffs >= margin) + 1) / (n + 1)
    return round(float(max(low, high)), 4)


def verdict(boot: dict, alpha: float = ALPHA) -> str:
    """better / worse (the 95% interval excludes 0), equivalent (TOST rejects both margins),
    inconclusive (neither: the data cannot tell a difference of the margin's size from none)."""
    if boot["ci_low"] > 0:
        return "better"
    if boot["ci_high"] < 0:
        return "worse"
    if boot.get("p_equivalence") is not None and boot["p_equivalence"] < alpha:
        return "equivalent"
    return "inconclusive"


def _z_sum(alpha: float, power: float) -> float:
    z = NormalDist().inv_cdf
    return z(1 - alpha / 2) + z(power)


def minimum_detectable_effect(
    example_var: float,
    seed_var: float | None,
    seeds: int,
    examples: int,
    n_examples: int,
    alpha: float = ALPHA,
    power: float = POWER,
) -> float:
    """The smallest true difference the design (``seeds`` seeds x ``examples`` test examples) detects
    with probability ``power`` at two-sided ``alpha``, from the variance components observed at
    ``n_examples`` test examples (see the module docstring). ``seed_var`` None (one seed): test
    sample only."""
    var = example_var * n_examples / examples + (seed_var or 0.0) / seeds
    return _z_sum(alpha, power) * math.sqrt(var)


def seeds_for_margin(
    margin: float, example_var: float, seed_var: float | None, alpha: float = ALPHA, power: float = POWER
) -> int | None:
    """The fewest seeds whose minimum detectable effect (same test set) is at most ``margin``; None
    when no number of seeds can (the test sample alone is too noisy) or the seed variance is unknown."""
    room = (margin / _z_sum(alpha, power)) ** 2 - example_var
    if seed_var is None or room <= 0:
        return None
    return max(1, math.ceil(seed_var / room - 1e-9))


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment (family-wise error rate), in the input order: the k-th smallest of
    m p-values is multiplied by m - k + 1, then made non-decreasing and capped at 1."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    out, running = [0.0] * len(p_values), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        out[i] = round(running, 4)
    return out
