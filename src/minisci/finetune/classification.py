"""The ``finetune_classification`` stage's entry point: any single-label text classification set of
the catalogue (SciCite citation intent by default) as sequence classification.

Encoding, prediction and scoring are the classification kind's (:mod:`minisci.tasks.classification`);
the seed loop is :func:`minisci.finetune.common.run_seeds`. The epoch is chosen on dev by macro-F1;
test is scored once with the chosen weights. Macro-F1 averages over the labels with test support
(a class absent from a split would otherwise add a meaningless 0); micro-F1 and accuracy are
reported too.
"""

from __future__ import annotations

from pathlib import Path

from minisci.config import FinetuneClassificationConfig
from minisci.data.readers import load_prepared
from minisci.finetune.common import FinetuneResult, SeedWorkers, run_seeds
from minisci.metrics import scores  # noqa: F401  (see below)
from minisci.pretrain.seeds import PretrainSeeds
from minisci.tasks.classification import CLASSIFICATION

# The scoring module is imported here, before any seed is set, not first when dev is scored: importing
# it (scikit-learn) draws from Python's global random state, which the checkpoints save and restore.


def run_finetune_classification(
    data_dir: str | Path,
    model_dir: str | Path,
    cfg: FinetuneClassificationConfig,
    work_dir: str | Path,
    design: PretrainSeeds | None = None,
    workers: SeedWorkers | None = None,
) -> FinetuneResult | None:
    """Fine-tune on a prepared classification dataset (``prepare_data`` output) once per seed;
    ``model_dir``, ``design`` and ``workers``: see :func:`~minisci.finetune.common.run_seeds`."""
    data = load_prepared(data_dir, task=CLASSIFICATION.name)
    return run_seeds(CLASSIFICATION, data, model_dir, cfg, work_dir, design, workers)
