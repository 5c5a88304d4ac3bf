"""Studies: two arms of queued experiments compared on one test set, with seed-aware significance.

Usage:
    python -m minisci.report queue [--only NAME ...] [--dry-run]    # dvc exp run --queue ...
    dvc queue start                                                # runs them, one at a time
    python -m minisci.report                                       # the experiment log, the studies' tables, JSON and charts

A study (``studies.yaml`` beside this module; ``--spec`` for your own) names a dataset and two sides,
each the test predictions of one fine-tuned arm: of an experiment (``experiment: NAME``) or of the
commit that experiment was queued from (``commit_of: NAME``, for comparing with the committed
default run). Experiments are plain ``dvc exp run`` experiments with ``-S`` overrides and, where a
study needs one arm only, a stage target, so that a WELT-vs-cross-entropy row costs one arm.

The report reads each experiment's outputs at its git revision through ``dvc.api`` (metrics from
git, predictions from the local DVC cache), scores every seed's predictions, and compares b with a
by :func:`minisci.report.bootstrap.seed_bootstrap` over paired seeds and test examples, with the
catalogue's published anchors beside them. The dataset's catalogue ``task`` decides the scores: for
``ner``, entity F1, precision and recall overall (exact typed spans) and F1 per entity type; for
``classification``, macro-F1, macro precision and macro recall over the dataset's labels found in the
test gold (the stage's rule, the same class set for both sides), accuracy, and
F1 per class. A study whose experiments have not run is listed with the commands that run it.

A curve (``curves:``) puts several studies' F1 differences on one axis, for example adapted − baseline
against pretraining steps: a table and a chart of b − a with its interval at each x. An ablation
(``ablation:``) lists studies as the ingredients of a recipe, one row each: what the ingredient is, its
F1 difference with interval, p and seeds ahead, and a note (the README's ablation table).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import subprocess
import sys
import textwrap
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from minisci.config import DATASETS_FILE, load_params
from minisci.errors import MinisciError
from minisci.io import atomic_path
from minisci.report.bootstrap import seed_bootstrap
from minisci.report.exp_show import format_value, params_of, read_show
from minisci.tasks import counting, registry
from minisci.tasks.kind import TaskKind

ARMS = ("baseline", "adapted")
DEFAULT_SPEC = "studies.yaml"  # packaged beside this module


# 1. the spec ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Experiment:
    name: str
    set: dict[str, Any]
    targets: tuple[str, ...] = ()

    def command(self, queue: bool = False) -> list[str]:
        cmd = ["dvc", "exp", "run", *(["--queue"] if queue else []), "-n", self.name]
        cmd += [a for k, v in self.set.items() for a in ("-S", f"{k}={format_value(v)}")]
        return cmd + list(self.targets)

    def shell(self, queue: bool = False) -> str:
        return " ".join(shlex.quote(a) for a in self.command(queue))


@dataclasses.dataclass(frozen=True)
class Side:
    experiment: str
    arm: str
    label: str
    commit_of: bool = False  # the commit the experiment was queued from, not the experiment

    def describe(self) -> str:
        where = f"the commit {self.experiment} was queued from" if self.commit_of else self.experiment
        return f"{self.arm} arm of {where}"


@dataclasses.dataclass(frozen=True)
class Study:
    name: str
    title: str
    dataset: str
    a: Side
    b: Side

    def experiments(self) -> list[str]:
        return list(dict.fromkeys(s.experiment for s in (self.a, self.b)))


@dataclasses.dataclass(frozen=True)
class Curve:
    name: str
    title: str
    x_label: str
    points: tuple[tuple[float, str], ...]  # (x, study name), ascending x


@dataclasses.dataclass(frozen=True)
class Ingredient:
    study: str
    ingredient: str
    note: str = ""


@dataclasses.dataclass(frozen=True)
class Spec:
    experiments: dict[str, Experiment]
    studies: dict[str, Study]
    curves: dict[str, Curve] = dataclasses.field(default_factory=dict)
    ablation: tuple[Ingredient, ...] = ()


def _mapping(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise MinisciError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _unknown(d: dict, allowed: set[str], where: str) -> None:
    extra = sorted(set(d) - allowed)
    if extra:
        raise MinisciError(f"{where}: unknown key {extra[0]!r} (allowed: {', '.join(sorted(allowed))})")


def _side(d: Any, where: str, experiments: dict[str, Experiment]) -> Side:
    d = _mapping(d, where)
    _unknown(d, {"experiment", "commit_of", "arm", "label"}, where)
    if ("experiment" in d) == ("commit_of" in d):
        raise MinisciError(f"{where}: give exactly one of experiment: NAME or commit_of: NAME")
    name = d.get("experiment", d.get("commit_of"))
    if name not in experiments:
        raise MinisciError(f"{where}: experiment {name!r} is not under experiments:")
    arm = d.get("arm", "baseline")
    if arm not in ARMS:
        raise MinisciError(f"{where}.arm: {arm!r} is not one of {', '.join(ARMS)}")
    return Side(str(name), arm, str(d.get("label") or arm), commit_of="commit_of" in d)


def parse_spec(raw: Any, where: str) -> Spec:
    raw = _mapping(raw, where)
    _unknown(raw, {"experiments", "studies", "curves", "ablation"}, where)
    experiments = {}
    for name, e in _mapping(raw.get("experiments") or {}, f"{where}: experiments").items():
        e = _mapping(e, f"{where}: experiments.{name}")
        _unknown(e, {"set", "targets"}, f"{where}: experiments.{name}")
        targets = e.get("targets") or []
        if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
            raise MinisciError(f"{where}: experiments.{name}.targets: expected a list of stage names")
        sets = _mapping(e.get("set") or {}, f"{where}: experiments.{name}.set")
        experiments[str(name)] = Experiment(str(name), dict(sets), tuple(targets))
    studies = {}
    for name, s in _mapping(raw.get("studies") or {}, f"{where}: studies").items():
        at = f"{where}: studies.{name}"
        s = _mapping(s, at)
        _unknown(s, {"title", "dataset", "a", "b"}, at)
        if not s.get("dataset"):
            raise MinisciError(f"{at}: dataset: is missing")
        a, b = _side(s.get("a"), f"{at}.a", experiments), _side(s.get("b"), f"{at}.b", experiments)
        studies[str(name)] = Study(str(name), str(s.get("title") or name), str(s["dataset"]), a, b)
    curves = {}
    for name, c in _mapping(raw.get("curves") or {}, f"{where}: curves").items():
        at = f"{where}: curves.{name}"
        c = _mapping(c, at)
        _unknown(c, {"title", "x_label", "points"}, at)
        points = _mapping(c.get("points"), f"{at}.points")
        for x, study in points.items():
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise MinisciError(f"{at}.points: {x!r} is not a number (points map x values to study names)")
            if study not in studies:
                raise MinisciError(f"{at}.points.{x}: study {study!r} is not under studies:")
        if not points:
            raise MinisciError(f"{at}.points: is empty")
        ordered = tuple(sorted((float(x), str(st)) for x, st in points.items()))
        curves[str(name)] = Curve(str(name), str(c.get("title") or name), str(c.get("x_label") or "x"), ordered)
    return Spec(experiments, studies, curves, _ablation(raw.get("ablation") or [], f"{where}: ablation", studies))


def _ablation(rows: Any, where: str, studies: dict[str, Study]) -> tuple[Ingredient, ...]:
    if not isinstance(rows, list):
        raise MinisciError(f"{where}: expected a list of rows (study, ingredient, note)")
    out = []
    for i, row in enumerate(rows):
        at = f"{where}[{i}]"
        row = _mapping(row, at)
        _unknown(row, {"study", "ingredient", "note"}, at)
        if row.get("study") not in studies:
            raise MinisciError(f"{at}.study: {row.get('study')!r} is not under studies:")
        if not row.get("ingredient"):
            raise MinisciError(f"{at}.ingredient: is missing")
        out.append(Ingredient(str(row["study"]), str(row["ingredient"]), str(row.get("note") or "")))
    return tuple(out)


def load_spec(path: str | None = None) -> Spec:
    if path is None:
        text = resources.files("minisci.report").joinpath(DEFAULT_SPEC).read_text(encoding="utf-8")
        return parse_spec(yaml.safe_load(text), f"minisci/report/{DEFAULT_SPEC}")
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise MinisciError(f"{path}: cannot read the studies spec: {str(e).splitlines()[0]}") from None
    return parse_spec(raw, str(path))


# 2. finding experiments in dvc exp show -------------------------------------------------------------


def _catalog(data: dict) -> dict:
    """The ``datasets`` catalogue an experiment recorded among its params (commits that kept it in
    params.yaml), as nested mappings; {} for the others."""
    return ((((data.get("params") or {}).get("params.yaml") or {}).get("data") or {}).get("datasets")) or {}


def read_catalogue(root: Path) -> dict:
    """The dataset catalogue of the project at ``root`` (data/datasets.yaml) as nested mappings, {} if
    there is none: the studies take each dataset's task and published scores from it."""
    path = root / DATASETS_FILE
    return (load_params(path).get("datasets") or {}) if path.is_file() else {}


def experiment_index(show: list[dict], catalogue: dict | None = None) -> dict[str, dict]:
    """Experiment name -> {rev, commit (the revision it was queued from), params, commit_params,
    catalog}: the newest successful run of each name across all baseline commits. ``catalog`` is the
    dataset catalogue, ``catalogue``'s entries overridden by any the experiment recorded itself."""
    index: dict[str, dict] = {}
    for commit in show:
        if commit.get("rev") == "workspace":
            continue
        commit_params = params_of(commit.get("data") or {})
        for exp in commit.get("experiments") or []:
            revs = exp.get("revs") or []
            state = (exp.get("executor") or {}).get("state")
            if not revs or revs[0].get("error") or state in {"queued", "running", "failed"}:
                continue
            data = revs[0].get("data") or {}
            entry = {
                "rev": revs[0]["rev"],
                "commit": commit["rev"],
                "timestamp": data.get("timestamp") or "",
                "params": params_of(data),
                "commit_params": commit_params,
                "catalog": {**(catalogue or {}), **_catalog(data)},
            }
            name = revs[0].get("name") or exp.get("name")
            if name and (name not in index or entry["timestamp"] > index[name]["timestamp"]):
                index[name] = entry
    return index


def experiment_states(show: list[dict]) -> dict[str, str]:
    """Experiment name -> queued | running | failed | done. A name run more than once gets its most
    advanced state (done, then running, then queued, then failed), so a failed attempt that was queued
    again reads as queued."""
    rank = {"failed": 0, "queued": 1, "running": 2, "done": 3}
    states: dict[str, str] = {}
    for commit in show:
        for exp in commit.get("experiments") or []:
            revs = exp.get("revs") or []
            if not revs:
                continue
            state = (exp.get("executor") or {}).get("state") or "done"
            state = "failed" if revs[0].get("error") or state == "failed" else state
            state = "done" if state == "success" else state
            name = revs[0].get("name") or exp.get("name")
            if rank.get(state, 0) >= rank.get(states.get(name, "failed"), 0):
                states[name] = state
    return states


def pending_or_done(show: list[dict]) -> set[str]:
    """Names of the experiments queued, running or run successfully (not failed)."""
    return {name for name, state in experiment_states(show).items() if state != "failed"}


# 3. scoring one side --------------------------------------------------------------------------------


def _read(root: Path, rev: str, path: str) -> str:
    import dvc.api

    try:
        return dvc.api.read(path, repo=str(root), rev=rev)
    except Exception as e:  # dvc raises many types (missing cache, path not in rev, ...)
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise MinisciError(
            f"{path} at {rev[:7]}: cannot read it ({msg}); its outputs must be in this clone's DVC cache "
            "(rerun the experiment: python -m minisci.report queue)"
        ) from None


def seed_predictions(rows: list[dict], seeds: list[int]) -> list[list[list[str]]]:
    """Predicted tag sequences per seed (``preds`` holds every seed's when there are several)."""
    if len(seeds) == 1:
        return [[r["pred"] for r in rows]]
    return [[r["preds"][str(s)] for r in rows] for s in seeds]


def _mean_sd(values: list[float]) -> dict:
    v = np.asarray(values, dtype=float)
    return {"mean": round(float(v.mean()), 4), "sd": round(float(v.std(ddof=1)) if len(v) > 1 else 0.0, 4)}


def items_and_types(kind: TaskKind, gold: list, preds: list[list], labels: list[str]) -> tuple[list[str], list[str]]:
    """The items a study counts (the kind's :attr:`~minisci.tasks.kind.TaskKind.items` over every
    seed's predictions of both sides) and those it breaks the scores down by: the items with gold
    support, in the same order."""
    items = kind.items(gold, preds, labels)
    support = counting.support(kind.count(gold, gold, items), len(items))
    return items, [t for t, n in zip(items, support) if n]


def score_side(
    kind: TaskKind, gold: list, preds: list[list], items: list[str], types: list[str]
) -> tuple[dict, list, dict]:
    """Per-seed and mean +- sd scores of the kind (:attr:`~minisci.tasks.kind.TaskKind.scores`),
    overall and per type or class (precision, recall and F1 of its own counts), plus the count arrays."""
    scores = kind.scores(len(items))
    overall = [kind.count(gold, p, items) for p in preds]
    per_type = {t: [counting.item(c, items.index(t)) for c in overall] for t in types}
    out = {name: _mean_sd([float(f(c.sum(0))) for c in overall]) for name, f in scores.items()}
    out["per_seed"] = {name: [round(float(f(c.sum(0))), 4) for c in overall] for name, f in scores.items()}
    out["per_type"] = {
        t: {name: _mean_sd([float(f(c.sum(0))) for c in cs]) for name, f in counting.SCORES.items()}
        | {"support": int(cs[0][:, 2].sum())}
        for t, cs in per_type.items()
    }
    return out, overall, per_type


def task_of(study: Study, index: dict) -> TaskKind:
    """The kind of the study dataset's ``task`` in the catalogue of its b side's experiment (NER when
    unnamed: catalogues before the task key)."""
    task = ((index[study.b.experiment].get("catalog") or {}).get(study.dataset) or {}).get("task") or registry.NER.name
    if task not in registry.KINDS:
        raise MinisciError(
            f"studies.{study.name}: dataset {study.dataset!r} has task {task!r}, not one of {', '.join(registry.names())}"
        )
    return registry.get(task)


def load_side(root: Path, side: Side, dataset: str, index: dict, stage: str = "finetune_ner") -> dict:
    e = index[side.experiment]
    rev = e["commit"] if side.commit_of else e["rev"]
    params = e["commit_params"] if side.commit_of else e["params"]
    metrics = json.loads(_read(root, rev, f"metrics/{stage}/{dataset}/{side.arm}.json"))
    rows = [
        json.loads(line)
        for line in _read(root, rev, f"models/{stage}/{dataset}/{side.arm}/test_predictions.jsonl").splitlines()
        if line.strip()
    ]
    return {"rev": rev, "params": params, "metrics": metrics, "rows": rows}


# 4. a study -------------------------------------------------------------------------------------------

SHOWN_PARAMS = ("loss", "crf", "seeds", "epochs", "learning_rate", "max_train_examples")


def run_study(study: Study, root: Path, show: list[dict], index: dict, resamples: int, seed: int) -> dict:
    missing = [name for name in study.experiments() if name not in index]
    if missing:
        states = experiment_states(show)
        missing = {name: states.get(name, "not run") for name in missing}
        return {"title": study.title, "dataset": study.dataset, "status": "not run", "missing": missing}
    kind = task_of(study, index)
    sides = {k: load_side(root, getattr(study, k), study.dataset, index, kind.stage) for k in ("a", "b")}
    seeds = {k: [int(s) for s in v["metrics"]["seeds"]] for k, v in sides.items()}
    if seeds["a"] != seeds["b"]:
        raise MinisciError(f"studies.{study.name}: the sides have different seeds ({seeds['a']} vs {seeds['b']})")
    gold = [r["gold"] for r in sides["a"]["rows"]]
    if gold != [r["gold"] for r in sides["b"]["rows"]]:
        raise MinisciError(f"studies.{study.name}: the sides were tested on different test sets")
    preds = {k: seed_predictions(v["rows"], seeds[k]) for k, v in sides.items()}
    labels = sides["a"]["metrics"].get("labels") or []
    items, types = items_and_types(kind, gold, [*preds["a"], *preds["b"]], labels)
    result = {
        "title": study.title,
        "dataset": study.dataset,
        "status": "done",
        "seeds": seeds["a"],
        "types": types,
        "task": kind.name,
    }
    scored = {}
    for k, v in sides.items():
        side = getattr(study, k)
        summary, overall, per_type = score_side(kind, gold, preds[k], items, types)
        scored[k] = (overall, per_type)
        result[k] = {
            "label": side.label,
            "experiment": side.experiment,
            "commit_of": side.commit_of,
            "arm": side.arm,
            "rev": v["rev"][:7],
            "queued_from": index[side.experiment]["commit"][:7],
            "params": {p: v["params"].get(f"{kind.stage}.{p}") for p in SHOWN_PARAMS},
            **summary,
        }
    (oa, ta), (ob, tb) = scored["a"], scored["b"]
    scores = kind.scores(len(items))
    result["delta"] = {name: seed_bootstrap(oa, ob, f, resamples, seed) for name, f in scores.items()}
    if len(types) > 1:
        result["delta"]["per_type_f1"] = {t: seed_bootstrap(ta[t], tb[t], counting.f1, resamples, seed) for t in types}
    entry = (index[study.b.experiment].get("catalog") or {}).get(study.dataset) or {}
    result["published"] = entry.get("published") or {}
    return result


# 5. Markdown, JSON and charts -------------------------------------------------------------------------


def _pct(x: float) -> str:
    return f"{100 * x:.2f}"


def _diff(d: dict) -> str:
    p = f"{d['p_value']:.4f}" if d["p_value"] < 0.01 else f"{d['p_value']:.3f}"  # 1/(resamples+1) is the floor
    return f"{100 * d['difference']:+.2f} [{100 * d['ci_low']:+.2f}, {100 * d['ci_high']:+.2f}], p = {p}"


def _published(result: dict, metric: str) -> str:
    """The catalogue's published test scores for ``f1`` or ``f1.<type>``, as text."""
    found = result.get("published", {}).get(metric) or {}
    return ", ".join(f"{system} {_pct(v)}" for system, v in found.items())


def item_word_plural(word: str) -> str:
    return word + ("es" if word.endswith("s") else "s")


def _commands(study: Study, spec: Spec) -> list[str]:
    return [spec.experiments[name].shell(queue=True) for name in study.experiments()]


def study_markdown(study: Study, result: dict, spec: Spec) -> str:
    lines = [f"## {result['title']}", ""]
    commands = _commands(study, spec)
    if result["status"] != "done":
        missing = ", ".join(f"{name} ({state})" for name, state in result["missing"].items())
        lines += [f"Not run yet: {missing}. Queue and run it with:", "", "```"]
        return "\n".join([*lines, *commands, "dvc queue start", "```", ""])
    a, b = result["a"], result["b"]
    kind = registry.get(result.get("task") or registry.NER.name)
    what, item, macro = kind.score_word, kind.item_word, kind.average == "macro"
    accuracy = "accuracy" in result["delta"]
    fifth = (
        ("accuracy", lambda s: _pct(s["accuracy"]["mean"]))
        if accuracy
        else ("CRF", lambda s: format_value(s["params"]["crf"]))
    )
    lines += [
        f"`{study.dataset}` test set, {len(result['seeds'])} seed(s) {result['seeds']} per side; "
        f"b − a over paired seeds and test {kind.size_unit} (seed-aware bootstrap, "
        f"{result['delta']['f1']['resamples']} resamples)"
        + (f"; precision, recall and F1 are macro averages over the {item_word_plural(item)}." if macro else "."),
        "",
        f"| side | what | rev | loss | {fifth[0]} | precision | recall | {what} (mean ± sd) | {what} per seed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key, s, side in (("a", a, study.a), ("b", b, study.b)):
        lines.append(
            f"| {key}: {s['label']} | {side.describe()} | {s['rev']} | {s['params']['loss']} | {fifth[1](s)} "
            f"| {_pct(s['precision']['mean'])} | {_pct(s['recall']['mean'])} "
            f"| {_pct(s['f1']['mean'])} ± {_pct(s['f1']['sd'])} | {', '.join(_pct(x) for x in s['per_seed']['f1'])} |"
        )
    d = result["delta"]
    lines += [
        "",
        f"**{b['label']} − {a['label']}: {what} {_diff(d['f1'])}**; "
        + (f"accuracy {_diff(d['accuracy'])}; " if accuracy else "")
        + f"precision {_diff(d['precision'])}; "
        f"recall {_diff(d['recall'])}. {b['label']} ahead in {d['f1']['seeds_b_better']} of {d['f1']['seeds']} seeds.",
    ]
    anchors = _published(result, kind.metric)
    if anchors:
        lines += ["", f"Published test {what} on this set: {anchors}."]
    if "per_type_f1" in d or any(k.startswith("f1.") for k in result.get("published", {})):
        lines += [
            "",
            f"| {item} | support | {a['label']} P / R / F1 | {b['label']} P / R / F1 | Δ F1 [95% CI], p | published F1 |",
            "|---|---|---|---|---|---|",
        ]
        for t in result["types"]:
            pa, pb = a["per_type"][t], b["per_type"][t]
            delta = _diff(d["per_type_f1"][t]) if "per_type_f1" in d else ""
            lines.append(
                f"| {t} | {pa['support']} | {_pct(pa['precision']['mean'])} / {_pct(pa['recall']['mean'])} / "
                f"{_pct(pa['f1']['mean'])} | {_pct(pb['precision']['mean'])} / {_pct(pb['recall']['mean'])} / "
                f"{_pct(pb['f1']['mean'])} | {delta} | {_published(result, f'f1.{t}')} |"
            )
    origin = sorted({result[k]["queued_from"] for k in ("a", "b")})
    if result.get("carried"):
        lines += ["", CARRIED_NOTE]
    lines += [
        "",
        f"Reproduce: from commit {' / '.join(origin)} (`git checkout {origin[0]}`), run",
        "",
        "```",
        *commands,
        "dvc queue start",
        "```",
        "",
    ]
    return "\n".join(lines)


CARRIED_NOTE = (
    "Carried over from the studies JSON written before: this workspace has not got the study's experiments "
    "(their refs and cached predictions stay where they ran). Rerunning them recomputes it."
)


def _states(result: dict) -> str:
    """The states of a study's missing experiments (queued / running / failed / not run)."""
    return " / ".join(sorted(set(result["missing"].values())))


def _f1_cells(result: dict) -> tuple[str, str, str]:
    """A done study's "a → b" F1, its difference with interval and p, and "k of n" seeds ahead."""
    a, b, d = result["a"], result["b"], result["delta"]["f1"]
    return (
        f"{_pct(a['f1']['mean'])} → {_pct(b['f1']['mean'])}",
        _diff(d),
        f"{d['seeds_b_better']} of {d['seeds']}",
    )


def _table_cells(result: dict) -> str:
    """Three table cells: a done study's F1 cells, or two blanks and the states of its experiments."""
    return " | ".join(_f1_cells(result)) if result["status"] == "done" else f"| | {_states(result)}"


def headline(result: dict) -> str:
    if result["status"] != "done":
        return f"| {result['title']} | | | | | | {_states(result)} |"
    d, (scores, diff, ahead) = result["delta"], _f1_cells(result)
    return (
        f"| {result['title']} | {result['a']['label']} → {result['b']['label']} | {scores} | {diff} "
        f"| {100 * d['precision']['difference']:+.2f} / {100 * d['recall']['difference']:+.2f} | {ahead} "
        f"| {'done (carried)' if result.get('carried') else 'done'} |"
    )


def _x(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:g}"


def curve_markdown(curve: Curve, results: dict[str, dict]) -> str:
    lines = [
        f"## {curve.title}",
        "",
        f"| {curve.x_label} | study | a → b F1 | Δ F1 [95% CI], p | b ahead (seeds) |",
        "|---|---|---|---|---|",
    ]
    for x, name in curve.points:
        lines.append(f"| {_x(x)} | {name} | {_table_cells(results[name])} |")
    return "\n".join([*lines, ""])


def ablation_markdown(rows: tuple[Ingredient, ...], results: dict[str, dict]) -> str:
    lines = [
        "## Ablation: what each ingredient contributes",
        "",
        "| ingredient | study | a → b (mean F1) | Δ F1 [95% CI], p | b ahead | note |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        note = f" {row.note} |" if row.note else " |"
        lines.append(f"| {row.ingredient} | `{row.study}` | {_table_cells(results[row.study])} |{note}")
    return "\n".join([*lines, ""])


def studies_markdown(spec: Spec, results: dict[str, dict], charts: list[Path]) -> str:
    lines = [
        "# Studies",
        "",
        "Generated by `python -m minisci.report` from the experiments in `dvc exp show` and their "
        "cached test predictions; the studies are defined in `src/minisci/report/studies.yaml`. "
        "Scores are test-set scores in %, mean over seeds: entity scores (exact typed spans) for NER, "
        "macro averages over the classes for classification (its F1 is macro-F1); differences are "
        "b − a with 95% intervals and two-sided p-values from the seed-aware bootstrap.",
        "",
        "| study | a → b | F1 | Δ F1 [95% CI], p | Δ precision / Δ recall | b ahead (seeds) | status |",
        "|---|---|---|---|---|---|---|",
        *(headline(results[n]) for n in spec.studies),
        "",
    ]
    lines += [f"![{p.stem}]({p.as_posix()})" for p in charts]
    if charts:
        lines += [
            "",
            "`pr_tradeoff`: each seed's test precision against recall; grey lines are equal F1, one point apart.",
        ]
    lines += ["", *([ablation_markdown(spec.ablation, results)] if spec.ablation else [])]
    lines += [*(curve_markdown(c, results) for c in spec.curves.values())]
    lines += [*(study_markdown(spec.studies[n], results[n], spec) for n in spec.studies)]
    return "\n".join(lines).rstrip() + "\n"


def _save(plt, fig, path: Path, dpi: int = 110) -> None:
    """Save a chart as a 256-colour PNG: flat colours lose nothing visible, and the file is a few times
    smaller than matplotlib's RGBA (the charts are committed; each stays under 200 KB)."""
    from PIL import Image

    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    with Image.open(path) as image:
        palette = image.convert("RGB").quantize(colors=256)
    palette.save(path, optimize=True)


def _title(ax, text: str, width: float) -> None:
    """A panel title wrapped to the panel's width (``width`` inches; ~12 characters an inch at 8 pt),
    so that neighbouring titles neither overlap nor run off the figure."""
    ax.set_title(textwrap.fill(text, max(20, int(12 * width))), fontsize=8)


def _panels(plt, n: int, width: float, height: float, columns: int = 4):
    """A figure with ``n`` panels in rows of at most ``columns``; unused panels hidden."""
    cols = min(n, columns)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def charts(results: dict[str, dict], out_dir: Path, curves: dict[str, Curve] | None = None) -> list[Path]:
    """pr_tradeoff.png: each seed's (recall, precision) per side, one panel per study; per_type_f1.png:
    per-type F1 (mean ± sd) of both sides with published anchors, for studies with several types;
    curve_<name>.png: b − a F1 with its interval against x, for each curve with a done point."""
    done = {n: r for n, r in results.items() if r["status"] == "done"}
    if not done:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "pr_tradeoff.png"]
    fig, axes = _panels(plt, len(done), 4.2, 3.8)
    for ax, r in zip(axes, done.values()):
        for key, marker in (("a", "o"), ("b", "s")):
            s = r[key]
            ax.scatter(
                [100 * x for x in s["per_seed"]["recall"]],
                [100 * x for x in s["per_seed"]["precision"]],
                marker=marker,
                label=s["label"],
            )
        lo, hi = ax.get_xlim()
        for f1 in np.arange(0.5, 1.0, 0.01):  # iso-F1 curves: P = F R / (2R - F)
            rec = np.linspace(max(lo, 1), hi, 50) / 100
            with np.errstate(divide="ignore", invalid="ignore"):
                prec = f1 * rec / (2 * rec - f1)
            ax.plot(100 * rec, 100 * prec, color="0.85", lw=0.6, zorder=0)
        ys = [100 * x for k in ("a", "b") for x in r[k]["per_seed"]["precision"]]
        ax.set_ylim(min(ys) - 1, max(ys) + 1)
        ax.set_xlim(lo, hi)
        _title(ax, r["title"], 4.2)
        ax.set_xlabel("recall (%)")
        ax.set_ylabel("precision (%)")
        ax.legend(fontsize=7)
    _save(plt, fig, written[0], dpi=72)  # one panel per study: at 110 dpi this chart alone is ~0.9 MB
    typed = {n: r for n, r in done.items() if len(r["types"]) > 1}
    if typed:
        written.append(out_dir / "per_type_f1.png")
        fig, axes = _panels(plt, len(typed), 5, 3.8, columns=3)
        for ax, r in zip(axes, typed.values()):
            x = np.arange(len(r["types"]))
            for i, key in enumerate(("a", "b")):
                s = r[key]["per_type"]
                ax.bar(
                    x + (i - 0.5) * 0.38,
                    [100 * s[t]["f1"]["mean"] for t in r["types"]],
                    0.38,
                    yerr=[100 * s[t]["f1"]["sd"] for t in r["types"]],
                    label=r[key]["label"],
                )
            for t in r["types"]:
                for system, score in (r["published"].get(f"f1.{t}") or {}).items():
                    ax.scatter([r["types"].index(t)], [100 * score], marker="_", s=400, color="k")
                    ax.annotate(system, (r["types"].index(t) + 0.22, 100 * score), fontsize=6)
            ax.set_xticks(x, r["types"], fontsize=8)
            ax.set_ylabel("test F1 (%)")
            ax.set_ylim(0, 100)
            _title(ax, r["title"], 5)
            ax.legend(fontsize=7, loc="lower center", ncol=2)  # below the published markers
        _save(plt, fig, written[-1])
    for curve in (curves or {}).values():
        points = [(x, results[n]["delta"]["f1"]) for x, n in curve.points if results[n]["status"] == "done"]
        if not points:
            continue
        written.append(out_dir / f"curve_{curve.name}.png")
        fig, ax = plt.subplots(figsize=(5, 3.6))
        xs = [x for x, _ in points]
        ys = np.array([100 * d["difference"] for _, d in points])
        err = np.array([[y - 100 * d["ci_low"], 100 * d["ci_high"] - y] for y, (_, d) in zip(ys, points)]).T
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=4)
        ax.axhline(0, color="0.6", lw=0.8)
        ax.set_xlabel(curve.x_label)
        ax.set_ylabel("Δ test F1 (points, 95% CI)")
        _title(ax, curve.title, 5)
        _save(plt, fig, written[-1])
    return written


def _same_sides(study: Study, result: dict) -> bool:
    """Whether a result written earlier compared what ``study`` compares (dataset, experiments, arms)."""
    return result.get("dataset") == study.dataset and all(
        (result[k].get("experiment"), bool(result[k].get("commit_of")), result[k].get("arm"))
        == (side.experiment, side.commit_of, side.arm)
        for k, side in (("a", study.a), ("b", study.b))
    )


def carry_over(spec: Spec, results: dict[str, dict], previous: Path) -> dict[str, dict]:
    """Keep the done results of ``previous`` (the committed studies JSON) for the studies whose
    experiments this workspace does not have (a fresh clone has no experiment refs or cache), when they
    compared the same sides; they are marked ``carried``, and titled as the spec titles them now.
    Everything else is as computed."""
    if not previous.is_file():
        return results
    try:
        old = json.loads(previous.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise MinisciError(
            f"{previous}: cannot read the earlier studies JSON ({e}); pass --no-carry to ignore it"
        ) from None
    out = dict(results)
    for name, result in results.items():
        earlier = old.get(name) if isinstance(old, dict) else None
        if result["status"] == "not run" and isinstance(earlier, dict) and earlier.get("status") == "done":
            if _same_sides(spec.studies[name], earlier):
                out[name] = earlier | {"carried": True, "title": spec.studies[name].title}  # the spec's words
    return out


def report(
    spec: Spec,
    show: list[dict],
    root: Path,
    out: Path,
    json_out: Path,
    chart_dir: Path,
    resamples: int,
    seed: int,
    carry: bool = True,
) -> dict[str, dict]:
    index = experiment_index(show, read_catalogue(root))
    results = {name: run_study(study, root, show, index, resamples, seed) for name, study in spec.studies.items()}
    if carry:
        results = carry_over(spec, results, json_out)
    written = charts(results, chart_dir, spec.curves)
    rel = [Path(os.path.relpath(p, out.parent)) for p in written]
    with atomic_path(json_out) as tmp:
        tmp.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    with atomic_path(out) as tmp:
        tmp.write_text(studies_markdown(spec, results, rel), encoding="utf-8")
    done = sum(r["status"] == "done" for r in results.values())
    print(f"studies: {done} of {len(results)} done -> {out}, {json_out}" + (f", {chart_dir}/" if written else ""))
    return results


# 6. queueing ------------------------------------------------------------------------------------------


def check_only(spec: Spec, only: list[str]) -> None:
    """Every ``--only`` name is an experiment or a study of the spec."""
    unknown = [n for n in only if n not in spec.experiments and n not in spec.studies]
    if unknown:
        raise MinisciError(f"--only: {unknown[0]!r} is neither an experiment nor a study of the spec")


def queue(spec: Spec, only: list[str], dry_run: bool, show: list[dict] | None) -> list[list[str]]:
    """``dvc exp run --queue`` for each experiment of the spec (or of ``only``: experiment or study
    names) that has no successful run yet."""
    check_only(spec, only)
    wanted = [
        n
        for n in spec.experiments
        if not only or n in only or any(n in spec.studies[s].experiments() for s in only if s in spec.studies)
    ]
    present = pending_or_done(show) if show is not None else set()
    commands = [spec.experiments[n].command(queue=True) for n in wanted if n not in present]
    pipeline = ("params.yaml", "dvc.yaml", "dvc.lock")  # named first: what decides what the experiments run
    changed = sorted(uncommitted() if commands else [], key=lambda path: (path not in pipeline, path))
    if changed:
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        problem = (
            f"uncommitted changes to {shown}: dvc exp run --queue copies them into every queued experiment "
            "(after a profile's run, its params and dvc.lock), so the studies would run on them, not on the "
            "commit their sides are compared with; commit them, or discard them (git checkout -- . && dvc checkout)"
        )
        if not dry_run:
            raise MinisciError(problem)
        print(f"warning: {problem}", file=sys.stderr)
    for cmd in commands:
        print(" ".join(shlex.quote(a) for a in cmd))
        if not dry_run:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
                raise MinisciError(f"{' '.join(cmd[:6])} ...: failed ({proc.returncode}): {last}")
    if not commands:
        print("studies: every experiment is queued or has run; nothing to queue")
    return commands


def uncommitted(root: str | Path = ".") -> list[str]:
    """The git-tracked files of ``root`` with uncommitted changes, staged or not ([] outside a git
    repository): what ``dvc exp run --queue`` carries into each experiment it queues."""
    try:
        proc = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "-z"],
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:
        return []
    if proc.returncode != 0:
        return []
    entries, paths = iter(proc.stdout.split("\0")), []
    for entry in entries:
        if len(entry) > 3:
            paths.append(entry[3:])
            if "R" in entry[:2] or "C" in entry[:2]:  # a rename or copy: its source path follows
                next(entries, None)
    return paths


def main(argv: list[str] | None = None) -> None:
    """``queue`` only: the studies are written by ``python -m minisci.report`` (with the experiment log)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    q = sub.add_parser("queue", help="queue the experiments that have not run (dvc exp run --queue)")
    q.add_argument("--only", nargs="*", default=[], help="experiment or study names (default: all)")
    q.add_argument("--dry-run", action="store_true", help="print the commands only")
    q.add_argument("--spec", help=f"studies spec (default: the packaged {DEFAULT_SPEC})")
    q.add_argument("--json", help="saved output of dvc exp show --json --all-commits (default: run it)")
    args = p.parse_args(argv)
    spec = load_spec(args.spec)
    check_only(spec, args.only)  # before dvc exp show, which takes minutes the first time in a clone
    queue(spec, args.only, args.dry_run, read_show(args.json))


if __name__ == "__main__":
    from minisci.stage import run_command

    sys.exit(run_command(main))
