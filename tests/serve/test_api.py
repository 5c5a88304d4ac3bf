"""The Python API: same outputs as the command-line functions, its documented examples run, and bad
models or indexes fail with one line."""

import doctest
import json
import subprocess
import sys

import numpy as np
import pytest

from minisci import CitationClassifier, Index, NerTagger
from minisci.errors import MinisciError
from minisci.serve import api
from minisci.serve.inference import classify, tag, text_classifier, token_classifier
from minisci.serve.search import recommend_reviewers, search

COLLECTION = [
    {"id": "p1", "title": "Aspirin and heparin", "text": "patients received aspirin after surgery", "authors": ["Ada"]},
    {"id": "p2", "title": "Lung cancer", "text": "lung cancer treatment with cisplatin", "authors": ["Cy", "Ada"]},
    {"id": "p3", "title": "Graph algorithms", "text": "shortest paths in sparse graphs", "authors": ["Dee", "Bob"]},
]
TEXTS = ["patients received aspirin after treatment", "lung cancer after insulin", "the study showed heparin"]


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, tiny_model_dir):
    docs = tmp_path_factory.mktemp("api") / "docs.jsonl"
    docs.write_text("".join(json.dumps(d) + "\n" for d in COLLECTION))
    out = docs.parent / "index"
    Index.build(tiny_model_dir, docs, out, max_length=64)
    return out


def test_import_minisci_does_not_import_torch():
    code = "import sys, minisci, minisci.config; print('torch' in sys.modules or 'transformers' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_api_equals_the_command_line_functions(tiny_finetuned, index_dir):
    tagger = NerTagger(tiny_finetuned["ner"], batch_size=2)
    assert tagger(TEXTS) == tag(token_classifier(tiny_finetuned["ner"]), TEXTS)
    assert tagger(TEXTS[0]) == tagger(TEXTS)[0] and tagger.labels == ["Entity"]
    clf = CitationClassifier(tiny_finetuned["cite"])
    assert clf(TEXTS) == classify(text_classifier(tiny_finetuned["cite"]), TEXTS)
    assert set(clf.labels) == {"background", "method", "result"}
    index = Index(index_dir)
    assert len(index) == 3
    assert index.search("lung cancer", k=2) == search(index_dir, "lung cancer", k=2)
    assert index.search(["lung cancer", "graphs"], k=3)[1] == search(index_dir, "graphs", k=3)
    got = index.reviewers("sparse graphs", exclude=["bob"], aggregation="mean_top3")
    assert got == recommend_reviewers(index_dir, "sparse graphs", exclude=("bob",), aggregation="mean_top3")
    assert "Bob" not in {r["author"] for r in got}


def test_docstring_examples_run(tiny_finetuned, index_dir, tmp_path, monkeypatch):
    """The module docstring's examples (also in the README), on tiny models laid out where `dvc repro` puts them."""
    (tmp_path / "models/finetune_ner/bc5cdr").mkdir(parents=True)
    (tmp_path / "models/finetune_ner/bc5cdr/adapted").symlink_to(tiny_finetuned["ner"])
    (tmp_path / "models/finetune_classification/scicite").mkdir(parents=True)
    (tmp_path / "models/finetune_classification/scicite/adapted").symlink_to(tiny_finetuned["cite"])
    (tmp_path / "index").symlink_to(index_dir)
    monkeypatch.chdir(tmp_path)
    result = doctest.testmod(api, verbose=False)
    assert result.attempted >= 8 and result.failed == 0


def test_missing_model_and_wrong_task(tiny_finetuned, tmp_path):
    with pytest.raises(MinisciError, match="nope: not a model directory"):
        NerTagger(tmp_path / "nope")
    with pytest.raises(
        MinisciError, match=r"not a token-classification .*BertForSequenceClassification.*finetune_ner stage"
    ):
        NerTagger(tiny_finetuned["cite"])
    with pytest.raises(
        MinisciError, match=r"not a sequence-classification .*pass a model from the finetune_classification stage"
    ):
        CitationClassifier(tiny_finetuned["ner"])


def test_missing_and_corrupt_index(index_dir, tmp_path):
    import shutil

    with pytest.raises(MinisciError, match="not an index"):
        Index(tmp_path)
    bad = tmp_path / "bad"
    shutil.copytree(index_dir, bad)
    (bad / "embeddings.npy").write_bytes((index_dir / "embeddings.npy").read_bytes()[:100])
    with pytest.raises(MinisciError, match=r"bad/embeddings\.npy: not a readable NumPy array"):
        Index(bad)
    np.save(bad / "embeddings.npy", np.zeros((2, 32), dtype=np.float32))
    with pytest.raises(MinisciError, match=r"bad: inconsistent index: 2 embeddings, 3 documents"):
        Index(bad)
    (bad / "index.json").write_text("{not json")
    with pytest.raises(MinisciError, match=r"bad/index\.json: not valid JSON"):
        Index(bad)


def test_loading_a_model_leaves_the_callers_transformers_logging_alone(tiny_finetuned, tiny_model_dir, tmp_path):
    from transformers.utils import logging as hf_logging

    before = hf_logging.get_verbosity()
    hf_logging.set_verbosity_info()
    hf_logging.enable_progress_bar()
    try:
        NerTagger(tiny_finetuned["ner"])
        docs = tmp_path / "docs.jsonl"
        docs.write_text("".join(json.dumps(d) + "\n" for d in COLLECTION))
        Index.build(tiny_model_dir, docs, tmp_path / "index", max_length=64)
        assert hf_logging.get_verbosity() == hf_logging.INFO and hf_logging.is_progress_bar_enabled()
    finally:
        hf_logging.set_verbosity(before)
