"""The ``finetune_ner`` stage's entry point: token classification, scored with seqeval in strict IOB2.

Encoding (running-text word pieces, first-piece labels, windows at word boundaries), decoding and
scoring are the NER kind's (:mod:`minisci.tasks.ner`); the seed loop is
:func:`minisci.finetune.common.run_seeds`. The task-specific training extra is the optional CRF head
(``crf: true``, :mod:`minisci.finetune.crf`): Viterbi decoding constrained to valid IOB2 transitions.
The epoch is chosen on dev; test is scored once, with the chosen weights.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from minisci.config import FinetuneNerConfig
from minisci.data.readers import load_prepared
from minisci.finetune.common import FinetuneResult, SeedWorkers, run_seeds
from minisci.finetune.crf import CrfForTokenClassification
from minisci.metrics import scores  # noqa: F401  (see below)
from minisci.pretrain.seeds import PretrainSeeds
from minisci.tasks.ner import NER

# The scoring module is imported here, before any seed is set, not first when dev is scored: importing
# it (scikit-learn) draws from Python's global random state, which the checkpoints save and restore.


def run_finetune_ner(
    data_dir: str | Path,
    model_dir: str | Path,
    cfg: FinetuneNerConfig,
    work_dir: str | Path,
    design: PretrainSeeds | None = None,
    workers: SeedWorkers | None = None,
) -> FinetuneResult | None:
    """Fine-tune on a prepared NER dataset (``prepare_data`` output) once per seed;
    ``model_dir``, ``design`` and ``workers``: see :func:`~minisci.finetune.common.run_seeds`."""
    kind = dataclasses.replace(NER, head_class=CrfForTokenClassification) if cfg.crf else NER
    return run_seeds(kind, load_prepared(data_dir, task=NER.name), model_dir, cfg, work_dir, design, workers)
