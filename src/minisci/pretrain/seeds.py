"""Pretraining seeds: the adapted arm as a procedure, and which adapted encoder each of its
fine-tuning runs starts from.

``pretrain.seeds`` lists the pretraining seeds, like the fine-tuning seeds: each gives its own adapted
encoder (its own masking, head initialisation and data order, from the same corpus and pairs). A
params file that has only ``pretrain.seed`` (every run so far) means that one seed, so the committed
run and its lock stay what they are. ``pretrain.seed_design`` spreads the adapted arm's fine-tuning
runs over the encoders:

* ``paired`` (default): fine-tuning seed i runs on pretraining seed i (i modulo the number of
  pretraining seeds), so the adapted arm keeps as many fine-tuning runs as the baseline; with one
  pretraining seed every fine-tuning seed runs on it, as today;
* ``cross``: every fine-tuning seed on every pretraining seed (P x S runs), which alone separates
  pretraining-seed from fine-tuning-seed variance without assumptions
  (:func:`minisci.report.bootstrap.pretrain_components`).

The stages: ``pretrain@<seed>`` (a ``foreach`` over ``pretrain.seeds``) writes ``models/adapted/<seed>``;
``base_model`` initialises the baseline's heads from the first seed; a fine-tuning stage given
``models/adapted`` runs :func:`finetune_plan` and records each run's pretraining seed in its metrics;
the embeddings, model cards and serving take the first seed's encoder (:attr:`PretrainSeeds.first`).
The statistics that use the assignment are in :mod:`minisci.report.bootstrap` (the Multi-Bootstrap);
the report reads each run's pretraining seed from its metrics file (:mod:`minisci.report.pretrain_seeds`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from minisci.config import PretrainConfig, check_seeds, from_dict, load_params
from minisci.errors import ConfigError, MinisciError

DESIGNS = ("paired", "cross")
SEED_KEYS = ("seeds", "seed", "seed_design")  # the section's keys about seeds; the rest configure one run


@dataclasses.dataclass(frozen=True)
class PretrainSeeds:
    """The pretraining seeds and how the adapted arm's fine-tuning runs are spread over them."""

    seeds: tuple[int, ...]
    design: str = "paired"

    def __post_init__(self) -> None:
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"params section 'pretrain': seeds must list distinct seeds, got {list(self.seeds)}")
        check_seeds(self.seeds, "pretrain", "seeds")
        if self.design not in DESIGNS:
            raise ConfigError(f"params section 'pretrain': seed_design must be one of {DESIGNS}, got {self.design!r}")

    @property
    def first(self) -> int:
        """The seed whose encoder is *the* adapted encoder (embeddings, model cards, serving)."""
        return self.seeds[0]

    def runs(self, finetune_seeds: list[int] | tuple[int, ...]) -> list[tuple[int, int]]:
        """The adapted arm's fine-tuning runs as (pretraining seed, fine-tuning seed), in the order of
        the fine-tuning seeds (cross: pretraining seed by pretraining seed)."""
        n_pre, n_ft = len(self.seeds), len(finetune_seeds)
        if self.design == "cross":
            return [(p, s) for p in self.seeds for s in finetune_seeds]
        if n_ft % n_pre:
            # unequal runs per encoder would weigh the encoders unequally in the arm's mean
            raise ConfigError(
                f"params section 'pretrain': seed_design paired needs a multiple of {n_pre} fine-tuning seeds "
                f"(one run or more on each of the {n_pre} pretraining seeds), got {n_ft}"
            )
        return [(self.seeds[i % n_pre], s) for i, s in enumerate(finetune_seeds)]

    def finetune_seeds_on(self, pretrain_seed: int, finetune_seeds: list[int] | tuple[int, ...]) -> list[int]:
        """The fine-tuning seeds that run on one pretraining seed's encoder (what its stage trains)."""
        if pretrain_seed not in self.seeds:
            raise ConfigError(f"params section 'pretrain': {pretrain_seed} is not one of seeds {list(self.seeds)}")
        return [s for p, s in self.runs(finetune_seeds) if p == pretrain_seed]


def pretrain_seeds(section: dict) -> PretrainSeeds:
    """The pretraining seeds of a raw ``pretrain`` params section: ``seeds`` (a list) or, in a params
    file written before it, ``seed`` alone; not both (one fact in one place)."""
    if "seeds" in section and "seed" in section:
        raise ConfigError("params section 'pretrain': set seeds (a list) or seed (one seed), not both")
    if "seeds" not in section and "seed" not in section:
        raise ConfigError("params section 'pretrain': missing key 'seeds'")
    raw = section["seeds"] if "seeds" in section else [section["seed"]]
    if not isinstance(raw, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in raw):
        raise ConfigError(f"params pretrain.seeds: expected a list of integers, got {raw!r}")
    design = section.get("seed_design", "paired")
    return PretrainSeeds(tuple(raw), design)


def _section(path: str | Path) -> dict:
    params = load_params(path)
    if "pretrain" not in params:
        raise ConfigError(f"{path}: missing section 'pretrain'")
    if not isinstance(params["pretrain"], dict):
        raise ConfigError(f"params section 'pretrain' must be a mapping, got {type(params['pretrain']).__name__}")
    return params["pretrain"]


def load_seed_design(path: str | Path = "params.yaml") -> PretrainSeeds:
    """The pretraining seeds and their design, from a params file's ``pretrain`` section."""
    return pretrain_seeds(_section(path))


def load_pretrain(path: str | Path = "params.yaml", seed: int | None = None) -> tuple[PretrainConfig, PretrainSeeds]:
    """One pretraining run's config (``seed``: one of ``pretrain.seeds``, default the first) and the
    seed design. The run's config holds its own seed only, so adding a seed to the list changes no
    other seed's run (its checkpoints resume, its DVC stage stays cached)."""
    section = _section(path)
    design = pretrain_seeds(section)
    if seed is not None and seed not in design.seeds:
        raise ConfigError(f"--seed {seed} is not one of {path}'s pretrain.seeds {list(design.seeds)}")
    return from_dict(PretrainConfig, run_section(section, seed), "pretrain"), design


def run_section(section: dict, seed: int | None = None) -> dict:
    """A raw ``pretrain`` section as one run's (:class:`~minisci.config.PretrainConfig`'s) keys:
    the seed keys replaced by that run's ``seed`` (default: the first of the section's seeds)."""
    if seed is None:
        seed = pretrain_seeds(section).first
    return {k: v for k, v in section.items() if k not in SEED_KEYS} | {"seed": seed}


def encoder_dirs(model_dir: str | Path, design: PretrainSeeds) -> dict[int | None, Path]:
    """The encoders a fine-tuning stage's ``--model`` holds, by pretraining seed: one model folder
    (``config.json`` in it: the baseline, or an adapted encoder from before pretraining seeds) is
    ``{None: model_dir}``, every fine-tuning seed running on it; a folder of one encoder per
    pretraining seed (``models/adapted/<seed>/``, as the per-seed ``pretrain`` stages write it) must
    hold exactly the seeds of ``design``."""
    root = Path(model_dir)
    if (root / "config.json").is_file():
        return {None: root}
    found = {int(d.name): d for d in root.iterdir() if d.is_dir() and d.name.isdigit()} if root.is_dir() else {}
    if set(found) != set(design.seeds):
        raise MinisciError(
            f"{root}: expected one encoder folder per pretraining seed {list(design.seeds)}, found {sorted(found)}"
        )
    return {p: found[p] for p in design.seeds}


def finetune_plan(
    model_dir: str | Path, design: PretrainSeeds, finetune_seeds: list[int] | tuple[int, ...]
) -> list[tuple[int | None, int, Path]]:
    """What a fine-tuning stage runs: (pretraining seed or None, fine-tuning seed, encoder folder) per
    run, in the order of :meth:`PretrainSeeds.runs`; with one model folder, every fine-tuning seed on
    it (today's runs). The stage records a run's pretraining seed as ``per_seed.<s>.pretrain_seed``
    (none for None), which the report reads."""
    encoders = encoder_dirs(model_dir, design)
    if None in encoders:
        return [(None, s, encoders[None]) for s in finetune_seeds]
    return [(p, s, encoders[p]) for p, s in design.runs(finetune_seeds)]
