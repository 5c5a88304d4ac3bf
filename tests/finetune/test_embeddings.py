import json

import numpy as np
import pytest
import yaml
from conftest import FIXTURE_MIRROR, REPO

from minisci.config import FinetuneEmbeddingsConfig, from_dict
from minisci.errors import MinisciError
from minisci.finetune.embeddings import retrieval_metrics, split_pairs, title_abstract_pairs
from minisci.io import write_jsonl


def test_retrieval_metrics_known_values():
    q = np.eye(3)
    d = np.array([[1.0, 0, 0], [0, 0.1, 1.0], [0, 1.0, 0.2]])  # query 1 ranks doc 2 first, query 2 ranks doc 1 first
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    m = retrieval_metrics(q, d)
    assert m["recall_at_1"] == pytest.approx(1 / 3, abs=1e-4) and m["recall_at_10"] == 1.0
    assert m["mrr_at_10"] == pytest.approx((1 + 0.5 + 0.5) / 3, abs=1e-4)


def test_pairs_only_from_sampled_documents(tmp_path):
    pool = [json.loads(l) for l in (FIXTURE_MIRROR / "corpus/biomedical.jsonl").read_text().splitlines()]
    keep = [d["id"] for d in pool if d["title"]][:5]
    write_jsonl(tmp_path / "docs.jsonl", [{"id": i, "sentences": ["x y z."]} for i in keep])
    pairs = title_abstract_pairs(FIXTURE_MIRROR, tmp_path / "docs.jsonl")
    assert {p["id"] for p in pairs} <= set(keep) and pairs
    assert all(p["anchor"] and len(p["positive"].split()) >= 30 for p in pairs)


def test_split_is_disjoint_and_too_few_pairs_raise():
    params = yaml.safe_load((REPO / "params.yaml").read_text())["finetune_embeddings"]
    cfg = from_dict(FinetuneEmbeddingsConfig, {**params, "n_train": 5, "n_eval": 10}, "finetune_embeddings")
    pairs = [{"id": str(i), "anchor": "a", "positive": "b"} for i in range(30)]
    train, held = split_pairs(pairs, cfg)
    assert len(train) == 5 and len(held) == 10 and not {p["id"] for p in train} & {p["id"] for p in held}
    with pytest.raises(MinisciError, match="only 8 title/abstract pairs"):
        split_pairs(pairs[:8], cfg)
