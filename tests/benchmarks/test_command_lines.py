"""The benchmark scripts' command lines: every option has help text and --help shows its default;
--help and usage errors come before torch and transformers are imported; default inputs are this
checkout's from any folder; the helper modules, run directly, say that they are modules."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO

BENCHMARKS = REPO / "benchmarks"
# imported by the scripts, not commands; each says so when run directly
HELPERS = ("finetune_variants", "machine", "onnx_peer", "roofline")
SCRIPTS = sorted(p.stem for p in BENCHMARKS.glob("*.py") if p.stem not in HELPERS)

# Runs a script as `python benchmarks/X.py ARGS` does, then prints its exit code and which of torch and
# transformers it imported (seconds of import each) as the last line of stdout.
DRIVER = """
import json, runpy, sys
script, sys.argv = sys.argv[1], sys.argv[1:]
sys.path.insert(0, script.rsplit("/", 1)[0])
try:
    runpy.run_path(script, run_name="__main__")
    code = 0
except SystemExit as e:
    code = e.code
print("\\n" + json.dumps({"code": code, "heavy": sorted({m.split(".")[0] for m in sys.modules} & {"torch", "transformers"})}))
"""


def run_script(script: str, *argv: str, cwd: Path) -> tuple[dict, str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, str(BENCHMARKS / f"{script}.py"), *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
    )
    *out, last = proc.stdout.rstrip("\n").split("\n")
    return json.loads(last), "\n".join(out), proc.stderr


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_and_usage_errors_come_before_torch_is_imported(script, tmp_path):
    result, out, _ = run_script(script, "--help", cwd=tmp_path)
    assert result == {"code": 0, "heavy": []} and out.startswith("usage: ")
    result, _, err = run_script(script, "--no-such-option", cwd=tmp_path)
    assert result == {"code": 2, "heavy": []}
    assert re.match(rf"{script}\.py: error: ", err.strip().splitlines()[-1])  # the option, or a required one


class Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        self.parser = parser


def parser_of(script: str, monkeypatch) -> argparse.ArgumentParser:
    """The parser ``script``'s main builds, caught where it parses (so nothing runs)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    module = __import__(script)

    def capture(self, args=None, namespace=None):
        raise Captured(self)

    with monkeypatch.context() as patch, pytest.raises(Captured) as caught:
        patch.setattr(argparse.ArgumentParser, "parse_known_args", capture)
        module.main([])
    return caught.value.parser


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_option_has_help_text_and_help_shows_its_default(script, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # one line per option: a default is not cut by the wrapping
    parser = parser_of(script, monkeypatch)
    shown = [a for a in parser._actions if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)]
    assert shown and [a.dest for a in shown if not (a.help or "").strip()] == []
    text = " ".join(parser.format_help().split())
    defaults = [a for a in shown if a.default not in (None, False)]
    assert [a.dest for a in defaults if f"(default: {a.default})" not in text] == []
    assert "(default: None)" not in text and "(default: False)" not in text


# the five scripts whose inputs default to paths: option -> the path under the checkout
DEFAULT_INPUTS = {
    "embedding_throughput": {"model": "models/adapted/13", "docs": "data/corpus/documents.jsonl"},
    "finetune_cpu_side": {"prepared": "data/prepared", "model": "models/baseline"},
    "finetune_throughput": {"model": "models/adapted/13", "params": "params.yaml"},
    "inference_speed": {
        "ner_data": "data/prepared/bc5cdr",
        "cite_data": "data/prepared/scicite",
        "ner_model": "models/finetune_ner/bc5cdr/adapted",
        "cite_model": "models/finetune_classification/scicite/adapted",
    },
    "pretrain_throughput": {"pairs": "data/pairs/train.jsonl"},
}


@pytest.mark.parametrize("script", sorted(DEFAULT_INPUTS))
def test_default_inputs_are_the_checkouts_from_another_folder(script, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    parser = parser_of(script, monkeypatch)
    args = parser.parse_args([])
    assert {dest: getattr(args, dest) for dest in DEFAULT_INPUTS[script]} == {
        dest: str(REPO / rel) for dest, rel in DEFAULT_INPUTS[script].items()
    }
    option = "--" + next(iter(DEFAULT_INPUTS[script])).replace("_", "-")
    given = parser.parse_args([option, "mine"])  # a path the user gives stays relative to their folder
    assert getattr(given, next(iter(DEFAULT_INPUTS[script]))) == "mine"


def test_finetune_benchmark_reads_the_checkouts_dataset_by_default_from_another_folder(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    """--data's default (the task's first dataset) is under this checkout, and a missing one is named
    as resolved."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import finetune_throughput

    from minisci.stage import run_stage

    read = []

    def load_prepared(path, task=None):
        read.append(Path(path))
        raise FileNotFoundError(path)

    monkeypatch.setattr(finetune_throughput, "load_prepared", load_prepared)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError):
        finetune_throughput.main(["--model", str(tiny_model_dir)])
    first = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))["finetune_ner"]["datasets"][0]
    assert read == [REPO / "data/prepared" / first]
    capsys.readouterr()
    assert run_stage(finetune_throughput.main, ["--model", str(tmp_path / "missing")]) == 1
    assert capsys.readouterr().err.startswith(f"error: {tmp_path / 'missing'}: not a model directory")


def importers(module: str) -> list[str]:
    """The benchmark scripts whose source imports ``module``."""
    pattern = re.compile(rf"^\s*(from {module} import|import {module}\b)", re.MULTILINE)
    return sorted(f"{p.name}" for p in BENCHMARKS.glob("*.py") if pattern.search(p.read_text(encoding="utf-8")))


@pytest.mark.parametrize("module", HELPERS)
def test_a_helper_module_run_directly_says_it_is_one_and_who_imports_it(module, tmp_path):
    """In one line, before torch or transformers is imported (finetune_variants.py took 11 s to say it)."""
    result, out, err = run_script(module, cwd=tmp_path)
    assert result == {"code": 2, "heavy": []} and out == "" and err.count("\n") == 1
    said = re.fullmatch(
        rf"{module}\.py is a module imported by the other benchmark scripts \((.+)\), not a command\n", err
    )
    assert said and said.group(1).split(", ") == importers(module)
