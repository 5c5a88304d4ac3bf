"""The retrieval benchmark of finetune_embeddings: guarded splits, rank metrics, verdicts on planted
rankings, the starting-encoder choice, and a tiny run of the stage."""

import json
import random
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, fixture_corpora, tiny_params, write_params

from minisci.config import FinetuneEmbeddingsConfig, from_dict
from minisci.data.corpora import iter_records
from minisci.data.corpus import rank, text_key
from minisci.data.readers import Document, read_documents
from minisci.errors import MinisciError
from minisci.finetune.embeddings import (
    choose_retriever,
    choose_start,
    curve_history,
    training_starts,
)
from minisci.finetune.retrieval_benchmark import (
    build_benchmark,
    cloze,
    pair_training_examples,
    rank_metrics,
    relevant_ranks,
    titled,
)
from minisci.io import write_jsonl
from minisci.report.retrieval import compare


def tiny_cfg(**overrides) -> FinetuneEmbeddingsConfig:
    return from_dict(
        FinetuneEmbeddingsConfig, {**tiny_params()["finetune_embeddings"], **overrides}, "finetune_embeddings"
    )


CORPORA = fixture_corpora()  # the catalogue (the shipped pool), its files read from the fixture mirror


def pool_rows() -> list[dict]:
    return [json.loads(line) for c in CORPORA.values() for line in Path(c.path).read_text().splitlines()]


@pytest.fixture
def sampled(tmp_path):
    """A corpus sample (pretraining's documents) of every third fixture pool document."""
    ids = [d["id"] for d in pool_rows()][::3]
    write_jsonl(tmp_path / "documents.jsonl", [{"id": i, "sentences": ["x y z."]} for i in ids])
    return tmp_path / "documents.jsonl", set(ids)


def test_query_documents_are_held_out_from_pretraining_and_training(sampled):
    documents, pretrain_ids = sampled
    bench = build_benchmark(CORPORA, documents, tiny_cfg())
    train_ids = {d["id"] for d in bench.train}
    for split, n_queries in ((bench.test, 6), (bench.dev, 4)):
        query_ids = {split.candidates[i]["id"] for q in split.queries.values() for _, i in q}
        assert len(query_ids) == n_queries and not query_ids & pretrain_ids, "queries come from unseen documents"
        assert not {c["id"] for c in split.candidates} & train_ids, "nothing searched is trained on"
    assert len(bench.test.candidates) == 14 and len(bench.dev.candidates) == 8
    assert not {c["id"] for c in bench.test.candidates} & {c["id"] for c in bench.dev.candidates}
    flagged = {d["id"] for d in pool_rows() if d["eval_overlap"]}
    assert flagged and not flagged & (train_ids | {c["id"] for c in bench.test.candidates})
    assert len(bench.train) == 16 < bench.train_available
    pairs = pair_training_examples(bench, True)
    texts = {d["id"]: d["text"] for d in bench.train}
    assert all(p["negative"] != p["positive"] and p["negative"] in texts.values() for p in pairs)


def in_memory_benchmark(documents, cfg) -> dict:
    """The benchmark built from every pool document held in memory, in the rule's own words: the
    streamed build must choose the same documents in the same order."""
    pool, seen_ids, seen_texts = [], set(), set()
    for name, c in CORPORA.items():
        for _, _, r in iter_records(name, c):
            if r.id in seen_ids or text_key(r.text) in seen_texts:
                continue
            seen_ids.add(r.id)
            seen_texts.add(text_key(r.text))
            if not r.flagged:
                pool.append(Document(r.id, r.source, name, r.kind, r.title, r.text, r.flagged))
    sampled = {d["id"] for d in read_documents(documents)}
    order = sorted(pool, key=lambda d: rank(cfg.seed, d.id, "retrieval"))
    need = cfg.n_test_queries + cfg.n_dev_queries
    held = [d for d in order if titled(d) and d.id not in sampled][:need]
    longest = max(len(d.text.split()) for d in held)
    rest = [d for d in order if d not in held and len(d.text.split()) <= longest]
    n_d = cfg.n_candidates + cfg.n_dev_candidates - need
    train = [d for d in order if titled(d) and d not in held + rest[:n_d]]
    random.Random(cfg.seed).shuffle(train)
    return {"queries": [d.id for d in held], "distractors": [d.id for d in rest[:n_d]],
            "train": [d.id for d in train[: cfg.n_train]], "available": len(train)}  # fmt: skip


def test_the_benchmark_read_twice_equals_the_one_built_in_memory(sampled):
    cfg = tiny_cfg(n_train=40)
    bench = build_benchmark(CORPORA, sampled[0], cfg)
    query_ids = [c["id"] for split in (bench.test, bench.dev) for c in split.candidates[: len(split.queries["title"])]]
    distractors = [
        c["id"] for split in (bench.test, bench.dev) for c in split.candidates[len(split.queries["title"]) :]
    ]
    got = {"queries": query_ids, "distractors": distractors, "train": [d["id"] for d in bench.train],
           "available": bench.train_available}  # fmt: skip
    assert got == in_memory_benchmark(sampled[0], cfg)


def test_too_few_unseen_documents_is_one_line(sampled):
    with pytest.raises(MinisciError, match=r"titled abstracts outside the corpus sample; .* lower them"):
        build_benchmark(CORPORA, sampled[0], tiny_cfg(n_test_queries=400, n_candidates=500))


def test_query_sentence_is_from_the_second_half():
    text = "First sentence is about the setup here. Second one tells a method in detail. Third result holds for all of the patients here. Fourth ends it with conclusions for many readers."
    s, _ = cloze(text, 13, "d1")
    assert s in text and text.index(s) > len(text) // 3
    assert cloze("Too short.", 13, "d1") == (None, "Too short.")


def test_the_query_sentence_is_removed_from_its_document():
    text = "First sentence is about the setup here.  Second one tells a method in detail. Third result holds for all of the patients here. Fourth ends it with conclusions for many readers."
    sentence, rest = cloze(text, 13, "d1")
    assert sentence and sentence not in rest
    assert sorted((rest + " " + sentence).split()) == sorted(text.split()), "nothing else is lost"
    one = "A single long sentence that has many more than eight words in it."
    assert cloze(one, 13, "d1") == (None, one), "a one-sentence text keeps its only sentence"


def test_candidates_are_as_searched_and_no_longer_than_a_query_document(sampled):
    bench = build_benchmark(CORPORA, sampled[0], tiny_cfg())
    for split in (bench.test, bench.dev):
        query_docs = {i for _, i in split.queries["title"]}
        for text, i in split.queries["sentence"]:
            assert text not in split.candidates[i]["text"], "inverse cloze: the sentence is not in its document"
        longest = max(len(split.candidates[i]["text"].split()) for i in query_docs)
        sentences = max((len(t.split()) for t, _ in split.queries["sentence"]), default=0)
        assert all(
            len(c["text"].split()) <= longest + sentences for i, c in enumerate(split.candidates) if i not in query_docs
        )


def test_too_few_short_distractors_is_one_line(sampled):
    with pytest.raises(
        MinisciError,
        match=r"candidates take \d+ distractors besides the \d+ queries; the pool has \d+ .* lower n_candidates",
    ):
        build_benchmark(CORPORA, sampled[0], tiny_cfg(n_candidates=60))


def test_ranks_count_ties_against_the_relevant_document():
    scores = np.array([[0.9, 0.1, 0.5], [0.0, 0.0, 0.0], [0.2, 0.3, 0.1]])
    ranks = relevant_ranks(scores, np.array([0, 1, 2]))
    assert ranks.tolist() == [1, 3, 3]
    m = rank_metrics(ranks)
    assert m["recall_at_1"] == pytest.approx(1 / 3, abs=1e-4) and m["mrr_at_10"] == pytest.approx(
        (1 + 2 / 3) / 3, abs=1e-4
    )


@pytest.mark.parametrize(
    "shift, expected",
    [(0.3, "better"), (-0.3, "worse"), (0.0, "equivalent")],
)
def test_verdict_on_planted_rankings(shift, expected):
    rng = np.random.default_rng(0)
    ranks_a = rng.integers(1, 15, size=800)
    terms_a = np.where(ranks_a <= 10, 1.0 / ranks_a, 0.0)
    if shift > 0:  # b finds every document that a had at rank 2-3 at rank 1
        terms_b = np.where((ranks_a > 1) & (ranks_a <= 3), 1.0, terms_a)
    elif shift < 0:  # b loses every document that a had at rank 1
        terms_b = np.where(ranks_a == 1, 0.0, terms_a)
    else:  # as good: 5 queries move from rank 1 out of the top 10, and 5 the other way
        terms_b = terms_a.copy()
        terms_b[np.flatnonzero(ranks_a == 1)[:5]] = 0.0
        terms_b[np.flatnonzero(ranks_a > 10)[:5]] = 1.0
    c = compare(terms_a, terms_b, margin=0.01, n_resamples=500, seed=1)
    assert c["verdict"] == expected
    assert c["ci_low"] <= c["difference"] <= c["ci_high"] and c["mde"] > 0 and c["examples"] == 800


def test_inconclusive_when_the_margin_is_below_the_noise():
    rng = np.random.default_rng(0)
    a, b = rng.random(50), rng.random(50)
    assert compare(a, b, margin=0.001, n_resamples=500, seed=1)["verdict"] == "inconclusive"


@pytest.mark.parametrize(
    "dev, setting, expected",
    [
        ({"baseline": 0.8, "adapted": 0.6}, "auto", "baseline"),
        ({"baseline": 0.5, "adapted": 0.6}, "auto", "adapted"),
        ({"baseline": 0.6, "adapted": 0.6}, "auto", "baseline"),
        ({"adapted": 0.6}, "adapted", "adapted"),
    ],
)
def test_starting_encoder_follows_dev_mrr(dev, setting, expected):
    """``dev``: the dev MRR@10 of the model fine-tuned from each start."""
    assert choose_start(dev, setting) == expected


def test_auto_fine_tunes_from_both_starts():
    assert training_starts("auto") == ["baseline", "adapted"]
    assert training_starts("adapted") == ["adapted"] and training_starts("baseline") == ["baseline"]


def test_curves_keep_each_starts_loss():
    histories = {
        "baseline": [{"step": 1, "loss": 2.0, "learning_rate": 1e-5}, {"train_runtime": 3.0}],
        "adapted": [{"step": 1, "loss": 3.0, "learning_rate": 1e-5}],
    }
    rows = [r for r in curve_history(histories) if len(r) > 1]
    assert rows == [
        {"step": 1, "loss_from_baseline": 2.0, "learning_rate": 1e-5},
        {"step": 1, "loss_from_adapted": 3.0},
    ]


def test_served_retriever_follows_dev_mrr():
    assert choose_retriever({"dense": 0.5, "bm25": 0.7, "hybrid": 0.8}) == "hybrid"
    assert choose_retriever({"dense": 0.8, "bm25": 0.7, "hybrid": 0.8}) == "dense"


def test_default_params_search_thousands_of_documents():
    import yaml

    params = yaml.safe_load((REPO / "params.yaml").read_text())["finetune_embeddings"]
    assert params["n_candidates"] >= 2000 and params["encoder"] == "auto"


@pytest.mark.slow
def test_stage_runs_on_the_fixture_pool_and_saves_the_encoder_better_on_dev(tiny_model_dir, sampled, tmp_path):

    import finetune_embeddings

    from minisci.report.retrieval import report_rows

    params = tiny_params()
    for name, c in CORPORA.items():  # the catalogue's corpora, where the fixture mirror has them
        params["corpora"][name]["path"] = c.path
    write_params(tmp_path, params)
    out, metrics = tmp_path / "embeddings", tmp_path / "m.json"
    argv = ["--docs", str(sampled[0]), "--adapted", str(tiny_model_dir)]
    argv += ["--baseline", str(tiny_model_dir), "--out", str(out), "--metrics", str(metrics)]
    argv += ["--plots", str(tmp_path / "plots"), "--checkpoints", str(tmp_path / "checkpoints")]
    argv += ["--corpora-catalogue", str(tmp_path / "data/corpora.yaml")]
    finetune_embeddings.main([*argv, "--params", str(tmp_path / "params.yaml")])
    m = json.loads(metrics.read_text())
    served = json.loads((out / "retrieval.json").read_text())
    assert served["encoder"] in ("shipped", "from_baseline", "from_adapted")
    assert served["retriever"] in ("dense", "bm25", "hybrid")
    assert m["benchmark"]["candidates"] == 14 and set(m["test"]) == {"title", "sentence"}
    # encoder: auto fine-tunes both starts, and the start kept is the one better on dev
    assert m["starts"] == ["baseline", "adapted"] and set(m["test"]["title"]) >= {"from_baseline", "from_adapted"}
    dev = m["start_encoder_dev_mrr"]
    assert dev == {s: m["dev"][f"from_{s}"] for s in ("baseline", "adapted")}
    assert m["start_encoder"] == max(("baseline", "adapted"), key=lambda k: (dev[k], k == "baseline"))
    if served["encoder"] != "shipped":
        assert served["encoder"] == f"from_{m['start_encoder']}"
    curves = sorted(p.name for p in (tmp_path / "plots" / "curves").iterdir())
    assert curves == ["learning_rate.tsv", "loss_from_adapted.tsv", "loss_from_baseline.tsv"]
    assert set(m["verdicts"]["title"]) == {
        "from_baseline vs shipped",
        "from_adapted vs shipped",
        "from_adapted vs from_baseline",
        "bm25 vs shipped",
        "hybrid vs shipped",
        "hybrid vs bm25",
    }
    assert (out / "modules.json").is_file() and (out / "2_Normalize").is_dir()
    assert any("the shipped model is better" in line.lower() or "is served" in line for line in report_rows(m, "x"))
