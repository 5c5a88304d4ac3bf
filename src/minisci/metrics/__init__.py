"""The project's metrics: :mod:`minisci.metrics.scores` computes them (what the stages call), and
``ner_f1`` and ``classification_f1`` wrap them as ``evaluate`` modules, one file each, loaded by path
(never from the hub): ``evaluate.load(minisci.metrics.ner_f1.__file__)``."""

from __future__ import annotations

import functools


@functools.cache
def load_metric(module):
    """The ``evaluate`` metric defined in a :mod:`minisci.metrics` module, loaded by its file path
    (offline: never a hub name), in memory (no cache files beside concurrent stages)."""
    import evaluate

    return evaluate.load(module.__file__, keep_in_memory=True)
