"""The `dvc exp show` recipes of the README and docs/experiments.md fit a 160-column terminal on the
committed run: `dvc exp show` reads params.yaml and metrics/summary.json from git, which are present
in every checkout, so no output of the pipeline is needed."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)
MAX_WIDTH = 160
# An experiment's row names it as `├── 1a2b3c4 [name]`: the first column must leave room for that,
# whatever the branch and workspace rows of the committed run happen to need.
EXPERIMENT_CELL = len("├── 1a2b3c4 [bushy-pyre]")


def recipes(path: Path) -> list[str]:
    """Every `dvc exp show` line in the page's bash blocks, without its trailing comment."""
    text = path.read_text(encoding="utf-8")
    return [
        shlex.join(shlex.split(line, comments=True))
        for block in FENCE.findall(text)
        for line in block.splitlines()
        if line.startswith("dvc exp show")
    ]


def table_width(lines: list[str]) -> int:
    """The width of a rich table as printed, with the Experiment column widened to an experiment's row."""
    width = max(len(line.rstrip()) for line in lines)
    header = next(line for line in lines if "Experiment" in line)
    # The first column runs from its two-space margin to where the second header starts.
    second = re.search(r"Experiment\s+(\S)", header)
    first_col = (second.start(1) - 3 - 2) if second else width
    return width + max(0, EXPERIMENT_CELL - first_col)


def run_recipe(recipe: str) -> list[str]:
    # A wide COLUMNS lets rich print the table at its natural width instead of squeezing it.
    env = {**os.environ, "COLUMNS": "100000"}
    out = subprocess.run(
        shlex.split(recipe), cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True
    )
    return [line for line in out.stdout.splitlines() if line.strip()]


needs_repo = pytest.mark.skipif(
    shutil.which("dvc") is None or not (ROOT / ".git").exists(), reason="needs dvc and a git checkout"
)
README_RECIPES = recipes(ROOT / "README.md")
DOC_RECIPES = recipes(ROOT / "docs" / "experiments.md")


def test_the_pages_have_recipes():
    assert README_RECIPES, "README.md shows no `dvc exp show` recipe"
    assert len(DOC_RECIPES) >= 4


@pytest.mark.slow  # a few seconds per `dvc exp show` on 2 shared cores
@needs_repo
def test_readme_headline_recipe_fits_160_columns():
    lines = run_recipe(README_RECIPES[0])
    assert any("delta" in line for line in lines), lines[:3]
    assert table_width(lines) <= MAX_WIDTH, "\n".join(lines)


@pytest.mark.slow
@needs_repo
@pytest.mark.parametrize("recipe", DOC_RECIPES + README_RECIPES[1:])
def test_every_recipe_fits_160_columns(recipe):
    lines = run_recipe(recipe)
    assert table_width(lines) <= MAX_WIDTH, "\n".join(lines)


def test_table_width_counts_room_for_an_experiment_row():
    lines = [
        " ───────────────────────────── ",
        "  Experiment    ner.x.delta.f1  ",
        "  main                  0.0002  ",
    ]
    assert table_width(lines) == len(" ─────────────────────────────") + EXPERIMENT_CELL - len("Experiment ")


def test_the_recipes_say_that_dropping_state_hides_a_failed_experiment():
    # the recipes drop every column but the ones kept, State included, and dvc exp show gives a failed
    # queued experiment the metrics of the workspace it was queued from: its row looks like a result
    dropping = [r for r in DOC_RECIPES + README_RECIPES if "--drop '.*'" in r and "State" not in r]
    assert dropping
    text = (ROOT / "docs" / "experiments.md").read_text(encoding="utf-8")
    assert "**`--drop '.*'` also drops the `State` column.**" in text and "dvc queue status" in text


def test_the_page_says_that_an_edit_of_the_stages_code_fails_the_queued_experiments():
    # a queued experiment's stages import minisci from the install (the workspace's src with pip install
    # -e .), and code_fingerprint stops it when a file the stages import differs from the queued copy's
    text = " ".join((ROOT / "docs" / "experiments.md").read_text(encoding="utf-8").split())
    assert "**Edit the stages' code after a queue has run, not while it runs.**" in text
    assert "`error: the minisci package that runs is" in text and "of the files the stages import differ" in text
