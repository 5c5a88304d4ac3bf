"""Bring your own data: two datasets declared in params.yaml only, added with `dvc add`, in formats
the built-ins do not use, fine-tuned and reported by `dvc repro` with no code change."""

import json

import pytest
from conftest import copy_project, make_project, run

from minisci.data.readers import load_prepared

# A space-separated 4-column NER file, IOB1 (mentions open with I-X), `-DOCSTART- NN O O` lines,
# the dev split named `devel`: the drug names are the entities, trivially learnable.
DRUGS = ["aspirin", "heparin", "insulin", "morphine"]
FILLER = ["patients", "received", "the", "study", "after", "treatment"]


def user_ner(root):
    d = root / "data" / "user_ner"
    d.mkdir(parents=True)
    for split, n in (("train", 40), ("devel", 12), ("test", 12)):
        lines = ["-DOCSTART- NN O O", ""]
        for i in range(n):
            words = [(w, "O") for w in FILLER[: 3 + i % 3]]
            words.insert(1, (DRUGS[i % 4], "I-Drug"))
            lines += [f"{w} NN I-NP {t}" for w, t in words] + [""]
        (d / f"{split}.txt").write_text("\n".join(lines))


def user_classification(root):
    """JSON Lines with other field names and CamelCase labels, a duplicate training row."""
    d = root / "data" / "user_cls"
    d.mkdir(parents=True)
    cue = {
        "UsesMethod": "we used the method of",
        "Background": "has been widely studied by",
        "CompareResult": "agrees with",
    }
    for split, n in (("train", 45), ("dev", 9), ("test", 9)):
        rows = [
            {"sentence": f"{FILLER[i % 6]} {cue[lab]} smith {split} {i}", "intent": lab}
            for i, lab in enumerate(list(cue) * (n // 3))
        ]
        rows += rows[:1] if split == "train" else []
        (d / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


DATASETS = {
    "user_ner": {
        "task": "ner",
        "dir": "data/user_ner",
        "splits": {"train": "train.txt", "dev": "devel.txt", "test": "test.txt"},
        "format": "conll",
        "scheme": "auto",
    },
    "user_cls": {
        "task": "classification",
        "dir": "data/user_cls",
        "splits": {"train": "train.jsonl", "dev": "dev.jsonl", "test": "test.jsonl"},
        "format": "jsonl",
        "text_field": "sentence",
        "label_field": "intent",
    },
}


@pytest.mark.slow
def test_user_declared_datasets_run_end_to_end(tiny_repro, tmp_path):
    proj = copy_project(tiny_repro, tmp_path / "proj")  # a project already run, as a user's is
    user_ner(proj)
    user_classification(proj)
    run(["dvc", "add", "data/user_ner", "data/user_cls"], proj)
    # 1. declare them in the catalogue, as a user edits data/datasets.yaml; 2. name them in the stages
    import yaml

    catalogue = yaml.safe_load((proj / "data/datasets.yaml").read_text())
    catalogue["datasets"].update(DATASETS)
    (proj / "data/datasets.yaml").write_text(yaml.safe_dump(catalogue, sort_keys=False))
    params = yaml.safe_load((proj / "params.yaml").read_text())
    params["finetune_ner"]["datasets"] += ["user_ner"]  # extended, as the README says, not replaced
    params["finetune_classification"]["datasets"] += ["user_cls"]
    (proj / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    # what is stale: every preparation (they depend on the catalogue file), the new sets' fine-tuning,
    # the guard (it reads every test split) and the report; no fine-tuning of the datasets already
    # there. (code_fingerprint always runs.)
    status = json.loads(run(["dvc", "status", "--json"], proj).stdout)
    assert set(status) == {
        "code_fingerprint",
        "prepare_data@bc5cdr",
        "prepare_data@scicite",
        "prepare_data@user_ner",
        "prepare_data@user_cls",
        "sample_corpus",
        "finetune_ner@user_ner-baseline",
        "finetune_ner@user_ner-adapted",
        "finetune_classification@user_cls-baseline",
        "finetune_classification@user_cls-adapted",
        "export_metrics",
    }
    out = run(["dvc", "repro"], proj).stdout
    ran = {line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage")}
    assert ran == set(status)
    # the untouched entries' preparations wrote the same bytes, so nothing downstream of them reran
    assert sorted(s for s in ran if "bc5cdr" in s or "scicite" in s) == ["prepare_data@bc5cdr", "prepare_data@scicite"]
    # the guard found none of the new test texts in the corpus, so the encoder is not retrained
    assert "sample_corpus" in ran and not [s for s in ran if s.startswith(("make_pairs", "pretrain"))]
    ner = load_prepared(proj / "data/prepared/user_ner")
    assert ner.meta["scheme"] == "IOB1" and ner.labels == ["Drug"] and ner.splits["test"][0].tags[1] == "B-Drug"
    m = json.loads((proj / "metrics/finetune_classification/user_cls/adapted.json").read_text())
    assert m["labels"] == ["Background", "CompareResult", "UsesMethod"] and m["train_duplicate_rows"] == 1
    summary = json.loads((proj / "metrics/summary.json").read_text())
    assert "ner.user_ner.delta.f1" in summary and "classification.user_cls.adapted.test.macro_f1" in summary
    report = (proj / "metrics/report.md").read_text()
    assert "| NER | user_ner |" in report and "| classification | user_cls |" in report
    # the contamination guard covers the user's test sets too
    corpus = json.loads((proj / "metrics/sample_corpus.json").read_text())
    assert set(corpus["excluded_own_check_per_dataset"]) >= {"user_ner", "user_cls"}
    # a change in the user's data reruns its own preparation and what depends on it, nothing else
    (proj / "data/user_cls/test.jsonl").write_text(
        (proj / "data/user_cls/test.jsonl").read_text().replace("smith", "jones")
    )
    run(["dvc", "add", "data/user_cls"], proj)
    status = json.loads(run(["dvc", "status", "--json"], proj).stdout)
    assert "prepare_data@user_cls" in status and "prepare_data@user_ner" not in status
    assert not any(s.startswith("finetune_ner") for s in status)


@pytest.mark.slow
def test_a_project_of_one_task(tiny_repro, tmp_path):
    """A project that fine-tunes on NER alone, as a user's own starts: the classification list empty
    and the old classification results removed. Only the report reruns, and it shows NER alone."""
    import shutil

    import yaml

    proj = copy_project(tiny_repro, tmp_path / "proj")
    params = yaml.safe_load((proj / "params.yaml").read_text())
    params["finetune_classification"]["datasets"] = []
    (proj / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    old = [f"{top}/finetune_classification/scicite" for top in ("metrics", "models", "plots")]
    run(["git", "rm", "-rq", *old], proj)
    shutil.rmtree(proj / "models/finetune_classification/scicite")  # DVC's output, ignored by git
    status = json.loads(run(["dvc", "status", "--json"], proj).stdout)
    assert set(status) == {"code_fingerprint", "export_metrics"}
    out = run(["dvc", "repro"], proj).stdout
    assert {line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage")} == set(status)
    summary = json.loads((proj / "metrics/summary.json").read_text())
    assert "ner.bc5cdr.delta.f1" in summary and not [k for k in summary if k.startswith("classification.")]
    report = (proj / "metrics/report.md").read_text()
    assert "| NER | bc5cdr |" in report and "| classification | scicite |" not in report
    assert "### NER: bc5cdr" in report and "### classification:" not in report
    assert sorted(p.name for p in (proj / "plots/charts").glob("*.png")) == ["comparison.png", "loss_curves.png"]
    shown = run(["dvc", "plots", "show", "-o", str(tmp_path / "plots")], proj)  # every plot of dvc.yaml loads
    assert "failed to load" not in shown.stdout + shown.stderr
    assert json.loads(run(["dvc", "status", "--json"], proj).stdout) == {"code_fingerprint": ["always changed"]}


def test_bad_user_data_fails_with_file_and_line_and_writes_nothing(tmp_path):
    proj = make_project(tmp_path / "proj")
    user_ner(proj)
    path = proj / "data/user_ner/train.txt"
    path.write_text(path.read_text().replace("aspirin NN I-NP I-Drug", "aspirin\tNN\tI-NP\tI-Drug", 1))
    import yaml

    catalogue = yaml.safe_load((proj / "data/datasets.yaml").read_text())
    catalogue["datasets"]["user_ner"] = DATASETS["user_ner"]
    (proj / "data/datasets.yaml").write_text(yaml.safe_dump(catalogue, sort_keys=False))
    res = run(["dvc", "repro", "prepare_data@user_ner"], proj, check=False)
    assert res.returncode != 0
    assert "data/user_ner/train.txt:4: expected 4 space-separated columns" in res.stdout + res.stderr
    assert not (proj / "data/prepared/user_ner").exists()
