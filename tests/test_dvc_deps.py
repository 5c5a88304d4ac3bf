"""Every library module a stage runs is a DVC dependency of that stage, and nothing else is.

Otherwise an edit to, say, ``config.py`` would leave ``dvc status`` clean while the results it
records came from other code (and a dep the stage never imports reruns it for nothing).
"""

import ast
from pathlib import Path

import pytest
import yaml

from conftest import REPO

SRC = REPO / "src" / "minisci"


def minisci_imports(path: Path) -> set[str]:
    """Module names (``minisci.x``) imported anywhere in ``path``, including inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "minisci":
            parts = node.module.split(".")
            found |= {f"minisci.{a.name}" for a in node.names} if len(parts) == 1 else {".".join(parts[:2])}
        elif isinstance(node, ast.Import):
            found |= {".".join(a.name.split(".")[:2]) for a in node.names if a.name.startswith("minisci.")}
    return found


def module_closure(script: Path) -> set[str]:
    """``src/minisci/*.py`` paths a script imports, directly or through other library modules."""
    seen, todo = set(), list(minisci_imports(script))
    while todo:
        module = todo.pop()
        path = SRC / f"{module.split('.')[1]}.py"
        if module in seen or not path.is_file():
            continue
        seen.add(module)
        todo += minisci_imports(path)
    return {f"src/minisci/{m.split('.')[1]}.py" for m in seen}


STAGES = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]


@pytest.mark.parametrize("name", sorted(STAGES))
def test_stage_deps_are_exactly_the_modules_it_imports(name):
    stage = STAGES[name]
    script = next(w for w in stage["cmd"].split() if w.startswith("stages/"))
    deps = {d if isinstance(d, str) else next(iter(d)) for d in stage["deps"]}
    assert script in deps
    listed = {d for d in deps if d.startswith("src/minisci/")}
    needed = module_closure(REPO / script)
    assert sorted(needed - listed) == [], "imported but not a dependency"
    assert sorted(listed - needed) == [], "a dependency the stage never imports"


def test_closure_follows_imports_inside_functions():
    assert "src/minisci/corpus.py" in module_closure(REPO / "stages/finetune_embeddings.py")  # via retrieval.py
