"""Studies: the spec, the scores and the seed-aware comparison on a tiny real ``dvc exp run`` whose
answer is known, and the experiment log's commands for the studies' experiments."""

import json
import shutil
import sys

import numpy as np
import pytest
import yaml
from conftest import REPO, committed_tree, git_dvc_project, run

from minisci.errors import MinisciError
from minisci.report import studies
from minisci.report.experiments import experiment_rows, experiments_table, spec_commands
from minisci.tasks.classification import CLASSIFICATION
from minisci.tasks.ner import NER

SAMPLE = REPO / "tests" / "fixtures" / "dvc_exp_show.json"

SPEC = {
    "experiments": {
        "welt": {"set": {"finetune_ner.loss": "welt"}, "targets": ["ner"]},
        "crf": {"set": {"finetune_ner.crf": True}},
    },
    "studies": {
        "welt_toy": {
            "title": "WELT against CE, toy",
            "dataset": "toy",
            "a": {"commit_of": "welt", "arm": "baseline", "label": "CE"},
            "b": {"experiment": "welt", "arm": "baseline", "label": "WELT"},
        },
        "crf_toy": {
            "dataset": "toy",
            "a": {"commit_of": "crf", "label": "softmax"},
            "b": {"experiment": "crf", "label": "CRF"},
        },
    },
    "curves": {"budget": {"title": "Toy curve", "x_label": "budget", "points": {1: "welt_toy", 2: "crf_toy"}}},
    "ablation": [
        {"study": "welt_toy", "ingredient": "WELT loss", "note": "toy"},
        {"study": "crf_toy", "ingredient": "CRF"},
    ],
}


def test_packaged_spec_parses_and_names_known_stages(tmp_path):
    # the studies are queued on the commit (report queue refuses uncommitted changes), so its params count
    spec = studies.load_spec()
    params = yaml.safe_load((committed_tree(tmp_path) / "params.yaml").read_text())
    assert "welt_ncbi" in spec.studies and "typed_bc5cdr" in spec.studies
    for exp in spec.experiments.values():
        for target in exp.targets:
            stage, _, item = target.partition("@")
            assert stage in {"finetune_ner", "finetune_classification", "export_metrics"}
            if item:  # the matrix item of a targeted arm exists under the experiment's datasets
                dataset, _, arm = item.rpartition("-")
                datasets = exp.set.get(f"{stage}.datasets", params[stage]["datasets"])
                assert arm in studies.ARMS and dataset in datasets


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"studies": {"s": {"dataset": "toy", "a": {"experiment": "nope"}, "b": {"experiment": "welt"}}}},
            r"'nope' is not under experiments",
        ),
        (
            {
                "studies": {
                    "s": {"dataset": "toy", "a": {"experiment": "welt", "arm": "x"}, "b": {"experiment": "welt"}}
                }
            },
            r"studies\.s\.a\.arm",
        ),
        (
            {
                "studies": {
                    "s": {
                        "dataset": "toy",
                        "a": {"experiment": "welt", "commit_of": "welt"},
                        "b": {"experiment": "welt"},
                    }
                }
            },
            "exactly one of",
        ),
        ({"studies": {"s": {"a": {"experiment": "welt"}, "b": {"experiment": "welt"}}}}, "dataset: is missing"),
        ({"experiments": {"welt": {"set": {}, "target": ["ner"]}}}, "unknown key 'target'"),
        ({"curves": {"c": {"points": {1: "nope"}}}}, r"curves\.c\.points\.1: study 'nope'"),
        ({"curves": {"c": {"points": {"many": "welt_toy"}}}}, r"curves\.c\.points: 'many' is not a number"),
        ({"ablation": [{"study": "nope", "ingredient": "x"}]}, r"ablation\[0\]\.study: 'nope' is not under studies"),
        ({"ablation": [{"study": "welt_toy"}]}, r"ablation\[0\]\.ingredient: is missing"),
        ({"ablation": {"welt_toy": "x"}}, r"ablation: expected a list"),
    ],
)
def test_bad_spec_is_one_line_error_naming_file_and_key(tmp_path, change, message):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({**SPEC, **change}))
    with pytest.raises(MinisciError, match=message) as e:
        studies.load_spec(str(path))
    assert str(e.value).startswith(str(path)) and "\n" not in str(e.value)


def test_queue_commands_skip_experiments_that_ran(capsys):
    spec = studies.parse_spec(SPEC, "spec")
    show = json.loads(SAMPLE.read_text())
    commands = studies.queue(spec, [], dry_run=True, show=show)
    assert commands[0] == ["dvc", "exp", "run", "--queue", "-n", "welt", "-S", "finetune_ner.loss=welt", "ner"]
    assert commands[1][-2:] == ["-S", "finetune_ner.crf=true"]
    present = studies.pending_or_done(show)
    assert present  # the fixture's experiments count as run
    named = {**SPEC, "experiments": {next(iter(present)): {"set": {}}}, "studies": {}, "curves": {}, "ablation": []}
    assert studies.queue(studies.parse_spec(named, "spec"), [], dry_run=True, show=show) == []
    with pytest.raises(MinisciError, match="--only: 'nope'"):
        studies.queue(spec, ["nope"], dry_run=True, show=show)


def test_queue_refuses_uncommitted_params_that_dvc_would_queue_with(tmp_path, monkeypatch, capsys):
    """dvc exp run --queue copies the workspace's uncommitted changes into each experiment (after
    ``python -m minisci.profiles quick --run``: its params.yaml and dvc.lock), so queueing the studies
    then would run them on the profile, not on the commit their sides are compared with."""
    for cmd in (
        ["git", "init", "-q"],
        ["git", "config", "user.email", "t@example.com"],
        ["git", "config", "user.name", "t"],
    ):
        run(cmd, tmp_path)
    (tmp_path / "params.yaml").write_text("finetune_ner:\n  epochs: 5.0\n")
    (tmp_path / "README.md").write_text("a project\n")
    run(["git", "add", "-A"], tmp_path)
    run(["git", "commit", "-qm", "baseline"], tmp_path)
    monkeypatch.chdir(tmp_path)
    spec = studies.parse_spec(SPEC, "spec")
    assert len(studies.queue(spec, [], dry_run=True, show=[])) == 2
    assert "warning" not in capsys.readouterr().err
    (tmp_path / "params.yaml").write_text("finetune_ner:\n  epochs: 2.0\n")  # a profile's run, say
    (tmp_path / "README.md").write_text("an edit\n")  # named after params.yaml, which decides the runs
    with pytest.raises(
        MinisciError, match=r"^uncommitted changes to params\.yaml, README\.md: dvc exp run --queue"
    ) as e:
        studies.queue(spec, [], dry_run=False, show=[])
    assert "\n" not in str(e.value)
    assert "dvc exp run --queue" not in capsys.readouterr().out  # nothing was queued
    assert len(studies.queue(spec, [], dry_run=True, show=[])) == 2  # --dry-run prints, and warns
    assert capsys.readouterr().err.startswith("warning: uncommitted changes to params.yaml")


def test_scores_per_seed_and_type():
    gold = [["B-A", "I-A", "O", "B-B"]] * 4
    seed1 = [["B-A", "I-A", "O", "O"]] * 4  # every B missed: A perfect, B recall 0
    seed2 = [["B-A", "O", "O", "B-B"]] * 4  # A cut short: a false positive and a miss
    summary, overall, per_type = studies.score_side(NER, gold, [seed1, seed2], ["A", "B"], ["A", "B"])
    assert summary["per_seed"]["precision"] == [1.0, 0.5]
    assert summary["per_seed"]["recall"] == [0.5, 0.5]
    assert summary["f1"]["mean"] == pytest.approx((2 / 3 + 0.5) / 2, abs=1e-4)
    assert summary["per_type"]["B"]["f1"]["mean"] == pytest.approx(0.5)  # 0 and 1
    assert summary["per_type"]["A"]["support"] == 4
    np.testing.assert_array_equal(overall[0].sum(0), [4, 4, 4, 0, 0, 4])  # [tp, predicted, gold] of A, then B


TOY_STAGE = """\
import json, os, yaml
p = yaml.safe_load(open("params.yaml"))["finetune_ner"]
os.makedirs("models/finetune_ner/toy/baseline", exist_ok=True)
os.makedirs("metrics/finetune_ner/toy", exist_ok=True)
rows = []
for i in range(40):
    gold = ["B-A", "I-A", "O", "B-B"]
    preds = {}
    for s in p["seeds"]:
        pred = list(gold)
        if p["loss"] == "ce" and i % 10 == 0:  # CE misses 4 of the 40 A mentions
            pred[0] = pred[1] = "O"
        if p["loss"] == "welt" and (i + s) % 4 == 0:  # WELT misses 10 of the 40 B mentions
            pred[3] = "O"
        preds[str(s)] = pred
    rows.append({"gold": gold, "pred": preds[str(p["seeds"][0])], "preds": preds, "sentence": i})
with open("models/finetune_ner/toy/baseline/test_predictions.jsonl", "w") as f:
    f.writelines(json.dumps(r) + "\\n" for r in rows)
json.dump({"seeds": p["seeds"]}, open("metrics/finetune_ner/toy/baseline.json", "w"))
"""


@pytest.mark.skipif(shutil.which("dvc") is None, reason="needs the dvc command")
def test_report_on_a_real_experiment_finds_the_planted_difference(tmp_path):
    # 1. a one-stage DVC project: CE at the baseline commit, WELT as an experiment
    params = {"finetune_ner": {"loss": "ce", "crf": False, "seeds": [1, 2, 3]}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    (tmp_path / "data").mkdir()  # the catalogue, with the published scores the study shows
    catalogue = {"datasets": {"toy": {"published": {"f1": {"SomeBERT": 0.9}, "f1.A": {"SomeBERT": 0.8}}}}}
    (tmp_path / "data/datasets.yaml").write_text(yaml.safe_dump(catalogue))
    (tmp_path / "ner.py").write_text(TOY_STAGE)
    stage = {
        "cmd": "python ner.py",
        "deps": ["ner.py", "data/datasets.yaml"],
        "params": ["finetune_ner"],
        "outs": ["models/finetune_ner", {"metrics/finetune_ner/toy/baseline.json": {"cache": False}}],
    }
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"ner": stage}}))
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    git_dvc_project(tmp_path, ["dvc", "exp", "run", "-q", "-n", "welt", "-S", "finetune_ner.loss=welt", "ner"])
    # 2. the report and the log, as a user runs them
    env = {"PYTHONPATH": str(REPO / "src")}
    log = [sys.executable, "-m", "minisci.report"]  # metrics/experiments.md and metrics/studies.md
    run([*log, "--spec", "spec.yaml"], tmp_path, env=env)
    result = json.loads((tmp_path / "metrics/studies.json").read_text())
    welt, crf = result["welt_toy"], result["crf_toy"]
    assert crf["status"] == "not run" and crf["missing"] == {"crf": "not run"}
    assert welt["status"] == "done" and welt["seeds"] == [1, 2, 3] and welt["types"] == ["A", "B"]
    ce_f1, welt_f1 = 2 * 76 / (76 + 80), 2 * 70 / (70 + 80)  # tp / predicted / gold, known by construction
    assert welt["a"]["f1"] == {"mean": round(ce_f1, 4), "sd": 0.0}
    assert welt["b"]["f1"] == {"mean": round(welt_f1, 4), "sd": 0.0}
    assert welt["a"]["params"]["loss"] == "ce" and welt["b"]["params"]["loss"] == "welt"
    d = welt["delta"]
    assert d["f1"]["difference"] == pytest.approx(welt_f1 - ce_f1, abs=1e-4)
    assert d["f1"]["seeds_b_better"] == 0 and d["f1"]["ci_high"] < 0 and d["f1"]["p_value"] < 0.05
    assert d["precision"]["difference"] == 0.0  # both only miss: all the change is in recall
    assert d["recall"]["difference"] == pytest.approx(70 / 80 - 76 / 80, abs=1e-4)
    assert d["per_type_f1"]["A"]["difference"] > 0 > d["per_type_f1"]["B"]["difference"]
    markdown = (tmp_path / "metrics/studies.md").read_text()
    assert "SomeBERT 90.00" in markdown and "| A | 40 |" in markdown
    assert "dvc exp run --queue -n crf -S finetune_ner.crf=true" in markdown  # the not-run study's command
    assert (tmp_path / "plots/studies/pr_tradeoff.png").stat().st_size > 0
    assert (tmp_path / "plots/studies/per_type_f1.png").stat().st_size > 0
    # the curve: the done study's difference at x = 1, the not-run one named at x = 2
    assert "## Toy curve" in markdown and f"| 1 | welt_toy | {100 * ce_f1:.2f} → {100 * welt_f1:.2f} |" in markdown
    assert "| 2 | crf_toy | | | not run |" in markdown
    # the ablation: one row per ingredient, in the spec's order
    assert f"| WELT loss | `welt_toy` | {100 * ce_f1:.2f} → {100 * welt_f1:.2f} |" in markdown
    assert "| CRF | `crf_toy` | | | not run | |" in markdown
    assert markdown.index("## Ablation") < markdown.index("## Toy curve")
    assert (tmp_path / "plots/studies/curve_budget.png").stat().st_size > 0
    log_md = (tmp_path / "metrics/experiments.md").read_text()
    assert "`dvc exp run -n welt -S finetune_ner.loss=welt ner`" in log_md
    # 3. where the experiment is gone (a fresh clone has no exp refs), the written results are carried
    run(["dvc", "exp", "remove", "welt"], tmp_path)
    run([*log, "--spec", "spec.yaml"], tmp_path, env=env)
    carried = json.loads((tmp_path / "metrics/studies.json").read_text())["welt_toy"]
    assert carried == welt | {"carried": True}
    markdown = (tmp_path / "metrics/studies.md").read_text()
    assert "| done (carried) |" in markdown and "Carried over from the studies JSON" in markdown
    rows = [
        line for line in (tmp_path / "metrics/experiments.md").read_text().splitlines() if line.startswith("| welt |")
    ]
    assert len(rows) == 1 and "(carried)" in rows[0] and "finetune_ner.loss=welt" in rows[0]
    # ... unless the study now compares other sides, or --no-carry
    other = SPEC | {"studies": SPEC["studies"] | {"welt_toy": SPEC["studies"]["welt_toy"] | {"dataset": "other"}}}
    (tmp_path / "spec2.yaml").write_text(yaml.safe_dump(other))
    run([*log, "--spec", "spec2.yaml"], tmp_path, env=env)
    assert json.loads((tmp_path / "metrics/studies.json").read_text())["welt_toy"]["status"] == "not run"
    run([*log, "--spec", "spec.yaml", "--no-carry"], tmp_path, env=env)
    assert json.loads((tmp_path / "metrics/studies.json").read_text())["welt_toy"]["status"] == "not run"
    assert "| welt |" not in (tmp_path / "metrics/experiments.md").read_text()


def test_log_uses_the_spec_command_only_when_params_match():
    show = json.loads(SAMPLE.read_text())
    rows = experiment_rows(show, "metrics/summary.json")
    exp = next(r for r in rows if r["baseline"])
    base = next(r for r in rows if r["name"] == exp["baseline"])
    changed = {k: v for k, v in exp["params"].items() if base["params"].get(k) != v}
    matching = {"experiments": {exp["name"]: {"set": changed, "targets": ["ner"]}}}
    commands = spec_commands(rows, studies.parse_spec(matching, "spec"))
    assert commands[exp["name"]][0].endswith(" ner") and commands[exp["name"]][1] is True
    table = experiments_table(rows, ("delta",), commands)
    line = next(line for line in table.splitlines() if line.startswith(f"| {exp['name']} |"))
    assert "stage targets" in line
    other = {"experiments": {exp["name"]: {"set": {"not.this": 1}}}}
    assert spec_commands(rows, studies.parse_spec(other, "spec")) == {}


def test_experiment_states_from_exp_show():
    def exp(name, state, error=None):
        return {"revs": [{"name": name, "rev": name * 4, "error": error}], "executor": state and {"state": state}}

    show = [
        {"rev": "c1", "experiments": [exp("a", "queued"), exp("b", "running"), exp("c", "failed"), exp("d", None)]},
        {"rev": "c0", "experiments": [exp("c", "success"), exp("e", "success", error={"msg": "x"})]},
        {"rev": "c2", "experiments": [exp("f", "failed"), exp("f", "queued"), exp("g", "running"), exp("g", "failed")]},
    ]
    states = studies.experiment_states(show)
    assert states == {
        "a": "queued",
        "b": "running",
        "c": "done",
        "d": "done",
        "e": "failed",
        "f": "queued",
        "g": "running",
    }
    assert studies.pending_or_done(show) == {"a", "b", "c", "d", "f", "g"}


def test_carry_over_of_an_unreadable_earlier_json_is_one_line_error(tmp_path):
    spec = studies.parse_spec(SPEC, "spec.yaml")
    not_run = {"title": "t", "dataset": "toy", "status": "not run", "missing": {"welt": "not run"}}
    bad = tmp_path / "studies.json"
    bad.write_text("{not json")
    with pytest.raises(MinisciError, match=r"studies\.json: cannot read the earlier studies JSON .*--no-carry"):
        studies.carry_over(spec, {"welt_toy": not_run}, bad)
    assert studies.carry_over(spec, {"welt_toy": not_run}, tmp_path / "none.json") == {"welt_toy": not_run}


def test_a_carried_study_takes_the_title_the_spec_gives_it_now(tmp_path):
    """A study's title is the spec's words, not a result: retitling it in the spec retitles the carried
    result (its heading, table row and chart panel), whose numbers stay as they were."""
    spec = studies.parse_spec(SPEC, "spec.yaml")
    not_run = {"title": "WELT against CE, toy", "dataset": "toy", "status": "not run", "missing": {"welt": "not run"}}
    side = {"experiment": "welt", "commit_of": True, "arm": "baseline", "label": "CE"}
    done = {
        "title": "an old title",
        "dataset": "toy",
        "status": "done",
        "a": side,
        "b": {**side, "commit_of": False, "label": "WELT"},
        "difference": 0.5,
    }
    earlier = tmp_path / "studies.json"
    earlier.write_text(json.dumps({"welt_toy": done}))
    carried = studies.carry_over(spec, {"welt_toy": not_run}, earlier)["welt_toy"]
    assert carried == {**done, "title": "WELT against CE, toy", "carried": True}


def test_classification_study_scores_macro_f1_and_accuracy(monkeypatch):
    labels = ["background", "method", "result"]
    gold = ["background"] * 6 + ["method"] * 3 + ["result"]
    # a: every "method" read as background; b: right but for one result read as method, per seed
    pred_a = {"1": ["background"] * 9 + ["result"], "2": ["background"] * 9 + ["result"]}
    pred_b = {"1": gold[:9] + ["method"], "2": list(gold)}
    files = {}
    for rev, arm, preds in (("c0", "baseline", pred_a), ("e1", "adapted", pred_b)):
        files[(rev, f"metrics/finetune_classification/cite/{arm}.json")] = json.dumps(
            {"seeds": [1, 2], "labels": labels}
        )
        rows = [
            {"gold": g, "pred": preds["1"][i], "preds": {s: p[i] for s, p in preds.items()}} for i, g in enumerate(gold)
        ]
        files[(rev, f"models/finetune_classification/cite/{arm}/test_predictions.jsonl")] = "\n".join(
            map(json.dumps, rows)
        )
    monkeypatch.setattr(studies, "_read", lambda root, rev, path: files[(rev, path)])
    catalog = {"cite": {"task": "classification", "published": {"macro_f1": {"SciBERT": 0.855}}}}
    index = {"exp": {"rev": "e1", "commit": "c0", "params": {}, "commit_params": {}, "catalog": catalog}}
    study = studies.parse_spec(
        {
            "experiments": {"exp": {"set": {"finetune_classification.seeds": [1, 2]}}},
            "studies": {
                "cite_toy": {
                    "dataset": "cite",
                    "a": {"commit_of": "exp", "arm": "baseline"},
                    "b": {"experiment": "exp", "arm": "adapted"},
                }
            },
        },
        "spec",
    )
    result = studies.run_study(study.studies["cite_toy"], REPO, [], index, resamples=500, seed=0)
    assert result["task"] == "classification" and result["types"] == labels
    # a: background P 6/9 R 1, method 0 (no prediction), result 1: macro-F1 (0.8 + 0 + 1) / 3
    assert result["a"]["f1"] == {"mean": round(1.8 / 3, 4), "sd": 0.0}
    assert result["a"]["accuracy"]["mean"] == 0.7
    # b, seed 1: method P 3/4 R 1, result R 0; seed 2 perfect
    assert result["b"]["per_seed"]["f1"] == [round((1 + 6 / 7 + 0) / 3, 4), 1.0]
    assert result["b"]["per_seed"]["accuracy"] == [0.9, 1.0]
    assert result["b"]["per_type"]["method"]["recall"]["mean"] == 1.0
    # the same macro-F1 as the export stage's counting (the kind's, minisci.tasks)
    for seed, pred in pred_b.items():
        c = CLASSIFICATION.counts([{"gold": g, "pred": p} for g, p in zip(gold, pred)], labels).sum(0)
        assert result["b"]["per_seed"]["f1"][int(seed) - 1] == round(float(CLASSIFICATION.headline(3)(c)), 4)
    d = result["delta"]
    assert d["f1"]["difference"] == pytest.approx((1 + 6 / 7) / 6 + 0.5 - 1.8 / 3, abs=1e-4)
    assert d["accuracy"]["difference"] == pytest.approx(0.25) and d["f1"]["seeds_b_better"] == 2
    assert set(d["per_type_f1"]) == set(labels)
    markdown = studies.study_markdown(study.studies["cite_toy"], result, study)
    assert "| accuracy | precision | recall | macro-F1 (mean ± sd) |" in markdown
    assert "macro-F1 +" in markdown and "Published test macro-F1 on this set: SciBERT 85.50." in markdown
    assert "| class | support |" in markdown and "| method | 3 |" in markdown


def test_classification_study_averages_over_the_labels_in_gold_as_the_stage_does():
    """A class that is absent from the test gold (but predicted by one side) is left out of the macro
    average for both sides: the same fixed class set as the stage's macro-F1."""
    from minisci.metrics.scores import classification_scores

    labels = ["background", "method", "result", "other"]
    gold = ["background", "background", "method", "result"]
    pred_a = ["background", "method", "method", "result"]
    pred_b = ["background", "other", "method", "result"]  # "other" never occurs in gold
    items, types = studies.items_and_types(CLASSIFICATION, gold, [pred_a, pred_b], labels)
    assert items == types == ["background", "method", "result"]
    for pred in (pred_a, pred_b):
        expected = classification_scores(gold, pred, labels)["macro_f1"]
        assert round(float(CLASSIFICATION.headline(3)(CLASSIFICATION.count(gold, pred, items).sum(0))), 4) == expected


def test_a_study_of_an_unknown_task_is_one_line_error():
    spec = studies.parse_spec(SPEC, "spec")
    index = {"welt": {"catalog": {"toy": {"task": "parsing"}}}}
    with pytest.raises(MinisciError, match=r"^studies.welt_toy: dataset 'toy' has task 'parsing', not one of ner, "):
        studies.task_of(spec.studies["welt_toy"], index)


def test_an_unknown_only_name_is_refused_before_dvc_exp_show_runs(monkeypatch, capsys):
    # dvc exp show --all-commits takes minutes the first time in a clone: a typo must not wait for it
    import importlib

    from minisci.stage import run_command

    def no_show(path):
        raise AssertionError("dvc exp show ran before --only was checked")

    report_main = importlib.import_module("minisci.report.__main__")
    monkeypatch.setattr(studies, "read_show", no_show)
    monkeypatch.setattr(report_main, "read_show", no_show)
    for main in (report_main.main, studies.main):  # python -m minisci.report queue, and the studies module's
        assert run_command(main, ["queue", "--only", "nope", "--dry-run"]) == 1
        assert capsys.readouterr().err == "error: --only: 'nope' is neither an experiment nor a study of the spec\n"
