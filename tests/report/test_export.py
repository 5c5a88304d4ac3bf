"""export_metrics on a synthetic run (no training): the headline is one statistic everywhere (summary,
report rows, chart bars), the report has verdicts, power, dataset health and an errors section, the
top-level plots follow the datasets that ran, the NER predictions come out as CoNLL files that give
the stage's F1, and the base model is named from the config."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml
from conftest import REPO, synthetic_embeddings_metrics

from minisci.config import ExportMetricsConfig
from minisci.metrics.classification_f1 import classification_scores
from minisci.metrics.ner_f1 import ner_scores
from minisci.report import export
from minisci.report.error_analysis import read_conll_predictions
from minisci.tasks import registry

CFG = ExportMetricsConfig(
    bootstrap_resamples=300,
    seed=13,
    equivalence_margin_ner=0.5,
    equivalence_margin_classification=1.0,
    error_examples=5,
)
SEEDS = [13, 14, 15]
LABELS = ["background", "method", "result"]
WORDS = ["aspirin", "causes", "mild", "liver", "damage", "in", "rats", "and", "heart", "failure"]


def _noisy_tags(gold: list[str], rng: random.Random, p: float) -> list[str]:
    """Gold tags with a fraction ``p`` of the entities dropped, shortened or invented."""
    tags = list(gold)
    for i, t in enumerate(tags):
        if rng.random() < p:
            tags[i] = "O" if t != "O" else ("B-Chemical" if i == 0 or tags[i - 1] == "O" else "O")
    return tags


def _ner_rows(n: int, rng: random.Random) -> list[dict]:
    rows = []
    for i in range(n):
        tokens = rng.choices(WORDS, k=8)
        gold = []
        for k, w in enumerate(tokens):
            if w == "aspirin":
                gold.append("B-Chemical")
            elif w == "liver":
                gold.append("B-Disease")
            elif w == "damage" and k and tokens[k - 1] == "liver":
                gold.append("I-Disease")
            else:
                gold.append("O")
        rows.append({"sentence": i, "tokens": tokens, "gold": gold})
    return rows


def _metrics_file(task: str, scores: dict, seed_scores: dict, labels: list[str]) -> dict:
    key = "f1" if task == "ner" else "macro_f1"
    values = [s[key] for s in seed_scores.values()]
    mean = sum(values) / len(values)
    sd = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
    return {
        "labels": labels,
        "seeds": SEEDS,
        "test": scores,
        "dev": scores,
        "best_epoch": 1,
        "wall_seconds": 1.0,
        "test_over_seeds": {f"{key}_mean": round(mean, 4), f"{key}_sd": round(sd, 4)},
    }


def synthetic_run(root: Path, ner_name: str = "toyner", cls_name: str = "toycls", n: int = 300) -> dict:
    """metrics/, models/, plots/ and data/prepared/ as the fine-tuning and prepare stages write them."""
    rng = random.Random(0)
    metrics, models, plots, prepared = (root / d for d in ("metrics", "models", "plots", "data/prepared"))
    # 1. NER: both arms, three seeds, predictions with planted noise (the adapted arm a little less)
    base_rows = _ner_rows(n, rng)
    for arm, noise in (("baseline", 0.15), ("adapted", 0.10)):
        preds = {str(s): [_noisy_tags(r["gold"], rng, noise) for r in base_rows] for s in SEEDS}
        rows = [
            {**r, "pred": preds["13"][i], "preds": {s: p[i] for s, p in preds.items()}} for i, r in enumerate(base_rows)
        ]
        seed_scores = {s: ner_scores([r["gold"] for r in base_rows], p) for s, p in preds.items()}
        m = _metrics_file(
            "ner", seed_scores["13"], seed_scores, ["O", "B-Chemical", "I-Chemical", "B-Disease", "I-Disease"]
        )
        _write(metrics / "finetune_ner" / ner_name / f"{arm}.json", json.dumps(m))
        _write(models / "finetune_ner" / ner_name / arm / "test_predictions.jsonl", _jsonl(rows))
        for curve, field in (("dev_f1", "dev_f1"), ("loss", "loss")):
            _write(
                plots / "finetune_ner" / ner_name / arm / "curves" / f"{curve}.tsv",
                f"step\t{field}\n10\t{0.5 if arm == 'baseline' else 0.6}\n20\t0.7\n",
            )
    # 2. classification: texts in data/prepared, probabilities for the first seed
    gold = [rng.choice(LABELS) for _ in range(n)]
    texts = [f"citation text number {i} about {g}" for i, g in enumerate(gold)]
    for arm, acc in (("baseline", 0.80), ("adapted", 0.82)):
        preds = {str(s): [g if rng.random() < acc else rng.choice(LABELS) for g in gold] for s in SEEDS}
        rows = []
        for i, g in enumerate(gold):
            p = preds["13"][i]
            conf = round(rng.uniform(0.4, 0.99), 5)
            probs = [conf if lab == p else round((1 - conf) / 2, 5) for lab in LABELS]
            rows.append({"i": i, "gold": g, "pred": p, "probs": probs, "preds": {s: q[i] for s, q in preds.items()}})
        seed_scores = {s: classification_scores(gold, q, LABELS) for s, q in preds.items()}
        m = _metrics_file("classification", seed_scores["13"], seed_scores, LABELS)
        _write(metrics / "finetune_classification" / cls_name / f"{arm}.json", json.dumps(m))
        _write(models / "finetune_classification" / cls_name / arm / "test_predictions.jsonl", _jsonl(rows))
    meta = {
        "name": cls_name,
        "task": "classification",
        "labels": LABELS,
        "splits": ["train", "dev", "test"],
        "counts": {
            "train": {"examples": 500, "per_label": {"background": 300, "method": 150, "result": 50}},
            "dev": {"examples": 50, "per_label": {"background": 30, "method": 20}},
            "test": {"examples": n, "per_label": {lab: gold.count(lab) for lab in LABELS}},
        },
        "train_quality": {
            "train_duplicate_rows": 7,
            "train_conflicting_texts": 2,
            "dev_texts_in_train": 3,
            "test_texts_in_train": 11,
        },
    }
    _write(prepared / cls_name / "dataset.json", json.dumps(meta))
    _write(
        prepared / cls_name / "test.jsonl",
        _jsonl([{"text": t, "label": g, "line": i + 1} for i, (t, g) in enumerate(zip(texts, gold))]),
    )
    # 3. the other stages' metrics the report shows
    _write(
        metrics / "pretrain.json",
        json.dumps(
            {
                "before": {"mlm_accuracy": 0.1, "perplexity": 100.0, "nsp_accuracy": 0.5},
                "after": {"mlm_accuracy": 0.2, "perplexity": 50.0, "nsp_accuracy": 0.6},
                "train": {"steps": 10, "tokens_seen": 1000, "tokens_per_second": 100.0},
                "wall_seconds": 1.0,
            }
        ),
    )
    for name in ("sample_corpus", "make_pairs"):
        _write(metrics / f"{name}.json", json.dumps({"wall_seconds": 1.0}))
    _write(metrics / "finetune_embeddings.json", json.dumps(synthetic_embeddings_metrics()))
    _write(plots / "pretrain/curves/loss.tsv", "step\tloss\n1\t9.0\n2\t8.0\n")
    runs = {"ner": [ner_name], "classification": [cls_name]}
    return export.collect(metrics, models, CFG, runs, {}, prepared, "my-org/my-encoder")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


@pytest.fixture(scope="module")
def run_data(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("run")
    return root, synthetic_run(root)


def test_chart_bars_and_label_come_from_one_summary_row(run_data):
    _, data = run_data
    summary = export.summary(data)
    for bar in export.comparison_bars(data):
        task, ds, metric = bar["task"], bar["dataset"], registry.get(bar["task"]).metric
        for arm in export.ARMS:
            assert bar[arm] == pytest.approx(100 * summary[f"{task}.{ds}.{arm}.test.{metric}"])
        assert bar["label"].startswith(
            f"{100 * summary[f'{task}.{ds}.delta.{metric}']:+.2f}, p={summary[f'{task}.{ds}.delta.p_value']:.3f}"
        )
        assert "mean of 3 seeds" in bar["tick"]
        # the arm score is the mean over seeds that the difference compares, not seed 13's score
        t = data["tasks"][(task, ds)]
        assert summary[f"{task}.{ds}.delta.{metric}"] == pytest.approx(
            summary[f"{task}.{ds}.adapted.test.{metric}"] - summary[f"{task}.{ds}.baseline.test.{metric}"], abs=2e-4
        )
        assert summary[f"{task}.{ds}.adapted.test.{metric}"] == t["bootstrap"]["mean_b"]


def test_chart_keeps_the_values_it_draws(run_data, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image

    _, data = run_data
    export._comparison_chart(plt, data, tmp_path / "c.png")
    kept = json.loads(Image.open(tmp_path / "c.png").text["Description"])["bars"]
    assert kept == json.loads(json.dumps(export.comparison_bars(data)))


def test_committed_report_chart_and_summary_agree():
    """The committed run: each dataset's row of metrics/report.md, its bars and label in
    plots/charts/comparison.png (the values drawn, kept in the PNG's Description chunk) and
    metrics/summary.json give one and the same headline."""
    from PIL import Image

    summary = json.loads((REPO / "metrics" / "summary.json").read_text())
    bars = json.loads(Image.open(REPO / "plots" / "charts" / "comparison.png").text["Description"])["bars"]
    lines = (REPO / "metrics" / "report.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = lines[start : next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    rows = {}
    for line in table[2:]:
        if not line.startswith("|"):
            break
        cells = dict(zip(header, (c.strip() for c in line.strip("|").split("|"))))
        rows[cells["dataset"]] = cells
    datasets = {k.split(".")[1] for k in summary if k.split(".")[0] in registry.KINDS and ".delta." in k}
    assert datasets and {bar["dataset"] for bar in bars} == set(rows) == datasets
    for bar in bars:
        task, ds = bar["task"], bar["dataset"]
        metric, row = registry.get(task).metric, rows[ds]
        delta = summary[f"{task}.{ds}.delta.{metric}"]
        for arm in export.ARMS:
            mean = summary[f"{task}.{ds}.{arm}.test.{metric}"]
            assert bar[arm] == pytest.approx(100 * mean, abs=1e-9)
            shown = row[arm].split(" ± ")
            assert shown[0] == f"{100 * mean:.2f}"
            if f"{task}.{ds}.{arm}.test.{metric}_sd" in summary:
                assert shown[1] == f"{100 * summary[f'{task}.{ds}.{arm}.test.{metric}_sd']:.2f}"
        assert row["difference"] == f"{100 * delta:+.2f}"
        assert row["p"] == f"{summary[f'{task}.{ds}.delta.p_value']:.3f}"
        assert bar["label"].startswith(f"{row['difference']}, p={row['p']}")
        assert row["verdict"].startswith(bar["label"].split("\n")[1])
        assert bar["ci"] == pytest.approx([100 * summary[f"{task}.{ds}.delta.ci_{k}"] for k in ("low", "high")])


def test_single_seed_bar_is_labelled_with_its_seed(run_data):
    _, data = run_data
    one = {**data, "tasks": {}}
    for key, t in data["tasks"].items():
        arms = {a: {**m, "seeds": [13]} for a, m in t["arms"].items()}
        one["tasks"][key] = {**t, "arms": arms, "bootstrap": {**t["bootstrap"], "seeds": 1}}
    assert all("(seed 13)" in bar["tick"] for bar in export.comparison_bars(one))
    assert not any(k.endswith("_sd") for k in export.summary(one))


def test_summary_keys_are_numbers_and_include_verdict_inputs(run_data):
    _, data = run_data
    s = export.summary(data)
    assert all(isinstance(v, (int, float)) for v in s.values())
    for key in (
        "ner.toyner.delta.p_holm",
        "ner.toyner.delta.p_equivalence",
        "ner.toyner.delta.mde",
        "classification.toycls.baseline.test.macro_f1_sd",
        "classification.toycls.delta.p_holm",
    ):
        assert key in s, key
    assert "ner.toyner.adapted.test.precision" not in s  # headline only


def test_report_has_verdicts_power_health_errors_and_the_base_model(run_data):
    _, data = run_data
    text = export.report(data, CFG)
    head = next(line for line in text.splitlines() if line.startswith("| NER | toyner"))
    assert any(v in head for v in ("| better |", "| worse |", "| equivalent within ±0.5 |", "| inconclusive |"))
    assert "| p (Holm) | verdict |" in text
    assert "## Power of the design" in text and "seeds to detect ±margin" in text
    assert "## Dataset health" in text
    health = next(line for line in text.splitlines() if line.startswith("| toycls | classification |"))
    assert "500 / 50 / 300 examples" in health and "| 7 / 2 |" in health and "| 3 / 11 |" in health
    assert "dev: result" in health  # a class missing from dev
    assert "## Errors" in text and "only adapted right" in text and "Most confident errors" in text
    assert "my-org/my-encoder" in text and "all-MiniLM" not in text
    assert "one fixed class set" in text


def test_report_says_when_the_seeds_cannot_reach_the_margin(run_data):
    _, data = run_data
    text = export.report(data, CFG)  # 300 test examples: far too few for ±0.5 F1
    assert "3 seeds cannot reach the declared margin ±0.5" in text
    assert "The seeds were not changed." in text


def test_conll_predictions_give_the_stage_f1_exactly(run_data, tmp_path):
    root, data = run_data
    written = export.write_predictions(data, tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in written] == ["toyner/baseline.conll", "toyner/adapted.conll"]
    rows = [json.loads(line) for line in (root / "models/finetune_ner/toyner/adapted/test_predictions.jsonl").open()]
    stage_f1 = data["tasks"][("ner", "toyner")]["arms"]["adapted"]["test"]["f1"]
    text = (tmp_path / "toyner/adapted.conll").read_text()
    # read as any CoNLL tool would: whitespace columns, blank line between sentences
    sentences, current = [], []
    for line in text.splitlines():
        if line.strip():
            current.append(line.split())
        else:
            sentences.append(current)
            current = []
    assert len(sentences) == len(rows) and [w for w, _, _ in sentences[0]] == rows[0]["tokens"]
    from seqeval.metrics import f1_score
    from seqeval.scheme import IOB2

    gold = [[g for _, g, _ in s] for s in sentences]
    pred = [[p for _, _, p in s] for s in sentences]
    assert round(f1_score(gold, pred, mode="strict", scheme=IOB2), 4) == stage_f1
    assert read_conll_predictions(text) == (gold, pred)


def test_top_level_plots_follow_the_datasets_that_ran(run_data, tmp_path):
    root, data = run_data
    export.write_compare_plots(data, root / "plots", tmp_path)
    # the dataset is not called bc5cdr: the fixed paths hold its curves all the same
    assert (tmp_path / "ner/adapted/dev_f1.tsv").read_text() == (
        root / "plots/finetune_ner/toyner/adapted/curves/dev_f1.tsv"
    ).read_text()
    assert (tmp_path / "classification/baseline/loss.tsv").read_text() == "step\tloss\n"  # not written: header only
    kinds = json.loads((tmp_path / "error_kinds/baseline.json").read_text())
    assert {r["item"] for r in kinds} == {
        "toyner/false positive",
        "toyner/false negative",
        "toyner/wrong type",
        "toyner/wrong boundary",
    }
    assert json.loads((tmp_path / "per_type/adapted.json").read_text())[0]["item"].startswith("toyner/")
    plots = yaml.safe_load((REPO / "dvc.yaml").read_text())["plots"]
    files = [f for p in plots if isinstance(p, dict) for spec in p.values() for f in (spec.get("y") or {})]
    assert files and all(f.startswith(("plots/compare/", "plots/pretrain/")) for f in files)
    assert not [f for f in files if "bc5cdr" in f or "scicite" in f]


def test_loss_chart_has_one_axis_per_task(run_data, tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    root, _ = run_data
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    export._loss_chart(plt, root / "plots", tmp_path / "loss.png")
    titles = [ax.get_title() for ax in figures[0].axes]
    assert titles == ["pretraining (MLM + NSP)", "NER fine-tuning"]
    assert all(ax.get_ylabel() == "training loss" for ax in figures[0].axes)


@pytest.mark.slow
def test_tiny_pipeline_conll_gives_the_stage_f1_and_plots_overlay_the_arms(tiny_repro):
    """The real stages: export_metrics' CoNLL file of each NER arm, read back, scores the F1 that the
    fine-tuning stage wrote, and `dvc plots show` draws the top-level overlays."""
    import subprocess

    from seqeval.metrics import f1_score
    from seqeval.scheme import IOB2

    for arm in ("baseline", "adapted"):
        stage = json.loads((tiny_repro / f"metrics/finetune_ner/bc5cdr/{arm}.json").read_text())
        gold, pred = read_conll_predictions((tiny_repro / f"data/predictions/bc5cdr/{arm}.conll").read_text())
        assert round(f1_score(gold, pred, mode="strict", scheme=IOB2), 4) == stage["test"]["f1"]
    text = (tiny_repro / "metrics/report.md").read_text()
    assert "| verdict |" in text and "## Errors" in text and "## Dataset health" in text
    shown = json.loads(
        subprocess.run(
            ["dvc", "plots", "show", "--json"], cwd=tiny_repro, capture_output=True, text=True, check=True
        ).stdout
    )["data"]
    for title in ("NER dev F1, first dataset (baseline vs adapted)", "NER error kinds (baseline vs adapted)"):
        names = {v["filename"] for v in shown[title][0]["content"]["data"]["values"]}
        assert len(names) == 2 and {"baseline", "adapted"} == {
            a for a in ("baseline", "adapted") for n in names if a in n
        }
