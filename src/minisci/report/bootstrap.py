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

Calibration (checked on synthetic data in tests/test_seed_bootstrap.py): resampling both levels
counts the per-run example noise twice (once through the examples, once through the spread of the
per-seed scores), while the spread of S resampled seeds has divisor S, not S - 1. When seed-to-seed
variation is larger than a single run's example noise, as for BERT fine-tuning (0.3-0.5 F1 between
seeds on BC5CDR, against a per-run bootstrap sd of ~0.2), the two roughly cancel and p-values under
no difference are close to uniform; when it is smaller, the test is conservative. With 3 seeds only
10 distinct seed multisets exist, so the report also gives the per-seed differences and the number of seeds
the adapted model won.
"""

from __future__ import annotations

import numpy as np

from minisci.data.readers import spans


def ner_counts(rows: list[dict]) -> np.ndarray:
    """Per sentence: [true positives, predicted entities, gold entities] (exact typed spans)."""
    out = np.zeros((len(rows), 3))
    for i, r in enumerate(rows):
        gold, pred = set(spans(r["gold"])), set(spans(r["pred"]))
        out[i] = (len(gold & pred), len(pred), len(gold))
    return out


def f1_from_counts(c: np.ndarray) -> np.ndarray:
    """Micro F1 from summed counts (..., 3)."""
    tp, n_pred, n_gold = c[..., 0], c[..., 1], c[..., 2]
    return np.where(n_pred + n_gold > 0, 2 * tp / np.maximum(n_pred + n_gold, 1e-12), 0.0)


def classification_counts(rows: list[dict], labels: list[str]) -> np.ndarray:
    """Per example: correct, then per class [tp, fp, fn] (flattened)."""
    out = np.zeros((len(rows), 1 + 3 * len(labels)))
    for i, r in enumerate(rows):
        out[i, 0] = r["gold"] == r["pred"]
        for k, lab in enumerate(labels):
            out[i, 1 + 3 * k] = r["gold"] == lab and r["pred"] == lab
            out[i, 2 + 3 * k] = r["gold"] != lab and r["pred"] == lab
            out[i, 3 + 3 * k] = r["gold"] == lab and r["pred"] != lab
    return out


def macro_f1_from_counts(c: np.ndarray, n_labels: int) -> np.ndarray:
    f1s = []
    for k in range(n_labels):
        tp, fp, fn = c[..., 1 + 3 * k], c[..., 2 + 3 * k], c[..., 3 + 3 * k]
        f1s.append(np.where(2 * tp + fp + fn > 0, 2 * tp / np.maximum(2 * tp + fp + fn, 1e-12), 0.0))
    return np.mean(f1s, axis=0)


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


def seed_bootstrap(counts_a: list[np.ndarray], counts_b: list[np.ndarray], metric, n_resamples: int, seed: int) -> dict:
    """Mean-over-seeds difference metric(b) - metric(a), its 95% interval and two-sided p-value
    from a hierarchical bootstrap over seeds and test examples (see the module docstring).

    ``counts_*`` hold one per-example count array per fine-tuning seed (as :func:`ner_counts` or
    :func:`classification_counts` return), paired by index between the arms. Besides the keys of
    :func:`paired_bootstrap`: ``seeds``, each arm's mean and sample sd over seeds, the per-seed
    differences, and ``seeds_b_better`` (seeds where b scores strictly higher).
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
    for start in range(0, n_resamples, 200):  # chunks keep memory at 200 x n multiplicities
        m = rng.multinomial(n, np.full(n, 1.0 / n), size=min(200, n_resamples - start)).astype(float)
        delta = _resampled_scores(counts_b, m, metric) - _resampled_scores(counts_a, m, metric)
        drawn = seed_rng.integers(n_seeds, size=delta.shape)
        diffs[start : start + len(m)] = np.take_along_axis(delta, drawn, axis=1).mean(axis=1)
    sd = 1 if n_seeds > 1 else 0  # sample sd; 0 for a single seed
    return {
        **_interval(diffs, observed),
        "seeds": n_seeds,
        "mean_a": round(float(score_a.mean()), 4),
        "sd_a": round(float(score_a.std(ddof=sd)), 4),
        "mean_b": round(float(score_b.mean()), 4),
        "sd_b": round(float(score_b.std(ddof=sd)), 4),
        "seed_differences": [round(float(d), 4) for d in per_seed],
        "seeds_b_better": int(np.sum(per_seed > 0)),
    }
