"""The code fingerprints on the tiny pipeline: an edit that cannot change a result reruns only the
fingerprint stage, an edit that can makes exactly the stages that run that code stale, a replaced
base model makes what reads it stale, and two runs from scratch give the same outputs."""

import json
import shutil

import pytest
import yaml
from conftest import copy_project, finish_queue, make_project, refused_by_the_first_stage, run

# Edits of the library that cannot change a result, each in a module of every stage's closure or of a few.
HARMLESS = {
    "message": ("src/minisci/config.py", 'params file not found"', 'params file is missing"'),
    "docstring": (
        "src/minisci/io.py",
        '"""Write rows as JSON Lines (keys sorted',
        '"""Write the rows as JSON Lines (keys sorted',
    ),
    "type hint": (
        "src/minisci/training.py",
        "def live_callback(live_dir: str | Path):",
        "def live_callback(live_dir):",
    ),
    "formatting and comment": (
        "src/minisci/finetune/common.py",
        "def subsample(examples: list, n: int, seed: int) -> list:",
        "def subsample(\n    examples: list,  # a comment\n    n: int,\n    seed: int,\n) -> list:",
    ),
}


def edit(proj, path, old, new):
    text = (proj / path).read_text()
    assert old in text, f"{path} no longer holds {old!r}"
    (proj / path).write_text(text.replace(old, new, 1))


def status(proj, *targets) -> dict:
    return json.loads(run(["dvc", "status", "--json", *targets], proj).stdout)


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(HARMLESS))
def test_an_edit_that_cannot_change_a_result_reruns_only_the_fingerprint_stage(tiny_repro, tmp_path, kind):
    proj = copy_project(tiny_repro, tmp_path / "proj")
    edit(proj, *HARMLESS[kind])
    out = run(["dvc", "repro"], proj).stdout
    assert [line for line in out.splitlines() if line.startswith("Running stage")] == [
        "Running stage 'code_fingerprint':"
    ]
    assert status(proj) == {"code_fingerprint": ["always changed"]}


@pytest.mark.slow
def test_a_changed_constant_makes_exactly_the_stages_that_run_it_stale(tiny_repro, tmp_path):
    proj = copy_project(tiny_repro, tmp_path / "proj")
    # finetune/ner.py is the one module only finetune_ner runs (the kind's code in tasks/ is read by every stage)
    edit(proj, "src/minisci/finetune/ner.py", "task=NER.name)", "task=str(NER.name))")
    run(["dvc", "repro", "code_fingerprint"], proj)
    stale = set(status(proj)) - {"code_fingerprint"}
    assert stale == {"finetune_ner@bc5cdr-baseline", "finetune_ner@bc5cdr-adapted"}
    # a module every stage runs: every stage (the prepare_data of each dataset included)
    edit(proj, "src/minisci/io.py", "indent=2", "indent=1")
    run(["dvc", "repro", "code_fingerprint"], proj)
    stages = yaml.safe_load((proj / "dvc.lock").read_text())["stages"]
    assert set(status(proj)) == set(stages)


@pytest.mark.slow
def test_replacing_the_base_weights_makes_what_reads_them_stale(tiny_model_dir, tmp_path):
    """model.base a relative folder, not tracked by git (as a user's copy of a model would be):
    a temporary experiment finds it from the repository root, and new weights in it are seen."""
    from safetensors.torch import load_file, save_file

    proj = make_project(tmp_path / "proj", {"model": {"base": "my_base", "tokenizer": None, "scratch_config": None}})
    shutil.copytree(tiny_model_dir, proj / "my_base")
    (proj / ".gitignore").write_text("/my_base/\n")
    run(["git", "add", ".gitignore"], proj)
    run(["git", "commit", "-qm", "ignore the base"], proj)
    run(["dvc", "exp", "run", "--temp", "base_model"], proj)  # a temporary workspace has no my_base
    run(["dvc", "exp", "run", "--queue", "-n", "queued", "base_model"], proj)  # nor has a queued one
    queue = finish_queue(proj, timeout=300)
    assert "Success" in queue and "Failed" not in queue, queue
    run(["dvc", "repro", "base_model"], proj)
    assert "base_model" not in status(proj, "base_model")
    weights = load_file(proj / "my_base/model.safetensors")
    name = next(iter(weights))
    weights[name] = weights[name] + 1.0
    save_file(weights, proj / "my_base/model.safetensors", metadata={"format": "pt"})
    run(["dvc", "repro", "code_fingerprint"], proj)
    assert status(proj, "base_model")["base_model"] == [
        {"changed deps": {"data/fingerprints/model_base.json": "modified"}}
    ]
    pretrain_deps = status(proj, "pretrain")["pretrain@13"][0]["changed deps"]
    assert pretrain_deps["data/fingerprints/model_base.json"] == "modified"


def test_an_unknown_dataset_in_a_fine_tuning_list_fails_in_one_line_before_any_stage(tmp_path):
    proj = make_project(tmp_path / "proj")
    params = yaml.safe_load((proj / "params.yaml").read_text())
    params["finetune_ner"]["datasets"] = ["bc5cdr", "bc2gmm"]
    (proj / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    assert refused_by_the_first_stage(proj) == [
        "error: params.yaml: finetune_ner.datasets names 'bc2gmm', which is not a ner dataset of the catalogue; "
        "known: bc5cdr"
    ]


# Outputs that record how long a run took (wall_seconds, tokens per second): metrics and curves for
# people, never a model or data directory, and read by no stage but the report.
TIMED = {
    "metrics/sample_corpus.json",
    "metrics/make_pairs.json",
    "metrics/pretrain_data.json",
    "metrics/pretrain/13.json",
    "plots/pretrain/13/curves",
    "metrics/finetune_ner/bc5cdr/baseline.json",
    "metrics/finetune_ner/bc5cdr/adapted.json",
    "metrics/finetune_classification/scicite/baseline.json",
    "metrics/finetune_classification/scicite/adapted.json",
    "metrics/finetune_embeddings.json",
    "metrics/summary.json",
    "metrics/report.md",
    "plots/charts",
}


def output_hashes(proj) -> dict[str, str]:
    stages = yaml.safe_load((proj / "dvc.lock").read_text())["stages"]
    return {o["path"]: o.get("md5") or o.get("hash") for s in stages.values() for o in s.get("outs", [])}


@pytest.mark.slow
def test_two_runs_from_scratch_give_the_same_outputs(tiny_repro, tmp_path):
    proj = make_project(tmp_path / "again")
    run(["dvc", "repro"], proj)
    first, second = output_hashes(tiny_repro), output_hashes(proj)
    assert set(first) == set(second)
    differ = {path for path in first if first[path] != second[path]}
    assert differ <= TIMED, f"outputs that differ between two runs of the same inputs: {sorted(differ - TIMED)}"
    # and no stage but the report reads a timed output, so none reruns because of one
    stages = yaml.safe_load((proj / "dvc.yaml").read_text())["stages"]
    for name, stage in stages.items():
        if name != "export_metrics":
            deps = {d if isinstance(d, str) else next(iter(d)) for d in stage.get("do", stage)["deps"]}
            assert not deps & TIMED, name
