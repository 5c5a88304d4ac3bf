"""export_metrics on a synthetic run (no training): the headline is one statistic everywhere (summary,
report rows, chart bars), the report has verdicts, power, dataset health and an errors section, the
top-level plots follow the datasets that ran, the NER predictions come out as CoNLL files that give
the stage's F1, and the base model is named from the config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import REPO, copy_project
from helpers import CFG, synthetic_run

from minisci.report import export
from minisci.report.error_analysis import read_conll_predictions
from minisci.tasks import registry


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
    # the dataset is not called bc5cdr: the fixed paths hold its curves all the same, each row naming
    # the dataset, which the series template puts in the legend of `dvc plots diff`
    src = (root / "plots/finetune_ner/toyner/adapted/curves/dev_f1.tsv").read_text().splitlines()
    rows = (tmp_path / "ner/adapted/dev_f1.tsv").read_text().splitlines()
    assert rows == [f"{src[0]}\tdataset"] + [f"{line}\ttoyner" for line in src[1:]] and len(rows) > 1
    template = (REPO / ".dvc/plots/series.json").read_text()
    assert "datum.dataset" in template
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
def test_tiny_pipeline_conll_gives_the_stage_f1_and_plots_overlay_the_arms(tiny_repro, tmp_path):
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
    proj = copy_project(tiny_repro, tmp_path / "proj")  # dvc writes its temporaries; the original stays read-only
    shown = json.loads(
        subprocess.run(["dvc", "plots", "show", "--json"], cwd=proj, capture_output=True, text=True, check=True).stdout
    )["data"]
    for title in ("NER dev F1, first dataset (baseline vs adapted)", "NER error kinds (baseline vs adapted)"):
        names = {v["filename"] for v in shown[title][0]["content"]["data"]["values"]}
        assert len(names) == 2 and {"baseline", "adapted"} == {
            a for a in ("baseline", "adapted") for n in names if a in n
        }


def test_the_corpus_table_gives_each_corpus_its_sample_guard_and_word_pieces():
    sample = {
        "corpora": {
            "bio": {"sampled_docs": 3, "sampled_sentences": 9, "sampled_words": 90, "excluded_total": 2}
            | {"excluded_own_check_per_dataset": {"ner1": 2, "cls": 0}},
            "law": {"sampled_docs": 1, "sampled_sentences": 2, "sampled_words": 20, "excluded_total": 0},
        }
    }
    examples = {
        "layout": "pairs",
        "train": {"examples": 60, "tokens": 1234},
        "heldout": {"examples": 12, "tokens": 200},
        "corpora": {"bio": {"train_tokens": 100, "heldout_tokens": 20}},
    }
    rows = export.corpus_rows(sample, examples)
    assert "| bio | 3 | 9 | 90 | 120 | 2 (ner1 2) |" in rows
    assert "| law | 1 | 2 | 20 | – | 0 |" in rows  # no count for a corpus the tokenised data lack
    assert any("60 for training (1,234 word pieces), 12 held out" in r for r in rows)
    assert export.corpus_rows({}, examples) == []


def test_report_of_a_run_without_nsp_shows_a_dash_for_its_nsp_accuracy(tmp_path):
    # pretrain.nsp: false (every non-BERT encoder, the nsp study) scores no NSP: the report says so
    data = synthetic_run(tmp_path)
    for run in data["pretrain"].values():
        for when in ("before", "after"):
            run[when]["nsp_accuracy"] = None
    text = export.report(data, CFG)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "| before |" in line]
    assert rows and all(line.split(" | ")[4] == "–" for line in rows)
    assert export.summary(data)["pretrain.after.nsp_accuracy"] is None
