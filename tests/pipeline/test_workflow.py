"""The experiment workflow from the README on the tiny pipeline in a temporary git repository:
repro, exp run -S, exp show, metrics diff, a queued grid, exp apply / branch, and a local remote.

Every test but the last needs the whole tiny pipeline reproduced (~2 min on 2 cores, shared with
the other slow tests through ``tiny_repro``), so they are ``slow``: CI runs them; the default suite
covers ``dvc exp run`` / ``exp show`` on smaller pipelines (report/test_experiments.py, report/test_studies.py)."""

import json
import shutil

import pytest
import yaml
from conftest import REPO, copy_project, finish_queue, run
from huggingface_hub import ModelCard


@pytest.fixture(scope="module")
def project(tiny_repro, tmp_path_factory):
    """The reproduced tiny pipeline, moved to another directory: DVC must still find it up to date."""
    return copy_project(tiny_repro, tmp_path_factory.mktemp("wf") / "proj")


@pytest.mark.slow
def test_full_tiny_pipeline_outputs(project, tiny_repro):
    summary = json.loads((project / "metrics/summary.json").read_text())
    for key in (
        "ner.bc5cdr.adapted.test.f1",
        "ner.bc5cdr.baseline.test.f1",
        "ner.bc5cdr.delta.p_value",
        "classification.scicite.adapted.test.macro_f1",
        "classification.scicite.delta.ci_low",
        "pretrain.after.mlm_accuracy",
    ):
        assert key in summary, key
    report = (project / "metrics/report.md").read_text()
    assert "| NER | bc5cdr | entity F1 (micro) |" in report and "BERT-base 86.70, SciBERT 90.00" in report
    for png in ("comparison.png", "loss_curves.png", "confusion_scicite.png"):
        assert (project / "plots/charts" / png).stat().st_size > 1000
    for model in ("baseline", "adapted/13", "finetune_ner/bc5cdr/adapted", "finetune_classification/scicite/baseline"):
        card = (project / "models" / model / "README.md").read_text()
        assert "## Metrics of this run" in card and "## Parameters of this run" in card
    for model in (
        "adapted/13",
        "embeddings",
        "finetune_ner/bc5cdr/adapted",
        "finetune_classification/scicite/baseline",
    ):
        meta = ModelCard.load(project / "models" / model / "README.md").data.to_dict()
        assert meta["model-index"][0]["results"], model
        card = (project / "models" / model / "README.md").read_text()
        assert str(tiny_repro) not in card and str(project) not in card  # written in tiny_repro, read here
    again = run(["dvc", "repro"], project).stdout  # nothing changed: nothing runs but the code fingerprints
    assert [line for line in again.splitlines() if line.startswith("Running")] == ["Running stage 'code_fingerprint':"]
    shown = json.loads(run(["dvc", "plots", "show", "--json"], project).stdout)["data"]
    assert "pretraining loss" in shown
    assert any("confusion.json" in k for k in shown) and any("per_type_f1.json" in k for k in shown)


@pytest.mark.slow
def test_exp_run_show_and_metrics_diff(project):
    out = run(["dvc", "exp", "run", "-n", "welt", "-S", "finetune_ner.loss=welt"], project).stdout
    assert "Running stage 'finetune_ner@bc5cdr-adapted'" in out and "Running stage 'finetune_classification" not in out
    table = json.loads(run(["dvc", "exp", "show", "--json"], project).stdout)
    assert "welt" in json.dumps(table)
    params = json.loads(run(["dvc", "params", "diff", "--json"], project).stdout)
    assert params["params.yaml"]["finetune_ner.loss"] == {"old": "ce", "new": "welt"}
    # (--all: the tiny model may score the same with either loss; the diff must still report it)
    diff = json.loads(run(["dvc", "metrics", "diff", "--all", "--json"], project).stdout)
    assert "ner.bc5cdr.adapted.test.f1" in diff["metrics/summary.json"]
    run(["git", "checkout", "--", "."], project)
    run(["dvc", "checkout"], project)


@pytest.mark.slow
def test_run_cache_restores_a_training_stage_that_ran_before(project):
    """A training stage run before with the same code, data and params (here an experiment run twice)
    is checked out from DVC's run-cache, not trained again: its metrics file is a metric, not a plain
    uncached output, which would keep DVC from saving the run."""
    args = ["dvc", "exp", "run", "-S", "finetune_classification.weight_decay=0.02"]
    first = run(args, project).stdout
    assert "Running stage 'finetune_classification@scicite-adapted'" in first
    trained = (project / "metrics/finetune_classification/scicite/adapted.json").read_bytes()
    run(["git", "checkout", "--", "."], project)
    run(["dvc", "checkout", "--force"], project)
    again = run(args, project).stdout
    assert "Stage 'finetune_classification@scicite-adapted' is cached - skipping run" in again
    assert [line for line in again.splitlines() if line.startswith("Running stage 'finetune")] == []
    assert (project / "metrics/finetune_classification/scicite/adapted.json").read_bytes() == trained
    run(["git", "checkout", "--", "."], project)
    run(["dvc", "checkout", "--force"], project)


@pytest.mark.slow
def test_run_cache_restores_in_a_clone_without_the_committed_outputs(tiny_repro, tmp_path):
    """In a fresh clone, whose cache lacks every output dvc.lock records, `dvc exp run` of a variant
    that ran before restores its stages from the run-cache. It failed while make_pairs listed
    data/corpus/documents.jsonl, a file inside sample_corpus's output: after a restore DVC looked the
    file up in the folder's committed version, which this cache never held."""
    proj = tmp_path / "clone"
    run(["git", "clone", "-q", str(tiny_repro), str(proj)], tmp_path)
    args = ["dvc", "exp", "run", "-S", "sample_corpus.seed=14", "make_pairs"]
    assert "Running stage 'make_pairs'" in run(args, proj).stdout
    run(["git", "checkout", "--", "."], proj)  # the variant's results discarded: the committed lock again
    again = run(args, proj).stdout
    assert "Stage 'sample_corpus' is cached - skipping run" in again
    assert "Stage 'make_pairs' is cached - skipping run" in again


@pytest.mark.slow
def test_queued_grid_apply_and_branch(project):
    # a grid over a report param: each queued run checks the pipeline out of the cache in its own
    # workspace and reruns export_metrics alone (a fine-tuning rerun is test_exp_run_show_and_metrics_diff's)
    key = "export_metrics.equivalence_margin_classification"
    for margin in ("2.0", "4.0"):
        run(["dvc", "exp", "run", "--queue", "-n", f"margin{margin[0]}", "-S", f"{key}={margin}"], project)
    status = finish_queue(project)
    assert "Success" in status and "Failed" not in status, status
    names = json.dumps(json.loads(run(["dvc", "exp", "show", "--json"], project).stdout))
    assert "margin2" in names and "margin4" in names
    run(["dvc", "exp", "apply", "margin4"], project)
    assert (
        yaml.safe_load((project / "params.yaml").read_text())["export_metrics"]["equivalence_margin_classification"]
        == 4.0
    )
    assert "±4.0" in (project / "metrics/report.md").read_text()  # the experiment's report, applied
    run(["dvc", "exp", "branch", "margin4", "try-margin4"], project)
    assert "try-margin4" in run(["git", "branch"], project).stdout
    run(["git", "checkout", "--", "."], project)
    run(["dvc", "checkout", "--force"], project)


@pytest.mark.slow
def test_push_and_pull_through_a_local_remote(project, tmp_path):
    run(["dvc", "remote", "add", "-d", "local", str(tmp_path / "remote")], project)
    run(["dvc", "push"], project)
    shutil.rmtree(project / "models" / "adapted")
    shutil.rmtree(project / ".dvc" / "cache")
    run(["dvc", "pull"], project)
    assert (project / "models/adapted/13/model.safetensors").is_file()
    assert json.loads(run(["dvc", "status", "--json"], project).stdout) == {"code_fingerprint": ["always changed"]}


def test_pull_request_workflow_is_valid():
    wf = yaml.safe_load((REPO / ".github/workflows/pr-report.yml").read_text())
    steps = wf["jobs"]["report"]["steps"]
    script = "\n".join(s.get("run", "") for s in steps)
    assert wf[True]["pull_request"]["branches"] == ["main"]  # YAML 1.1 reads the key `on` as True
    assert "dvc metrics diff main --md" in script and "cml comment create" in script
    assert "pip install -r requirements.txt" in script and "dvc repro" in script
    assert all(shutil.which(cmd) for cmd in ("dvc", "git"))  # the commands it runs exist here
    assert "for png in plots/charts/*.png" in script  # every chart the run wrote, whichever datasets ran
