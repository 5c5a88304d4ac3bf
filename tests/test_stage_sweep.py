"""Debris after ``kill -9`` and Ctrl-C: a rerun of *any* stage clears what a killed write of any
other output left behind (temporaries, and in the move-aside fallback the old output is put back
first); a write still running is left alone; Ctrl-C is one line and exit code 130."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import yaml
from conftest import FIXTURE_MIRROR, REPO, fixture_manifest
from helpers import KILL_CHILD, NEW, OLD, tree, write_old

import minisci.io as mio
from minisci.io import OUTPUT_MARKER, atomic_path, sweep

# A stage of a DVC project: writes one directory output through run_stage (which sweeps first).
STAGE = """
import json, sys
from minisci.io import atomic_path
from minisci.stage import run_stage

def main(argv):
    out, files = sys.argv[1], json.loads(sys.argv[2])
    with atomic_path(out) as tmp:
        for name, text in files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(text)

sys.exit(run_stage(main))
"""


def env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO / "src")}


@pytest.mark.parametrize("exchange", [True, False], ids=["rename-exchange", "move-aside"])
def test_a_kill_then_a_run_of_another_stage_leaves_no_debris(tmp_path, exchange):
    """Kill a write of models/a after each of its filesystem operations, then run a stage that
    writes metrics/b: models/a holds the old or the new content and no temporary is left anywhere."""
    stage = tmp_path / "stage.py"
    stage.write_text(STAGE)
    old = {**OLD}
    total = None
    for k in range(1, 40):
        project = tmp_path / f"p{k}"
        (project / "models").mkdir(parents=True)
        (project / "dvc.yaml").write_text("stages: {}\n")
        write_old(project / "models" / "a")
        old = tree(project / "models" / "a")
        argv = [str(stage), "models/a", json.dumps(NEW)]
        flags = [] if exchange else ["--no-exchange"]
        proc = subprocess.run(
            [sys.executable, str(KILL_CHILD), str(k), *flags, *argv],
            cwd=project,
            env=env(),
            capture_output=True,
            text=True,
        )
        if proc.returncode == 0:
            total = k
            break
        assert proc.returncode == -9, proc.stderr
        other = subprocess.run(
            [sys.executable, str(stage), "metrics/b", json.dumps({"b.txt": "b"})],
            cwd=project,
            env=env(),
            capture_output=True,
            text=True,
        )
        assert other.returncode == 0, other.stderr
        assert tree(project / "models" / "a") in (old, {**NEW, OUTPUT_MARKER: old[OUTPUT_MARKER]}), f"killed after {k}"
        assert sorted(p.name for p in (project / "models").iterdir()) == ["a"], f"killed after operation {k}"
    assert total and total > 5


def test_a_running_write_is_not_swept(tmp_path):
    write_old(tmp_path / "out")
    with atomic_path(tmp_path / "out") as tmp:
        tmp.mkdir()
        (tmp / "a.txt").write_text("new")
        sweep(tmp_path)  # another process's run, while this write is under way
        assert (tmp / "a.txt").read_text() == "new"
    assert tree(tmp_path / "out")["a.txt"] == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_temporary_changed_since_the_process_started_is_not_swept(tmp_path):
    """Another process writing beside this one may be between creating its temporary and taking the
    lock in it: a temporary without a lock is swept only if it is older than the sweeping process."""
    young = tmp_path / ".b.json.abcdefgh.tmp"
    young.mkdir()  # created after this process started, no lock yet
    sweep(tmp_path)
    assert young.is_dir()
    os.utime(young, (mio._STARTED - 5, mio._STARTED - 5))  # the same, left before this process started
    sweep(tmp_path)
    assert not young.exists()


WRITERS = """
import sys
from minisci.io import write_json
for i in range(int(sys.argv[3])):
    write_json(f"{sys.argv[1]}/w{sys.argv[2]}-{i % 5}.json", {"i": i})
"""


@pytest.mark.slow
def test_processes_writing_beside_each_other_do_not_sweep_each_others_writes(tmp_path):
    """Four processes writing their own files into one folder at once (as DDP ranks write their
    loss windows into a checkpoint): none fails, none loses a file, no temporary is left."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITERS, str(tmp_path), str(w), "300"], env=env(), stderr=subprocess.PIPE
        )
        for w in range(4)
    ]
    stderr = [p.communicate()[1].decode() for p in procs]
    errors = [err[-2000:] for p, err in zip(procs, stderr) if p.returncode]
    assert not errors, errors[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"w{w}-{i}.json" for w in range(4) for i in range(5))


def test_a_sweep_restores_the_aside_of_a_killed_fallback_swap(tmp_path, monkeypatch):
    """What a kill between the two renames of the move-aside fallback leaves: no output, the old
    one aside and the new one in an abandoned temporary."""
    (tmp_path / "models").mkdir()
    write_old(tmp_path / "models" / "a")
    old = tree(tmp_path / "models" / "a")
    (tmp_path / "models" / "a").rename(tmp_path / "models" / ".a.k7x2m9qz.old")
    (tmp_path / "models" / ".a.k7x2m9qz.tmp").mkdir()
    (tmp_path / "models" / ".a.k7x2m9qz.tmp" / mio._LOCK).write_bytes(b"")  # the killed writer's, now free
    (tmp_path / "models" / ".a.k7x2m9qz.tmp" / "half.txt").write_text("half")
    (tmp_path / "models" / ".b.abcdefgh.tmp").mkdir()  # a killed write of another output
    monkeypatch.setattr(mio, "_STARTED", time.time())  # the next run's sweep
    sweep(tmp_path)
    assert tree(tmp_path / "models" / "a") == old
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["a"]


def test_a_sweep_leaves_alone_what_is_only_named_like_a_temporary(tmp_path, monkeypatch):
    """A user's files and folders named like temporaries or asides, with no lock file of ours inside,
    are neither deleted nor renamed over an output's name."""
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / ".notes.abcdefgh.tmp").write_text("mine")
    (tmp_path / "models" / ".drafts.abcdefgh.tmp").mkdir()
    (tmp_path / "models" / ".drafts.abcdefgh.tmp" / "d.txt").write_text("mine")
    (tmp_path / "models" / ".report.k7x2m9qz.old").write_text("mine")  # no output called report
    (tmp_path / "models" / ".a.k7x2m9qz.old").write_text("mine")  # beside an output called a
    write_old(tmp_path / "models" / "a")
    before = {p.name for p in (tmp_path / "models").iterdir()}
    monkeypatch.setattr(mio, "_STARTED", time.time() + 60)
    sweep(tmp_path)
    assert {p.name for p in (tmp_path / "models").iterdir()} == before
    assert (tmp_path / "models" / ".notes.abcdefgh.tmp").read_text() == "mine"
    assert (tmp_path / "models" / ".drafts.abcdefgh.tmp" / "d.txt").read_text() == "mine"
    assert (tmp_path / "models" / ".report.k7x2m9qz.old").read_text() == "mine"


def test_a_temporary_removed_midway_is_still_known_as_ours(tmp_path, monkeypatch):
    """Its lock file goes last: a kill while a temporary is being removed leaves one that the next
    sweep still recognises and clears."""
    tmp = tmp_path / ".a.abcdefgh.tmp"
    tmp.mkdir()
    (tmp / mio._LOCK).write_bytes(b"")
    for name in ("x.txt", "y.txt"):
        (tmp / name).write_text(name)

    def killed(path):
        raise KeyboardInterrupt

    monkeypatch.setattr(mio, "_remove", killed)
    with pytest.raises(KeyboardInterrupt):
        mio._remove_temporary(tmp)
    monkeypatch.undo()
    assert (tmp / mio._LOCK).is_file()
    monkeypatch.setattr(mio, "_STARTED", time.time() + 60)
    sweep(tmp_path)
    assert list(tmp_path.iterdir()) == []


INTERRUPT = """
import os, runpy, shutil, signal, sys
real = shutil.copyfile
def copy_then_ctrl_c(*args, **kwargs):
    real(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C in the terminal sends
shutil.copyfile = copy_then_ctrl_c
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_ctrl_c_during_fetch_data_is_one_line_and_exit_130(tmp_path):
    fixture_manifest(tmp_path / "m.tsv")
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"fetch_data": {"mirror": str(FIXTURE_MIRROR)}}))
    (tmp_path / "interrupt.py").write_text(INTERRUPT)
    argv = [str(REPO / "stages" / "fetch_data.py"), "--manifest", str(tmp_path / "m.tsv")]
    argv += ["--out", str(tmp_path / "work" / "raw"), "--params", str(params)]
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "interrupt.py"), *argv], env=env(), capture_output=True, text=True
    )
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "error: interrupted" and "Traceback" not in proc.stderr
    assert not (tmp_path / "work").exists() or [p.name for p in (tmp_path / "work").iterdir()] == []
