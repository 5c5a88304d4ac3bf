"""Every library module a stage runs is a DVC dependency of that stage, and nothing else is; and the
layers of the library import only downwards.

Otherwise an edit to, say, ``config.py`` would leave ``dvc status`` clean while the results it
records came from other code (and a dep the stage never imports reruns it for nothing).
"""

import ast
from pathlib import Path

import pytest
import yaml
from conftest import REPO

SRC = REPO / "src"


def module_file(module: str) -> Path | None:
    """``src/minisci/a/b.py`` (or ``.../__init__.py``) of ``minisci.a.b``; None if it is not a module."""
    base = SRC.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def minisci_imports(path: Path) -> set[str]:
    """Library modules (``minisci.x.y``) imported anywhere in ``path``, including inside functions.
    ``from minisci.data import readers`` names the module ``minisci.data.readers``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "minisci":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if module_file(sub) else node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "minisci"}
    return found


def module_closure(script: Path) -> set[str]:
    """Repository-relative paths of the library files a script imports, directly or indirectly.
    Package ``__init__.py`` files (empty here) are left out."""
    seen, todo = set(), list(minisci_imports(script))
    while todo:
        module = todo.pop()
        path = module_file(module)
        if module in seen or path is None:
            continue
        seen.add(module)
        todo += minisci_imports(path)
    files = {module_file(m) for m in seen}
    return {p.relative_to(REPO).as_posix() for p in files if p.name != "__init__.py"}


# foreach stages keep their definition under "do"
STAGES = {name: s.get("do", s) for name, s in yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"].items()}


def stage_script(stage: dict) -> str:
    return next(w for w in stage["cmd"].split() if w.startswith("stages/"))


@pytest.mark.parametrize("name", sorted(STAGES))
def test_stage_deps_are_exactly_the_modules_it_imports(name):
    stage = STAGES[name]
    script = stage_script(stage)
    deps = {d if isinstance(d, str) else next(iter(d)) for d in stage["deps"]}
    assert script in deps
    listed = {d for d in deps if d.startswith("src/minisci/")}
    needed = module_closure(REPO / script)
    assert sorted(needed - listed) == [], "imported but not a dependency"
    assert sorted(listed - needed) == [], "a dependency the stage never imports"


def test_closure_follows_imports_inside_functions_and_submodules(tmp_path):
    script = tmp_path / "stage.py"
    script.write_text("def main():\n    from minisci.data import pairs\n")
    closure = module_closure(script)
    assert {"src/minisci/data/pairs.py", "src/minisci/data/readers.py", "src/minisci/config.py"} <= closure


def test_embedding_training_does_not_depend_on_pair_generation_or_serving():
    closure = module_closure(REPO / "stages/finetune_embeddings.py")
    assert "src/minisci/data/pairs.py" not in closure and "src/minisci/data/corpus.py" not in closure
    assert not [p for p in closure if "serve/" in p]


def test_package_inits_are_empty():
    """The closure leaves ``__init__.py`` out; that is right only while they import nothing."""
    for init in [p for p in (SRC / "minisci").glob("*/__init__.py") if p.parent.name != "profiles"]:
        assert not minisci_imports(init), f"{init} imports library code; list it as a dep instead"


# Layering: serving code sits on top of the pipeline, never under it; data readers know nothing of models.
FORBIDDEN = {
    "stages": ("minisci.serve",),
    "data": ("minisci.pretrain", "minisci.finetune", "minisci.report", "minisci.serve"),
}


@pytest.mark.parametrize("name", sorted(STAGES))
def test_no_stage_reaches_serving_code(name):
    closure = module_closure(REPO / stage_script(STAGES[name]))
    assert not [p for p in closure if p.startswith("src/minisci/serve/")]


def test_data_layer_imports_no_model_code():
    for path in (SRC / "minisci" / "data").glob("*.py"):
        bad = [m for m in minisci_imports(path) if m.startswith(FORBIDDEN["data"])]
        assert not bad, f"{path.name} imports {bad}"


def test_no_stage_declares_a_persist_output():
    """DVC does not find a stage with an uncached ``persist`` output up to date in a queued
    experiment's fresh temporary workspace (the directory is missing there), so every
    ``dvc exp run --queue`` would retrain every model. Resume checkpoints are therefore plain
    git-ignored directories passed with ``--checkpoints``, not outputs."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    persist = [
        (name, next(iter(out)))
        for name, stage in stages.items()
        for out in stage.get("do", stage).get("outs", [])
        if isinstance(out, dict) and next(iter(out.values())).get("persist")
    ]
    assert persist == []
    gitignore = (REPO / ".gitignore").read_text().split()
    for stage in stages.values():
        cmd = stage.get("do", stage)["cmd"]
        if "--checkpoints" in cmd:
            path = cmd.split("--checkpoints", 1)[1].split()[0]
            assert "/" + "/".join(path.split("/")[:2]) + "/" in gitignore, path
