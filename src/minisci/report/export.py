"""The ``export_metrics`` stage: one flat summary for ``dvc metrics diff`` / ``dvc exp show``, a
Markdown report (baseline vs adapted, paired bootstrap, published anchors, stage times) and PNG
charts for people.

Every fine-tuned dataset is reported the same way; what differs between tasks (the headline
metric, the columns, how a test example is counted for the bootstrap) is one row of :data:`TASKS`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

from minisci.config import DatasetConfig, ExportMetricsConfig
from minisci.errors import MinisciError
from minisci.io import iter_jsonl
from minisci.report.bootstrap import (
    classification_counts,
    f1_from_counts,
    macro_f1_from_counts,
    ner_counts,
    seed_bootstrap,
)

ARMS = ("baseline", "adapted")


def _pct(x: float) -> str:
    return f"{100 * x:.2f}"


# 1. the task table ------------------------------------------------------------------------------------------


def _classification_score(labels: list[str]) -> Callable:
    return lambda c: macro_f1_from_counts(c, len(labels))


def _labels_in_play(arms: dict, preds: dict) -> list[str]:
    """Classification labels that occur in gold or in either arm's predictions, in label order
    (the same set the stages' macro-F1 averages over)."""
    seen = {r[k] for rows in preds.values() for r in rows for k in ("gold", "pred")}
    return [lab for lab in arms["baseline"]["labels"] if lab in seen]


@dataclasses.dataclass(frozen=True)
class TaskReport:
    """How one fine-tuning task is read, compared and shown."""

    stage: str  # its stage: the folder of its metrics and models
    title: str  # how the report names a dataset of this task
    metric: str  # the headline test metric, compared between arms
    metric_label: str
    summary_keys: tuple[str, ...]  # test metrics in summary.json
    columns: tuple[tuple[str, str], ...]  # (header, test metric) of the details table
    breakdown: str  # per-item test scores: per_type | per_class
    item: str  # what one breakdown row is
    labels: Callable  # (arms' metrics, arms' test rows) -> the labels the comparison scores over
    counts: Callable  # (test prediction rows, labels) -> per-example additive counts
    score: Callable  # labels -> (summed counts -> headline metric)


TASKS = {
    "ner": TaskReport(
        stage="finetune_ner",
        title="NER",
        metric="f1",
        metric_label="entity F1 (micro)",
        summary_keys=("precision", "recall", "f1"),
        columns=(
            ("P", "precision"),
            ("R", "recall"),
            ("F1", "f1"),
            ("macro-F1", "macro_f1"),
            ("token acc.", "token_accuracy"),
        ),
        breakdown="per_type",
        item="type",
        labels=lambda arms, preds: arms["baseline"]["labels"],
        counts=lambda rows, labels: ner_counts(rows),
        score=lambda labels: f1_from_counts,
    ),
    "classification": TaskReport(
        stage="finetune_classification",
        title="classification",
        metric="macro_f1",
        metric_label="macro-F1",
        summary_keys=("accuracy", "macro_f1"),
        columns=(("accuracy", "accuracy"), ("macro-F1", "macro_f1"), ("micro-F1", "micro_f1")),
        breakdown="per_class",
        item="class",
        labels=lambda arms, preds: _labels_in_play(arms, preds),
        counts=classification_counts,
        score=_classification_score,
    ),
}


# 2. collect -------------------------------------------------------------------------------------------------


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise MinisciError(f"{path}: metrics file not found (run the stage that writes it)")
    return json.loads(path.read_text())


def _predictions(path: Path) -> list[dict]:
    return [row for _, row in iter_jsonl(path)]


def _seed_rows(rows: list[dict], seeds: list[int]) -> list[list[dict]]:
    """One list of test rows per fine-tuning seed (rows keep every seed's predictions in ``preds``
    when there are several)."""
    if len(seeds) == 1:
        return [rows]
    return [[{**r, "pred": r["preds"][str(s)]} for r in rows] for s in seeds]


def collect(
    metrics_dir: Path,
    models_dir: Path,
    cfg: ExportMetricsConfig,
    runs: dict[str, list[str]],
    catalog: dict[str, DatasetConfig],
) -> dict:
    """Everything the report needs: per (task, dataset), per arm metrics and the paired comparison.
    ``runs``: task -> the datasets its stage fine-tuned."""
    tasks = {}
    for task, datasets in runs.items():
        t = TASKS[task]
        for ds in datasets:
            arms = {a: _read_json(metrics_dir / t.stage / ds / f"{a}.json") for a in ARMS}
            preds = {a: _predictions(models_dir / t.stage / ds / a / "test_predictions.jsonl") for a in ARMS}
            labels = t.labels(arms, preds)
            counts = {a: [t.counts(rows, labels) for rows in _seed_rows(preds[a], arms[a]["seeds"])] for a in ARMS}
            # examples and seeds resampled together (one seed: the paired bootstrap over examples)
            boot = seed_bootstrap(
                counts["baseline"], counts["adapted"], t.score(labels), cfg.bootstrap_resamples, cfg.seed
            )
            published = catalog[ds].published if ds in catalog else None
            tasks[(task, ds)] = {"arms": arms, "bootstrap": boot, "published": published or {}}
    return {
        "tasks": tasks,
        "pretrain": _read_json(metrics_dir / "pretrain.json"),
        "sample_corpus": _read_json(metrics_dir / "sample_corpus.json"),
        "make_pairs": _read_json(metrics_dir / "make_pairs.json"),
        "embeddings": _read_json(metrics_dir / "finetune_embeddings.json"),
    }


# 3. summary.json: the few numbers `dvc metrics diff` and `dvc exp show` are read for ---------------------------


def summary(data: dict) -> dict:
    """Flat, stable keys: ``ner.bc5cdr.adapted.test.f1``, ``classification.scicite.delta.macro_f1``, ...
    Headline scores, deltas and p-values only: per-type scores, epochs and timings stay in the
    per-stage JSON files and the report, so that a diff shows what changed in the results."""
    out = {}
    for (task, ds), t in data["tasks"].items():
        spec, prefix = TASKS[task], f"{task}.{ds}"
        for arm, m in t["arms"].items():
            for k in spec.summary_keys:
                out[f"{prefix}.{arm}.test.{k}"] = m["test"][k]
            out[f"{prefix}.{arm}.dev.{spec.metric}"] = m["dev"][spec.metric]
            for k in (f"{spec.metric}_mean", f"{spec.metric}_sd"):
                if k in m.get("test_over_seeds", {}):
                    out[f"{prefix}.{arm}.test.{k}"] = m["test_over_seeds"][k]
        b = t["bootstrap"]
        out[f"{prefix}.delta.{spec.metric}"] = b["difference"]
        out[f"{prefix}.delta.ci_low"] = b["ci_low"]
        out[f"{prefix}.delta.ci_high"] = b["ci_high"]
        out[f"{prefix}.delta.p_value"] = b["p_value"]
        if b["seeds"] > 1:
            out[f"{prefix}.delta.seeds_adapted_ahead"] = b["seeds_b_better"]
    p = data["pretrain"]
    for when in ("before", "after"):
        for k in ("mlm_accuracy", "perplexity", "nsp_accuracy"):
            out[f"pretrain.{when}.{k}"] = p[when][k]
    out["pretrain.tokens_seen"] = p["train"]["tokens_seen"]
    for model in ("baseline", "encoder", "finetuned"):
        for k in ("mrr_at_10", "recall_at_1"):
            out[f"embeddings.{model}.{k}"] = data["embeddings"][model][k]
    return out


def stage_seconds(data: dict) -> dict:
    out = {
        name: data[key].get("wall_seconds")
        for name, key in (
            ("sample_corpus", "sample_corpus"),
            ("make_pairs", "make_pairs"),
            ("pretrain", "pretrain"),
            ("finetune_embeddings", "embeddings"),
        )
    }
    for (task, ds), t in data["tasks"].items():
        for arm, m in t["arms"].items():
            out[f"{TASKS[task].stage}@{ds}-{arm}"] = m.get("wall_seconds")
    return out


# 4. the report ------------------------------------------------------------------------------------------------


def _anchor(published: dict, metric: str) -> str:
    return ", ".join(f"{k} {_pct(v)}" for k, v in published.get(metric, {}).items()) or "–"


def _headline_rows(data: dict) -> list[str]:
    lines = [
        "| task | dataset | metric | seeds | baseline | adapted | difference | 95% CI | p | adapted ahead | "
        "published (not ours) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (task, ds), t in data["tasks"].items():
        spec, boot = TASKS[task], t["bootstrap"]
        if boot["seeds"] > 1:  # the mean ± sd over seeds, which is what the difference compares
            b, a = (f"{_pct(boot[f'mean_{x}'])} ± {_pct(boot[f'sd_{x}'])}" for x in "ab")
            ahead = f"{boot['seeds_b_better']} of {boot['seeds']} seeds"
        else:
            b, a = (_pct(t["arms"][arm]["test"][spec.metric]) for arm in ARMS)
            ahead = "–"
        lines.append(
            f"| {spec.title} | {ds} | {spec.metric_label} | {boot['seeds']} | {b} | {a} | {100 * boot['difference']:+.2f} | "
            f"[{100 * boot['ci_low']:+.2f}, {100 * boot['ci_high']:+.2f}] | {boot['p_value']:.3f} | {ahead} | "
            f"{_anchor(t['published'], spec.metric)} |"
        )
    return lines


def _detail_rows(task: str, ds: str, t: dict) -> list[str]:
    spec = TASKS[task]
    heads = [h for h, _ in spec.columns]
    seeds = t["arms"]["baseline"].get("seeds") or []
    arm_head = f"arm (seed {seeds[0]} of {seeds})" if len(seeds) > 1 else "arm"
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
        f"| {spec.item} | baseline F1 | adapted F1 | support | published F1 (not ours) |",
        "|---|---|---|---|---|",
    ]
    for item in items:
        pb, pa = (t["arms"][arm]["test"][spec.breakdown][item] for arm in ARMS)
        anchor = _anchor(t["published"], f"f1.{item}")
        lines.append(f"| {item} | {_pct(pb['f1'])} | {_pct(pa['f1'])} | {pb['support']} | {anchor} |")
    b = t["bootstrap"]
    if b["seeds"] > 1:
        deltas = ", ".join(f"{100 * d:+.2f}" for d in b["seed_differences"])
        lines.append(
            f"\nOver {b['seeds']} seeds {t['arms']['baseline']['seeds']}: baseline {_pct(b['mean_a'])} ± {_pct(b['sd_a'])}, "
            f"adapted {_pct(b['mean_b'])} ± {_pct(b['sd_b'])} (mean ± sd); per-seed differences {deltas}; "
            f"adapted ahead in {b['seeds_b_better']} of {b['seeds']}."
        )
    return lines + [""]


def report(data: dict, cfg: ExportMetricsConfig) -> str:
    lines = [
        "# minisci results",
        "",
        "Test scores of the **baseline** (base model as is) and the **adapted** model (continued MLM+NSP",
        "pretraining), each fine-tuned with the same params; the epoch is chosen on dev, test is scored once.",
        "Differences: adapted − baseline of the mean test score over fine-tuning seeds, with a hierarchical",
        f"bootstrap ({cfg.bootstrap_resamples} resamples, seed {cfg.seed}): each resample draws the test examples",
        "(shared by every seed and both arms) and the seeds, both with replacement; 95% percentile interval and",
        "two-sided p-value. With one seed this is the paired bootstrap over test examples, and seed-to-seed",
        "variation is not in the interval. Method: `src/minisci/report/bootstrap.py`.",
        "",
        *_headline_rows(data),
        "",
        "## Details",
        "",
    ]
    for (task, ds), t in data["tasks"].items():
        lines += _detail_rows(task, ds, t)
    p, e = data["pretrain"], data["embeddings"]
    lines += [
        "## Pretraining (held-out pairs)",
        "",
        "| | MLM accuracy | perplexity | NSP accuracy |",
        "|---|---|---|---|",
    ]
    for when in ("before", "after"):
        lines.append(
            f"| {when} | {_pct(p[when]['mlm_accuracy'])} | {p[when]['perplexity']:.1f} | {_pct(p[when]['nsp_accuracy'])} |"
        )
    tr = p["train"]
    lines += [
        "",
        f"{tr['steps']} steps, {tr['tokens_seen']:,} tokens, {tr['tokens_per_second']} tokens/s.",
        "",
        f"## Sentence embeddings (title -> abstract retrieval, {e['eval_pairs']} held-out documents)",
        "",
        "| model | MRR@10 | recall@1 | recall@10 |",
        "|---|---|---|---|",
    ]
    for model, name in (
        ("baseline", "baseline (shipped all-MiniLM-L6-v2)"),
        ("encoder", f"input encoder ({e['encoder_dir']})"),
        ("finetuned", f"fine-tuned ({e['train_pairs']} pairs, in-batch negatives)"),
    ):
        r = e[model]
        lines.append(f"| {name} | {r['mrr_at_10']:.4f} | {r['recall_at_1']:.4f} | {r['recall_at_10']:.4f} |")
    lines += ["", "## Wall time per stage (seconds)", "", "| stage | seconds |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in stage_seconds(data).items()]
    return "\n".join(lines) + "\n"


# 5. charts and plot data ----------------------------------------------------------------------------------------


def _comparison_chart(plt, data: dict, path: Path) -> None:
    """Baseline vs adapted per dataset, the 95% interval of the difference drawn on the adapted bar."""
    tasks = list(data["tasks"].items())
    fig, ax = plt.subplots(figsize=(2.4 + 1.8 * len(tasks), 3.8))
    scores = []
    for i, ((task, _ds), t) in enumerate(tasks):
        m, b = TASKS[task].metric, t["bootstrap"]
        base, adapt = (100 * t["arms"][a]["test"][m] for a in ARMS)
        scores += [base, adapt]
        ax.bar(i - 0.2, base, 0.4, color="#9aa5b1", label="baseline" if i == 0 else None)
        err = [[max(0.0, -100 * b["ci_low"])], [max(0.0, 100 * b["ci_high"])]]
        ax.bar(i + 0.2, adapt, 0.4, color="#2f6f9f", label="adapted" if i == 0 else None, yerr=err, capsize=4)
        ax.annotate(
            f"{100 * b['difference']:+.2f}\np={b['p_value']:.2f}",
            (i + 0.2, adapt + err[1][0]),
            xytext=(0, 4),
            textcoords="offset points",
            ha="center",
            fontsize=8,
        )
    ax.set_xticks(range(len(tasks)), [f"{ds}\n{TASKS[task].metric_label}" for (task, ds), _ in tasks], fontsize=8)
    # A zoomed axis would exaggerate sub-point differences; say the axis does not start at 0.
    low = max(0, 5 * int((min(scores) - 8) // 5))
    ax.set_ylim(low, min(100, max(scores) + 6))
    ax.set_ylabel("test score (%)" + (f", axis from {low}" if low else ""))
    ax.set_title("baseline vs adapted (bar: 95% CI of the difference)", fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _loss_chart(plt, plots_dir: Path, path: Path) -> None:
    curves = sorted(plots_dir.glob("**/plots/metrics/loss.tsv"))
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for curve in curves:
        rows = [line.split("\t") for line in curve.read_text().splitlines()[1:]]
        run = curve.parents[2].relative_to(plots_dir).as_posix()
        ax = axes[0] if run.startswith("pretrain") else axes[1]
        ax.plot([int(r[0]) for r in rows], [float(r[-1]) for r in rows], label=run)
    for ax, title in zip(axes, ("pretraining loss (MLM + NSP)", "fine-tuning loss")):
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.legend(fontsize=7)
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
    _loss_chart(plt, plots_dir, written[1])
    for (task, ds), t in data["tasks"].items():
        if TASKS[task].breakdown == "per_class":
            written.append(out_dir / f"confusion_{ds}.png")
            _confusion_chart(plt, ds, t, written[-1])
    return written


def per_type_rows(data: dict) -> list[dict]:
    """Per-type (NER) and per-class test F1 of both arms for a DVC bar plot; one row per bar."""
    rows = []
    for (task, ds), t in data["tasks"].items():
        for arm, m in t["arms"].items():
            for item, v in m["test"][TASKS[task].breakdown].items():
                rows.append({"item": f"{ds}/{item} ({arm})", "dataset": ds, "arm": arm, "f1": v["f1"]})
    return rows
