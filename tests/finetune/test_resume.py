"""Fine-tuning resumes from its epoch checkpoints and ends exactly where an uninterrupted run ends.

The runs train on a few dozen sentences (five or six steps an epoch): what is compared is a resumed run
with an uninterrupted one, which does not need a model that learns."""

import json

import pytest
import torch
from conftest import learnable_ner_files, learnable_scicite_files, prepare
from helpers import ner_cfg

from minisci.errors import MinisciError
from minisci.finetune.classification import run_finetune_classification
from minisci.finetune.common import DevSelection
from minisci.finetune.ner import run_finetune_ner


class Interrupted(Exception):
    pass


def crash_after_checkpoint(monkeypatch, epoch: int):
    """The run dies right after the checkpoint of ``epoch`` is complete (as if killed there)."""
    original = DevSelection.on_save

    def on_save(self, args, state, control, **kwargs):
        original(self, args, state, control, **kwargs)
        if round(state.epoch) == epoch:
            raise Interrupted

    monkeypatch.setattr(DevSelection, "on_save", on_save)


def strip_runtime(history):
    """Log history without timings and the final train_loss (a mean over this process's steps only)."""
    return [
        {k: v for k, v in h.items() if "runtime" not in k and "per_second" not in k and k != "train_loss"}
        for h in history
    ]


def test_ner_resume_matches_uninterrupted_run(tmp_path, tiny_model_dir, monkeypatch, capsys):
    data = prepare(learnable_ner_files(tmp_path / "raw", n=40), "bc5cdr", tmp_path / "prepared")
    # a loss is logged every 3 steps of 5 an epoch: the window of step 12 spans the resumed checkpoint (step 10)
    cfg = ner_cfg(epochs=3.0, eval_delay=0, logging_steps=3)
    ref = run_finetune_ner(data, tiny_model_dir, cfg, tmp_path / "ref")
    with monkeypatch.context() as m:
        crash_after_checkpoint(m, epoch=2)
        with pytest.raises(Interrupted):
            run_finetune_ner(data, tiny_model_dir, cfg, tmp_path / "work")
    seed_dir = tmp_path / f"work/seed{cfg.seeds[0]}"
    assert len(json.loads((seed_dir / "dev_selection.json").read_text())["history"]) == 2
    capsys.readouterr()
    got = run_finetune_ner(data, tiny_model_dir, cfg, tmp_path / "work")
    assert "resuming from" in capsys.readouterr().out
    assert got.metrics["dev_per_epoch"] == ref.metrics["dev_per_epoch"]
    assert got.metrics["test"] == ref.metrics["test"] and got.test_predictions == ref.test_predictions
    assert strip_runtime(got.log_history) == strip_runtime(ref.log_history)
    for (name, a), b in zip(got.model.state_dict().items(), ref.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert len(list(seed_dir.glob("best-*.safetensors"))) == 1 and len(list(seed_dir.glob("checkpoint-*"))) == 1


def test_classification_resume_matches_uninterrupted_run(tmp_path, tiny_model_dir, monkeypatch):
    import yaml
    from conftest import REPO

    from minisci.config import FinetuneClassificationConfig, from_dict

    params = yaml.safe_load((REPO / "params.yaml").read_text())["finetune_classification"]
    params.update(
        {"epochs": 2.0, "batch_size": 8, "learning_rate": 5.0e-3, "max_length": 32, "logging_steps": 5, "seeds": [13]}
    )
    cfg = from_dict(FinetuneClassificationConfig, params, "finetune_classification")
    data = prepare(learnable_scicite_files(tmp_path / "raw", n=45), "scicite", tmp_path / "prepared")
    ref = run_finetune_classification(data, tiny_model_dir, cfg, tmp_path / "ref")
    with monkeypatch.context() as m:
        crash_after_checkpoint(m, epoch=1)
        with pytest.raises(Interrupted):
            run_finetune_classification(data, tiny_model_dir, cfg, tmp_path / "work")
    got = run_finetune_classification(data, tiny_model_dir, cfg, tmp_path / "work")
    assert got.metrics["dev_per_epoch"] == ref.metrics["dev_per_epoch"] and got.metrics["test"] == ref.metrics["test"]
    assert got.test_predictions == ref.test_predictions


def test_a_checkpoint_cut_short_with_none_before_it_is_not_announced_as_a_resume(tmp_path, tiny_model_dir, capsys):
    """Classification killed while writing its first checkpoint (no trainer_state.json yet): the rerun
    deletes it, says so in one line without claiming "resuming from an earlier one" (there is none),
    trains from step 0 and ends as an uninterrupted run."""
    import yaml
    from conftest import REPO

    from minisci.config import FinetuneClassificationConfig, from_dict

    params = yaml.safe_load((REPO / "params.yaml").read_text())["finetune_classification"]
    params.update({"epochs": 1.0, "batch_size": 8, "learning_rate": 5.0e-3, "max_length": 32, "seeds": [13]})
    cfg = from_dict(FinetuneClassificationConfig, params, "finetune_classification")
    data = prepare(learnable_scicite_files(tmp_path / "raw", n=45), "scicite", tmp_path / "prepared")
    ref = run_finetune_classification(data, tiny_model_dir, cfg, tmp_path / "ref")
    work = tmp_path / "work"
    run_finetune_classification(data, tiny_model_dir, cfg, work)
    (checkpoint,) = (work / "seed13").glob("checkpoint-*")
    (checkpoint / "trainer_state.json").unlink()  # the Trainer writes it last: killed while saving
    capsys.readouterr()
    got = run_finetune_classification(data, tiny_model_dir, cfg, work)
    out, err = capsys.readouterr()
    assert err == f"warning: {checkpoint}: no trainer_state.json (killed while saving); deleting it\n"
    assert f"{work / 'seed13'}: no complete checkpoint of this run; training from step 0" in out
    assert "resuming" not in out + err
    assert got.metrics["dev_per_epoch"] == ref.metrics["dev_per_epoch"] and got.test_predictions == ref.test_predictions


def test_dev_selection_resume_drops_epochs_after_the_checkpoint(tmp_path):
    """Killed after epoch 2's dev score and best weights were written, before its checkpoint."""
    sel = DevSelection(evaluate=None, key="f1", state_dir=tmp_path)
    history = [{"epoch": 1, "step": 5, "f1": 0.5}, {"epoch": 2, "step": 10, "f1": 0.7}]
    (tmp_path / "dev_selection.json").write_text(json.dumps({"history": history}))
    (tmp_path / "best-5.safetensors").write_bytes(b"x")
    (tmp_path / "best-10.safetensors").write_bytes(b"y")
    sel.resume(5)
    assert sel.history == history[:1] and sel.best == {"epoch": 1, "step": 5, "metrics": {"f1": 0.5}}
    assert sorted(p.name for p in tmp_path.glob("best-*")) == ["best-5.safetensors"]
    (tmp_path / "best-5.safetensors").unlink()
    with pytest.raises(MinisciError, match="weights of the best epoch so far are missing"):
        sel.resume(5)
    sel.resume(0)  # a checkpoint before any epoch end: nothing to keep
    assert sel.history == [] and sel.best is None


def test_checkpoints_of_other_code_are_not_resumed(tmp_path, tiny_model_dir, monkeypatch, capsys):
    """DVC reruns a stage when its code changes; the rerun must train anew, not resume old checkpoints."""
    import minisci.training

    data = prepare(learnable_ner_files(tmp_path / "raw", n=40), "bc5cdr", tmp_path / "prepared")
    cfg = ner_cfg(epochs=1.0)
    run_finetune_ner(data, tiny_model_dir, cfg, tmp_path / "work")
    real = minisci.training.code_version()
    assert set(real) == {"minisci", "torch", "transformers"} and len(real["minisci"]) == 64
    capsys.readouterr()
    run_finetune_ner(data, tiny_model_dir, cfg, tmp_path / "work")  # same code: resumes the final checkpoint
    assert "resuming from" in capsys.readouterr().out
    monkeypatch.setattr(minisci.training, "code_version", lambda: {**real, "minisci": "edited"})
    run_finetune_ner(data, tiny_model_dir, cfg, tmp_path / "work")
    out = capsys.readouterr().out
    assert "belong to another configuration: deleted" in out and "resuming from" not in out
    assert out.count("training from step 0") == 1  # said once: where training starts, after what was deleted
    assert "starting fresh" not in out


def test_a_start_over_after_a_kill_before_the_first_checkpoint_says_so(tmp_path, tiny_model_dir, capsys):
    """A run killed while writing its first checkpoint leaves files, no complete checkpoint: the rerun
    clears them and trains from step 0, and says so (as pretraining does); a first run says nothing."""
    data = prepare(learnable_ner_files(tmp_path / "raw", n=40), "bc5cdr", tmp_path / "prepared")
    cfg = ner_cfg(epochs=1.0)
    run_finetune_ner(data, tiny_model_dir, cfg, tmp_path / "first")
    assert "training from step 0" not in capsys.readouterr().out
    seed_dir = tmp_path / f"work/seed{cfg.seeds[0]}"
    (seed_dir / ".best-5.safetensors.x.tmp").mkdir(parents=True)
    run_finetune_ner(data, tiny_model_dir, cfg, tmp_path / "work")
    out = capsys.readouterr().out
    assert f"{seed_dir}: no complete checkpoint of this run; training from step 0" in out and "resuming" not in out
    assert not (seed_dir / ".best-5.safetensors.x.tmp").exists()


def test_eval_delay_scores_dev_from_that_epoch_and_always_after_the_last(tmp_path):
    """Epochs before eval_delay are checkpointed, not scored; the last epoch is scored whatever the delay."""
    from types import SimpleNamespace

    def run(delay: int, epochs: int) -> list[int]:
        scored = []
        sel = DevSelection(
            lambda m: scored.append(1) or {"f1": 0.1 * len(scored)}, "f1", tmp_path / f"{delay}-{epochs}", delay
        )
        sel.state_dir.mkdir()
        model = torch.nn.Linear(2, 2)
        for epoch in range(1, epochs + 1):
            state = SimpleNamespace(epoch=float(epoch), global_step=10 * epoch, max_steps=10 * epochs, log_history=[])
            control = SimpleNamespace(should_save=False)
            sel.on_epoch_end(None, state, control, model=model)
            assert control.should_save  # every epoch stays a resume point
        return [h["epoch"] for h in sel.history]

    assert run(delay=0, epochs=3) == [1, 2, 3]
    assert run(delay=2, epochs=3) == [2, 3]
    assert run(delay=9, epochs=3) == [3]  # a delay past the end still scores the final epoch


def test_eval_delay_run_matches_the_scored_epochs_of_a_full_run(tmp_path, tiny_model_dir):
    """Skipping dev scoring changes nothing else: the scored epoch equals eval_delay 0's at that epoch (same weights)."""
    data = prepare(learnable_ner_files(tmp_path / "raw", n=40), "bc5cdr", tmp_path / "prepared")
    full = run_finetune_ner(data, tiny_model_dir, ner_cfg(epochs=3.0, eval_delay=0), tmp_path / "full")
    late = run_finetune_ner(data, tiny_model_dir, ner_cfg(epochs=3.0, eval_delay=3), tmp_path / "late")
    assert [e["epoch"] for e in late.metrics["dev_per_epoch"]] == [3]
    assert late.metrics["dev_per_epoch"][0] == full.metrics["dev_per_epoch"][2]  # the same weights at epoch 3
    assert late.metrics["best_epoch"] == 3
