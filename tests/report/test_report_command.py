"""``python -m minisci.report``: options that cannot work are refused before any file is written."""

from __future__ import annotations

import importlib

import pytest
from conftest import REPO

from minisci.stage import run_command

main = importlib.import_module("minisci.report.__main__").main
SAMPLE = REPO / "tests" / "fixtures" / "dvc_exp_show.json"


def outputs(tmp_path) -> list[str]:
    return [
        "--experiments",
        str(tmp_path / "e.md"),
        "--studies",
        str(tmp_path / "s.md"),
        "--charts",
        str(tmp_path / "c"),
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["queue", "--only"], "argument --only: expected at least one argument"),
        (["--resamples", "0"], "--resamples must be >= 100, got 0"),
        (["--seed", "-1"], "--seed must be in [0, 2**32 - 1], got -1"),
        (["--metrics-file", "no/such.json"], "--metrics-file no/such.json: no such file"),
    ],
    ids=["--only without a name (it used to mean all)", "no resamples", "negative seed", "missing metrics file"],
)
def test_an_option_that_cannot_work_is_refused_and_nothing_is_written(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        main([*argv, "--json", str(SAMPLE), *outputs(tmp_path)])
    assert e.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"python -m minisci.report: error: {message}"
    assert list(tmp_path.iterdir()) == []


def test_an_empty_exp_show_is_refused_before_the_studies_are_written(tmp_path, capsys):
    (tmp_path / "show.json").write_text("[]")
    assert run_command(main, ["--json", str(tmp_path / "show.json"), *outputs(tmp_path)]) == 1
    assert capsys.readouterr().err == (
        f"error: {tmp_path / 'show.json'}: no commits or experiments (dvc exp show --json lists the workspace at least)\n"
    )
    assert [p.name for p in tmp_path.iterdir()] == ["show.json"]


def test_reading_every_commit_says_so_before_it_starts(monkeypatch, capsys):
    # dvc exp show --all-commits took 8 min on 2 cores the first time in a clone of ~660 commits: the
    # command says what it is waiting for before it waits
    import subprocess

    from minisci.report import exp_show

    def fake_run(cmd, **kwargs):
        assert "reading dvc exp show --json --all-commits" in capsys.readouterr().err  # printed first
        return subprocess.CompletedProcess(cmd, 0, stdout=SAMPLE.read_text(), stderr="")

    monkeypatch.setattr(subprocess, "run", fake_run)
    assert exp_show.read_show(None)
