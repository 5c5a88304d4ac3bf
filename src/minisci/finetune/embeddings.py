"""The ``finetune_embeddings`` stage: contrastive fine-tuning of an encoder into a sentence-embedding
model (sentence-transformers, mean pooling, MultipleNegativesRankingLoss with in-batch and BM25
hard negatives) on title <-> abstract pairs mined from the pool without any labels, measured on the
retrieval benchmark of :mod:`minisci.finetune.retrieval_benchmark` against the base model as
shipped, BM25 and their fusion; the stage saves whichever encoder is better on dev.

Phases: 1. benchmark; 2. training from each starting encoder (``encoder: auto``: both the shipped
and the adapted encoder, the same pairs and seed; or the one named); 3. dev: which encoder (a
fine-tuned one, or the shipped model if neither beats it) and which retriever to serve; 4. test:
scores, intervals and verdicts (:mod:`minisci.report.retrieval`), the fine-tuned models against the
shipped one and against each other: whether pretraining on the domain helps the embeddings."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from minisci.batching import windows_of
from minisci.config import FinetuneEmbeddingsConfig
from minisci.encoding import embed, load_encoder
from minisci.finetune.retrieval_benchmark import (
    QUERY_KINDS,
    Split,
    build_benchmark,
    pair_training_examples,
    rank_metrics,
    reciprocal_ranks,
    relevant_ranks,
)
from minisci.lexical import Bm25, fuse
from minisci.progress import WorkProgress
from minisci.report.retrieval import SHIPPED, mrr_interval, retrieval_verdicts
from minisci.trainer_progress import use_stage_progress
from minisci.training import check_lengths, quiet_load_reports, run_environment, training_arguments

STARTS = ("baseline", "adapted")  # the encoders fine-tuning may start from (``encoder: auto`` trains both)
# every comparison of the report: (a, b) reads "b vs a"; the shipped model is the baseline. A pair
# with a system the run did not train is left out.
COMPARISONS = (
    (SHIPPED, "from_baseline"),
    (SHIPPED, "from_adapted"),
    ("from_baseline", "from_adapted"),  # does pretraining on the domain help the embeddings?
    (SHIPPED, "bm25"),
    (SHIPPED, "hybrid"),
    ("bm25", "hybrid"),
)
RETRIEVAL_FILE = "retrieval.json"  # beside the saved model: what the stage measured and serves


def sentence_model(model_dir, max_seq_length: int):
    """A SentenceTransformer of mean pooling and unit length over ``model_dir``: what minisci's
    :func:`~minisci.encoding.embed` computes for a text of up to ``max_seq_length`` pieces, so that
    ``SentenceTransformer(saved).encode`` gives the vectors the stage evaluated (a longer text is cut by
    ``encode`` and windowed by minisci)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    word = Transformer(str(model_dir), max_seq_length=max_seq_length)
    pooling = Pooling(word.get_embedding_dimension(), pooling_mode="mean")
    return SentenceTransformer(modules=[word, pooling, Normalize()], device="cpu")


def tuned_name(start: str) -> str:
    """The system name of the model fine-tuned from ``start`` (``baseline`` or ``adapted``)."""
    return f"from_{start}"


def served_summary(served: str, starts: list[str]) -> str:
    """The card's one-line summary of what models/embeddings holds."""
    if served == SHIPPED:
        return (
            "The base model as shipped (mean pooling, unit length): on the dev queries of minisci's retrieval "
            f"benchmark it beat the models fine-tuned from {' and '.join(starts)}, so minisci serves it."
        )
    return (
        f"Sentence-transformers model (mean pooling, unit length) fine-tuned from the {served.removeprefix('from_')} "
        "encoder with in-batch and BM25 hard negatives (MultipleNegativesRankingLoss) on title <-> abstract pairs "
        "of the pool."
    )


def train_embeddings(model_dir: str | Path, train: list[dict], cfg: FinetuneEmbeddingsConfig, work_dir: str | Path):
    import datasets
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments, losses
    from sentence_transformers.training_args import BatchSamplers

    # Mean pooling over a plain Hugging Face encoder (our adapted model has no sentence-transformers config).
    model = sentence_model(model_dir, cfg.max_length)
    args = training_arguments(
        work_dir,
        seed=cfg.seed,
        batch_size=cfg.batch_size,
        learning_rate=cfg.learning_rate,
        weight_decay=0.01,
        precision=cfg.precision,
        epochs=cfg.epochs,
        warmup=cfg.warmup_ratio,
        logging_steps=cfg.logging_steps,
        group_by_length=False,
        args_cls=SentenceTransformerTrainingArguments,
        batch_sampler=BatchSamplers.NO_DUPLICATES,  # a duplicate in the batch would be a false negative
        include_num_input_tokens_seen="no",  # cannot find a SentenceTransformer's input; would warn every step
    )
    columns = ("anchor", "positive", "negative") if "negative" in train[0] else ("anchor", "positive")
    ds = datasets.Dataset.from_dict({c: [p[c] for p in train] for c in columns})
    # sentence-transformers would fill its card's widget from training rows drawn at random, behind a
    # progress bar that lands in the log; minisci writes the model's card itself (cards.py).
    model.model_card_data.widget = [{"text": train[0]["anchor"]}]
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=ds, loss=losses.MultipleNegativesRankingLoss(model, scale=cfg.scale)
    )
    use_stage_progress(trainer, "embeddings fine-tuning").train()
    model[0].max_seq_length = cfg.eval_max_length  # saved for use: encode as the stage evaluates
    return model, trainer.state.log_history


def check_encoder_lengths(adapted_dir, baseline_dir, cfg: FinetuneEmbeddingsConfig) -> None:
    """The lengths against each model's positions, before any work: either encoder may be the
    starting one, which trains at ``max_length`` and is scored at ``eval_max_length``."""
    from transformers import AutoConfig

    quiet_load_reports()
    lengths = {
        "finetune_embeddings.max_length": cfg.max_length,
        "finetune_embeddings.eval_max_length": cfg.eval_max_length,
    }
    for model_dir, keys in ((adapted_dir, lengths), (baseline_dir, lengths)):
        check_lengths(
            AutoConfig.from_pretrained(model_dir, local_files_only=True, trust_remote_code=False), keys, model_dir
        )


# scoring ---------------------------------------------------------------------------------------------------


def dense_scores(
    model_dir, split: Split, cfg: FinetuneEmbeddingsConfig, what: str = "scoring"
) -> dict[str, np.ndarray]:
    """Per query kind, cosine scores [queries, candidates] of an encoder (windowed as `minisci index`),
    with progress over every window encoded (``what``)."""
    quiet_load_reports()
    model, tok = load_encoder(model_dir)
    kinds = {kind: [text for text, _ in queries] for kind, queries in split.queries.items() if queries}
    texts = [[c["text"] for c in split.candidates], *kinds.values()]
    body = cfg.eval_max_length - 2
    windows = sum(
        len(windows_of(ids, body))
        for group in texts
        for ids in tok(group, add_special_tokens=False, verbose=False)["input_ids"]
    )
    progress = WorkProgress(what, windows, "windows")
    docs, *queries = (embed(model, tok, group, cfg.eval_batch_size, cfg.eval_max_length, progress) for group in texts)
    # no query kind without queries (no abstract had a long enough second-half sentence: tiny collections)
    return {kind: q @ docs.T for kind, q in zip(kinds, queries)}


def bm25_scores(split: Split) -> dict[str, np.ndarray]:
    bm25 = Bm25.build([c["text"] for c in split.candidates])
    return {kind: np.stack([bm25.scores(text) for text, _ in qs]) for kind, qs in split.queries.items() if qs}


def split_ranks(split: Split, scores: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {kind: relevant_ranks(s, np.array([i for _, i in split.queries[kind]])) for kind, s in scores.items()}


def dev_mrr(split: Split, scores: dict[str, np.ndarray]) -> float:
    """Mean over query kinds of MRR@10: one number to choose by."""
    return round(float(np.mean([rank_metrics(r)["mrr_at_10"] for r in split_ranks(split, scores).values()])), 4)


def training_starts(setting: str) -> list[str]:
    """The encoders fine-tuning starts from: both with ``auto``, else the one named in params."""
    return list(STARTS) if setting == "auto" else [setting]


def choose_start(dev_mrrs: dict[str, float], setting: str) -> str:
    """The starting encoder: the one named in params, or with ``auto`` the one whose fine-tuned
    model has the better dev MRR@10 (the shipped baseline on a tie: it is the one users already have)."""
    if setting != "auto":
        return setting
    return max(STARTS, key=lambda k: (dev_mrrs[k], k == "baseline"))


def choose_retriever(dev: dict[str, float]) -> str:
    """The best of dense, bm25 and hybrid on dev; ties go to the simpler (dense, then bm25)."""
    return max(("dense", "bm25", "hybrid"), key=lambda k: (dev[k], -("dense", "bm25", "hybrid").index(k)))


def test_results(split: Split, scores: dict[str, dict[str, np.ndarray]], cfg) -> tuple[dict, dict]:
    """Per query kind and system: MRR@10 (with its interval), recall@1, recall@10; and the verdicts."""
    table, terms = {}, {}
    for kind in (k for k in QUERY_KINDS if k in scores[SHIPPED]):
        table[kind], terms[kind] = {}, {}
        for system, per_kind in scores.items():
            ranks = split_ranks(split, {kind: per_kind[kind]})[kind]
            terms[kind][system] = reciprocal_ranks(ranks)
            low, high = mrr_interval(terms[kind][system], cfg.bootstrap_resamples, cfg.seed)
            table[kind][system] = {**rank_metrics(ranks), "ci_low": low, "ci_high": high}
    verdicts = retrieval_verdicts(terms, COMPARISONS, cfg.equivalence_margin, cfg.bootstrap_resamples, cfg.seed)
    return table, verdicts


def run_finetune_embeddings(corpora, documents, adapted_dir, baseline_dir, cfg: FinetuneEmbeddingsConfig, work_dir):
    """Returns the served model (a SentenceTransformer), the metrics and the training log (per
    starting encoder). ``corpora``: the catalogue's entries (paths relative to the working directory)."""
    start = time.perf_counter()
    check_encoder_lengths(adapted_dir, baseline_dir, cfg)
    encoders = {"baseline": Path(baseline_dir), "adapted": Path(adapted_dir)}
    # 1. the benchmark, and BM25 on both splits (cheap)
    bench = build_benchmark(corpora, documents, cfg)
    dev_bm25, test_bm25 = bm25_scores(bench.dev), bm25_scores(bench.test)
    # 2. contrastive training from each starting encoder: the same pairs, the same seed
    pairs = pair_training_examples(bench, cfg.hard_negatives)
    starts = training_starts(cfg.encoder)
    tuned, histories, tuned_dirs = {}, {}, {}
    for s in starts:
        tuned[s], histories[s] = train_embeddings(encoders[s], pairs, cfg, Path(work_dir) / f"train_{s}")
        tuned_dirs[s] = Path(work_dir) / tuned_name(s)
        tuned[s].save(str(tuned_dirs[s]))
    # 3. dev: the fine-tuned model to keep, served only if it beats the shipped model; then the retriever
    dev_scores = {SHIPPED: dense_scores(baseline_dir, bench.dev, cfg, f"finetune_embeddings: dev, {SHIPPED}")}
    dev_scores |= {
        tuned_name(s): dense_scores(tuned_dirs[s], bench.dev, cfg, f"finetune_embeddings: dev, {tuned_name(s)}")
        for s in starts
    }
    dev = {name: dev_mrr(bench.dev, s) for name, s in dev_scores.items()}
    start_dev = {s: dev[tuned_name(s)] for s in starts}
    start_encoder = choose_start(start_dev, cfg.encoder)
    best = tuned_name(start_encoder)
    served = best if dev[best] > dev[SHIPPED] else SHIPPED
    dev_retrievers = {
        "dense": dev[served],
        "bm25": dev_mrr(bench.dev, dev_bm25),
        "hybrid": dev_mrr(bench.dev, {k: fuse(dev_scores[served][k], dev_bm25[k]) for k in dev_bm25}),
    }
    retriever = choose_retriever(dev_retrievers)
    # 4. test: every system once, then intervals and verdicts
    test = {SHIPPED: dense_scores(baseline_dir, bench.test, cfg, f"finetune_embeddings: test, {SHIPPED}")}
    test |= {
        tuned_name(s): dense_scores(tuned_dirs[s], bench.test, cfg, f"finetune_embeddings: test, {tuned_name(s)}")
        for s in starts
    }
    test["bm25"] = test_bm25
    test["hybrid"] = {k: fuse(test[served][k], test_bm25[k]) for k in test_bm25}
    table, verdicts = test_results(bench.test, test, cfg)
    model = tuned[start_encoder] if served != SHIPPED else sentence_model(baseline_dir, cfg.eval_max_length)
    metrics = {
        "benchmark": {
            "candidates": len(bench.test.candidates),
            "query_documents": len(bench.test.queries["title"]),
            "dev_candidates": len(bench.dev.candidates),
            "dev_query_documents": len(bench.dev.queries["title"]),
            "training_documents_available": bench.train_available,
        },
        "starts": starts,
        "start_encoder": start_encoder,
        "start_encoder_dev_mrr": start_dev,
        "train_pairs": len(pairs),
        "hard_negatives": cfg.hard_negatives,
        "dev": {**dev, **{k: v for k, v in dev_retrievers.items() if k != "dense"}},
        "served": {"encoder": served, "retriever": retriever, "dev_mrr": dev_retrievers},
        "test": table,
        "verdicts": verdicts,
        "environment": run_environment(cfg.precision),
        "wall_seconds": round(time.perf_counter() - start, 1),
    }
    return model, metrics, histories


def curve_history(histories: dict[str, list[dict]]) -> list[dict]:
    """One log history for :func:`~minisci.training.write_curves` from the runs of each start: the
    loss of each as ``loss_from_<start>``, the learning rate once (every run has the same schedule)."""
    out = []
    for i, (s, history) in enumerate(histories.items()):
        for entry in history:
            row = {"step": entry["step"]} if "step" in entry else {}
            if "loss" in entry:
                row[f"loss_{tuned_name(s)}"] = entry["loss"]
            if i == 0 and "learning_rate" in entry:
                row["learning_rate"] = entry["learning_rate"]
            out.append(row)
    return out
