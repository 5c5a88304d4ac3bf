"""A rerun is the same run: a training stage that finds a complete checkpoint at its final step
(a forced `dvc repro -f`, or a crash after the last checkpoint and before the model was written)
writes the model from it without training further."""

import hashlib
import json
import shutil

import pytest
import torch
import yaml
from conftest import copy_project, learnable_ner_files, prepare, run
from helpers import ner_cfg, run_ok, stage_cmd, write_pairs, write_params

from minisci.finetune.ner import run_finetune_ner


def file_hashes(model_dir, skip=("README.md",)):
    """Every file of a model directory by its hash (the card quotes this run's timings: skipped)."""
    return {
        p.relative_to(model_dir).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(model_dir.rglob("*"))
        if p.is_file() and p.name not in skip
    }


@pytest.mark.slow  # three pretraining runs of the tiny model: ~50 s on a loaded 2-core machine
def test_pretrain_rerun_of_a_finished_run_and_after_a_crash_before_the_save(tmp_path):
    write_pairs(tmp_path / "pairs")
    params = write_params(tmp_path, max_steps=10, save_steps=5)  # checkpoints at 5 and at the final step, 10
    run_ok(stage_cmd(tmp_path, params))
    first_bytes = (tmp_path / "adapted.json").read_bytes()
    first = json.loads(first_bytes)
    weights = file_hashes(tmp_path / "adapted")
    # 1. rerun the finished stage: the final checkpoint is the model
    again = run_ok(stage_cmd(tmp_path, params))
    assert "checkpoint-10 is the run's final step: the model is taken from it, not trained further" in again.stdout
    # the metrics of the run that trained it, timings included (not 0 s and 0 tokens/s of the restore)
    assert (tmp_path / "adapted.json").read_bytes() == first_bytes
    assert first["train"]["tokens_per_second"] > 0 and first["train"]["resumed_from_step"] == 0
    assert file_hashes(tmp_path / "adapted") == weights
    # 2. killed after the final checkpoint, before the model and metrics were written
    shutil.rmtree(tmp_path / "adapted")
    (tmp_path / "adapted.json").unlink()
    run_ok(stage_cmd(tmp_path, params))
    assert file_hashes(tmp_path / "adapted") == weights
    assert json.loads((tmp_path / "adapted.json").read_text()) == first


def test_finetuning_rerun_after_a_fractional_last_epoch_trains_nothing_more(tmp_path, tiny_model_dir, capsys):
    """1.5 epochs: the run ends mid-epoch, where resuming would take one more step and score dev again."""
    data = prepare(learnable_ner_files(tmp_path / "raw", n=40), "bc5cdr", tmp_path / "prepared")
    cfg = ner_cfg(epochs=1.5, eval_delay=0)
    first = run_finetune_ner(data, tiny_model_dir, cfg, tmp_path / "work")
    capsys.readouterr()
    again = run_finetune_ner(data, tiny_model_dir, cfg, tmp_path / "work")
    assert "is the run's final step: the model is taken from it, not trained further" in capsys.readouterr().out
    assert again.metrics["dev_per_epoch"] == first.metrics["dev_per_epoch"]
    assert again.metrics["test"] == first.metrics["test"] and again.test_predictions == first.test_predictions
    for (name, a), b in zip(again.model.state_dict().items(), first.model.state_dict().values()):
        assert torch.equal(a, b), name


def lock_outs(proj, stage: str) -> dict[str, str]:
    lock = yaml.safe_load((proj / "dvc.lock").read_text())["stages"][stage]
    return {o["path"]: o["md5"] for o in lock["outs"]}


TRAINING = ("pretrain", "base_model", "finetune_ner", "finetune_classification", "finetune_embeddings")


@pytest.mark.slow
def test_a_forced_rerun_of_each_training_stage_leaves_dvc_status_clean(tiny_repro, tmp_path):
    """`dvc repro -f -s STAGE` of a finished run restores it from its final checkpoint, model and metrics
    (timings included) byte for byte: nothing downstream becomes stale, and `dvc status` lists only the
    always-run fingerprint stage."""
    proj = copy_project(tiny_repro, tmp_path / "proj")
    clean = json.loads(run(["dvc", "status", "--json"], proj).stdout)
    assert clean == {"code_fingerprint": ["always changed"]}
    stages = [s for s in yaml.safe_load((proj / "dvc.lock").read_text())["stages"] if s.split("@")[0] in TRAINING]
    assert len(stages) == 7  # pretrain, base_model, two NER arms, two classification arms, embeddings
    finetune, model = "finetune_ner@bc5cdr-baseline", "models/finetune_ner/bc5cdr/baseline"
    adapted, tuned = file_hashes(proj / "models/adapted/13"), lock_outs(proj, finetune)
    metrics = json.loads((proj / "metrics/finetune_ner/bc5cdr/baseline.json").read_text())
    # one `dvc repro` for the seven (a DVC process and a status check each would cost more than the
    # stages): a rerun that changed an output or a metric shows in dvc.lock or metrics/, which git
    # compares with the committed run, whatever stage ran after it
    out = run(["dvc", "repro", "-f", "-s", *stages], proj).stdout
    logs = dict(chunk.split("'", 1) for chunk in out.split("Running stage '")[1:])
    assert sorted(logs) == sorted(stages)
    for stage in ("pretrain@13", finetune):
        assert "is the run's final step" in logs[stage], stage
    assert json.loads(run(["dvc", "status", "--json"], proj).stdout) == clean
    assert run(["git", "status", "--porcelain", "--", "metrics", "dvc.lock"], proj).stdout == "", run(
        ["git", "diff", "--stat", "--", "metrics", "dvc.lock"], proj
    ).stdout
    assert file_hashes(proj / "models/adapted/13") == adapted
    again = json.loads((proj / "metrics/finetune_ner/bc5cdr/baseline.json").read_text())
    assert again["test"] == metrics["test"] and again["dev_per_epoch"] == metrics["dev_per_epoch"]
    assert lock_outs(proj, finetune)[model] == tuned[model]  # its card holds no timings: the whole directory
