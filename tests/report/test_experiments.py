"""The experiment log: a saved ``dvc exp show --json``, and a tiny real ``dvc exp run`` whose logged
command reproduces the experiment."""

import json
import shlex
import shutil
import sys

import pytest
import yaml
from conftest import REPO, git_dvc_project, run

from minisci.errors import MinisciError
from minisci.report.experiments import carried_rows, experiment_rows, experiments_table, format_value, main, read_log

SAMPLE = REPO / "tests" / "fixtures" / "dvc_exp_show.json"


def table_rows(markdown: str) -> dict[str, dict[str, str]]:
    """The log's rows by experiment name, as {column: cell}."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split(" | ")]
    rows = [dict(zip(header, (c.strip() for c in line.strip("|").split(" | ")))) for line in lines[2:]]
    return {r["experiment"]: r for r in rows}


def test_saved_exp_show_gives_one_row_per_experiment(tmp_path):
    out = tmp_path / "experiments.md"
    main(["--out", str(out), "--json", str(SAMPLE)])
    rows = table_rows(out.read_text())
    assert list(rows) == ["master", "exp-a", "fusil-bort", "repro", "queued-one"]  # baseline, then oldest first
    assert rows["exp-a"]["rev"] == "28d0d22" and rows["exp-a"]["train.lr"] == "0.5"
    assert rows["exp-a"]["reproduce"] == "`dvc exp run -S train.lr=0.5 -S 'train.seeds=[1,2,3]'`"
    assert rows["fusil-bort"]["reproduce"] == (
        "`dvc exp run -S train.lr=0.5 -S 'train.name=two words' -S train.nsp=false -S 'train.seeds=[1,2,3]'`"
    )
    assert rows["master"]["state"] == "baseline" and rows["master"]["reproduce"] == "`git checkout 55ebfcf`"
    assert rows["queued-one"]["state"] == "queued" and rows["queued-one"]["ner.delta.f1"] == ""
    # default metric columns: keys with delta, test.f1, test.macro_f1 or p_value; not seconds.x
    metric_columns = [c for c in rows["master"] if c.startswith(("ner.", "seconds."))]
    assert metric_columns == ["ner.adapted.test.f1", "ner.delta.f1", "ner.delta.p_value"]
    assert rows["exp-a"]["ner.delta.f1"] == "1.0" and rows["master"]["ner.delta.f1"] == "0.2"


def test_metrics_option_chooses_columns():
    rows = experiment_rows(json.loads(SAMPLE.read_text()), "metrics/summary.json")
    header = experiments_table(rows, ("seconds",)).splitlines()[0]
    assert "seconds.x" in header and "ner.delta.f1" not in header


@pytest.mark.parametrize(
    ("value", "text"),
    [(True, "true"), (None, "null"), (5e-05, "5e-05"), ([1, 2], "[1,2]"), ("ce", "ce"), ("true", "'true'")],
)
def test_values_are_written_as_dvc_reads_them(value, text):
    assert format_value(value) == text


def test_unreadable_json_is_one_line_error(tmp_path):
    bad = tmp_path / "show.json"
    bad.write_text("{not json")
    with pytest.raises(MinisciError, match=r"show\.json: cannot read dvc exp show JSON"):
        main(["--out", str(tmp_path / "x.md"), "--json", str(bad)])
    assert not (tmp_path / "x.md").exists()


TOY_STAGE = (
    "python -c \"import json, yaml; p = yaml.safe_load(open('params.yaml'))['train']; "
    "json.dump({'ner.delta.f1': p['lr'] * 2, 'ner.delta.p_value': 0.5 if p['nsp'] else 0.01}, "
    "open('metrics/summary.json', 'w'))\""
)


@pytest.mark.skipif(shutil.which("dvc") is None, reason="needs the dvc command")
def test_logged_command_reproduces_a_real_experiment(tmp_path):
    # 1. a one-stage DVC project in a temporary git repository
    (tmp_path / "metrics").mkdir()
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"train": {"lr": 0.1, "nsp": True}}))
    stage = {"cmd": TOY_STAGE, "params": ["train"], "metrics": [{"metrics/summary.json": {"cache": False}}]}
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"train": stage}}))
    git_dvc_project(
        tmp_path, ["dvc", "exp", "run", "-q", "-n", "mlm-only", "-S", "train.lr=0.25", "-S", "train.nsp=false"]
    )
    # 2. the log, from dvc exp show run by the script itself
    log = [sys.executable, "-m", "minisci.report.experiments", "--out", "metrics/experiments.md"]
    run(log, tmp_path, env={"PYTHONPATH": str(REPO / "src")})
    row = table_rows((tmp_path / "metrics/experiments.md").read_text())["mlm-only"]
    assert (row["train.lr"], row["train.nsp"], row["ner.delta.f1"]) == ("0.25", "false", "0.5")
    # 3. the logged command, run from the baseline, gives the same metrics
    run(["git", "checkout", "-q", "--", "params.yaml"], tmp_path)
    command = shlex.split(row["reproduce"].strip("`"))
    assert command[:3] == ["dvc", "exp", "run"]
    run([*command, "-q", "-n", "again"], tmp_path)
    run(log, tmp_path, env={"PYTHONPATH": str(REPO / "src")})
    again = table_rows((tmp_path / "metrics/experiments.md").read_text())["again"]
    assert {k: again[k] for k in ("train.lr", "train.nsp", "ner.delta.f1", "ner.delta.p_value")} == {
        k: row[k] for k in ("train.lr", "train.nsp", "ner.delta.f1", "ner.delta.p_value")
    }


def test_older_commits_without_experiments_are_left_out():
    """--all-commits lists every commit: HEAD stays as the reference, older commits only with experiments."""
    show = json.loads(SAMPLE.read_text())
    head = next(c for c in show if c["rev"] != "workspace")
    older_empty = {**head, "rev": "1" * 40, "name": None, "experiments": None}
    older_with = {**head, "rev": "2" * 40, "name": None}
    rows = experiment_rows([*show, older_empty, older_with], "metrics/summary.json")
    assert [r["rev"] for r in rows if r["baseline"] is None] == [head["rev"][:7], "2222222"]
    assert len(rows) == 2 * len(experiment_rows(show, "metrics/summary.json"))


def test_rows_of_the_earlier_log_not_listed_here_are_carried(tmp_path):
    """A fresh clone lists no experiments: the committed log's rows stay, marked, with their commands."""
    out = tmp_path / "experiments.md"
    main(["--out", str(out), "--json", str(SAMPLE)])
    before = table_rows(out.read_text())
    show = json.loads(SAMPLE.read_text())
    head = next(c for c in show if c["rev"] != "workspace")
    fresh = tmp_path / "fresh.json"  # a new HEAD commit and no experiments
    fresh.write_text(json.dumps([{**head, "rev": "9" * 40, "name": "main", "experiments": None}]))
    main(["--out", str(out), "--json", str(fresh)])
    after = table_rows(out.read_text())
    kept = [name for name in before if name != "queued-one"]  # what was only queued then is not a result
    assert list(after) == ["main", *kept]  # the new HEAD row, then the earlier rows in their order
    for name in kept:
        assert after[name] == before[name] | {"state": before[name]["state"] + " (carried)"}
    main(["--out", str(out), "--json", str(fresh)])  # carried twice: marked once
    assert table_rows(out.read_text())["exp-a"]["state"] == after["exp-a"]["state"]
    fresher = tmp_path / "fresher.json"  # one more commit: the former HEAD, without experiments, is not carried
    fresher.write_text(json.dumps([{**head, "rev": "8" * 40, "name": "main", "experiments": None}]))
    main(["--out", str(out), "--json", str(fresher)])
    assert list(table_rows(out.read_text())) == ["main", *kept]
    assert table_rows(out.read_text())["main"]["rev"] == "8888888"
    # an experiment listed here again (rerun: a new rev) replaces its carried row; queued rows are not carried
    rows = experiment_rows(json.loads(SAMPLE.read_text()), "metrics/summary.json")
    earlier = [{"experiment": r["name"], "rev": r["rev"] + "x", "state": "success"} for r in rows[1:3]]
    earlier.append({"experiment": "elsewhere", "rev": "abc", "state": "queued"})
    assert carried_rows(earlier, rows) == []
    main(["--out", str(out), "--json", str(fresh), "--no-carry"])
    assert list(table_rows(out.read_text())) == ["main"]


def test_a_carried_row_logged_as_dvc_s_success_is_done_as_the_docs_say():
    earlier = [
        {"experiment": "a", "rev": "abc", "state": "success (stage targets; see studies) (carried)"},
        {"experiment": "b", "rev": "def", "state": "success"},
        {"experiment": "c", "rev": "123", "state": "failed"},
    ]
    states = [r["state"] for r in carried_rows(earlier, [])]
    assert states == ["done (stage targets; see studies) (carried)", "done (carried)", "failed (carried)"]


def test_escaped_pipes_stay_inside_their_cell(tmp_path):
    log = tmp_path / "log.md"
    log.write_text(
        "# x\n\n| experiment | rev | state | reproduce |\n|---|---|---|---|\n| e | abc | done | `a \\| b` |\n"
    )
    rows = read_log(log)
    assert rows == [{"experiment": "e", "rev": "abc", "state": "done", "reproduce": "`a \\| b`"}]
    assert carried_rows(rows, [{"name": "e", "rev": "abc", "baseline": None}]) == []


def test_a_broken_earlier_log_is_one_line_error(tmp_path):
    log = tmp_path / "log.md"
    log.write_text("| experiment | rev | state | reproduce |\n|---|---|---|---|\n| e | abc | done |\n")
    with pytest.raises(MinisciError, match=r"log\.md:3: 3 cells under a header of 4; pass --no-carry"):
        main(["--out", str(log), "--json", str(SAMPLE)])
    assert log.read_text().count("\n") == 3  # left as it was


def test_a_failed_queued_experiment_shows_no_results_and_a_finished_one_is_done():
    # dvc exp show gives a queued experiment that failed the metrics files of the workspace it was queued
    # from (seen after `quick --run`: the quick run's numbers), and DVC's queue calls a finished one success
    show = json.loads(SAMPLE.read_text())
    commit = next(c for c in show if c.get("rev") != "workspace" and c.get("experiments"))
    finished = next(e for e in commit["experiments"] if (e["revs"][0]["data"].get("metrics") or {}))
    commit["experiments"] = [
        {**finished, "executor": {"state": "success"}, "name": "ok"},
        {**finished, "executor": {"state": "failed"}, "name": "broke"},
    ]
    commit["experiments"][0]["revs"] = [{**finished["revs"][0], "name": "ok"}]
    commit["experiments"][1]["revs"] = [{**finished["revs"][0], "name": "broke"}]
    rows = {r["name"]: r for r in experiment_rows([commit], "metrics/summary.json")}
    assert rows["ok"]["state"] == "done" and rows["ok"]["metrics"]
    assert rows["broke"]["state"] == "failed" and rows["broke"]["metrics"] == {}
