"""benchmarks/compare_runs.py: two runs of the pipeline, output by output and number by number."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import yaml
from conftest import REPO


@pytest.fixture
def compare_runs(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import compare_runs

    return compare_runs


def project(root, metrics: dict, curve: str, model: bytes | None, lock_from=None):
    """A finished run in miniature: one stage with a metrics file, a curve and a model folder, and the
    dvc.lock recording them (``lock_from``: another project whose files' hashes it records instead)."""
    (root / "metrics").mkdir(parents=True)
    (root / "metrics" / "train.json").write_text(json.dumps(metrics))
    (root / "plots" / "train" / "curves").mkdir(parents=True)
    (root / "plots" / "train" / "curves" / "loss.tsv").write_text(curve)
    (root / "plots" / "train" / "curves" / "tokens_per_second.tsv").write_text("step\ttokens_per_second\n1\t123.4\n")
    if model is not None:
        (root / "models" / "m").mkdir(parents=True)
        (root / "models" / "m" / "model.safetensors").write_bytes(model)
    return root


def write_lock(compare_runs, root, source):
    outs = ["metrics/train.json", "models/m", "plots/train/curves"]
    lock = {
        "schema": "2.0",
        "stages": {
            "train": {
                "cmd": "python train.py",
                "outs": [{"path": p, "md5": compare_runs.disk_hash(source / p) or "absent"} for p in outs],
            }
        },
    }
    (root / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))


def test_a_run_elsewhere_is_compared_by_bytes_then_by_number(compare_runs, tmp_path, capsys):
    mine = project(
        tmp_path / "a",
        {"f1": 0.8511, "wall_seconds": 100.0, "environment": {"threads": 2}, "per_seed": [0.85, 0.86]},
        "step\tloss\n1\t9.718657684326171\n2\t5.0\n",
        b"weights",
    )
    other = project(
        tmp_path / "b",
        {"f1": 0.8511, "wall_seconds": 40.0, "environment": {"threads": 16}, "per_seed": [0.85, 0.8612], "new": 1},
        "step\tloss\n1\t9.718658447265625\n2\t5.0\n",
        b"weights",
    )
    write_lock(compare_runs, mine, mine)
    write_lock(compare_runs, other, other)
    compare_runs.main([str(other), "--root", str(mine)])
    out = capsys.readouterr().out
    assert "| train | models/m | same | yes |" in out  # the same weights: the same DVC hash
    assert "| train | metrics/train.json | differ | yes |" in out
    assert "1 same, 2 differ, 0 not there, 0 not run there" in out
    # the timings and the environment are the machine's, not the result's: not compared
    assert "| metrics/train.json | 3 | 2 | 0.0012 | per_seed[1] | 0.86 | 0.8612 | 1 |" in out  # "new": there only
    row = re.search(r"\| plots/train/curves/loss\.tsv \| 4 \| 3 \| ([\d.e-]+) \| 1\.loss \| .* \| 0 \|$", out, re.M)
    assert row and float(row[1]) == pytest.approx(7.85e-8, rel=0.01)  # relative, as the loss's scale is its own
    assert "tokens_per_second" not in out


def test_what_the_other_run_has_not_written_is_not_a_difference(compare_runs, tmp_path, capsys):
    mine = project(tmp_path / "a", {"f1": 0.85}, "step\tloss\n1\t2.0\n", b"weights")
    other = project(tmp_path / "b", {"f1": 0.85}, "step\tloss\n1\t2.0\n", None)
    write_lock(compare_runs, mine, mine)
    write_lock(compare_runs, other, mine)  # its checkout's lock: the stage has not run there
    (other / "plots" / "train" / "curves" / "loss.tsv").unlink()
    compare_runs.main([str(other), "--root", str(mine)])
    out = capsys.readouterr().out
    assert "| train | models/m | not there |  |" in out
    # the stage has not run there: what is on its disk is its checkout's, not a result to compare
    assert "| train | metrics/train.json | not run there | yes |" in out
    assert "| train | plots/train/curves | not run there | no |" in out  # on its disk, not in its lock
    assert "0 same, 0 differ, 1 not there, 2 not run there" in out
    assert "\n| metrics/train.json |" not in out  # the checkout's copy would compare equal: left out
    assert out.count("1 files not written there yet, or left out") == 2  # the metrics file, then the curve


def test_a_stage_not_run_there_is_not_counted_as_reproduced(compare_runs, tmp_path, capsys):
    """A run stopped part way: the finished stage is compared; the next one's checkout copies (equal by
    construction: the same git-tracked files) are neither "same" nor numbers that agree."""
    mine = project(tmp_path / "a", {"f1": 0.85}, "step\tloss\n1\t2.0\n", b"weights")
    other = project(tmp_path / "b", {"f1": 0.85}, "step\tloss\n1\t2.0\n", b"weights")
    for root in (mine, other):
        (root / "metrics" / "next.json").write_text(json.dumps({"f1": 0.9}))
        (root / "models" / "next").mkdir()
        (root / "models" / "next" / "model.safetensors").write_bytes(b"next weights")
    shutil.rmtree(other / "models" / "next")  # still training there
    for root in (mine, other):
        write_lock(compare_runs, root, root)
        lock = yaml.safe_load((root / "dvc.lock").read_text())
        outs = [{"path": p, "md5": compare_runs.disk_hash(mine / p)} for p in ("metrics/next.json", "models/next")]
        lock["stages"]["next"] = {"cmd": "python next.py", "outs": outs}
        (root / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))
    compare_runs.main([str(other), "--root", str(mine)])
    out = capsys.readouterr().out
    assert "| train | models/m | same | yes |" in out and "| train | metrics/train.json | same | yes |" in out
    assert "| next | metrics/next.json | not run there | yes |" in out
    assert "| next | models/next | not there |  |" in out
    assert "3 same, 0 differ, 1 not there, 1 not run there" in out
    assert "\n| metrics/train.json | 1 | 1 | 0 |" in out and "\n| metrics/next.json |" not in out
    assert "1 files not written there yet, or left out" in out


def test_a_file_no_stage_writes_is_not_counted_as_reproduced(compare_runs, tmp_path, capsys):
    """A study's table (metrics/studies.json) is git-tracked and written by no stage: both checkouts
    hold the same copy, so comparing it would report agreement that no run produced."""
    mine = project(tmp_path / "a", {"f1": 0.85}, "step\tloss\n1\t2.0\n", b"weights")
    other = project(tmp_path / "b", {"f1": 0.86}, "step\tloss\n1\t2.0\n", b"weights")
    for root in (mine, other):
        (root / "metrics" / "studies.json").write_text(json.dumps({"lr": {"f1": 0.9}}))
        write_lock(compare_runs, root, root)
    compare_runs.main([str(other), "--root", str(mine)])
    out = capsys.readouterr().out
    assert "\n| metrics/train.json | 1 | 0 | 0.01 |" in out  # the stage's metrics are compared
    assert "\n| metrics/studies.json |" not in out
    assert "Left out as no stage of this dvc.lock writes them: metrics/studies.json." in out
    assert "Every file is there too." in out  # not counted as missing there either


def test_a_project_without_dvc_lock_is_one_line(compare_runs, tmp_path, capsys):
    from minisci.stage import run_command

    (tmp_path / "a").mkdir()
    assert run_command(compare_runs.main, [str(tmp_path), "--root", str(tmp_path / "a")]) == 1
    assert capsys.readouterr().err == f"error: {tmp_path / 'a' / 'dvc.lock'}: no dvc.lock (run dvc repro there first)\n"


@pytest.mark.slow
def test_a_reproduced_project_against_its_copy_is_the_same_bytes(compare_runs, tiny_repro, tmp_path, capsys):
    """On a real tiny run: the hashes computed from the files are the ones DVC recorded."""
    copy = tmp_path / "copy"
    shutil.copytree(tiny_repro, copy, symlinks=True, ignore=shutil.ignore_patterns(".dvc", ".git"))
    compare_runs.main([str(copy), "--root", str(tiny_repro)])
    out = capsys.readouterr().out
    verdicts = re.findall(r"^\| \S+ \| \S+ \| (same|differ|not there) \| (yes|no|) \|$", out, re.M)
    assert len(verdicts) > 15 and set(verdicts) == {("same", "yes")}
    rows = re.findall(r"^\| (?:metrics|plots)/\S+ \| (\d+) \| (\d+) \|", out, re.M)
    assert rows and all(numbers == equal for numbers, equal in rows)
