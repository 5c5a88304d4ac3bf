"""Every library module a stage runs is in that stage's code fingerprint (its DVC dependency), and
nothing else is; every param key a stage reads is a dependency, the keys that only shape a matrix
excepted; and the layers of the library import only downwards.

Otherwise an edit to, say, ``config.py`` would leave ``dvc status`` clean while the results it
records came from other code (and a module the stage never imports reruns it for nothing).
"""

import re
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from minisci import config
from minisci.fingerprint import minisci_imports, module_closure, stage_fingerprint

SRC = REPO / "src"

# foreach stages keep their definition under "do"
STAGES = {name: s.get("do", s) for name, s in yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"].items()}
FINGERPRINT_STAGE = "code_fingerprint"


def stage_script(stage: dict) -> str:
    return next(w for w in stage["cmd"].split() if w.startswith("stages/"))


def closure(script: str | Path) -> set[str]:
    return {p.relative_to(REPO).as_posix() for p in module_closure(REPO / script, SRC)}


def path(entry) -> str:
    """The path of a dvc.yaml list entry: a string, or a one-key mapping to its options."""
    return entry if isinstance(entry, str) else next(iter(entry))


def deps(stage: dict) -> set[str]:
    return {path(d) for d in stage["deps"]}


@pytest.mark.parametrize("name", sorted(set(STAGES) - {FINGERPRINT_STAGE}))
def test_stage_code_is_its_fingerprint_of_exactly_the_modules_it_imports(name):
    """Code reaches a stage through its fingerprint file only, and that file covers the script and
    every library module the script imports, directly or not."""
    stage = STAGES[name]
    script = stage_script(stage)
    assert Path(script).stem == name
    assert f"data/fingerprints/{name}.json" in deps(stage)
    assert not [d for d in deps(stage) if d.startswith(("src/", "stages/"))], "code listed beside its fingerprint"
    files = stage_fingerprint(REPO / script, REPO)["files"]
    assert files[0] == script and set(files[1:]) == closure(script)


def test_fingerprint_stage_runs_first_and_always():
    """Every stage script has a fingerprint, and the stage that writes them runs every time (cheap),
    so a replaced base model or an edit is seen; its only dep is its own script."""
    stage = STAGES[FINGERPRINT_STAGE]
    assert stage.get("always_changed") is True
    assert deps(stage) == {"stages/code_fingerprint.py"}
    assert [next(iter(o)) for o in stage["outs"]] == ["data/fingerprints"]
    scripts = {p.stem for p in (REPO / "stages").glob("*.py")} - {FINGERPRINT_STAGE}
    assert scripts == set(STAGES) - {FINGERPRINT_STAGE}
    for name in ("base_model", "pretrain_data", "pretrain"):
        assert "data/fingerprints/model_base.json" in deps(STAGES[name])


def test_the_fingerprint_stage_checks_corpora_where_sample_corpus_reads_them():
    """code_fingerprint checks each corpus against the folders sample_corpus is given, and fetch_data's
    output folder against its manifest: the same paths as in dvc.yaml."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_cf_dirs", REPO / "stages" / "code_fingerprint.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cmd = STAGES["sample_corpus"]["cmd"].split()
    given = cmd[cmd.index("--corpus-dirs") + 1 :]
    assert tuple(given[: given.index(next(a for a in given if a.startswith("--")))]) == module.CORPUS_DIRS
    fetch = STAGES["fetch_data"]
    assert [next(iter(o)) if isinstance(o, dict) else o for o in fetch["outs"]] == [module.FETCHED]
    assert module.MANIFEST in deps(fetch)


def test_pretraining_data_depends_on_exactly_the_params_its_folder_is_built_with():
    """The examples are tokenised once for every seed: a change of a training knob (learning rate,
    seeds) does not tokenise again, and a change of what the examples are (objective, length,
    vocabulary, the held-out split, the model) does. The folder records the same keys, and the
    trainer refuses one built with others."""
    from minisci.pretrain.data import BUILT_WITH

    listed = set(STAGES["pretrain_data"]["params"])
    assert listed == {"model", "make_pairs.heldout_doc_fraction", "make_pairs.seed"} | {
        f"pretrain.{k}" for k in BUILT_WITH
    }
    assert {"data/pairs", "data/corpus"} <= deps(STAGES["pretrain_data"])
    assert "data/pretrain" in deps(STAGES["pretrain"]) and "data/pairs" not in deps(STAGES["pretrain"])


# Keys that only shape a stage's matrix or foreach (which datasets or seeds run), not what any one
# stage instance computes; and the keys of other sections a stage reads besides its own.
MATRIX_KEYS = {
    "finetune_ner": {"datasets"},
    "finetune_classification": {"datasets"},
    "pretrain": {"seeds", "seed_design"},
}
# Keys that change how fast a stage runs, never its bytes (each has a test that the outputs are equal
# either way): not DVC params, so setting them on a GPU node reruns nothing.
SPEED_KEYS = {
    "pretrain": set(config.PretrainConfig.SPEED_KEYS),  # test_dataloader_workers_do_not_change_the_trained_weights
    "finetune_ner": set(config.FinetuneNerConfig.SPEED_KEYS),  # test_seed_processes_give_the_same_bytes
    "finetune_classification": set(config.FinetuneClassificationConfig.SPEED_KEYS),
}
OTHER_KEYS = {
    "finetune_ner": {"pretrain.seeds", "pretrain.seed_design"},  # the adapted arm's plan over the encoders
    "finetune_classification": {"pretrain.seeds", "pretrain.seed_design"},
    "pretrain": {"model"},
}
SECTION_CLASSES = {
    "finetune_ner": config.FinetuneNerConfig,
    "finetune_classification": config.FinetuneClassificationConfig,
    "pretrain": config.PretrainConfig,
}


@pytest.mark.parametrize("name", sorted(MATRIX_KEYS))
def test_matrix_stage_depends_on_every_key_of_its_section_but_the_matrix_keys(name):
    """A fine-tuning stage lists its section key by key, so adding a dataset to the list does not
    rerun the other datasets' stages, and a pretraining stage likewise for the seeds (adding a seed
    reruns no other seed); a new knob of the section (in params.yaml or the config class) must be
    listed too, or this fails. (``seed``, one run's seed, comes from the foreach, not from params.)"""
    import dataclasses

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    fields = {f.name for f in dataclasses.fields(SECTION_CLASSES[name])} - {"seed"}
    section = set(params[name]) | fields
    listed = set(STAGES[name]["params"])
    assert name not in listed, "the whole section: a new dataset or seed would rerun every one's stages"
    keys = section - MATRIX_KEYS[name] - SPEED_KEYS.get(name, set())
    assert listed == {f"{name}.{k}" for k in keys} | OTHER_KEYS[name]


def test_closure_follows_imports_inside_functions_and_submodules(tmp_path):
    script = tmp_path / "stage.py"
    script.write_text("def main():\n    from minisci.data import pairs\n")
    files = {p.relative_to(REPO).as_posix() for p in module_closure(script, SRC)}
    assert {"src/minisci/data/pairs.py", "src/minisci/data/readers.py", "src/minisci/config.py"} <= files


def test_embedding_training_does_not_depend_on_pair_generation_or_serving():
    # corpus.py is in: the retrieval benchmark deduplicates the pool and orders it as the sample does
    files = closure("stages/finetune_embeddings.py")
    assert "src/minisci/data/pairs.py" not in files
    assert not [p for p in files if "serve/" in p]


# The stages that fine-tune or report on task kinds; the others read only the kinds' facts.
TASK_STAGES = {"finetune_ner", "finetune_classification", "export_metrics"}


@pytest.mark.parametrize("name", sorted(set(STAGES) - TASK_STAGES - {FINGERPRINT_STAGE}))
def test_a_stage_that_fine_tunes_nothing_does_not_depend_on_the_task_code(name):
    """The configuration knows the kinds by their facts (minisci.tasks.facts) alone: an edit of how a
    kind encodes or scores does not make the data, pretraining or embedding stages stale."""
    task_code = {p for p in closure(stage_script(STAGES[name])) if p.startswith("src/minisci/tasks/")}
    assert task_code == {"src/minisci/tasks/facts.py"}


def test_each_fine_tuning_stage_depends_on_its_own_kind_only():
    ner, classification = (closure(f"stages/{s}.py") for s in ("finetune_ner", "finetune_classification"))
    assert "src/minisci/tasks/ner.py" in ner and "src/minisci/tasks/classification.py" not in ner
    assert "src/minisci/tasks/classification.py" in classification and "src/minisci/tasks/ner.py" not in classification
    # the CRF head is the NER stage's alone: an edit of it reruns no classification stage
    assert "src/minisci/finetune/crf.py" in ner and "src/minisci/finetune/crf.py" not in classification


def test_package_inits_are_empty():
    """The closure leaves ``__init__.py`` out; that is right only while they import nothing."""
    for init in [p for p in (SRC / "minisci").glob("*/__init__.py") if p.parent.name != "profiles"]:
        assert not minisci_imports(init, SRC), f"{init} imports library code; list it as a dep instead"


# Layering: serving code sits on top of the pipeline, never under it; data readers know nothing of models.
FORBIDDEN = {
    "stages": ("minisci.serve",),
    "data": ("minisci.pretrain", "minisci.finetune", "minisci.report", "minisci.serve"),
}


@pytest.mark.parametrize("name", sorted(STAGES))
def test_no_stage_reaches_serving_code(name):
    assert not [p for p in closure(stage_script(STAGES[name])) if p.startswith("src/minisci/serve/")]


def test_data_layer_imports_no_model_code():
    for path in (SRC / "minisci" / "data").glob("*.py"):
        bad = [m for m in minisci_imports(path, SRC) if m.startswith(FORBIDDEN["data"])]
        assert not bad, f"{path.name} imports {bad}"


def test_only_the_fingerprint_stage_declares_a_persist_output():
    """DVC does not find a stage with an uncached ``persist`` output up to date in a queued
    experiment's fresh temporary workspace (the directory is missing there), so every
    ``dvc exp run --queue`` would retrain every model. Resume checkpoints are therefore plain
    git-ignored directories passed with ``--checkpoints``, not outputs. The exception is
    code_fingerprint's git-tracked folder (present in every workspace; the stage always runs): DVC
    deletes an output before its stage runs, so without ``persist`` a params value the stage refuses
    would leave every fingerprint file deleted in the user's checkout."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    persist = [
        (name, next(iter(out)))
        for name, stage in stages.items()
        for out in stage.get("do", stage).get("outs", [])
        if isinstance(out, dict) and next(iter(out.values())).get("persist")
    ]
    assert persist == [(FINGERPRINT_STAGE, "data/fingerprints")]
    gitignore = (REPO / ".gitignore").read_text().split()
    for stage in stages.values():
        cmd = stage.get("do", stage)["cmd"]
        if "--checkpoints" in cmd:
            path = cmd.split("--checkpoints", 1)[1].split()[0]
            assert "/" + "/".join(path.split("/")[:2]) + "/" in gitignore, path


def test_every_stage_but_the_report_can_be_restored_from_the_run_cache():
    """DVC saves a run-cache entry only for a stage whose uncached outputs are all metrics or plots
    (``Stage.run``: ``no_cache_outs``). The stages' git-tracked JSON files are therefore metrics;
    export_metrics (a report in Markdown, charts) and code_fingerprint (always run) are the exceptions."""
    blocked = {
        name
        for name, stage in STAGES.items()
        if any(isinstance(o, dict) and o[path(o)].get("cache") is False for o in stage.get("outs", []))
    }
    assert blocked == {FINGERPRINT_STAGE, "export_metrics"}


def test_no_stage_reads_a_file_inside_another_stages_output_folder():
    """After a run-cache restore, `dvc exp run` looks a dependency inside an output folder up in the
    folder's version recorded in dvc.lock, which a fresh clone's cache lacks ("failed to load
    directory"): stages depend on whole outputs. Two folders are safe: data/fingerprints (not cached,
    rewritten first by the always-run code_fingerprint) and data/raw (fetch_data's copy of the mirror,
    fixed by the manifest's checksums, so the recorded version is the one fetch_data writes)."""
    template = re.compile(r"\$\{[^}]*\}")  # ${item}, ${item.arm}: one path segment each
    outs = {path(o) for stage in STAGES.values() for key in ("outs", "metrics", "plots") for o in stage.get(key, [])}
    inside_of = [
        re.compile(re.escape(template.sub("@", o)).replace("@", "[^/]+") + "/.+")
        for o in outs - {"data/fingerprints", "data/raw"}
    ]
    inside = [
        (name, dep)
        for name, stage in STAGES.items()
        for dep in deps(stage)
        if any(pattern.fullmatch(template.sub("x", dep)) for pattern in inside_of)
    ]
    assert inside == []
