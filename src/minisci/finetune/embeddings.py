"""The ``finetune_embeddings`` stage: contrastive fine-tuning of an encoder into a sentence-embedding
model (sentence-transformers, mean pooling, MultipleNegativesRankingLoss with in-batch negatives)
on title <-> abstract pairs mined from the sampled corpus without any labels, and retrieval
evaluation (title -> abstract among held-out documents: MRR@10, recall@1, recall@10) for the
shipped baseline, the input encoder and the fine-tuned model."""

from __future__ import annotations

import random
import time
from pathlib import Path

import numpy as np

from minisci.config import FinetuneEmbeddingsConfig
from minisci.data.readers import POOLS, load_pool, read_documents
from minisci.encoding import embed, load_encoder
from minisci.errors import MinisciError
from minisci.progress import use_stage_progress
from minisci.training import check_lengths, quiet_load_reports, run_environment, training_arguments


def title_abstract_pairs(raw_dir: str | Path, documents: str | Path) -> list[dict]:
    """(title, abstract) of every sampled document that has a separate title (no labels needed).
    Only documents of the contamination-guarded sample are used."""
    sampled = {d["id"] for d in read_documents(documents)}
    pairs = []
    for domain, rel in POOLS.items():
        for d in load_pool(Path(raw_dir) / rel, domain):
            title, text = " ".join(d.title.split()), " ".join(d.text.split())
            if d.id in sampled and d.kind == "abstract" and len(title.split()) >= 4 and len(text.split()) >= 30:
                pairs.append({"id": d.id, "anchor": title, "positive": text})
    return sorted(pairs, key=lambda p: p["id"])


def split_pairs(pairs: list[dict], cfg: FinetuneEmbeddingsConfig) -> tuple[list[dict], list[dict]]:
    need = cfg.n_eval + 1
    if len(pairs) < need:
        raise MinisciError(
            f"finetune_embeddings: only {len(pairs)} title/abstract pairs; need more than n_eval={cfg.n_eval}"
        )
    order = list(range(len(pairs)))
    random.Random(cfg.seed).shuffle(order)
    held = [pairs[i] for i in order[: cfg.n_eval]]
    train = [pairs[i] for i in order[cfg.n_eval : cfg.n_eval + cfg.n_train]]
    return train, held


def retrieval_metrics(query_vecs: np.ndarray, doc_vecs: np.ndarray) -> dict:
    """Query i's relevant document is document i. MRR@10, recall@1, recall@10."""
    scores = query_vecs @ doc_vecs.T
    rank = (scores > np.diag(scores)[:, None]).sum(1) + 1  # 1-based rank of the relevant document
    return {
        "mrr_at_10": round(float(np.mean(np.where(rank <= 10, 1.0 / rank, 0.0))), 4),
        "recall_at_1": round(float(np.mean(rank <= 1)), 4),
        "recall_at_10": round(float(np.mean(rank <= 10)), 4),
        "queries": len(rank),
    }


def evaluate_encoder(model_dir: str | Path, held: list[dict], cfg: FinetuneEmbeddingsConfig) -> dict:
    model, tok = load_encoder(model_dir)
    q = embed(model, tok, [p["anchor"] for p in held], cfg.eval_batch_size, cfg.eval_max_length)
    d = embed(model, tok, [p["positive"] for p in held], cfg.eval_batch_size, cfg.eval_max_length)
    return retrieval_metrics(q, d)


def train_embeddings(model_dir: str | Path, train: list[dict], cfg: FinetuneEmbeddingsConfig, work_dir: str | Path):
    import datasets
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
        losses,
    )
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from sentence_transformers.training_args import BatchSamplers

    # Mean pooling over a plain Hugging Face encoder (our adapted model has no sentence-transformers config).
    word = Transformer(str(model_dir), max_seq_length=cfg.max_length)
    model = SentenceTransformer(
        modules=[word, Pooling(word.get_embedding_dimension(), pooling_mode="mean")], device="cpu"
    )
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
    ds = datasets.Dataset.from_dict(
        {"anchor": [p["anchor"] for p in train], "positive": [p["positive"] for p in train]}
    )
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=ds, loss=losses.MultipleNegativesRankingLoss(model, scale=cfg.scale)
    )
    use_stage_progress(trainer, "embeddings fine-tuning").train()
    return model, trainer.state.log_history


def check_encoder_lengths(encoder_dir, baseline_dir, cfg: FinetuneEmbeddingsConfig) -> None:
    """The lengths against each model's positions, before any work: the encoder trains at
    ``max_length`` and is scored at ``eval_max_length``, the baseline is only scored."""
    from transformers import AutoConfig

    quiet_load_reports()
    lengths = {
        "finetune_embeddings.max_length": cfg.max_length,
        "finetune_embeddings.eval_max_length": cfg.eval_max_length,
    }
    for model_dir, keys in ((encoder_dir, lengths), (baseline_dir, {k: v for k, v in lengths.items() if "eval" in k})):
        check_lengths(
            AutoConfig.from_pretrained(model_dir, local_files_only=True, trust_remote_code=False), keys, model_dir
        )


def run_finetune_embeddings(raw_dir, documents, encoder_dir, baseline_dir, cfg: FinetuneEmbeddingsConfig, work_dir):
    start = time.perf_counter()
    check_encoder_lengths(encoder_dir, baseline_dir, cfg)
    # 1. pairs mined from the corpus; 2. held-out split
    train, held = split_pairs(title_abstract_pairs(raw_dir, documents), cfg)
    # 3. contrastive fine-tuning
    model, history = train_embeddings(encoder_dir, train, cfg, work_dir)
    tuned_dir = Path(work_dir) / "model"
    model.save(str(tuned_dir))
    # 4. retrieval before and after (and the shipped baseline for reference)
    metrics = {
        "baseline": evaluate_encoder(baseline_dir, held, cfg),
        "encoder": evaluate_encoder(encoder_dir, held, cfg),
        "finetuned": evaluate_encoder(tuned_dir, held, cfg),
        "train_pairs": len(train),
        "eval_pairs": len(held),
        "encoder_dir": str(encoder_dir),
    }
    metrics["delta_mrr_at_10"] = round(metrics["finetuned"]["mrr_at_10"] - metrics["encoder"]["mrr_at_10"], 4)
    metrics["environment"] = run_environment(cfg.precision)
    metrics["wall_seconds"] = round(time.perf_counter() - start, 1)
    return model, metrics, history
