"""benchmarks/run_floor.py: the lower bound on each training stage's time counts the right products
and runs on a reproduced project."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from conftest import REPO

CFG = SimpleNamespace(hidden_size=4, intermediate_size=8, num_hidden_layers=2, vocab_size=10)


@pytest.fixture
def run_floor(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import roofline
    import run_floor

    measure = roofline.peak_matmul_flops
    monkeypatch.setattr(
        roofline, "peak_matmul_flops", lambda config, dtype, **_: measure(config, dtype, windows=1, seconds=0.01)
    )
    return run_floor


def test_training_is_three_forward_passes_per_epoch(run_floor):
    from roofline import encoder_flops

    assert run_floor.training_flops(CFG, [3, 5], epochs=2.0) == 6 * encoder_flops(CFG, [3, 5])
    # the head at 7 masked positions: transform 4·4 and decoder 4·10 multiply-adds, forward and backward
    assert run_floor.mlm_head_flops(CFG, 7, vocab=10) == 3 * 2 * 7 * (16 + 40)


@pytest.mark.parametrize(("epochs", "delay", "scorings"), [(5.0, 4, 2), (2.0, 0, 2), (2.5, 0, 3), (3.0, 9, 1)])
def test_dev_is_scored_from_the_delay_on_and_after_the_last_epoch(run_floor, epochs, delay, scorings):
    assert run_floor.dev_scorings(epochs, delay) == scorings


def test_windows_are_what_embed_encodes(run_floor, tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = " ".join(["kinase"] * 30)
    pieces = len(tok(text, add_special_tokens=False)["input_ids"])
    lengths = run_floor.windowed_lengths(tok, [text, "short"], max_length=12)
    assert sum(lengths) == pieces + len(tok("short", add_special_tokens=False)["input_ids"]) + 2 * len(lengths)
    assert max(lengths) == 12 and len(lengths) == -(-pieces // 10) + 1
    assert run_floor.cut_lengths(tok, [text], max_length=12) == [12]


@pytest.mark.slow
def test_every_training_stage_has_a_floor_below_its_run(run_floor, tiny_repro, capsys):
    run_floor.main(["--root", str(tiny_repro), "--at", "1000"])
    out = capsys.readouterr().out
    rows = {m[0]: m[1:] for m in re.findall(r"^\| (\S+@?\S*) \| ([\d.]+) \| ([\d.]+) \| ([\d.e-]+) \|", out, re.M)}
    stages = {"finetune_embeddings", "pretrain@13"} | {
        f"{s}@{d}-{arm}" for s, d in (("finetune_ner", "bc5cdr"),) for arm in ("baseline", "adapted")
    }
    assert stages <= set(rows), out
    for stage, (_tflop, committed, floor) in rows.items():
        assert 0 < float(floor) <= float(committed), (stage, out)
    assert re.search(r"floor at --at 1000 \(1000 GFLOP/s\): finetune_embeddings [\d.]+ min \(target 10\)", out)


def test_a_project_without_the_runs_outputs_is_one_line(run_floor, tmp_path, capsys):
    """A fresh clone has the metrics (git) but not the models and data (DVC): one line, before any work."""
    import shutil

    from minisci.stage import run_command

    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    assert run_command(run_floor.main, ["--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {tmp_path}: no models/baseline/config.json and ")
    assert err.rstrip().endswith("more of the default run's outputs; run `dvc repro` there first")


@pytest.mark.parametrize("rate", ["0", "-5", "nan", "inf", "fast"])
def test_a_rate_that_is_not_positive_is_a_usage_error(run_floor, rate, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_floor.main(["--at", rate])
    assert exit_info.value.code == 2
    assert "argument --at: expected a number > 0, got" in capsys.readouterr().err


def test_the_committed_runs_cpu_is_named_and_another_cpu_is_flagged(run_floor, tmp_path):
    import json

    (tmp_path / "metrics/pretrain").mkdir(parents=True)
    env = {"cpu": "AMD EPYC", "cpu_flags": "avx2", "precision": "fp32"}
    for name in ("pretrain/13.json", "finetune_embeddings.json"):
        (tmp_path / "metrics" / name).write_text(json.dumps({"wall_seconds": 1.0, "environment": env}))
    (tmp_path / "metrics/make_pairs.json").write_text(json.dumps({"wall_seconds": 1.0}))
    machines = run_floor.committed_machines(tmp_path)
    assert machines == ["AMD EPYC (avx2)"]
    same = run_floor.machines_line(machines, "AMD EPYC")
    assert same == "committed s: the committed run's wall times, measured on AMD EPYC (avx2)"
    other = run_floor.machines_line(machines, "Intel(R) Xeon(R) Processor")
    assert other.startswith(same + "; not this CPU (Intel(R) Xeon(R) Processor), so `committed / floor`")
