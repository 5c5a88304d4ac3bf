"""End-to-end: the real dvc.yaml and stage scripts on tiny params and the fixture mirror, in a
temporary git repository."""

import json
import re

import pytest
import yaml
from conftest import copy_project, make_project, refused_by_the_first_stage, run


@pytest.mark.slow  # a dozen dvc commands and a pretraining run: ~2 min on a loaded 2-core machine
def test_dvc_repro_make_pairs_then_pretrain(tiny_repro, tmp_path):
    """The data stages, their caching and invalidation, then pretraining on the pairs made anew, in a
    copy of the tiny project the session reproduced from scratch."""
    out = (tiny_repro.parent / "repro.out").read_text()  # the whole pipeline's `dvc repro` from scratch
    proj = copy_project(tiny_repro, tmp_path / "proj")
    for stage in ("fetch_data", "sample_corpus", "make_pairs"):
        assert f"Running stage '{stage}'" in out
    assert (proj / "dvc.lock").is_file()
    m = json.loads((proj / "metrics/sample_corpus.json").read_text())
    assert m["total_docs"] == 30 and m["excluded_own_check_only"] == 1
    pairs = json.loads((proj / "metrics/make_pairs.json").read_text())
    assert pairs["train"]["pairs"] == 60 and pairs["heldout"]["pairs"] == 12
    assert sum(1 for _ in (proj / "data/pairs/train.jsonl").open()) == 60

    # Nothing changed: status clean and a second repro runs nothing.
    assert "up to date" in run(["dvc", "status", "make_pairs"], proj).stdout
    again = run(["dvc", "repro", "make_pairs"], proj).stdout
    assert "Running stage 'make_pairs'" not in again  # only code_fingerprint runs (always)

    # A make_pairs param change reruns only make_pairs.
    params = (proj / "params.yaml").read_text().replace("n_pairs: 60", "n_pairs: 70")
    (proj / "params.yaml").write_text(params)
    rerun = run(["dvc", "repro", "make_pairs"], proj).stdout
    assert "Running stage 'make_pairs'" in rerun and "Running stage 'sample_corpus'" not in rerun

    dag = run(["dvc", "dag", "make_pairs"], proj).stdout
    assert all(s in dag for s in ("fetch_data", "sample_corpus", "make_pairs"))

    # Pretraining the tiny model on those pairs (the heldout pairs are unchanged: 12), tokenised once;
    # the checkpoints of the run on the old pairs are another run's: it trains from step 0.
    out = run(["dvc", "repro", "pretrain"], proj).stdout
    assert "Running stage 'pretrain_data'" in out and "Running stage 'pretrain@13'" in out
    assert "is the run's final step" not in out
    data = json.loads((proj / "metrics/pretrain_data.json").read_text())
    assert (data["layout"], data["train"]["examples"], data["heldout"]["examples"]) == ("pairs", 70, 12)
    assert set(data["corpora"]) == {"biomedical", "general"}
    m = json.loads((proj / "metrics/pretrain/13.json").read_text())
    assert m["seed"] == 13 and m["train"]["steps"] == 12 and m["after"]["pairs"] == 12
    assert m["train"]["resumed_from_step"] == 0
    assert (proj / "models/adapted/13/model.safetensors").is_file()
    assert (proj / "plots/pretrain/13/curves/loss.tsv").is_file()
    assert "up to date" in run(["dvc", "status", "pretrain"], proj).stdout
    # The persist checkpoint directory survives, and a re-run of a finished run does nothing.
    assert any((proj / "models/pretrain_checkpoints/13").glob("checkpoint-*"))
    assert "Running stage 'pretrain@13'" not in run(["dvc", "repro", "pretrain"], proj).stdout
    # A training knob reruns pretraining on the same tokenised examples.
    p = yaml.safe_load((proj / "params.yaml").read_text())
    p["pretrain"]["learning_rate"] *= 2
    (proj / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    status = run(["dvc", "status", "--with-deps", "pretrain@13"], proj).stdout
    assert "pretrain@13" in status and "pretrain_data" not in status
    shown = run(["dvc", "plots", "show", "--json"], proj).stdout
    assert "loss.tsv" in shown


@pytest.mark.slow
def test_pretraining_seeds_one_stage_each_and_the_adapted_arm_paired(tiny_repro, tmp_path):
    """pretrain.seeds [13, 14] after a run with [13]: stage pretrain@14 runs and pretrain@13 stays
    cached, one encoder each in models/adapted/<seed>; the adapted arm runs fine-tuning seed i on
    pretraining seed i and records it. A third seed with two fine-tuning seeds does not fit the paired
    design: a one-line refusal naming the option, from the first stage, before any pretraining runs."""
    proj = copy_project(tiny_repro, tmp_path / "proj")
    params = proj / "params.yaml"
    p = yaml.safe_load(params.read_text())
    assert p["pretrain"]["seeds"] == [13]
    p["pretrain"]["seeds"] = [13, 14]
    p["finetune_classification"]["seeds"] = p["finetune_ner"]["seeds"] = [13, 14]
    params.write_text(yaml.safe_dump(p, sort_keys=False))
    out = run(["dvc", "repro", "finetune_classification@scicite-adapted"], proj).stdout
    ran = [line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage")]
    assert ran == ["code_fingerprint", "pretrain@14", "finetune_classification@scicite-adapted"]
    encoders = {s: (proj / f"models/adapted/{s}/model.safetensors").read_bytes() for s in (13, 14)}
    assert encoders[13] != encoders[14]  # each seed its own masking, head initialisation and order
    m = json.loads((proj / "metrics/finetune_classification/scicite/adapted.json").read_text())
    assert {s: r["pretrain_seed"] for s, r in m["per_seed"].items()} == {"13": 13, "14": 14}
    card = (proj / "models/finetune_classification/scicite/adapted/README.md").read_text()
    assert "models/adapted/13" in card  # the saved model is the first seed's, from the first encoder

    p["pretrain"]["seeds"] = [13, 14, 15]
    params.write_text(yaml.safe_dump(p, sort_keys=False))
    assert refused_by_the_first_stage(proj, "pretrain") == [
        "error: params.yaml: finetune_ner.seeds: params section 'pretrain': seed_design paired needs a multiple "
        "of 3 fine-tuning seeds (one run or more on each of the 3 pretraining seeds), got 2"
    ]
    assert not (proj / "models/adapted/15").exists()


def test_failing_stage_exits_nonzero_without_outputs(tmp_path):
    proj = make_project(tmp_path / "proj")
    (proj / "data/manifest.tsv").write_text((proj / "data/manifest.tsv").read_text().replace("\t", "\tX", 1))
    res = run(["dvc", "repro", "fetch_data"], proj, check=False)
    assert res.returncode != 0 and "error:" in res.stderr + res.stdout
    assert not (proj / "data/raw").exists()


def stale_stages(proj):
    """Stale stages, but code_fingerprint: it always runs (a few seconds), see dvc.yaml."""
    status = json.loads(run(["dvc", "status", "--json"], proj).stdout or "{}")
    return sorted(set(status) - {"code_fingerprint"})


@pytest.mark.slow
def test_dvc_repro_whole_pipeline_both_arms_and_invalidation(tiny_repro, tmp_path):
    out = (tiny_repro.parent / "repro.out").read_text()  # the whole pipeline's `dvc repro` from scratch
    proj = copy_project(tiny_repro, tmp_path / "proj")
    for stage in (
        "finetune_ner@bc5cdr-baseline",
        "finetune_ner@bc5cdr-adapted",
        "finetune_classification@scicite-baseline",
        "finetune_classification@scicite-adapted",
    ):
        assert f"Running stage '{stage}'" in out
    for arm in ("baseline", "adapted"):
        ner = json.loads((proj / f"metrics/finetune_ner/bc5cdr/{arm}.json").read_text())
        assert ner["test"]["entities_gold"] == ner["test_entities_reader"] > 0
        assert (proj / f"models/finetune_ner/bc5cdr/{arm}/test_predictions.jsonl").is_file()
        cite = json.loads((proj / f"metrics/finetune_classification/scicite/{arm}.json").read_text())
        assert sum(map(sum, cite["test"]["confusion_matrix"])) == 20
        assert (proj / f"plots/finetune_classification/scicite/{arm}/confusion.json").is_file()
    assert stale_stages(proj) == []
    # the log is minisci's own lines: no library's progress bar (tqdm's "42%|", "examples/s]", "it/s]")
    log = out + (tiny_repro.parent / "repro.err").read_text()
    bars = [line for line in log.splitlines() if re.search(r"\d%\||[0-9.]+ ?(it|examples|ba)/s\]", line)]
    assert not bars, bars[:3]

    # A classification-only change leaves every NER and pretraining stage up to date.
    params = proj / "params.yaml"
    original = params.read_text()
    changed = yaml.safe_load(original)
    changed["finetune_classification"]["epochs"] = 2.0
    params.write_text(yaml.safe_dump(changed, sort_keys=False))
    assert stale_stages(proj) == ["finetune_classification@scicite-adapted", "finetune_classification@scicite-baseline"]
    # A pretraining change reruns only pretraining and what uses the adapted model, never a baseline.
    params.write_text(original.replace("head_warmup_steps: 2", "head_warmup_steps: 3"))
    assert stale_stages(proj) == ["pretrain@13"]
    rerun = run(["dvc", "repro"], proj).stdout
    ran = sorted(line.split("'")[1] for line in rerun.splitlines() if line.startswith("Running stage"))
    assert ran == [
        "code_fingerprint",
        "export_metrics",
        "finetune_classification@scicite-adapted",
        "finetune_embeddings",
        "finetune_ner@bc5cdr-adapted",
        "pretrain@13",
    ]
    again = run(["dvc", "repro"], proj).stdout  # nothing changed: nothing runs but the code fingerprints
    assert [line for line in again.splitlines() if line.startswith("Running")] == ["Running stage 'code_fingerprint':"]
