"""Declaring a corpus the docs' way (docs/corpora.md) in a tiny DVC project: `dvc add` under
data/corpora, an entry in params.yaml; `dvc status` lists sample_corpus, and the rerun samples the
new corpus at its weight. A corpus outside data/corpora is refused in one line, writing nothing."""

import gzip
import json

import pytest
import yaml
from conftest import copy_project, run


@pytest.mark.slow  # the session's tiny dvc repro, then sample_corpus again
def test_declare_a_corpus_the_docs_way(tiny_repro, tmp_path):
    proj = copy_project(tiny_repro, tmp_path / "proj")  # a project already run and committed, as a user's is
    assert "up to date" in run(["dvc", "status", "make_pairs"], proj).stdout

    # 1. the files, tracked by DVC
    (proj / "data/corpora/astro").mkdir()
    with gzip.open(proj / "data/corpora/astro/abstracts.jsonl.gz", "wt") as f:
        for i in range(8):
            abstract = f"We observed pulsar {i} for nine years. Its timing noise is red. A common process is not seen."
            f.write(json.dumps({"paper_id": f"astro-{i}", "abstract": abstract}) + "\n")
    run(["dvc", "add", "data/corpora/astro"], proj)
    # 2. the entry, in the corpus catalogue
    catalogue = yaml.safe_load((proj / "data/corpora.yaml").read_text())
    catalogue["corpora"]["astro"] = {
        "path": "data/corpora/astro/abstracts.jsonl.gz",
        "format": "jsonl",
        "text_field": "abstract",
        "id_field": "paper_id",
        "weight": 0.25,
    }
    (proj / "data/corpora.yaml").write_text(yaml.safe_dump(catalogue, sort_keys=False))
    status = run(["dvc", "status", "--with-deps", "make_pairs"], proj).stdout  # make_pairs and the stages above
    assert "sample_corpus:" in status and "modified:           data/corpora\n" in status
    assert "modified:           data/corpora.yaml" in status
    assert "make_pairs:" not in status  # downstream stages see the change only through the new corpus
    # 3. the run: 30 documents at 0.8 / 0.2 / 0.25 -> 19 + 5 + 6 (largest remainders)
    out = run(["dvc", "repro", "sample_corpus"], proj).stdout
    assert "Running stage 'sample_corpus'" in out
    m = json.loads((proj / "metrics/sample_corpus.json").read_text())
    assert m["corpora"]["astro"]["sampled_docs"] == m["astro_docs"] == 6

    # a corpus outside the folders the stage depends on: one line, exit 1, no output written
    catalogue["corpora"]["astro"]["path"] = str(tmp_path / "elsewhere.jsonl")
    (proj / "data/corpora.yaml").write_text(yaml.safe_dump(catalogue, sort_keys=False))
    proc = run(["python", "stages/sample_corpus.py", "--corpus-dirs", "data/raw/corpus", "data/corpora",
                "--datasets", "data/prepared", "--out", "data/corpus2", "--metrics", "m2.json"], proj, check=False)  # fmt: skip
    assert proc.returncode == 1 and not (proj / "data/corpus2").exists()
    assert proc.stderr.count("\n") == 1 and "corpora.astro" in proc.stderr and "outside the folders" in proc.stderr
