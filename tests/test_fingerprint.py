"""The code normaliser behind the stages' code fingerprints: edits that cannot change a result keep
the hash, edits that can change it do not."""

import pytest

from minisci.fingerprint import normalise

BASE = '''
"""Module docstring."""
import argparse
import logging
import warnings

logger = logging.getLogger(__name__)
LIMIT = 3


class Config:
    """A dataclass-like config."""

    size: int = 2


def scale(x: float, factor: int = 2) -> float:
    """Scale x."""
    total: float = x * factor  # why: a comment
    assert total >= 0, "negative"
    if total > LIMIT:
        limit: int = LIMIT
        raise ValueError(f"too big: {total}")
    logger.info("scaled %s", x)
    print(f"scaled {x}")
    return total


def main(argv=None):
    p = argparse.ArgumentParser(description="the stage")
    p.add_argument("--out", required=True, help="where to write")
    return scale(2.0)
'''

SAME = {
    "docstring": ('"""Scale x."""', '"""Multiply x by its factor (a longer docstring)."""'),
    "module docstring": ('"""Module docstring."""', '"""Another text."""'),
    "comment": ("# why: a comment", "# another reason"),
    "exception message": ('f"too big: {total}"', '"total exceeds the limit"'),
    "log message": ('logger.info("scaled %s", x)', 'logger.warning("now scaled %s (%d)", x, 1)'),
    "print": ('print(f"scaled {x}")', 'print("done", x, sep=" ")'),
    "help text": ('help="where to write"', 'help="the output folder"'),
    "argparse description": ('description="the stage"', 'description="what this stage does"'),
    "argument annotation": ("x: float, factor: int = 2) -> float:", "x, factor: float = 2) -> int:"),
    "local annotation": ("total: float = x * factor", "total: int = x * factor"),
    "nested local annotation": ("limit: int = LIMIT", "limit: float = LIMIT"),
    "assert message": ('"negative"', 'f"negative total {total}"'),
    "formatting": ("return scale(2.0)", "return scale(\n        2.0,\n    )"),
}

CHANGED = {
    "constant": ("LIMIT = 3", "LIMIT = 4"),
    "default": ("factor: int = 2", "factor: int = 3"),
    "operator": ("x * factor", "x + factor"),
    "argparse flag": ("required=True", "required=False"),
    "class field annotation": ("size: int = 2", "size: float = 2"),
    "comparison": ("total > LIMIT", "total >= LIMIT"),
    "assert condition": ("total >= 0", "total > 0"),
}


@pytest.mark.parametrize("kind", sorted(SAME))
def test_an_edit_that_cannot_change_a_result_keeps_the_normalised_code(kind):
    old, new = SAME[kind]
    assert old in BASE
    assert normalise(BASE.replace(old, new)) == normalise(BASE)


@pytest.mark.parametrize("kind", sorted(CHANGED))
def test_an_edit_that_can_change_a_result_changes_the_normalised_code(kind):
    old, new = CHANGED[kind]
    assert old in BASE
    assert normalise(BASE.replace(old, new)) != normalise(BASE)


def test_adding_or_removing_a_log_line_keeps_it_but_printing_to_a_file_is_code():
    no_log = BASE.replace('    logger.info("scaled %s", x)\n', "")
    assert normalise(no_log) == normalise(BASE)
    to_file = BASE.replace('print(f"scaled {x}")', 'print(f"scaled {x}", file=out)')
    assert normalise(to_file) != normalise(BASE)


def test_a_function_with_only_a_docstring_equals_one_with_only_pass():
    assert normalise('def f():\n    """Nothing."""\n') == normalise("def f():\n    pass\n")


def test_a_string_used_as_data_is_code():
    assert normalise('SEP = "\\t"\n') != normalise('SEP = " "\n')
    assert normalise('x = {"key": 1}\n') != normalise('x = {"other": 1}\n')


def test_code_hash_and_the_resume_code_version_see_the_same_code(tmp_path):
    """The resume check (training.code_version) hashes the library as the stage fingerprints do:
    a docstring edit keeps a checkpoint resumable, a constant edit does not."""
    from pathlib import Path

    import minisci
    from minisci.fingerprint import code_hash
    from minisci.training import code_version

    package = Path(minisci.__file__).parent
    assert code_version()["minisci"] == code_hash(sorted(package.rglob("*.py")), package)
    module = tmp_path / "m.py"
    module.write_text(BASE)
    before = code_hash([module], tmp_path)
    module.write_text(BASE.replace('"""Scale x."""', '"""Scale x by a factor."""'))
    assert code_hash([module], tmp_path) == before
    module.write_text(BASE.replace("LIMIT = 3", "LIMIT = 5"))
    assert code_hash([module], tmp_path) != before


def test_in_a_stage_the_resume_code_version_is_the_stage_closure(tmp_path, monkeypatch):
    """Run by a stage script, the resume check hashes that script and its import closure, so an edit of
    a module the stage does not import (serving, the report) keeps its checkpoints resumable."""
    import sys
    import types
    from pathlib import Path

    import minisci
    from minisci.fingerprint import module_closure
    from minisci.training import code_version

    whole = code_version()["minisci"]
    stages = tmp_path / "stages"
    stages.mkdir()
    versions = {}
    for name, body in {
        "a": "from minisci.io import write_json\n",
        "b": "from minisci.io import write_json\n\n\ndef main():\n    pass\n",
        "c": "from minisci.io import write_json\nimport minisci.serve.search\n",
    }.items():
        script = stages / f"{name}.py"
        script.write_text(body)
        monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__file__=str(script)))
        versions[name] = code_version()["minisci"]
    src = Path(minisci.__file__).parent.parent
    assert Path(minisci.__file__).parent / "serve" / "search.py" not in module_closure(stages / "a.py", src)
    assert len(versions["a"]) == 64 and whole not in versions.values()
    assert len(set(versions.values())) == 3  # the script's own code and its closure both count
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__file__=str(tmp_path / "notebook.py")))
    assert code_version()["minisci"] == whole


def test_a_file_edited_between_two_fingerprints_in_one_process_is_read_anew(tmp_path):
    """The fingerprints parse each file once per content: an edit (a new import, a changed constant)
    made between two calls in one process shows in the second."""
    from minisci.fingerprint import stage_fingerprint

    package = tmp_path / "src" / "minisci"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("X = 1\n")
    (package / "b.py").write_text("Y = 2\n")
    script = tmp_path / "stages" / "s.py"
    script.parent.mkdir()
    script.write_text("from minisci import a\n")
    first = stage_fingerprint(script, tmp_path)
    assert first["files"] == ["stages/s.py", "src/minisci/a.py"]
    script.write_text("from minisci import a\nfrom minisci import b\n")
    second = stage_fingerprint(script, tmp_path)
    assert second["files"] == ["stages/s.py", "src/minisci/a.py", "src/minisci/b.py"]
    assert second["code"] != first["code"]
    (package / "b.py").write_text("Y = 3\n")
    assert stage_fingerprint(script, tmp_path)["code"] != second["code"]
