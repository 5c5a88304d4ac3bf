"""Pretraining on a tiny random BERT: learning, head warm-up, resume after kill -9, DDP."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from helpers import configs, pretraining_data, run_ok, stage_cmd, write_pairs, write_params

from minisci.pretrain.model import load_pretraining_model
from minisci.pretrain.trainer import PretrainTrainer, lr_lambdas, run_pretraining
from minisci.training import checkpoint_to_resume, training_arguments


def test_lr_schedule_holds_the_encoder_during_head_warmup():
    heads, encoder = lr_lambdas(total=100, warmup=10, head_steps=20)
    assert [encoder(s) for s in (0, 19)] == [0.0, 0.0] and encoder(20) == pytest.approx(0.1)
    assert heads(0) == pytest.approx(0.1) and heads(9) == 1.0 and heads(99) == pytest.approx(1 / 90)
    assert encoder(29) == 1.0 and encoder(99) == pytest.approx(1 / 70)


def test_length_grouped_batches_read_the_lengths_once_in_the_same_order():
    """The sampler gets the length column as a list (transformers would hand it the lazy datasets
    Column, read one example at a time every epoch) and draws the order transformers' would."""
    import types

    import datasets
    from transformers.trainer_pt_utils import LengthGroupedSampler

    lengths = [int(x) for x in torch.randint(5, 200, (500,), generator=torch.Generator().manual_seed(0))]
    ds = datasets.Dataset.from_dict({"length": lengths, "idx": list(range(500))}).select(range(499, -1, -1))
    args = types.SimpleNamespace(
        train_sampling_strategy="group_by_length", length_column_name="length", train_batch_size=16,
        gradient_accumulation_steps=2,
    )  # fmt: skip
    trainer = types.SimpleNamespace(args=args, train_dataset=ds)
    ours = PretrainTrainer._get_train_sampler(trainer)
    assert type(ours.lengths) is list and ours.lengths == lengths[::-1]
    theirs = LengthGroupedSampler(32, lengths=ds["length"])  # what transformers builds
    assert not isinstance(theirs.lengths, list)
    for _ in range(2):  # two epochs, each from the same global generator state
        state = torch.get_rng_state()
        order = list(ours)
        torch.set_rng_state(state)
        assert order == list(theirs) and sorted(order) == list(range(500))


def test_head_warmup_leaves_the_encoder_untouched(tmp_path):
    model_cfg, cfg = configs(max_steps=3, head_warmup_steps=3, save_steps=100)
    result = run_pretraining(
        pretraining_data(write_pairs(tmp_path / "pairs"), model_cfg, cfg), model_cfg, cfg, tmp_path / "ckpt"
    )
    initial, _ = load_pretraining_model(model_cfg, 30522, cfg.seed)  # same seed -> same init
    trained = dict(result.model.named_parameters())
    for name, p in initial.named_parameters():
        same = torch.equal(p, trained[name].detach().cpu())
        assert same != name.startswith("cls."), f"{name}: {'unchanged' if same else 'changed'}"


@pytest.mark.slow
def test_dataloader_workers_do_not_change_the_trained_weights(tmp_path):
    """Batches built in worker processes mask exactly as in the training process, in every epoch
    (each example's masks follow from seed, epoch and example), so the weights are the same bytes."""
    data = None
    weights = {}
    for workers in (0, 2):
        model_cfg, cfg = configs(epochs=2.0, max_steps=-1, save_steps=100, dataloader_workers=workers)
        data = data or pretraining_data(write_pairs(tmp_path / "pairs"), model_cfg, cfg)
        result = run_pretraining(data, model_cfg, cfg, tmp_path / f"ckpt-{workers}")
        assert max(h.get("epoch", 0) for h in result.log_history) == 2.0
        weights[workers] = {k: v.detach().cpu().clone() for k, v in result.model.state_dict().items()}
    assert weights[0].keys() == weights[2].keys()
    assert all(torch.equal(weights[0][k], weights[2][k]) for k in weights[0])


def test_tiny_model_learns_and_stage_writes_hf_model(tmp_path):
    from transformers import AutoModel

    write_pairs(tmp_path / "pairs")
    params = write_params(tmp_path, max_steps=100, learning_rate=5.0e-3, head_learning_rate=5.0e-3)
    run_ok(stage_cmd(tmp_path, params))
    m = json.loads((tmp_path / "adapted.json").read_text())
    assert m["train"]["steps"] == 100 and m["train"]["tokens_seen"] > 0
    assert m["after"]["mlm_loss"] < m["before"]["mlm_loss"] - 2.0
    assert m["after"]["mlm_accuracy"] > m["before"]["mlm_accuracy"] + 0.1  # 10-word vocabulary
    encoder = AutoModel.from_pretrained(tmp_path / "adapted", use_safetensors=True)
    assert encoder.config.hidden_size == 32
    curves = tmp_path / "plots-adapted/curves"
    for key in ("loss", "mlm_loss", "nsp_loss", "learning_rate", "head_learning_rate", "tokens_per_second"):
        assert (curves / f"{key}.tsv").is_file(), key
    losses = [float(line.split("\t")[-1]) for line in (curves / "loss.tsv").read_text().splitlines()[1:]]
    assert losses[-1] < losses[0]


@pytest.mark.slow
def test_resume_after_kill_matches_uninterrupted_run(tmp_path):
    write_pairs(tmp_path / "pairs")
    # a loss is logged every 3 steps: the window of step 6 spans the first checkpoint (step 5)
    params = write_params(tmp_path, max_steps=40, save_steps=5, logging_steps=3)
    # 1. an uninterrupted reference run
    run_ok(stage_cmd(tmp_path, params, ckpt="ref-ckpt", out="ref"))
    # 2. the same run, killed with SIGKILL once its first checkpoint is complete
    proc = subprocess.Popen(
        stage_cmd(tmp_path, params), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    # killed once the second checkpoint is begun: the first (step 5) is then whole, with what the
    # callbacks save beside it (a kill on the first trainer_state.json alone could catch it half-written,
    # and the rerun would rightly discard that checkpoint and start over)
    second = tmp_path / "ckpt/checkpoint-10"
    deadline = time.time() + 120
    while not second.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert second.exists() and not (tmp_path / "adapted").exists(), "the run was not interrupted mid-way"
    # 3. re-running resumes from the newest complete checkpoint, says so, and finishes
    resumed = run_ok(stage_cmd(tmp_path, params))
    assert f"resuming from {tmp_path / 'ckpt'}/checkpoint-" in resumed.stdout
    ref = json.loads((tmp_path / "ref.json").read_text())
    got = json.loads((tmp_path / "adapted.json").read_text())
    assert got["train"]["resumed_from_step"] >= 5 and got["train"]["steps"] == ref["train"]["steps"] == 40
    assert got["train"]["tokens_seen"] == ref["train"]["tokens_seen"]
    assert got["train"]["final_loss"] == pytest.approx(ref["train"]["final_loss"], abs=1e-4)
    assert got["after"] == pytest.approx(ref["after"], abs=1e-4)
    curve = {out: (tmp_path / f"plots-{out}/curves/loss.tsv").read_text().split() for out in ("ref", "adapted")}
    assert len(curve["adapted"]) == len(curve["ref"]) > 4  # the header, then a step and its loss per log
    assert [float(x) for x in curve["adapted"][2:]] == pytest.approx([float(x) for x in curve["ref"][2:]], abs=1e-4)


def test_checkpoints_of_another_configuration_are_discarded(tmp_path):
    ckpt = tmp_path / "ckpt"
    assert checkpoint_to_resume(ckpt, "run-a") is None
    (ckpt / "checkpoint-7").mkdir()
    (ckpt / "checkpoint-7/trainer_state.json").write_text("{}")
    (ckpt / "checkpoint-9").mkdir()  # killed while saving: no trainer_state.json
    assert checkpoint_to_resume(ckpt, "run-a") == ckpt / "checkpoint-7"
    assert checkpoint_to_resume(ckpt, "run-b") is None and not (ckpt / "checkpoint-7").exists()


@pytest.mark.slow
def test_two_process_ddp_run(tmp_path):
    write_pairs(tmp_path / "pairs")
    params = write_params(tmp_path, max_steps=10, save_steps=5)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--standalone",
        *stage_cmd(tmp_path, params)[1:],
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    # torchrun prints every rank's traceback; the one that failed first is rarely the last
    ranks = [line for line in proc.stderr.splitlines() if line.startswith("[rank1]")]
    assert proc.returncode == 0, "\n".join(ranks[-30:]) + "\n...\n" + proc.stderr[-2000:]
    m = json.loads((tmp_path / "adapted.json").read_text())
    assert m["train"]["world_size"] == 2 and m["train"]["steps"] == 10
    # Both ranks consumed data: 10 steps x 2 processes x 8 pairs.
    assert m["train"]["epochs"] == pytest.approx(10 * 2 * 8 / 160, abs=0.01)
    assert (tmp_path / "adapted/model.safetensors").is_file()


def test_training_arguments_extra_fields_override_the_defaults(tmp_path):
    common = dict(seed=1, batch_size=2, learning_rate=1e-3, weight_decay=0.0, precision="fp32")
    assert training_arguments(tmp_path, **common).include_num_input_tokens_seen == "non_padding"
    assert (
        training_arguments(tmp_path, **common, include_num_input_tokens_seen="no").include_num_input_tokens_seen == "no"
    )


def test_fine_tuning_steps_with_torch_fused_adamw(tmp_path):
    """The fine-tuning stages step torch's fused AdamW (whose last bits differ from the unfused one's) with
    its betas and epsilon, clipping and a linear schedule set explicitly, not taken from transformers'
    defaults, which releases move; an extra argument still overrides them."""
    from transformers import Trainer

    args = training_arguments(tmp_path, seed=1, batch_size=2, learning_rate=1e-3, weight_decay=0.01, precision="fp32")
    cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(args)
    assert (cls, kwargs) == (
        torch.optim.AdamW,
        {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "fused": True},
    )
    assert (args.max_grad_norm, args.lr_scheduler_type) == (1.0, "linear")
    other = training_arguments(
        tmp_path, seed=1, batch_size=2, learning_rate=1e-3, weight_decay=0.01, precision="fp32", optim="adamw_torch"
    )
    assert Trainer.get_optimizer_cls_and_kwargs(other)[1].get("fused") is None
    # set, not defaulted: what the arguments class receives names each of them
    settings = training_arguments(
        tmp_path, seed=1, batch_size=2, learning_rate=1e-3, weight_decay=0.01, precision="fp32", args_cls=dict
    )
    assert {k: settings[k] for k in ("optim", "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm")} == {
        "optim": "adamw_torch_fused", "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_epsilon": 1e-8, "max_grad_norm": 1.0
    }  # fmt: skip
    assert settings["lr_scheduler_type"] == "linear"


def test_resume_reports_no_tied_weights_missing(tmp_path, monkeypatch):
    """A checkpoint holds each tied tensor once, so loading it leaves the masked-LM decoder (tied to
    the word embeddings) "missing" although it is loaded: no warning on resume, but a key truly
    missing is still reported."""
    import transformers.trainer
    from safetensors.torch import load_file

    model_cfg, cfg = configs()
    model, _ = load_pretraining_model(model_cfg, 30522, cfg.seed)
    model.save_pretrained(tmp_path / "checkpoint-1")
    state = load_file(tmp_path / "checkpoint-1/model.safetensors")
    warned = []
    monkeypatch.setattr(transformers.trainer.logger, "warning", lambda msg, *a, **k: warned.append(msg))
    trainer = PretrainTrainer.__new__(PretrainTrainer)  # the method reads only .model
    trainer.model = model
    result = model.load_state_dict(state, strict=False)
    assert "cls.predictions.decoder.weight" in result.missing_keys  # what transformers warned about
    trainer._issue_warnings_after_load(result)
    assert warned == []
    del state["cls.seq_relationship.weight"]
    trainer._issue_warnings_after_load(model.load_state_dict(state, strict=False))
    assert len(warned) == 1 and "cls.seq_relationship.weight" in warned[0] and "decoder" not in warned[0]
