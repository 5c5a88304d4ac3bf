"""`minisci index` / `search` on a sentence-transformers model use the model's own modules (here CLS
pooling and a Normalize layer), so the index agrees with `SentenceTransformer.encode`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from minisci.encoding import embed
from minisci.serve import cli
from minisci.serve.search import load_encoder, search

TEXTS = ["aspirin and heparin after surgery", "lung cancer treatment with cisplatin", "shortest paths in graphs"]


@pytest.fixture(scope="module")
def st_dir(tiny_model_dir, tmp_path_factory):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    word = Transformer(str(tiny_model_dir))
    model = SentenceTransformer(
        modules=[word, Pooling(word.get_embedding_dimension(), pooling_mode="cls"), Normalize()], device="cpu"
    )
    out = tmp_path_factory.mktemp("st") / "cls-model"
    model.save(str(out))
    return out


def test_index_of_a_sentence_transformers_model_equals_its_encode(st_dir, tiny_model_dir, tmp_path):
    from sentence_transformers import SentenceTransformer

    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(TEXTS)))
    argv = ["index", "--model", str(st_dir), "--docs", str(docs), "--out", str(tmp_path / "idx"), "--device", "cpu"]
    assert cli.main(argv) == 0
    ours = np.load(tmp_path / "idx/embeddings.npy")
    reference = SentenceTransformer(str(st_dir), device="cpu").encode(TEXTS)
    assert np.allclose(ours, reference, atol=1e-5)  # CLS pooling, not our mean pooling
    mean_pooled = embed(*load_encoder(tiny_model_dir), TEXTS)  # the same encoder as a plain directory
    assert not np.allclose(mean_pooled, reference, atol=1e-3)
    hit = search(tmp_path / "idx", TEXTS[1], k=1)[0]
    assert hit["id"] == "d1" and hit["score"] == pytest.approx(1.0, abs=1e-4)


def test_sentence_transformers_model_loads_as_one(st_dir):
    model, tok = load_encoder(st_dir)
    assert type(model).__name__ == "SentenceTransformer" and tok is model.tokenizer
