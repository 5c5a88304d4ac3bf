"""The ``export_metrics`` stage: one flat summary for ``dvc metrics diff`` / ``dvc exp show``, a
Markdown report (baseline vs adapted, paired bootstrap, published anchors, stage times) and PNG
charts for people."""

from __future__ import annotations

import json
from pathlib import Path

from minisci.config import ExportMetricsConfig
from minisci.errors import MinisciError
from minisci.io import iter_jsonl
from minisci.report.bootstrap import (
    classification_counts,
    f1_from_counts,
    macro_f1_from_counts,
    ner_counts,
    paired_bootstrap,
)

ARMS = ("baseline", "adapted")
# Published numbers for context only (not produced by this pipeline): SciBERT paper, Beltagy et al. 2019.
ANCHORS = {
    ("ner", "bc5cdr", "f1"): {"BERT-base": 0.867, "SciBERT": 0.900},
    ("scicite", "scicite", "macro_f1"): {"BERT-base": 0.849, "SciBERT": 0.855},
}


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise MinisciError(f"{path}: metrics file not found (run the stage that writes it)")
    return json.loads(path.read_text())


def _predictions(path: Path) -> list[dict]:
    return [row for _, row in iter_jsonl(path)]


def collect(metrics_dir: Path, models_dir: Path, cfg: ExportMetricsConfig, ner_datasets: tuple[str, ...]) -> dict:
    """Everything the report needs: per task, per arm metrics, and the paired comparison."""
    tasks = {}
    for ds in ner_datasets:
        arms = {a: _read_json(metrics_dir / "finetune_ner" / ds / f"{a}.json") for a in ARMS}
        preds = {a: _predictions(models_dir / "finetune_ner" / ds / a / "test_predictions.jsonl") for a in ARMS}
        counts = {a: ner_counts(preds[a]) for a in ARMS}
        boot = paired_bootstrap(
            counts["baseline"], counts["adapted"], f1_from_counts, cfg.bootstrap_resamples, cfg.seed
        )
        tasks[("ner", ds)] = {"metric": "f1", "arms": arms, "bootstrap": boot}
    arms = {a: _read_json(metrics_dir / "finetune_scicite" / f"{a}.json") for a in ARMS}
    labels = arms["baseline"]["labels"]
    preds = {a: _predictions(models_dir / "finetune_scicite" / a / "test_predictions.jsonl") for a in ARMS}
    counts = {a: classification_counts(preds[a], labels) for a in ARMS}
    boot = paired_bootstrap(
        counts["baseline"],
        counts["adapted"],
        lambda c: macro_f1_from_counts(c, len(labels)),
        cfg.bootstrap_resamples,
        cfg.seed,
    )
    tasks[("scicite", "scicite")] = {"metric": "macro_f1", "arms": arms, "bootstrap": boot}
    return {
        "tasks": tasks,
        "pretrain": _read_json(metrics_dir / "pretrain.json"),
        "sample_corpus": _read_json(metrics_dir / "sample_corpus.json"),
        "make_pairs": _read_json(metrics_dir / "make_pairs.json"),
        "embeddings": _read_json(metrics_dir / "finetune_embeddings.json"),
    }


def summary(data: dict) -> dict:
    """Flat, stable keys: ``ner.bc5cdr.adapted.test.f1``, ``scicite.delta.macro_f1``, ..."""
    out = {}
    for (kind, ds), t in data["tasks"].items():
        prefix = f"ner.{ds}" if kind == "ner" else "scicite"
        keys = (
            ("precision", "recall", "f1", "macro_f1", "token_accuracy") if kind == "ner" else ("accuracy", "macro_f1")
        )
        for arm, m in t["arms"].items():
            for k in keys:
                out[f"{prefix}.{arm}.test.{k}"] = m["test"][k]
            out[f"{prefix}.{arm}.dev.{t['metric']}"] = m["dev"][t["metric"]]
            out[f"{prefix}.{arm}.best_epoch"] = m["best_epoch"]
            for k, v in m.get("test_over_seeds", {}).items():
                out[f"{prefix}.{arm}.test.{k}"] = v
        b = t["bootstrap"]
        out[f"{prefix}.delta.{t['metric']}"] = b["difference"]
        out[f"{prefix}.delta.ci_low"] = b["ci_low"]
        out[f"{prefix}.delta.ci_high"] = b["ci_high"]
        out[f"{prefix}.delta.p_value"] = b["p_value"]
    p = data["pretrain"]
    for when in ("before", "after"):
        for k in ("mlm_accuracy", "perplexity", "nsp_accuracy"):
            out[f"pretrain.{when}.{k}"] = p[when][k]
    out["pretrain.tokens_seen"] = p["train"]["tokens_seen"]
    for model in ("baseline", "encoder", "finetuned"):
        for k in ("mrr_at_10", "recall_at_1", "recall_at_10"):
            out[f"embeddings.{model}.{k}"] = data["embeddings"][model][k]
    for name, secs in stage_seconds(data).items():
        out[f"seconds.{name}"] = secs
    return out


def stage_seconds(data: dict) -> dict:
    out = {
        "sample_corpus": data["sample_corpus"].get("wall_seconds"),
        "make_pairs": data["make_pairs"].get("wall_seconds"),
        "pretrain": data["pretrain"].get("wall_seconds"),
        "finetune_embeddings": data["embeddings"].get("wall_seconds"),
    }
    for (kind, ds), t in data["tasks"].items():
        for arm, m in t["arms"].items():
            out[f"finetune_{kind}.{ds}.{arm}" if kind == "ner" else f"finetune_scicite.{arm}"] = m.get("wall_seconds")
    return out


def _pct(x: float) -> str:
    return f"{100 * x:.2f}"


def report(data: dict, cfg: ExportMetricsConfig) -> str:
    lines = [
        "# minisci results",
        "",
        "Test scores of the **baseline** (base model as is) and the **adapted** model (continued MLM+NSP",
        "pretraining), each fine-tuned with the same params; the epoch is chosen on dev, test is scored once.",
        f"Differences: adapted − baseline, with a paired bootstrap over test examples ({cfg.bootstrap_resamples}",
        f"resamples, seed {cfg.seed}): 95% interval and two-sided p-value.",
        "",
    ]
    lines += [
        "| task | metric | baseline | adapted | difference | 95% CI | p | published anchors (not ours) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (kind, ds), t in data["tasks"].items():
        metric = t["metric"]
        b, a, boot = t["arms"]["baseline"]["test"], t["arms"]["adapted"]["test"], t["bootstrap"]
        anchors = ANCHORS.get((kind, ds, metric), {})
        anchor = ", ".join(f"{k} {_pct(v)}" for k, v in anchors.items()) or "–"
        name = f"NER {ds}" if kind == "ner" else "SciCite"
        label = "entity F1 (micro)" if kind == "ner" else "macro-F1"
        lines.append(
            f"| {name} | {label} | {_pct(b[metric])} | {_pct(a[metric])} | {100 * boot['difference']:+.2f} | "
            f"[{100 * boot['ci_low']:+.2f}, {100 * boot['ci_high']:+.2f}] | {boot['p_value']:.3f} | {anchor} |"
        )
    lines += ["", "## Details", ""]
    for (kind, ds), t in data["tasks"].items():
        if kind == "ner":
            lines += [
                f"### NER {ds}",
                "",
                "| arm | P | R | F1 | macro-F1 | token acc. | dev F1 | best epoch | seconds |",
                "|---|---|---|---|---|---|---|---|---|",
            ]
            for arm, m in t["arms"].items():
                s = m["test"]
                lines.append(
                    f"| {arm} | {_pct(s['precision'])} | {_pct(s['recall'])} | {_pct(s['f1'])} | {_pct(s['macro_f1'])} | "
                    f"{_pct(s['token_accuracy'])} | {_pct(m['dev']['f1'])} | {m['best_epoch']} | {m['wall_seconds']:.0f} |"
                )
            types = sorted(t["arms"]["baseline"]["test"]["per_type"])
            lines += ["", "| type | baseline F1 | adapted F1 | support |", "|---|---|---|---|"]
            for ty in types:
                pb, pa = (t["arms"][arm]["test"]["per_type"][ty] for arm in ARMS)
                lines.append(f"| {ty} | {_pct(pb['f1'])} | {_pct(pa['f1'])} | {pb['support']} |")
        else:
            lines += [
                "### SciCite",
                "",
                "| arm | accuracy | macro-F1 | dev macro-F1 | best epoch | seconds |",
                "|---|---|---|---|---|---|",
            ]
            for arm, m in t["arms"].items():
                lines.append(
                    f"| {arm} | {_pct(m['test']['accuracy'])} | {_pct(m['test']['macro_f1'])} | "
                    f"{_pct(m['dev']['macro_f1'])} | {m['best_epoch']} | {m['wall_seconds']:.0f} |"
                )
            labels = t["arms"]["baseline"]["labels"]
            lines += ["", "| class | baseline F1 | adapted F1 | support |", "|---|---|---|---|"]
            for lab in labels:
                pb, pa = (t["arms"][arm]["test"]["per_class"][lab] for arm in ARMS)
                lines.append(f"| {lab} | {_pct(pb['f1'])} | {_pct(pa['f1'])} | {pb['support']} |")
        for arm, m in t["arms"].items():
            if "test_over_seeds" in m:
                lines.append(
                    f"\n{arm} over seeds {m['seeds']}: "
                    + ", ".join(f"{k} {v}" for k, v in m["test_over_seeds"].items())
                )
        lines.append("")
    p = data["pretrain"]
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
    e = data["embeddings"]
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


def charts(data: dict, plots_dir: Path, out_dir: Path) -> list[Path]:
    """PNG charts: baseline vs adapted bars with bootstrap intervals, loss curves, confusion matrices."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    # 1. baseline vs adapted, with the 95% interval of the difference drawn on the adapted bar
    tasks = list(data["tasks"].items())
    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(tasks), 3.6))
    for i, (_key, t) in enumerate(tasks):
        m = t["metric"]
        base, adapt = (100 * t["arms"][a]["test"][m] for a in ARMS)
        b = t["bootstrap"]
        ax.bar(i - 0.2, base, 0.4, color="#9aa5b1", label="baseline" if i == 0 else None)
        ax.bar(
            i + 0.2,
            adapt,
            0.4,
            color="#2f6f9f",
            label="adapted" if i == 0 else None,
            yerr=[[-100 * b["ci_low"] if b["ci_low"] < 0 else 0], [100 * b["ci_high"] if b["ci_high"] > 0 else 0]],
            capsize=4,
        )
        ax.text(i + 0.2, adapt + 0.5, f"{100 * b['difference']:+.2f}\np={b['p_value']:.2f}", ha="center", fontsize=8)
    ax.set_xticks(range(len(tasks)), [f"{ds}\n{t['metric']}" for (_, ds), t in tasks])
    lows = [100 * min(t["arms"][a]["test"][t["metric"]] for a in ARMS) for _, t in tasks]
    ax.set_ylim(max(0, min(lows) - 10), 100)
    ax.set_ylabel("test score (%)")
    ax.set_title("baseline vs adapted (error bar: 95% CI of the difference)", fontsize=9)
    ax.legend(loc="lower right")
    fig.tight_layout()
    written.append(out_dir / "comparison.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)
    # 2. loss curves: pretraining and every fine-tuning run
    curves = sorted(plots_dir.glob("**/plots/metrics/loss.tsv"))
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for path in curves:
        rows = [line.split("\t") for line in path.read_text().splitlines()[1:]]
        steps, values = [int(r[0]) for r in rows], [float(r[-1]) for r in rows]
        run = path.parents[2].relative_to(plots_dir).as_posix()
        ax = axes[0] if run.startswith("pretrain") else axes[1]
        ax.plot(steps, values, label=run)
    for ax, title in zip(axes, ("pretraining loss (MLM + NSP)", "fine-tuning loss")):
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.legend(fontsize=7)
    fig.tight_layout()
    written.append(out_dir / "loss_curves.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)
    # 3. SciCite confusion matrices
    t = data["tasks"][("scicite", "scicite")]
    labels = t["arms"]["baseline"]["labels"]
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.6))
    for ax, arm in zip(axes, ARMS):
        cm = t["arms"][arm]["test"]["confusion_matrix"]
        ax.imshow(cm, cmap="Blues")
        for r in range(len(labels)):
            for c in range(len(labels)):
                ax.text(c, r, cm[r][c], ha="center", va="center", fontsize=9)
        ax.set_xticks(range(len(labels)), labels, fontsize=8)
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        ax.set_xlabel("predicted")
        ax.set_ylabel("actual")
        ax.set_title(f"SciCite {arm}")
    fig.tight_layout()
    written.append(out_dir / "scicite_confusion.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)
    return written


def per_type_rows(data: dict) -> list[dict]:
    """Per-type test F1 for a DVC bar plot."""
    rows = []
    for (kind, ds), t in data["tasks"].items():
        if kind != "ner":
            continue
        for arm, m in t["arms"].items():
            for ty, v in m["test"]["per_type"].items():
                rows.append({"type": f"{ds}/{ty}", "arm": arm, "f1": v["f1"]})
    return rows
