"""pretrain_data streams: its memory does not grow with the sample (slow: ~1 min on 2 cores).

Generated documents and NSP pairs, 3k and 15k of each (~2 and ~10 MB of JSON Lines), are built into
both layouts (pairs, and packed MLM blocks) in a fresh process per size. The process samples its own
anonymous resident memory (``RssAnon`` in ``/proc/self/status``, every 10 ms) and keeps the peak.
Anonymous memory is what holding data costs: the documents as Python objects would be about 1.5 KB
each, and the pairs with their word-piece lists about 2 KB, ~40 MB more at 15k. The peak RSS
(``getrusage``) also counts the memory-mapped Arrow files' pages, which grow with the output but are
page cache the kernel takes back under pressure, so it is not the measure here (on this generator it
grew ~35 MB from 3k to 30k while ``RssAnon`` grew under 1 MB).
"""

import json
import random
import subprocess
import sys

import pytest
from conftest import REPO

CHILD = """
import json, sys, threading, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from helpers import configs
from conftest import tiny_params
from minisci.config import MakePairsConfig, from_dict
from minisci.pretrain.data import build_pretraining_data

def anon_kb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))

peak = [anon_kb()]
def sample():
    while True:
        peak[0] = max(peak[0], anon_kb())
        time.sleep(0.01)

threading.Thread(target=sample, daemon=True).start()
root = Path({root!r})
split = from_dict(MakePairsConfig, tiny_params()["make_pairs"], "make_pairs")
for nsp in (True, False):
    model_cfg, cfg = configs(nsp=nsp)
    build_pretraining_data(root, root / "documents.jsonl", model_cfg, cfg, split, root / f"out-{{nsp}}")
time.sleep(0.05)
print(json.dumps(max(peak[0], anon_kb())))
"""

WORDS = [f"w{i}" for i in range(3000)]


def generate(root, n: int, seed: int = 0) -> None:
    """``n`` documents (two corpora, eight sentences each) and ``n`` training pairs (and a tenth held out)."""
    rng = random.Random(seed)

    def sentence() -> str:
        return " ".join(rng.choices(WORDS, k=12)) + "."

    root.mkdir()
    with (root / "documents.jsonl").open("w") as f:
        for i in range(n):
            doc = {"id": f"d{i}", "domain": ("bio", "gen")[i % 2], "sentences": [sentence() for _ in range(8)]}
            f.write(json.dumps(doc) + "\n")
    for name, k in (("train", n), ("heldout", n // 10)):
        with (root / f"{name}.jsonl").open("w") as f:
            for i in range(k):
                pair = {"a": sentence(), "b": sentence(), "label": i % 2, "doc_a": "x", "doc_b": "y"}
                f.write(json.dumps(pair) + "\n")


def peak_anon_kb(tmp_path, n: int) -> int:
    root = tmp_path / f"gen{n}"
    generate(root, n)
    code = CHILD.format(tests=str(REPO / "tests"), root=str(root))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_anonymous_memory_does_not_grow_with_the_sample(tmp_path):
    small, large = peak_anon_kb(tmp_path, 3_000), peak_anon_kb(tmp_path, 15_000)
    data_mb = sum(f.stat().st_size for f in (tmp_path / "gen15000").glob("*.jsonl")) / 2**20
    assert data_mb > 10
    # 12k more documents and pairs: holding them would be ~40 MB; streaming keeps a batch
    assert (large - small) / 1024 < 10, f"peak anonymous memory {small / 1024:.0f} MB -> {large / 1024:.0f} MB"
