"""Faults: a SIGKILL after every filesystem operation of an atomic write and of ``fetch_data``,
corrupt checkpoints, atomic curves, and the one error mechanism at the top of the stages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import FIXTURE_MIRROR, REPO, fixture_manifest
from helpers import KILL_CHILD, NEW, tree, write_old

import minisci.io as mio
from minisci.io import OUTPUT_MARKER, atomic_path, recover, sha256_file
from minisci.stage import run_stage
from minisci.training import checkpoint_to_resume, write_curves

WRITER = """
import json, sys
from pathlib import Path
from minisci.io import atomic_path
with atomic_path(sys.argv[1]) as tmp:
    for name, text in json.loads(sys.argv[2]).items():
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_text(text)
"""


def child(kill_at: int, *args: str, exchange: bool = True) -> subprocess.CompletedProcess:
    flags = [] if exchange else ["--no-exchange"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run(
        [sys.executable, str(KILL_CHILD), str(kill_at), *flags, *args], env=env, capture_output=True, text=True
    )


def ops(proc: subprocess.CompletedProcess) -> int:
    return int(proc.stderr.strip().splitlines()[-1].removeprefix("ops="))


@pytest.mark.parametrize("exchange", [True, False], ids=["rename-exchange", "move-aside"])
def test_kill_after_every_filesystem_operation_leaves_old_or_new(tmp_path, exchange, monkeypatch):
    writer = tmp_path / "writer.py"
    writer.write_text(WRITER)
    probe = tmp_path / "probe"
    write_old(probe / "out")
    old = tree(probe / "out")
    new = {**NEW, OUTPUT_MARKER: old[OUTPUT_MARKER]}
    total = ops(child(0, str(writer), str(probe / "out"), json.dumps(NEW), exchange=exchange))
    assert total > 5 and tree(probe / "out") == new
    for k in range(1, total + 1):
        work = tmp_path / f"k{k}"
        out = work / "out"
        write_old(out)
        proc = child(k, str(writer), str(out), json.dumps(NEW), exchange=exchange)
        assert proc.returncode == -9, proc.stderr
        if exchange:  # one atomic syscall: the path itself always holds a whole version
            assert tree(out) in (old, new), f"killed after operation {k}"
        monkeypatch.setattr(mio, "_STARTED", time.time())  # a run started after the kill
        recover(out)  # what the next run does first (the move-aside fallback needs it)
        assert tree(out) in (old, new), f"killed after operation {k}"
        assert child(0, str(writer), str(out), json.dumps(NEW), exchange=exchange).returncode == 0
        assert tree(out) == new and [p.name for p in work.iterdir()] == ["out"], f"killed after operation {k}"


def test_kill_during_fetch_data_then_rerun_completes_without_stray_files(tmp_path):
    entries = fixture_manifest(tmp_path / "m.tsv")
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"fetch_data": {"mirror": str(FIXTURE_MIRROR)}}))
    stage = str(REPO / "stages" / "fetch_data.py")
    work = tmp_path / "work"
    work.mkdir()
    argv = [stage, "--manifest", str(tmp_path / "m.tsv"), "--out", str(work / "raw"), "--params", str(params)]
    total = ops(child(0, *argv))
    (work / "raw").rename(tmp_path / "first")  # a first run's output: later runs replace one like it
    for k in sorted({1, 2, total // 3, total // 2, total - 3, total - 2, total - 1, total}):
        if (tmp_path / "first").exists():
            (tmp_path / "first").rename(work / "raw")
        assert child(k, *argv).returncode == -9
        rerun = child(0, *argv)
        assert rerun.returncode == 0, rerun.stderr
        assert [p.name for p in work.iterdir()] == ["raw"], f"stray files after a kill at operation {k}"
        assert {e.path: e.sha256 for e in entries} == {e.path: sha256_file(work / "raw" / e.path) for e in entries}


def test_existing_directory_that_is_not_ours_is_refused_not_deleted(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out/thesis.tex").write_text("years of work")
    with pytest.raises(Exception, match=r"out: exists and is not an earlier minisci output .*refusing to delete"):
        with atomic_path(tmp_path / "out") as tmp:
            tmp.mkdir()
    assert tree(tmp_path / "out") == {"thesis.tex": "years of work"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_owned_predicate_recognises_outputs_written_before_the_marker(tmp_path):
    (tmp_path / "index").mkdir()
    (tmp_path / "index/index.json").write_text("{}")
    with atomic_path(tmp_path / "index", owned=lambda p: (p / "index.json").is_file()) as tmp:
        tmp.mkdir()
        (tmp / "index.json").write_text('{"v": 2}')
    assert tree(tmp_path / "index") == {
        "index.json": '{"v": 2}',
        OUTPUT_MARKER: tree(tmp_path / "index")[OUTPUT_MARKER],
    }


def test_a_failed_block_keeps_the_old_output_and_leaves_no_temporaries(tmp_path):
    write_old(tmp_path / "out")
    before = tree(tmp_path / "out")
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "out") as tmp:
        tmp.mkdir()
        raise RuntimeError("training diverged")
    assert tree(tmp_path / "out") == before and [p.name for p in tmp_path.iterdir()] == ["out"]


def test_directory_output_over_a_symlink_or_file_is_refused(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(Exception, match="link: is a symbolic link"), atomic_path(tmp_path / "link") as tmp:
        tmp.mkdir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(Exception, match="file: exists and is a file"), atomic_path(tmp_path / "file") as tmp:
        tmp.mkdir()
    assert (tmp_path / "file").read_text() == "x" and (tmp_path / "link").is_symlink()


# --- checkpoints ---------------------------------------------------------------------------


def make_checkpoint(ckpt: Path, step: int) -> Path:
    path = ckpt / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (path / "config.json").write_text("{}")
    return path


def test_truncated_fingerprint_starts_fresh_instead_of_failing_forever(tmp_path):
    ckpt = tmp_path / "ckpt"
    assert checkpoint_to_resume(ckpt, "run-a") is None
    make_checkpoint(ckpt, 4)
    (ckpt / "fingerprint.json").write_text('{"fingerpr')  # killed while the old code wrote it
    assert checkpoint_to_resume(ckpt, "run-a") is None and not (ckpt / "checkpoint-4").exists()
    assert json.loads((ckpt / "fingerprint.json").read_text()) == {"fingerprint": "run-a"}


@pytest.mark.parametrize(
    "corrupt, reason",
    [
        (lambda p: (p / "trainer_state.json").write_text('{"global_st'), "trainer_state.json is unreadable"),
        (lambda p: (p / "trainer_state.json").write_bytes(b"\xff\xfe"), "trainer_state.json is unreadable"),
        (
            lambda p: (p / "trainer_state.json").write_text('{"global_step": 3}'),
            "trainer_state.json does not describe step 8",
        ),
        (lambda p: (p / "config.json").write_text("{"), "config.json is unreadable"),
        (lambda p: (p / "model.safetensors").write_bytes(b"\x10\x00"), "model.safetensors is truncated"),
        (lambda p: (p / "optimizer.pt").write_bytes(b"PK\x03\x04trunc"), "optimizer.pt is truncated"),
        (lambda p: (p / "trainer_state.json").unlink(), "no trainer_state.json"),
    ],
)
def test_corrupt_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, capsys, corrupt, reason):
    ckpt = tmp_path / "ckpt"
    checkpoint_to_resume(ckpt, "run-a")
    make_checkpoint(ckpt, 4)
    corrupt(make_checkpoint(ckpt, 8))
    assert checkpoint_to_resume(ckpt, "run-a") == ckpt / "checkpoint-4"
    assert f"checkpoint-8: {reason}" in capsys.readouterr().err and not (ckpt / "checkpoint-8").exists()


def test_whole_torch_and_safetensors_files_pass_the_check(tmp_path):
    import torch
    from safetensors.torch import save_file

    ckpt = tmp_path / "ckpt"
    checkpoint_to_resume(ckpt, "run-a")
    path = make_checkpoint(ckpt, 2)
    save_file({"w": torch.zeros(3)}, path / "model.safetensors")
    torch.save({"lr": 0.1}, path / "optimizer.pt")
    assert checkpoint_to_resume(ckpt, "run-a") == path


# --- curves --------------------------------------------------------------------------------


def test_write_curves_replaces_the_folder_whole(tmp_path):
    plots = tmp_path / "plots"
    write_curves([{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.0}], plots, ("loss",))
    assert (plots / "curves/loss.tsv").is_file() and (plots / OUTPUT_MARKER).is_file()
    with pytest.raises(TypeError):  # a failure while writing keeps the previous curves
        write_curves([{"step": 1, "loss": object()}], plots, ("loss",))
    assert (plots / "curves/loss.tsv").read_text().count("\n") == 3
    assert [p.name for p in tmp_path.iterdir()] == ["plots"]


def test_write_curves_replaces_curves_written_before_markers_but_not_other_folders(tmp_path):
    legacy = tmp_path / "legacy"
    (legacy / "plots/metrics").mkdir(parents=True)
    (legacy / "plots/metrics/loss.tsv").write_text("step\tloss\n")
    write_curves([{"step": 1, "loss": 2.0}], legacy, ("loss",))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine/notes.md").write_text("keep")
    with pytest.raises(Exception, match="refusing to delete"):
        write_curves([{"step": 1, "loss": 2.0}], tmp_path / "mine", ("loss",))
    assert (tmp_path / "mine/notes.md").read_text() == "keep"


# --- one error mechanism -------------------------------------------------------------------


def _raise(exc: BaseException):
    def main(argv):
        raise exc

    return main


@pytest.mark.parametrize(
    "exc, message",
    [
        (
            FileNotFoundError(2, "No such file or directory", "data/x.txt"),
            "error: data/x.txt: No such file or directory",
        ),
        (IsADirectoryError(21, "Is a directory", "data"), "error: data: Is a directory"),
        (
            UnicodeDecodeError("utf-8", b"ab\xff", 2, 3, "invalid"),
            "error: input is not UTF-8: byte 0xff at byte offset 2",
        ),
        (json.JSONDecodeError("Expecting value", "x\n{", 2), "error: invalid JSON: Expecting value: line 2 column 1"),
        (yaml.YAMLError("bad\nthing"), "error: invalid YAML: bad thing"),
    ],
)
def test_run_stage_turns_library_errors_into_one_line(capsys, exc, message):
    assert run_stage(_raise(exc)) == 1
    err = capsys.readouterr().err
    assert err == message + "\n"


def test_run_stage_keeps_tracebacks_for_bugs_and_exit_2_for_usage():
    with pytest.raises(ZeroDivisionError):
        run_stage(_raise(ZeroDivisionError()))
    with pytest.raises(SystemExit) as e:
        run_stage(_raise(SystemExit(2)))
    assert e.value.code == 2


def _strays(root: Path) -> list[str]:
    """Temporaries of a killed atomic write (``.NAME.*.tmp`` / ``.old``) anywhere in a project."""
    return sorted(p.name for p in root.rglob(".*") if p.name.endswith((".tmp", ".old")))


def _results(proj: Path) -> dict:
    m = json.loads((proj / "metrics/finetune_ner/bc5cdr/baseline.json").read_text())
    return {k: v for k, v in m.items() if k not in ("wall_seconds", "environment")}


@pytest.mark.slow
def test_kill_9_during_a_finetuning_stage_then_dvc_repro_gives_the_uninterrupted_metrics(tiny_repro, tmp_path):
    """`kill -9` of `dvc repro` in the middle of fine-tuning (after an epoch checkpoint), then
    `dvc repro` again: it resumes, ends with the metrics of an uninterrupted run, and leaves no strays.
    Both start from a copy of the session's tiny repro (its data and base model), with 24 epochs (eight
    were too few on a loaded machine: the stage could finish between two looks for a checkpoint);
    the kill waits for a checkpoint before the last step (the uninterrupted run's last one), since the
    tiny run's epochs take a fraction of a second and the stage's metrics come right after the last."""
    import shutil
    import signal
    import time

    from conftest import copy_project, run

    stage = "finetune_ner@bc5cdr-baseline"
    proj = copy_project(tiny_repro, tmp_path / "proj")
    params = yaml.safe_load((proj / "params.yaml").read_text())
    params["finetune_ner"]["epochs"] = 24.0
    (proj / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    ckpts = proj / "models/finetune_checkpoints/ner/bc5cdr/baseline/seed13"
    shutil.rmtree(ckpts)  # the one-epoch run's: the checkpoint awaited below is the new run's
    ref = copy_project(proj, tmp_path / "ref")  # the same inputs, run without a kill
    run(["dvc", "repro", "-s", stage], ref)
    ref_ckpts = ref / ckpts.relative_to(proj)
    last = max(int(c.name.rsplit("-", 1)[1]) for c in ref_ckpts.glob("checkpoint-[0-9]*"))
    env = {**os.environ, "MINISCI_DATA_MIRROR": str(FIXTURE_MIRROR)}
    proc = subprocess.Popen(
        ["dvc", "repro", "-s", stage],
        cwd=proj,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    from minisci.training import checkpoint_problem

    def whole_checkpoint() -> bool:  # a trainer_state.json alone may be caught half-written
        return any(
            checkpoint_problem(c) is None
            for c in ckpts.glob("checkpoint-[0-9]*")
            if c.is_dir() and c.name.rsplit("-", 1)[1].isdigit() and int(c.name.rsplit("-", 1)[1]) < last
        )

    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not whole_checkpoint():
        time.sleep(0.05)
    assert proc.poll() is None, "the stage finished before it could be killed; raise the epochs"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (proj / "metrics/finetune_ner/bc5cdr/baseline.json").exists()  # dvc removed the old run's
    out = run(["dvc", "repro", "-s", stage], proj).stdout
    assert f"Running stage '{stage}'" in out and "resuming from" in out
    assert _results(proj) == _results(ref)
    assert _strays(proj) == []
