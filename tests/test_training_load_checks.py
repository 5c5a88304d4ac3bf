"""Checks at model load, shared by every training stage: lengths against the model's positions, a
tokenizer without a maximum length, the [UNK] rate of the training text, weights that start random,
and quiet load reports in stage logs."""

import contextlib
import json
import logging
import subprocess
import sys

import pytest
import yaml
from conftest import REPO, learnable_ner_files, prepare, tiny_params
from helpers import configs, ner_cfg, pretraining_data, stage_cmd, write_pairs

from minisci.errors import ConfigError
from minisci.finetune.common import load_head_model
from minisci.finetune.ner import run_finetune_ner
from minisci.stage import run_stage
from minisci.training import (
    _OneLineLoadReport,
    check_at_load,
    checkpoint_to_resume,
    unk_rate,
    usable_positions,
)


def stage_main(name):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "stages" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def write_params(tmp_path, overrides):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(tiny_params(overrides)))
    return path


# 1. lengths against positions ---------------------------------------------------------------------------


def test_pretrain_length_beyond_the_positions_is_one_line_not_a_traceback(tmp_path, capsys):
    write_pairs(tmp_path / "pairs")
    params = write_params(tmp_path, {"pretrain": {"max_seq_length": 128}})  # the tiny model has 64 positions
    argv = stage_cmd(tmp_path, params, out="out")[2:]
    capsys.readouterr()
    with contextlib.chdir(tmp_path):  # not the repository: a stage sweeps the DVC project it runs in
        assert run_stage(stage_main("pretrain"), argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        "error: pretrain.max_seq_length 128 exceeds the model's 64 positions (scratch); "
        "set pretrain.max_seq_length to 64 or less, or use a model with more positions"
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("stage", ["finetune_ner", "finetune_classification"])
def test_finetuning_length_beyond_the_positions_is_one_line(tmp_path, tiny_model_dir, fixture_prepared, stage, capsys):
    params = write_params(tmp_path, {stage: {"max_length": 128}})
    data = fixture_prepared / ("bc5cdr" if stage == "finetune_ner" else "scicite")
    argv = ["--data", str(data), "--model", str(tiny_model_dir), "--out", str(tmp_path / "out")]
    argv += ["--metrics", str(tmp_path / "m.json"), "--plots", str(tmp_path / "plots")]
    argv += ["--checkpoints", str(tmp_path / "ckpt"), "--params", str(params)]
    with contextlib.chdir(tmp_path):  # not the repository: a stage sweeps the DVC project it runs in
        assert run_stage(stage_main(stage), argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"error: {stage}.max_length 128 exceeds the model's 64 positions ({tiny_model_dir}); "
        f"set {stage}.max_length to 64 or less, or use a model with more positions"
    )
    assert not (tmp_path / "ckpt").exists()  # refused before any training


def test_embeddings_lengths_are_checked_against_both_models(tmp_path, tiny_model_dir):
    from minisci.config import FinetuneEmbeddingsConfig, from_dict
    from minisci.finetune.embeddings import check_encoder_lengths

    section = tiny_params()["finetune_embeddings"]
    ok = from_dict(FinetuneEmbeddingsConfig, section, "finetune_embeddings")
    check_encoder_lengths(tiny_model_dir, tiny_model_dir, ok)
    long_eval = from_dict(FinetuneEmbeddingsConfig, {**section, "eval_max_length": 128}, "finetune_embeddings")
    with pytest.raises(ConfigError, match=r"^finetune_embeddings.eval_max_length 128 exceeds the model's 64 positions"):
        check_encoder_lengths(tiny_model_dir, tiny_model_dir, long_eval)
    long_train = from_dict(FinetuneEmbeddingsConfig, {**section, "max_length": 96}, "finetune_embeddings")
    with pytest.raises(ConfigError, match=r"^finetune_embeddings.max_length 96 exceeds the model's 64 positions"):
        check_encoder_lengths(tiny_model_dir, tiny_model_dir, long_train)


def test_positions_after_the_padding_index_are_not_usable():
    from transformers import BertConfig, RobertaConfig

    assert usable_positions(BertConfig(max_position_embeddings=64)) == 64
    assert usable_positions(RobertaConfig(max_position_embeddings=66, pad_token_id=1)) == 64  # ids start at 2
    with pytest.raises(ConfigError, match=r"^x.max_length 65 exceeds the model's 64 positions \(m\)"):
        check_at_load(RobertaConfig(max_position_embeddings=66, pad_token_id=1), None, {"x.max_length": 65}, "m")


# 2. a tokenizer without a maximum length ----------------------------------------------------------------------


def test_a_tokenizer_without_model_max_length_takes_the_models_positions(tiny_model_dir):
    from transformers import AutoConfig, AutoTokenizer
    from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

    config = AutoConfig.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir, model_max_length=VERY_LARGE_INTEGER)
    check_at_load(config, tokenizer, {}, tiny_model_dir)
    assert tokenizer.model_max_length == 64
    declared = AutoTokenizer.from_pretrained(tiny_model_dir)  # declares 512: its own value is kept
    check_at_load(config, declared, {}, tiny_model_dir)
    assert declared.model_max_length == 512


# 3. the [UNK] rate --------------------------------------------------------------------------------------------------


def test_unk_rate_counts_words_that_become_unk(tiny_model_dir):
    from transformers import AutoTokenizer

    uncased = AutoTokenizer.from_pretrained(tiny_model_dir)
    cased_flag = AutoTokenizer.from_pretrained(tiny_model_dir, do_lower_case=False)  # an uncased vocabulary
    texts = ["Aspirin reduces Fever in Patients", "the study showed no effect"]
    assert unk_rate(uncased, texts) == 0.0
    assert unk_rate(cased_flag, texts) == 0.3  # Aspirin, Fever, Patients: 3 of 10 words


def test_finetuning_records_the_unk_rate_and_warns_above_one_percent(tmp_path, tiny_model_dir, capsys):
    from transformers import AutoTokenizer

    model_dir = tmp_path / "model"
    import shutil

    shutil.copytree(tiny_model_dir, model_dir)
    AutoTokenizer.from_pretrained(tiny_model_dir, do_lower_case=False).save_pretrained(model_dir)
    raw = learnable_ner_files(tmp_path / "raw", n=20)
    for split in raw.glob("ner/bc5cdr/*.txt"):  # capitalised drug names: [UNK] in an uncased vocabulary
        split.write_text("\n".join(line[:1].upper() + line[1:] for line in split.read_text().splitlines()) + "\n")
    data = prepare(raw, "bc5cdr", tmp_path / "prepared")
    result = run_finetune_ner(data, model_dir, ner_cfg(epochs=1.0), tmp_path / "work")
    rate = result.metrics["unk_rate"]
    assert rate > 0.5
    assert f"warning: finetune_ner: {rate:.1%} of the words in a sample of the training text become [UNK]" in (
        capsys.readouterr().err
    )
    clean = run_finetune_ner(data, tiny_model_dir, ner_cfg(epochs=1.0), tmp_path / "work2")
    assert clean.metrics["unk_rate"] == 0.0 and "of the training text become" not in capsys.readouterr().err


def test_pretraining_records_the_unk_rate(tmp_path):
    from minisci.pretrain.trainer import run_pretraining

    model_cfg, cfg = configs(max_steps=1, save_steps=100)
    result = run_pretraining(
        pretraining_data(write_pairs(tmp_path / "pairs"), model_cfg, cfg), model_cfg, cfg, tmp_path / "ckpt"
    )
    assert result.metrics["unk_rate"] == 0.0


# 4. weights that start random -------------------------------------------------------------------------------------


@pytest.fixture
def no_pooler_dir(tmp_path, tiny_model_dir):
    """The tiny BERT saved without its pooler and pretraining heads: an encoder-only checkpoint."""
    from transformers import AutoTokenizer, BertModel

    out = tmp_path / "no-pooler"
    BertModel.from_pretrained(tiny_model_dir, add_pooling_layer=False).save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out)
    return out


def test_a_classifier_on_a_random_pooler_is_named_in_one_warning(no_pooler_dir, tiny_model_dir, capsys):
    from transformers import AutoModelForSequenceClassification

    load_head_model(AutoModelForSequenceClassification, no_pooler_dir, "finetune_classification", num_labels=3)
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"warning: finetune_classification: 4 tensors are not in {no_pooler_dir} and start random, "
        "2 of them in the encoder: bert.pooler.dense (2), classifier (2)"
    ]
    load_head_model(AutoModelForSequenceClassification, tiny_model_dir, "finetune_classification", num_labels=3)
    captured = capsys.readouterr()
    assert captured.err == ""  # a new head alone is expected: one line on stdout
    assert captured.out.strip() == (
        f"finetune_classification: 2 tensors are not in {tiny_model_dir} and start random: classifier (2)"
    )


def test_pretraining_names_a_missing_nsp_head_and_pooler(no_pooler_dir, tmp_path, capsys):
    import dataclasses

    from minisci.pretrain.trainer import run_pretraining

    model_cfg, cfg = configs(max_steps=1, save_steps=100, nsp=True)
    model_cfg = dataclasses.replace(model_cfg, base=str(no_pooler_dir), tokenizer=None)
    run_pretraining(
        pretraining_data(write_pairs(tmp_path / "pairs"), model_cfg, cfg), model_cfg, cfg, tmp_path / "ckpt"
    )
    line = next(x for x in capsys.readouterr().err.splitlines() if "start random" in x)
    # the MLM decoder is tied to the word embeddings (loaded), its bias to cls.predictions.bias (one tensor)
    assert line == (
        f"warning: pretrain: 9 tensors are not in {no_pooler_dir} and start random, 2 of them in the encoder: "
        "bert.pooler.dense (2), cls.predictions (1), cls.predictions.transform.LayerNorm (2), "
        "cls.predictions.transform.dense (2), cls.seq_relationship (2)"
    )


# 5. quiet logs, and the stale-checkpoint message ------------------------------------------------------------------


def load_report_record() -> logging.LogRecord:
    msg = "BertForSequenceClassification LOAD REPORT from: x\nKey | Status\nclassifier.weight | MISSING\n"
    return logging.LogRecord("transformers", logging.WARNING, __file__, 1, msg, (), None)


def test_load_reports_are_dropped_from_logs_and_one_line_on_a_terminal():
    assert _OneLineLoadReport(terminal=False).filter(load_report_record()) is False
    record = load_report_record()
    assert _OneLineLoadReport(terminal=True).filter(record) is True
    assert record.getMessage() == "BertForSequenceClassification LOAD REPORT from: x (1 missing keys)"


def test_a_stage_log_has_no_load_report_and_no_weight_bars(tmp_path, tiny_model_dir, fixture_prepared):
    params = write_params(tmp_path, {"finetune_classification": {"max_train_examples": 16}})
    cmd = [sys.executable, str(REPO / "stages/finetune_classification.py"), "--data", str(fixture_prepared / "scicite")]
    cmd += ["--model", str(tiny_model_dir), "--out", str(tmp_path / "out"), "--metrics", str(tmp_path / "m.json")]
    cmd += ["--plots", str(tmp_path / "plots"), "--checkpoints", str(tmp_path / "ckpt"), "--params", str(params)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = proc.stdout + proc.stderr
    assert "LOAD REPORT" not in log and "Loading weights" not in log
    assert "belong to another configuration" not in log  # a fresh workspace has no stale checkpoints
    assert "finetune_classification: 2 tensors are not in" in proc.stdout
    assert "unk_rate" in json.loads((tmp_path / "m.json").read_text())


def test_the_base_model_stage_log_has_no_load_report_and_no_bars(tmp_path, tiny_model_dir):
    params = write_params(tmp_path, {"model": {"base": str(tiny_model_dir)}})
    cmd = [sys.executable, str(REPO / "stages/base_model.py"), "--out", str(tmp_path / "out"), "--params", str(params)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = proc.stdout + proc.stderr
    assert "LOAD REPORT" not in log and "Loading weights" not in log and "Writing model shards" not in log
    assert proc.stdout.startswith("base_model: ")


def test_the_stale_checkpoint_message_only_when_there_was_a_checkpoint(tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()  # the Trainer creates its output directory before the resume check
    assert checkpoint_to_resume(ckpt, "run-a") is None
    assert checkpoint_to_resume(ckpt, "run-b") is None  # another fingerprint, no checkpoint
    assert "another configuration" not in capsys.readouterr().out
    (ckpt / "checkpoint-3").mkdir()
    (ckpt / "checkpoint-3/trainer_state.json").write_text("{}")
    assert checkpoint_to_resume(ckpt, "run-c") is None
    assert capsys.readouterr().out == f"{ckpt}: checkpoints belong to another configuration: deleted\n"
