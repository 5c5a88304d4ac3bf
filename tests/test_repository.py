"""What git tracks: source, docs, params, metrics and small plots. Build products stay out: the GPU
check's prepared folder (wheels, weights), models and checkpoints (DVC's cache or ignored)."""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 1 << 20  # bytes; the largest tracked file is DVC's offline plots page (~0.8 MB)


def tracked() -> list[str]:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [p for p in out.split("\0") if p and (ROOT / p).is_file()]


def test_no_tracked_file_is_large():
    big = {p: (ROOT / p).stat().st_size for p in tracked() if (ROOT / p).stat().st_size > LIMIT}
    assert not big, f"tracked files over {LIMIT} bytes (build products belong in DVC or .gitignore): {big}"


def test_no_build_product_is_tracked():
    products = [
        p
        for p in tracked()
        if p.startswith("gpu-check/") or (p.startswith("models/") and not p.endswith(("/.gitignore", "/.gitkeep")))
    ]
    assert not products, products[:5]
