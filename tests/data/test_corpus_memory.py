"""sample_corpus streams, and finetune_embeddings's benchmark reads its pool twice instead of holding
it: their peak memory does not grow with the corpus, in documents or in document length (slow: ~2-4
min on 2 cores).

A generated corpus of 10k and of 100k documents (~6 and ~60 MB of JSON Lines) is sampled in a fresh
process each, and the process reads its own peak RSS (``getrusage``). Holding every document, as the
code before the catalogue did, costs ~1 KB per document, ~90 MB more at 100k; streaming keeps
~40 bytes per document.
"""

import json
import random
import subprocess
import sys

import pytest
from conftest import FIXTURE_DATASETS, REPO

CHILD = """
import json, resource, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from conftest import tiny_params
from minisci.config import CorpusConfig, SampleCorpusConfig, from_dict
from minisci.data.corpus import sample_corpus
corpora = {{"gen": from_dict(CorpusConfig, {{"path": {path!r}, "format": "jsonl", "text_field": "text", "weight": 1.0}}, "c")}}
cfg = from_dict(SampleCorpusConfig, tiny_params({{"sample_corpus": {{"n_docs": 200}}}})["sample_corpus"], "s")
out = Path({out!r}); out.mkdir()
sample_corpus(corpora, {prepared!r}, {datasets!r}, cfg, out, num_proc=1)
print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))
"""


TXT_CHILD = """
import json, resource, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from conftest import tiny_params
from minisci.config import CorpusConfig, SampleCorpusConfig, from_dict
from minisci.data.corpus import sample_corpus
corpora = {{"gen": from_dict(CorpusConfig, {{"dir": {path!r}, "format": "txt", "weight": 1.0}}, "c")}}
cfg = from_dict(SampleCorpusConfig, tiny_params({{"sample_corpus": {{"n_docs": 4}}}})["sample_corpus"], "s")
out = Path({out!r}); out.mkdir()
sample_corpus(corpora, {prepared!r}, {datasets!r}, cfg, out, num_proc=2)
print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))
"""


BENCHMARK_CHILD = """
import json, resource, sys
sys.path.insert(0, {tests!r})
from conftest import tiny_params
from minisci.config import CorpusConfig, FinetuneEmbeddingsConfig, from_dict
from minisci.finetune.retrieval_benchmark import build_benchmark
corpora = {{"gen": from_dict(CorpusConfig, {{"path": {path!r}, "format": "jsonl", "text_field": "text",
                                            "title_field": "title", "weight": 1.0}}, "c")}}
cfg = from_dict(FinetuneEmbeddingsConfig, tiny_params()["finetune_embeddings"], "f")
bench = build_benchmark(corpora, {documents!r}, cfg)
assert len(bench.train) == cfg.n_train
print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))
"""


def generate(path, n: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(5000)]
    with path.open("w") as f:
        for i in range(n):
            sents = [" ".join(rng.choices(vocab, k=12)).capitalize() + "." for _ in range(8)]
            f.write(json.dumps({"text": " ".join(sents), "n": i, "title": f"Title of generated document {i}"}) + "\n")


def peak_kb(tmp_path, n: int, child: str, **fields) -> int:
    path = tmp_path / f"gen{n}.jsonl"
    if not path.exists():
        generate(path, n)
    code = child.format(tests=str(REPO / "tests"), path=str(path), out=str(tmp_path / f"out{n}"), **fields)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_peak_rss_does_not_grow_with_the_corpus(tmp_path, fixture_prepared):
    fields = {"prepared": str(fixture_prepared), "datasets": FIXTURE_DATASETS}
    small, large = peak_kb(tmp_path, 10_000, CHILD, **fields), peak_kb(tmp_path, 100_000, CHILD, **fields)
    corpus_mb = (tmp_path / "gen100000.jsonl").stat().st_size / 2**20
    assert corpus_mb > 50
    # 90k more documents: ~4 MB of keys and ranks; holding them would be ~90 MB
    assert (large - small) / 1024 < 25, f"peak RSS {small / 1024:.0f} MB -> {large / 1024:.0f} MB"


@pytest.mark.slow
def test_the_retrieval_benchmarks_peak_rss_does_not_grow_with_the_pool(tmp_path):
    documents = tmp_path / "documents.jsonl"  # the corpus sample: two documents outside it, so the pool is unseen
    documents.write_text("".join(json.dumps({"id": i, "sentences": ["One sentence here."]}) + "\n" for i in "xy"))
    small, large = (peak_kb(tmp_path, n, BENCHMARK_CHILD, documents=str(documents)) for n in (10_000, 100_000))
    # 90k more documents: ~5 MB of keys, ranks and lengths; holding them would be ~100 MB
    assert (large - small) / 1024 < 25, f"peak RSS {small / 1024:.0f} MB -> {large / 1024:.0f} MB"


def long_documents(folder, n: int, kb: int) -> None:
    """``n`` text files of ``kb`` KiB each, every one its own text (no duplicates)."""
    rng = random.Random(kb)
    paragraph = " ".join(
        " ".join(rng.choices([f"w{i}" for i in range(5000)], k=12)).capitalize() + "." for _ in range(40)
    )
    folder.mkdir()
    for i in range(n):
        text = f"Document {i}. " + (paragraph + "\n") * (kb * 1024 // (len(paragraph) + 1))
        (folder / f"doc{i:04d}.txt").write_text(text)


@pytest.mark.slow
def test_peak_rss_does_not_grow_with_document_length(tmp_path, fixture_prepared):
    """150 text files of 100 KiB, then of 1 MiB: the chunks handed to the workers are bounded in bytes,
    not only in documents, so 135 MB more text adds only what the chunks in flight hold (a chunk of
    256 whole files held all of it)."""
    peaks = []
    for kb in (100, 1024):
        long_documents(tmp_path / f"txt{kb}", 150, kb)
        code = TXT_CHILD.format(
            tests=str(REPO / "tests"), path=str(tmp_path / f"txt{kb}"), out=str(tmp_path / f"out{kb}"),
            prepared=str(fixture_prepared), datasets=FIXTURE_DATASETS,
        )  # fmt: skip
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        peaks.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    small, large = peaks
    assert (large - small) / 1024 < 90, f"peak RSS {small / 1024:.0f} MB -> {large / 1024:.0f} MB"
