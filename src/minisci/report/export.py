"""The ``export_metrics`` stage: one flat summary for ``dvc metrics diff`` / ``dvc exp show``, a
Markdown report (baseline vs adapted: seed-aware bootstrap, verdict against a declared equivalence
margin, the design's minimum detectable effect, Holm-adjusted p-values, dataset health, the errors
behind each score, published anchors, stage times), word-level CoNLL test predictions, DVC plot data
that overlays both arms, and PNG charts for people.

One definition of an arm's score is used wherever it stands beside a difference (summary, report
rows, chart bars): the mean over fine-tuning seeds, with its sample sd; that mean is what the
difference compares. A single seed's score is labelled with its seed.

Every fine-tuned dataset is reported the same way; what differs between task kinds (the headline
metric, the columns, how a test example is counted for the bootstrap, the error analysis) is read
from the kind (:mod:`minisci.tasks`).
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from minisci.config import SPLITS, DatasetConfig, ExportMetricsConfig
from minisci.data.readers import load_prepared
from minisci.errors import MinisciError
from minisci.io import iter_jsonl
from minisci.report import retrieval
from minisci.report.bootstrap import (
    ALPHA,
    POWER,
    holm,
    multi_power,
    seeds_for_margin,
    verdict,
)
from minisci.report.error_analysis import ANALYSES, NER_KINDS, arm_differences
from minisci.report.pretrain_seeds import compare, report_rows
from minisci.tasks import registry
from minisci.tasks.kind import TaskKind

ARMS = ("baseline", "adapted")
CURVES = "curves"  # the training curves' folder in a stage's plots (minisci.training.write_curves)


def _pct(x: float) -> str:
    return f"{100 * x:.2f}"


def _pct_or_dash(x: float | None) -> str:
    """A percentage, or a dash where the run has no such score (NSP accuracy with ``pretrain.nsp: false``)."""
    return "–" if x is None else _pct(x)


# 1. collect -------------------------------------------------------------------------------------------------


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise MinisciError(f"{path}: metrics file not found (run the stage that writes it)")
    return json.loads(path.read_text())


def _not_finite(obj: object, where: str = "") -> tuple[str, float] | None:
    """The key and value of the first NaN or infinite number in ``obj`` (nested dicts and lists)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return where, obj
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        if (found := _not_finite(v, f"{where}.{k}" if where else str(k))) is not None:
            return found
    return None


def _read_arm(path: Path, stage: str) -> dict:
    """A fine-tuning metrics file, refused when a number in it is NaN or infinite (a diverged run's
    NaN F1 would otherwise be printed beside a verdict)."""
    metrics = _read_json(path)
    if (found := _not_finite(metrics)) is not None:
        raise MinisciError(f"{path}: {found[0]} is {found[1]}, not a number; rerun dvc repro -f {stage}")
    return metrics


def _predictions(path: Path, stage: str) -> list[dict]:
    if path.is_file() and path.stat().st_size == 0:  # no row: nothing to pair with the other arm's
        raise MinisciError(f"{path}: no test predictions; rerun dvc repro -f {stage}")
    return [row for _, row in iter_jsonl(path)]


def _seed_rows(rows: list[dict], seeds: list[int]) -> list[list[dict]]:
    """One list of test rows per fine-tuning seed (rows keep every seed's predictions in ``preds``
    when there are several)."""
    if len(seeds) == 1:
        return [rows]
    return [[{**r, "pred": r["preds"][str(s)]} for r in rows] for s in seeds]


def _missing_per_split(meta: dict) -> dict[str, list[str]]:
    """Labels (classes or entity types) with no example in a split, from ``dataset.json``'s counts;
    a split whose counts are not there is skipped."""
    kind = registry.KINDS.get(meta.get("task"))
    key = kind.label_counts if kind else None
    out = {}
    for split in SPLITS:
        counts = (meta.get("counts") or {}).get(split) or {}
        if key in counts:
            out[split] = [lab for lab in meta.get("labels") or [] if not counts[key].get(lab)]
    return out


def dataset_health(data_dir: Path, name: str) -> dict:
    """What ``prepare_data`` found in one dataset (its ``dataset.json``): split sizes, repeated and
    conflicting training rows, dev/test texts also in train, labels missing from a split and any
    warnings. Keys a dataset.json lacks are left out (older or NER datasets)."""
    path = data_dir / name / "dataset.json"
    if not path.is_file():
        return {"name": name, "prepared": False}
    meta = json.loads(path.read_text(encoding="utf-8"))
    counts = meta.get("counts") or {}
    kind = registry.KINDS.get(meta.get("task"))
    size = kind.size_unit if kind else "examples"
    out = {
        "name": name,
        "prepared": True,
        "task": meta.get("task"),
        "sizes": {sp: counts[sp].get(size) for sp in SPLITS if sp in counts},
        "size_unit": size,
        "entities": {sp: counts[sp]["entities"] for sp in SPLITS if "entities" in counts.get(sp, {})},
        "missing": _missing_per_split(meta),
        **(meta.get("train_quality") or {}),
    }
    warnings = meta.get("warnings")
    if isinstance(warnings, list) and warnings:
        out["warnings"] = [str(w) for w in warnings]
    return out


def _test_texts(data_dir: Path | None, ds: str, kind: TaskKind) -> list[str] | None:
    if not ANALYSES[kind.errors].needs_texts or data_dir is None or not (data_dir / ds / "test.jsonl").is_file():
        return None
    return [e.text for e in load_prepared(data_dir / ds, splits=("test",)).splits["test"]]


def _errors(kind: TaskKind, preds: dict, texts: list[str] | None, labels: list[str], top: int) -> dict:
    """Per arm the errors of its saved model (the first seed's predictions), and where the arms differ."""
    analysis = ANALYSES[kind.errors]
    out = {"differences": arm_differences(analysis.judge, preds["baseline"], preds["adapted"], texts, top)}
    for arm in ARMS:
        found = analysis.arm_errors(preds[arm], texts, labels, top)
        if found is not None:
            out[arm] = found
    return out


def _power(boot: dict, margin: float) -> dict:
    """Minimum detectable effect of this design (pretraining seeds x fine-tuning runs x test examples),
    the pretraining seeds and the fine-tuning seeds the margin needs."""
    need = seeds_for_margin(margin, boot["example_var"], boot["seed_var"])
    return {**multi_power(boot, margin), "seeds_for_margin": need}


def collect(
    metrics_dir: Path,
    models_dir: Path,
    cfg: ExportMetricsConfig,
    runs: dict[str, list[str]],
    catalog: dict[str, DatasetConfig],
    data_dir: Path | None = None,
    base_model: str = "the base model",
    pretrain_seeds: list[int] | tuple[int, ...] = (13,),
) -> dict:
    """Everything the report needs: per (task, dataset), per arm metrics, the paired comparison with
    its verdict and power, and the errors behind the scores. ``runs``: task -> the datasets its stage
    fine-tuned; ``data_dir``: the prepared datasets (health lines, classification texts);
    ``pretrain_seeds``: the pretraining seeds (``metrics/pretrain/<seed>.json``, the first first)."""
    tasks = {}
    for task, datasets in runs.items():
        kind = registry.get(task)
        for ds in datasets:
            stage = {a: f"{kind.stage}@{ds}-{a}" for a in ARMS}  # the DVC stage that wrote an arm's files
            arms = {a: _read_arm(metrics_dir / kind.stage / ds / f"{a}.json", stage[a]) for a in ARMS}
            if arms["baseline"]["seeds"] != arms["adapted"]["seeds"]:  # seeds edited between the arms' runs
                raise MinisciError(
                    f"{kind.stage} {ds}: the arms ran different seeds (baseline {arms['baseline']['seeds']}, adapted "
                    f"{arms['adapted']['seeds']}); rerun both with {kind.stage}.seeds: "
                    f"dvc repro -f {stage['baseline']} {stage['adapted']}"
                )
            preds = {
                a: _predictions(models_dir / kind.stage / ds / a / "test_predictions.jsonl", stage[a]) for a in ARMS
            }
            labels = kind.report_labels(arms, preds)
            runs_of = {a: _seed_rows(preds[a], arms[a]["seeds"]) for a in ARMS}
            every = [[r["pred"] for r in rows] for a in ARMS for rows in runs_of[a]]
            items = kind.items([r["gold"] for r in preds["baseline"]], every, arms["baseline"]["labels"])
            counts = {a: [kind.counts(rows, items) for rows in runs_of[a]] for a in ARMS}
            # examples, pretraining seeds and fine-tuning seeds resampled together (the Multi-Bootstrap;
            # one pretraining seed: the seed bootstrap, one seed: the paired bootstrap over examples)
            boot = compare(
                counts["baseline"],
                counts["adapted"],
                arms,
                kind.headline(len(items)),
                cfg.bootstrap_resamples,
                cfg.seed,
                cfg.margin(task),
                metrics_dir / kind.stage / ds / "adapted.json",
            )
            boot.update(verdict=verdict(boot), **_power(boot, cfg.margin(task)))
            published = catalog[ds].published if ds in catalog else None
            texts = _test_texts(data_dir, ds, kind)
            conll = ANALYSES[kind.errors].word_predictions
            tasks[(task, ds)] = {
                "arms": arms,
                "bootstrap": boot,
                "published": published or {},
                "labels": labels,
                "errors": _errors(kind, preds, texts, arms["baseline"]["labels"], cfg.error_examples),
                "conll": {a: conll(preds[a]) for a in ARMS} if conll else None,
            }
    if len(tasks) > 1:  # several comparisons in one run: family-wise (Holm) p-values beside the raw ones
        for t, p in zip(tasks.values(), holm([t["bootstrap"]["p_value"] for t in tasks.values()])):
            t["bootstrap"]["p_holm"] = p
    declared = list(dict.fromkeys([*catalog, *(ds for ds_list in runs.values() for ds in ds_list)]))
    health = [dataset_health(data_dir, name) for name in declared] if data_dir is not None else []
    return {
        "tasks": tasks,
        "health": health,
        "base_model": base_model,
        "pretrain": {seed: _read_json(metrics_dir / "pretrain" / f"{seed}.json") for seed in pretrain_seeds},
        "sample_corpus": _read_json(metrics_dir / "sample_corpus.json"),
        "make_pairs": _read_json(metrics_dir / "make_pairs.json"),
        # word pieces per corpus; absent in a workspace whose pretraining predates the pretrain_data stage
        "pretrain_data": json.loads(pd.read_text()) if (pd := metrics_dir / "pretrain_data.json").is_file() else None,
        "embeddings": _read_json(metrics_dir / "finetune_embeddings.json"),
    }


# 2. summary.json: the few numbers `dvc metrics diff` and `dvc exp show` are read for ---------------------------


def arm_score(t: dict, task: str, arm: str) -> tuple[float, float | None]:
    """An arm's score wherever it stands beside a difference: the mean over fine-tuning seeds of the
    headline test metric, as the bootstrap computed it from the saved predictions (the quantity the
    difference compares), and its sample sd (None with one seed, whose score it then is)."""
    b, x = t["bootstrap"], "a" if arm == "baseline" else "b"
    mean = b.get(f"mean_{x}", t["arms"][arm]["test"][registry.get(task).metric])
    return mean, (b.get(f"sd_{x}") if b["seeds"] > 1 else None)


def summary(data: dict) -> dict:
    """Flat, stable keys: ``ner.bc5cdr.adapted.test.f1`` (mean over seeds), ``...test.f1_sd``,
    ``classification.scicite.delta.macro_f1``, ``...delta.p_holm``, ``...delta.mde``, ...
    Headline scores, deltas, p-values and power only: precision, recall, per-type scores, dev scores,
    epochs and timings stay in the per-stage JSON files and the report, so that a diff shows what
    changed in the results. Numbers only (the verdict is in the report)."""
    out = {}
    for (task, ds), t in data["tasks"].items():
        spec, prefix, b = registry.get(task), f"{task}.{ds}", t["bootstrap"]
        for arm in ARMS:
            mean, sd = arm_score(t, task, arm)
            out[f"{prefix}.{arm}.test.{spec.metric}"] = mean
            if sd is not None:
                out[f"{prefix}.{arm}.test.{spec.metric}_sd"] = sd
        out[f"{prefix}.delta.{spec.metric}"] = b["difference"]
        for k in ("ci_low", "ci_high", "p_value", "p_holm", "p_equivalence", "mde"):
            if b.get(k) is not None:
                out[f"{prefix}.delta.{k}"] = b[k]
        if b["seeds"] > 1:
            out[f"{prefix}.delta.seeds_adapted_ahead"] = b["seeds_b_better"]
    runs = list(data["pretrain"].values())  # one per pretraining seed: their mean, one key each
    for when in ("before", "after"):
        for k in ("mlm_accuracy", "perplexity", "nsp_accuracy"):
            values = [r[when][k] for r in runs]
            out[f"pretrain.{when}.{k}"] = None if None in values else round(statistics.fmean(values), 4)
    out["pretrain.tokens_seen"] = runs[0]["train"]["tokens_seen"]
    out.update(retrieval.summary_keys(data["embeddings"]))
    return out


def stage_seconds(data: dict) -> dict:
    out = {
        name: data[key].get("wall_seconds")
        for name, key in (
            ("sample_corpus", "sample_corpus"),
            ("make_pairs", "make_pairs"),
            ("pretrain_data", "pretrain_data"),
            ("finetune_embeddings", "embeddings"),
        )
        if data.get(key) is not None
    }
    for seed, m in data["pretrain"].items():
        out[f"pretrain@{seed}"] = m.get("wall_seconds")
    for (task, ds), t in data["tasks"].items():
        for arm, m in t["arms"].items():
            out[f"{registry.get(task).stage}@{ds}-{arm}"] = m.get("wall_seconds")
    return out


# 3. the report ------------------------------------------------------------------------------------------------


def _anchor(published: dict, metric: str) -> str:
    return ", ".join(f"{k} {_pct(v)}" for k, v in published.get(metric, {}).items()) or "–"


def _score_cell(t: dict, task: str, arm: str) -> str:
    mean, sd = arm_score(t, task, arm)
    return _pct(mean) if sd is None else f"{_pct(mean)} ± {_pct(sd)}"


def _verdict_cell(task: str, boot: dict, margin: float | None) -> str:
    v = boot.get("verdict")
    if v is None:
        return "–"
    if v == "equivalent":
        return f"equivalent within ±{100 * margin:.1f}"
    note = " (not after Holm)" if v in ("better", "worse") and boot.get("p_holm", 0) >= ALPHA else ""
    return v + note


def _headline_rows(data: dict, margins: dict | None = None) -> list[str]:
    margins = margins or {}
    lines = [
        "| task | dataset | metric | seeds | baseline | adapted | difference | 95% CI | p | p (Holm) | verdict | "
        "adapted ahead | published (not ours) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (task, ds), t in data["tasks"].items():
        spec, boot = registry.get(task), t["bootstrap"]
        b, a = (_score_cell(t, task, arm) for arm in ARMS)
        ahead = f"{boot['seeds_b_better']} of {boot['seeds']} seeds" if boot["seeds"] > 1 else "–"
        holm_p = f"{boot['p_holm']:.3f}" if "p_holm" in boot else "–"
        lines.append(
            f"| {spec.title} | {ds} | {spec.metric_label} | {boot['seeds']} | {b} | {a} | {100 * boot['difference']:+.2f} | "
            f"[{100 * boot['ci_low']:+.2f}, {100 * boot['ci_high']:+.2f}] | {boot['p_value']:.3f} | {holm_p} | "
            f"{_verdict_cell(task, boot, margins.get(task))} | {ahead} | {_anchor(t['published'], spec.metric)} |"
        )
    return lines


def _power_rows(data: dict, cfg: ExportMetricsConfig) -> list[str]:
    """Per comparison: the declared margin, the TOST p-value, the design's minimum detectable effect
    and the seeds the margin needs; then one sentence per task whose seeds cannot reach its margin."""
    lines = [
        "| dataset | margin (declared) | TOST p | minimum detectable effect | design | seeds to detect ±margin |",
        "|---|---|---|---|---|---|",
    ]
    notes = []
    for (task, ds), t in data["tasks"].items():
        b, m = t["bootstrap"], cfg.margin(task)
        need = b.get("seeds_for_margin")
        if b.get("seed_var") is None:
            need_cell = "unknown (one seed: no seed variance)"
        elif need is None:
            need_cell = "none: the test set alone is too small"
        else:
            need_cell = str(need)
        lines.append(
            f"| {ds} | ±{100 * m:.1f} | {b.get('p_equivalence', float('nan')):.3f} | {100 * b['mde']:.2f} | "
            f"{b['seeds']} seed{'s' if b['seeds'] > 1 else ''} × {b['examples']:,} test examples | {need_cell} |"
        )
        if not b.get("margin_reachable", True):
            if b.get("seed_var") is None:
                more = "; with one seed the seed variance, and so the seeds needed, is unknown"
            elif need is None:
                more = "; no number of seeds would on this test set (more test examples would)"
            else:
                more = f"; {need} seeds would"
            seeds = f"{b['seeds']} seed{'s' if b['seeds'] > 1 else ''}"
            notes.append(
                f"- **{ds}**: {seeds} cannot reach the declared margin ±{100 * m:.1f}: the smallest "
                f"difference this design detects (80% power) is {100 * b['mde']:.2f}{more}. The seeds were not changed."
            )
    return lines + ([""] + notes if notes else [])


def _health_rows(health: list[dict]) -> list[str]:
    lines = [
        "| dataset | task | sizes (train / dev / test) | duplicate / conflicting train rows | dev / test texts in train | "
        "missing from a split | warnings |",
        "|---|---|---|---|---|---|---|",
    ]
    for h in health:
        if not h["prepared"]:
            lines.append(f"| {h['name']} | – | not prepared | – | – | – | – |")
            continue
        sizes = " / ".join(f"{h['sizes'].get(sp, 0):,}" for sp in SPLITS) + f" {h['size_unit']}"
        if h["entities"]:
            sizes += " (" + " / ".join(f"{h['entities'].get(sp, 0):,}" for sp in SPLITS) + " entities)"
        dup = f"{h['train_duplicate_rows']} / {h['train_conflicting_texts']}" if "train_duplicate_rows" in h else "–"
        leak = f"{h['dev_texts_in_train']} / {h['test_texts_in_train']}" if "test_texts_in_train" in h else "–"
        missing = "; ".join(f"{sp}: {', '.join(labs)}" for sp, labs in h["missing"].items() if labs) or "none"
        warnings = "; ".join(h.get("warnings", [])) or "–"
        lines.append(f"| {h['name']} | {h['task']} | {sizes} | {dup} | {leak} | {missing} | {warnings} |")
    return lines


def _f1_cell(v: dict) -> str:
    return "absent" if v.get("absent") or v.get("f1") is None else _pct(v["f1"])


def _detail_rows(task: str, ds: str, t: dict) -> list[str]:
    spec = registry.get(task)
    heads = [h for h, _ in spec.columns]
    seeds = t["arms"]["baseline"].get("seeds") or []
    arm_head = f"arm, seed {seeds[0]} only (of {seeds})" if len(seeds) > 1 else "arm"
    lines = [
        f"### {spec.title}: {ds}",
        "",
        f"| {arm_head} | {' | '.join(heads)} | dev {spec.metric_label} | best epoch | seconds |",
        "|---|" + "---|" * (len(heads) + 3),
    ]
    for arm, m in t["arms"].items():
        cells = " | ".join(_pct(m["test"][k]) for _, k in spec.columns)
        lines.append(
            f"| {arm} | {cells} | {_pct(m['dev'][spec.metric])} | {m['best_epoch']} | {m['wall_seconds']:.0f} |"
        )
    items = list(t["arms"]["baseline"]["test"][spec.breakdown])
    lines += [
        "",
        f"| {spec.item_word} | baseline F1 | adapted F1 | support | published F1 (not ours) |",
        "|---|---|---|---|---|",
    ]
    for item in items:
        pb, pa = (t["arms"][arm]["test"][spec.breakdown][item] for arm in ARMS)
        anchor = _anchor(t["published"], f"f1.{item}")
        lines.append(f"| {item} | {_f1_cell(pb)} | {_f1_cell(pa)} | {pb['support']} | {anchor} |")
    b = t["bootstrap"]
    if b["seeds"] > 1:
        deltas = ", ".join(f"{100 * d:+.2f}" for d in b["seed_differences"])
        lines.append(
            f"\nOver {b['seeds']} seeds {t['arms']['baseline']['seeds']}: baseline {_pct(b['mean_a'])} ± {_pct(b['sd_a'])}, "
            f"adapted {_pct(b['mean_b'])} ± {_pct(b['sd_b'])} (mean ± sd); per-seed differences {deltas}; "
            f"adapted ahead in {b['seeds_b_better']} of {b['seeds']}."
        )
    return lines + [""]


def _quote(text: str, limit: int = 160) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _strings(pairs: list) -> str:
    return ", ".join(f"{_quote(s, 40)} ({n})" for s, n in pairs) or "–"


def _error_rows(task: str, ds: str, t: dict) -> list[str]:
    """The errors section of one dataset: error kinds and frequent strings (NER) or the most confident
    errors (classification) per arm, then what one arm gets right and the other wrong."""
    errors, seed = t.get("errors"), (t["arms"]["baseline"].get("seeds") or ["?"])[0]
    if not errors:
        return []
    kind = registry.get(task)
    lines = [f"### {kind.title}: {ds}", ""]
    if all("kinds" in errors.get(arm, {}) for arm in ARMS):  # span error kinds (NER)
        lines += [
            f"Error kinds of each saved model (seed {seed}), entity spans: "
            + ", ".join(NER_KINDS).replace("_", " ")
            + " (defined in `src/minisci/report/error_analysis.py`). Word-level predictions: "
            f"`{ds}/baseline.conll`, `{ds}/adapted.conll` in the predictions folder.",
            "",
            "| arm | correct | " + " | ".join(k.replace("_", " ") for k in NER_KINDS) + " |",
            "|---|---|" + "---|" * len(NER_KINDS),
        ]
        for arm in ARMS:
            k = errors[arm]["kinds"]
            lines.append(f"| {arm} | {k['correct']} | " + " | ".join(str(k[x]) for x in NER_KINDS) + " |")
        lines.append("")
        for arm in ARMS:
            lines.append(f"- {arm}, most often missed: {_strings(errors[arm]['missed'])}")
            lines.append(f"- {arm}, most often spurious: {_strings(errors[arm]['spurious'])}")
    else:
        for arm in ARMS:
            conf = errors.get(arm, {}).get("confident", [])
            if conf:
                lines += [
                    f"Most confident errors of the {arm} model (seed {seed}):",
                    "",
                    "| # | gold | predicted | confidence | text |",
                    "|---|---|---|---|---|",
                ]
                lines += [
                    f"| {e['i']} | {e['gold']} | {e['pred']} | {e['confidence']:.3f} | {_quote(e['text'])} |"
                    for e in conf
                ]
                lines.append("")
    unit = ANALYSES[kind.errors].judged
    d = errors["differences"]
    lines += [
        "",
        f"Baseline against adapted ({unit}, each arm right when a majority of its seeds is): both right "
        f"{d['both']}, both wrong {d['neither']}, **only baseline right {d['baseline_only']}**, "
        f"**only adapted right {d['adapted_only']}**.",
        "",
    ]
    for arm in ARMS:
        sample = d[f"{arm}_only_sample"]
        if sample:
            lines.append(f"- only {arm} right: " + "; ".join(_quote(x["item"], 80) for x in sample))
    return lines + [""]


def report(data: dict, cfg: ExportMetricsConfig) -> str:
    base = data.get("base_model", "the base model")
    margins = {task: cfg.margin(task) for task in registry.names()}
    lines = [
        "# minisci results",
        "",
        f"Test scores of the **baseline** (base model `{base}` as is) and the **adapted** model (continued",
        "pretraining), each fine-tuned with the same params; the epoch is chosen on dev, test is scored once.",
        "An arm's score is the mean ± sd of its test score over fine-tuning seeds (one seed: that seed's score).",
        "Differences: adapted − baseline of those means, with a hierarchical",
        f"bootstrap ({cfg.bootstrap_resamples} resamples, seed {cfg.seed}): each resample draws the test examples",
        "(shared by every seed and both arms) and the seeds, both with replacement; 95% percentile interval and",
        "two-sided p-value. With one seed this is the paired bootstrap over test examples, and seed-to-seed",
        "variation is not in the interval. Method: `src/minisci/report/bootstrap.py`.",
        "",
        f"Verdict: **better** or **worse** when the 95% interval excludes 0 and p < {ALPHA}; **equivalent within ±m** when two "
        f"one-sided tests (TOST, the same bootstrap) reject both −m and +m at α = {ALPHA} (the 90% interval lies "
        f"inside ±m), m declared in params.yaml before the run (export_metrics.equivalence_margin_*: "
        + ", ".join(f"{registry.get(k).title} ±{100 * v:.1f}" for k, v in margins.items())
        + "); **inconclusive** otherwise: not significant, and not shown equivalent either. When a run "
        "compares several datasets, Holm-adjusted p-values stand beside the raw ones.",
        "",
        "Macro-F1 (classification) averages over one fixed class set for both arms: the dataset's labels that "
        "occur in the test split. A class absent from test has no F1: it is shown as *absent* and left out of "
        "the average.",
        "",
        *_headline_rows(data, margins),
        "",
        f"## Power of the design (α = {ALPHA}, {POWER:.0%} power)",
        "",
        "Minimum detectable effect: the smallest true difference this many seeds × test examples detects 80% of the "
        "time, from the observed variances: sqrt(example variance + seed variance / seeds) × (z₀.₉₇₅ + z₀.₈); "
        "the test-sample part does not shrink with seeds (every seed is scored on the same test set).",
        "",
        *_power_rows(data, cfg),
        "",
        *report_rows([(ds, t["bootstrap"], cfg.margin(task)) for (task, ds), t in data["tasks"].items()]),
    ]
    if data.get("health"):
        lines += [
            "## Dataset health",
            "",
            "One line per declared dataset, from `data/prepared/<name>/dataset.json` (what `prepare_data` found): "
            "duplicate = a training row repeated with its label, conflicting = one training text with several "
            "labels; texts in train = dev/test texts that also occur in train; missing = declared labels "
            "(classes or entity types) with no example in a split.",
            "",
            *_health_rows(data["health"]),
            "",
        ]
    lines += ["## Details", ""]
    for (task, ds), t in data["tasks"].items():
        lines += _detail_rows(task, ds, t)
    errors = [line for (task, ds), t in data["tasks"].items() for line in _error_rows(task, ds, t)]
    if errors:
        lines += ["## Errors", "", *errors]
    e, seeds = data["embeddings"], list(data["pretrain"])
    lines += corpus_rows(data.get("sample_corpus") or {}, data.get("pretrain_data"))
    unit = (data.get("pretrain_data") or {}).get("layout", "pairs")
    lines += [
        f"## Pretraining (held-out {unit})",
        "",
        f"One run per pretraining seed ({', '.join(map(str, seeds))}); the first seed's encoder is the adapted "
        "encoder of the embeddings, the model cards and serving.",
        "",
        "| seed | | MLM accuracy | perplexity | NSP accuracy | steps | tokens | tokens/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for seed, p in data["pretrain"].items():
        tr = p["train"]
        for when in ("before", "after"):
            run = f"{tr['steps']} | {tr['tokens_seen']:,} | {tr['tokens_per_second']}" if when == "after" else "| |"
            lines.append(
                f"| {seed if when == 'before' else ''} | {when} | {_pct(p[when]['mlm_accuracy'])} | "
                f"{p[when]['perplexity']:.1f} | {_pct_or_dash(p[when]['nsp_accuracy'])} | {run} |"
            )
    lines.append("")
    lines += retrieval.report_rows(e, base)
    lines += ["## Wall time per stage (seconds)", "", "| stage | seconds |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in stage_seconds(data).items()]
    return "\n".join(lines) + "\n"


def corpus_rows(sample: dict, examples: dict | None) -> list[str]:
    """The pretraining corpus, one row per declared corpus: what ``sample_corpus`` sampled and the
    guard excluded, and the word pieces ``pretrain_data`` counted under the pretraining tokenizer."""
    corpora = sample.get("corpora") or {}
    if not corpora:
        return []
    pieces = (examples or {}).get("corpora") or {}
    lines = [
        "## Pretraining corpus",
        "",
        "| corpus | documents | sentences | words | word pieces | excluded by the test-set guard |",
        "|---|---|---|---|---|---|",
    ]
    for name, c in corpora.items():
        n = pieces.get(name)
        tokens = f"{n['train_tokens'] + n['heldout_tokens']:,}" if n else "–"
        per_ds = ", ".join(f"{ds} {k}" for ds, k in (c.get("excluded_own_check_per_dataset") or {}).items() if k)
        excluded = f"{c.get('excluded_total', 0):,}" + (f" ({per_ds})" if per_ds else "")
        lines.append(
            f"| {name} | {c.get('sampled_docs', 0):,} | {c.get('sampled_sentences', 0):,} | "
            f"{c.get('sampled_words', 0):,} | {tokens} | {excluded} |"
        )
    if examples:
        tr, held = examples["train"], examples["heldout"]
        lines += [
            "",
            f"Pretraining examples ({examples['layout']}, tokenised once for every seed): {tr['examples']:,} for "
            f"training ({tr['tokens']:,} word pieces), {held['examples']:,} held out.",
        ]
    return [*lines, ""]


# 4. charts and plot data ----------------------------------------------------------------------------------------


def comparison_bars(data: dict) -> list[dict]:
    """What the comparison chart draws, one entry per dataset: both arms' bars (the seed means that the
    difference compares) and the label (difference, p, verdict), all from one summary row."""
    bars = []
    for (task, ds), t in data["tasks"].items():
        b = t["bootstrap"]
        (base, _), (adapt, _) = (arm_score(t, task, arm) for arm in ARMS)
        what = f"mean of {b['seeds']} seeds" if b["seeds"] > 1 else f"seed {t['arms']['baseline']['seeds'][0]}"
        bars.append(
            {
                "dataset": ds,
                "task": task,
                "baseline": 100 * base,
                "adapted": 100 * adapt,
                "ci": (100 * b["ci_low"], 100 * b["ci_high"]),
                "label": f"{100 * b['difference']:+.2f}, p={b['p_value']:.3f}"
                + (f"\n{b['verdict']}" if b.get("verdict") else ""),
                "tick": f"{ds}\n{registry.get(task).metric_label}\n({what})",
            }
        )
    return bars


def _comparison_chart(plt, data: dict, path: Path) -> None:
    """Baseline vs adapted per dataset (seed means), the 95% interval of the difference drawn on the adapted bar."""
    bars = comparison_bars(data)
    fig, ax = plt.subplots(figsize=(2.4 + 1.8 * len(bars), 4.2))
    scores = []
    for i, bar in enumerate(bars):
        scores += [bar["baseline"], bar["adapted"]]
        ax.bar(i - 0.2, bar["baseline"], 0.4, color="#9aa5b1", label="baseline" if i == 0 else None)
        err = [[max(0.0, -bar["ci"][0])], [max(0.0, bar["ci"][1])]]
        ax.bar(i + 0.2, bar["adapted"], 0.4, color="#2f6f9f", label="adapted" if i == 0 else None, yerr=err, capsize=4)
        ax.annotate(
            bar["label"],
            (i + 0.2, bar["adapted"] + err[1][0]),
            xytext=(0, 4),
            textcoords="offset points",
            ha="center",
            fontsize=8,
        )
    ax.set_xticks(range(len(bars)), [bar["tick"] for bar in bars], fontsize=8)
    # A zoomed axis would exaggerate sub-point differences; say the axis does not start at 0.
    low = max(0, 5 * int((min(scores) - 8) // 5))
    top = max(bar["adapted"] + max(0.0, bar["ci"][1]) for bar in bars)  # the interval and its label fit
    ax.set_ylim(low, min(105, max(max(scores), top) + 7))
    ax.set_ylabel("test score (%)" + (f", axis from {low}" if low else ""))
    ax.set_title(
        f"baseline ({data.get('base_model', 'base model')}) vs adapted\n(bar: 95% CI of the difference)", fontsize=9
    )
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    # The drawn values go into the PNG's Description text chunk, so that a test (or a reader with
    # PIL: Image.open(path).text) can check the committed chart against the summary it came from.
    fig.savefig(path, dpi=110, metadata={"Description": json.dumps({"bars": bars})})
    plt.close(fig)


GROUP_TITLES = {  # the loss chart's axes, in words
    "pretrain": "pretraining (MLM + NSP)",
    "finetune_ner": "NER fine-tuning",
    "finetune_classification": "classification fine-tuning",
    "finetune_embeddings": "embeddings fine-tuning",
}


def _loss_chart(plt, plots_dir: Path, path: Path, runs: dict[str, list[str]] | None = None) -> None:
    """Training loss, one axis per training task (pretraining, each fine-tuning task), since their
    scales differ by an order of magnitude. ``runs``: stage -> the datasets this report covers; a
    fine-tuning curve of any other dataset (left in plots/ by an earlier run or experiment) is not
    drawn, so the chart never mixes runs. Each curve is labelled by dataset and arm."""
    groups: dict[str, list[Path]] = {}
    for curve in sorted(plots_dir.glob(f"**/{CURVES}/loss.tsv")):
        run = curve.parents[1].relative_to(plots_dir).as_posix().split("/")
        if runs is not None and run[0] in runs and (len(run) < 2 or run[1] not in runs[run[0]]):
            continue
        groups.setdefault(run[0], []).append(curve)
    fig, axes = plt.subplots(1, max(1, len(groups)), figsize=(4.2 * max(1, len(groups)), 3.9), squeeze=False)
    for ax, (group, curves) in zip(axes[0], sorted(groups.items(), key=lambda g: g[0] != "pretrain")):
        for curve in curves:
            rows = [line.split("\t") for line in curve.read_text().splitlines()[1:]]
            label = curve.parents[1].relative_to(plots_dir / group).as_posix().replace("/", ", ")
            steps, losses = [int(r[0]) for r in rows], [float(r[-1]) for r in rows]
            ax.plot(steps, losses, marker="o" if len(rows) == 1 else None, label=label if label != "." else "loss")
        ax.set_title(GROUP_TITLES.get(group, group.replace("_", " ")), fontsize=9)
        ax.set_xlabel("training step")
        ax.set_ylabel("training loss")
        title = "pretraining seed" if group == "pretrain" else "dataset, arm" if group in (runs or {}) else None
        ax.legend(fontsize=7, title=title, title_fontsize=7)
    fig.suptitle("Training loss, this run only", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _confusion_chart(plt, ds: str, t: dict, path: Path) -> None:
    """Row-normalised confusion matrices (recall per class on the diagonal), counts in brackets."""
    labels = t["arms"]["baseline"]["labels"]
    fig, axes = plt.subplots(1, 2, figsize=(4 + 1.6 * len(labels), 1.8 + 0.9 * len(labels)))
    for ax, arm in zip(axes, ARMS):
        cm = t["arms"][arm]["test"]["confusion_matrix"]
        norm = [[c / max(sum(row), 1) for c in row] for row in cm]
        ax.imshow(norm, cmap="Blues", vmin=0, vmax=1)
        for r, row in enumerate(cm):
            for c, n in enumerate(row):
                colour = "white" if norm[r][c] > 0.6 else "black"
                ax.text(c, r, f"{norm[r][c]:.2f}\n({n})", ha="center", va="center", fontsize=8, color=colour)
        ax.set_xticks(range(len(labels)), labels, fontsize=8, rotation=30, ha="right")
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        ax.set_xlabel("predicted")
        ax.set_ylabel("actual")
        ax.set_title(f"{ds} {arm} (row-normalised)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def charts(data: dict, plots_dir: Path, out_dir: Path) -> list[Path]:
    """PNG charts: baseline vs adapted with bootstrap intervals, loss curves, confusion matrices."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "comparison.png", out_dir / "loss_curves.png"]
    _comparison_chart(plt, data, written[0])
    runs: dict[str, list[str]] = {}
    for task, ds in data["tasks"]:
        runs.setdefault(registry.get(task).stage, []).append(ds)
    runs["pretrain"] = [str(seed) for seed in data["pretrain"]]
    _loss_chart(plt, plots_dir, written[1], runs)
    for (task, ds), t in data["tasks"].items():
        if registry.get(task).breakdown == "per_class":
            written.append(out_dir / f"confusion_{ds}.png")
            _confusion_chart(plt, ds, t, written[-1])
    return written


def per_type_rows(data: dict) -> list[dict]:
    """Per-type (NER) and per-class test F1 of both arms for a DVC bar plot; one row per bar (a class
    absent from test has no F1 and no bar)."""
    rows = []
    for (task, ds), t in data["tasks"].items():
        for arm, m in t["arms"].items():
            for item, v in m["test"][registry.get(task).breakdown].items():
                if v.get("f1") is not None:
                    rows.append({"item": f"{ds}/{item} ({arm})", "dataset": ds, "arm": arm, "f1": v["f1"]})
    return rows


def with_dataset_column(tsv: str, dataset: str) -> str:
    """A curve's TSV with a ``dataset`` column: the series template puts it in the legend, so
    ``dvc plots diff`` of revisions whose first datasets differ says which curve is which."""
    lines = tsv.splitlines()
    if not lines:
        return tsv
    return "".join(f"{line}\t{'dataset' if i == 0 else dataset}\n" for i, line in enumerate(lines) if line)


def write_compare_plots(data: dict, plots_dir: Path, out: Path) -> None:
    """Plot data at fixed paths that dvc.yaml's top-level plots overlay for both arms, whichever datasets
    ran: ``<task>/<arm>/<curve>.tsv`` (the training curves of the task's first dataset, the one
    its stage lists first, named in a ``dataset`` column), ``per_type/<arm>.json`` (test F1 per dataset and type or class) and
    ``error_kinds/<arm>.json`` (NER error counts per dataset and kind)."""
    for task, spec in registry.KINDS.items():
        first = next((ds for (tk, ds) in data["tasks"] if tk == task), None)
        for arm in ARMS:
            for curve in spec.curves:
                src = plots_dir / spec.stage / str(first) / arm / CURVES / f"{curve}.tsv"
                dst = out / task / arm / f"{curve}.tsv"
                dst.parent.mkdir(parents=True, exist_ok=True)
                # a task that did not run gets a header only, so the declared plot stays valid
                dst.write_text(
                    with_dataset_column(src.read_text(), first) if first and src.is_file() else f"step\t{curve}\n"
                )
    for arm in ARMS:
        per_type = [
            {"item": f"{ds}/{item}", "f1": v["f1"]}
            for (task, ds), t in data["tasks"].items()
            for item, v in t["arms"][arm]["test"][registry.get(task).breakdown].items()
            if v.get("f1") is not None
        ]
        kinds = [
            {"item": f"{ds}/{kind.replace('_', ' ')}", "count": t["errors"][arm]["kinds"][kind]}
            for (task, ds), t in data["tasks"].items()
            if "kinds" in (t.get("errors") or {}).get(arm, {})
            for kind in NER_KINDS
        ]
        for name, rows in (("per_type", per_type), ("error_kinds", kinds)):
            (out / name).mkdir(parents=True, exist_ok=True)
            (out / name / f"{arm}.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


def write_predictions(data: dict, out: Path) -> list[Path]:
    """Word-level CoNLL test predictions (token gold predicted) of each NER arm's saved model."""
    written = []
    for (_task, ds), t in data["tasks"].items():
        for arm, text in (t.get("conll") or {}).items():
            written.append(out / ds / f"{arm}.conll")
            written[-1].parent.mkdir(parents=True, exist_ok=True)
            written[-1].write_text(text, encoding="utf-8")
    return written
