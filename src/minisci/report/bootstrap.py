"""Paired bootstrap over test examples: is the adapted model's difference from the baseline real?

Both systems are scored on the same resampled test sets (examples drawn with replacement), which
keeps the pairing. The 95% interval is the percentile interval of the resampled differences; the
two-sided p-value uses the bootstrap distribution shifted to the null (difference 0):
p = P(|d* - mean(d*)| >= |d_observed|). Identical systems give d* = 0 everywhere and p = 1.
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
    centred = np.abs(diffs - diffs.mean())
    p = float((np.sum(centred >= abs(observed) - 1e-12) + 1) / (n_resamples + 1))
    return {
        "difference": round(observed, 4),
        "ci_low": round(float(np.percentile(diffs, 2.5)), 4),
        "ci_high": round(float(np.percentile(diffs, 97.5)), 4),
        "p_value": round(min(1.0, p), 4),
        "resamples": n_resamples,
    }
