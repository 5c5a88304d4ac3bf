"""The one count layout every score is read from, and the scores of summed counts.

Counts (:meth:`minisci.tasks.kind.TaskKind.counts`) are per test example and per scored item (an entity type, a class),
side by side: ``[true positives, predicted, gold]`` of item 0, then of item 1, ... (shape
``(examples, 3 * items)``). They are additive, so the bootstrap resamples examples by summing rows,
and every score is a function of summed counts (:func:`precision`, :func:`recall`, :func:`f1` of one
item's triple, or of all items' triples pooled (micro) or averaged (macro)). The report, the studies
and the bootstrap all score through these functions.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.where(den > 0, num / np.maximum(den, 1e-12), 0.0)


def precision(c: np.ndarray) -> np.ndarray:
    """Precision of summed ``[tp, predicted, gold]`` triples (..., 3); 0 when nothing was predicted."""
    return _ratio(c[..., 0], c[..., 1])


def recall(c: np.ndarray) -> np.ndarray:
    """Recall of summed triples (..., 3); 0 when there is no gold."""
    return _ratio(c[..., 0], c[..., 2])


def f1(c: np.ndarray) -> np.ndarray:
    """F1 = 2 tp / (predicted + gold) of summed triples (..., 3); 0 when both are empty."""
    return np.where(c[..., 1] + c[..., 2] > 0, 2 * c[..., 0] / np.maximum(c[..., 1] + c[..., 2], 1e-12), 0.0)


SCORES = {"precision": precision, "recall": recall, "f1": f1}  # of one triple


def triples(c: np.ndarray, n_items: int) -> np.ndarray:
    """Summed counts (..., 3 * n_items) as (..., n_items, 3)."""
    return c.reshape(*c.shape[:-1], n_items, 3)


def item(c: np.ndarray, k: int) -> np.ndarray:
    """The counts (..., 3) of item ``k``."""
    return c[..., 3 * k : 3 * k + 3]


def micro(score: Callable, n_items: int) -> Callable:
    """``score`` of the triples pooled over the items (summed counts -> score)."""
    return lambda c: score(triples(c, n_items).sum(axis=-2))


def macro(score: Callable, n_items: int) -> Callable:
    """The mean over items of ``score`` of each item's triple (summed counts -> score)."""
    return lambda c: np.mean([score(item(c, k)) for k in range(n_items)], axis=0)


def support(c: np.ndarray, n_items: int) -> list[int]:
    """Gold count of each item in per-example counts (examples, 3 * n_items)."""
    return [int(v) for v in triples(c.sum(0), n_items)[:, 2]]


def scored_labels(gold: list[str], labels: list[str]) -> list[str]:
    """The classes macro-F1 averages over: the declared labels with gold support, in declared order."""
    present = set(gold)
    return [lab for lab in labels if lab in present]
