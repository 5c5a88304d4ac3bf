"""``dvc plots show`` renders offline: the project's HTML template (``.dvc/config`` plots.html_template)
inlines vega, vega-lite and vega-embed, so the page loads nothing from a CDN; in headless Chromium
the page draws its charts."""

import re
import shutil
import subprocess

import pytest
from conftest import REPO, run

TEMPLATE = REPO / ".dvc" / "plots" / "offline.html"


def test_template_is_self_contained():
    html = TEMPLATE.read_text()
    assert "{plot_divs}" in html and "{scripts}" not in html  # DVC's CDN script tags never get in
    assert not re.search(r"<script[^>]+src=", html)
    assert "vegaEmbed" in html
    assert "html_template = plots/offline.html" in (REPO / ".dvc" / "config").read_text()


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """``dvc plots show`` of a tiny project with the project's template: two overlaid curves."""
    root = tmp_path_factory.mktemp("plots")
    run(["git", "init", "-q"], root)
    run(["dvc", "init", "-q"], root)
    for arm, offset in (("baseline", 0.0), ("adapted", 0.02)):
        (root / arm).mkdir()
        rows = "".join(f"{s * 100}\t{0.8 * s / (s + 1) + offset:.4f}\n" for s in range(1, 9))
        (root / arm / "dev_f1.tsv").write_text("step\tdev_f1\n" + rows)
    (root / "dvc.yaml").write_text(
        "plots:\n  - dev F1:\n      x: step\n      y:\n"
        "        baseline/dev_f1.tsv: dev_f1\n        adapted/dev_f1.tsv: dev_f1\n"
    )
    run(["dvc", "plots", "show", "-o", "out", "--html-template", str(TEMPLATE)], root)
    return root / "out" / "index.html"


def test_page_loads_no_remote_script(page):
    html = page.read_text()
    assert "cdn.jsdelivr" not in html and not re.search(r"<script[^>]+src=\"?https?:", html)
    assert "baseline/dev_f1.tsv" in html and "adapted/dev_f1.tsv" in html


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium")
def test_page_draws_charts_in_headless_chromium(page, tmp_path):
    from PIL import Image

    flags = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000"]
    dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert "<svg" in dom or "<canvas" in dom
    shot = tmp_path / "shot.png"
    subprocess.run([*flags, "--window-size=900,600", f"--screenshot={shot}", page.as_uri()], timeout=120, check=True)
    dark = sum(p < 240 for p in Image.open(shot).convert("L").tobytes())
    assert dark > 2000, "the page is blank"
