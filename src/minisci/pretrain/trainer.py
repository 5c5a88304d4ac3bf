"""The ``pretrain`` stage: continued MLM + NSP pretraining of a BERT encoder.

Phases: 1. the examples and the tokenizer, tokenised once by the ``pretrain_data`` stage
(:mod:`minisci.pretrain.data`: NSP pairs, or packed blocks for MLM only) and memory-mapped here;
2. load the model (random heads for all-MiniLM-L6-v2; new word embeddings from their pieces);
3. evaluate the base model on held-out pairs; 4. train with the Hugging Face Trainer (resuming
from the newest complete checkpoint of the same configuration); 5. evaluate the adapted model.

Head warm-up: for the first ``head_warmup_steps`` steps the encoder's learning rate is 0 and only
the (randomly initialised) heads learn, so their random gradients do not wreck the encoder. This is
done with per-group learning-rate schedules rather than ``requires_grad``, which would break DDP.

MLM only (``nsp: false``): the examples are packed blocks of contiguous text, the loss is the MLM
loss alone, and a BERT's NSP classifier and pooler (which only NSP reads here) are frozen from the
start, so they stay exactly as loaded and DDP never waits for their gradients. No NSP accuracy is
reported (there are no pairs to score).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path

import torch
from transformers import Trainer

from minisci.batching import length_batches
from minisci.config import ModelConfig, PretrainConfig
from minisci.pretrain.collator import EpochCallback, MlmNspCollator
from minisci.pretrain.data import load_pretraining_data
from minisci.pretrain.model import is_head_parameter, load_pretraining_model
from minisci.pretrain.vocab import init_new_embeddings
from minisci.progress import scoring
from minisci.trainer_progress import use_stage_progress
from minisci.training import (
    RUN_METRICS,
    check_at_load,
    checkpoint_to_resume,
    keep_run_metrics,
    live_callback,
    report_random_init,
    run_environment,
    run_id,
    train_or_restore,
    training_arguments,
)

NSP_ONLY_PREFIXES = ("cls.seq_relationship.", "bert.pooler.")  # parameters only the NSP loss trains
CURVE_KEYS = ("loss", "mlm_loss", "nsp_loss", "learning_rate", "head_learning_rate", "tokens_per_second", "grad_norm")


# 2. the trainer -------------------------------------------------------------------------------------


def pretraining_losses(outputs: dict, nsp_labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Mean MLM cross-entropy over the labelled positions and mean NSP cross-entropy (None for a
    model without an NSP head)."""
    ce = torch.nn.functional.cross_entropy
    nsp = ce(outputs["nsp_logits"], nsp_labels) if outputs["nsp_logits"] is not None else None
    return ce(outputs["mlm_logits"], outputs["mlm_labels"]), nsp


def lr_lambdas(total: int, warmup: int, head_steps: int):
    """Linear warm-up then linear decay; the encoder starts ``head_steps`` later."""

    def heads(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))

    def encoder(step: int) -> float:
        if step < head_steps:
            return 0.0
        s = step - head_steps
        if s < warmup:
            return (s + 1) / warmup
        return max(0.0, (total - step) / max(1, total - head_steps - warmup))

    return heads, encoder


class PretrainTrainer(Trainer):
    """Trainer with separate MLM/NSP loss logging, tokens/s, and head/encoder learning rates."""

    def __init__(self, *args, cfg: PretrainConfig, **kwargs):
        super().__init__(*args, **kwargs)
        self.cfg = cfg
        self.loss_is_scaled_for_ga = False  # our compute_loss returns a per-batch mean
        self._sums = {"mlm_loss": 0.0, "nsp_loss": 0.0, "n": 0}
        self._last = (time.perf_counter(), 0)

    def _issue_warnings_after_load(self, load_result) -> None:
        """A checkpoint stores a tied tensor once, so on resume the masked-LM decoder (tied to the
        word embeddings and the head's bias) is reported missing although it is loaded through the
        tensor it shares: transformers then warned "There were missing keys in the checkpoint" on
        every resume. Warn only about missing keys that share no loaded tensor."""
        params = dict(self.model.named_parameters(remove_duplicate=False))
        missing = set(load_result.missing_keys)
        loaded = {p.data_ptr() for n, p in params.items() if n not in missing}
        real = [k for k in load_result.missing_keys if k not in params or params[k].data_ptr() not in loaded]
        super()._issue_warnings_after_load(type(load_result)(real, load_result.unexpected_keys))

    def _get_train_sampler(self, train_dataset=None):
        """The Trainer's length-grouped sampler, given the ``length`` column as a list. Transformers
        hands it the column as the dataset returns it: in datasets >= 4 a lazy ``Column``, which the
        sampler then reads one example at a time, every epoch (0.1-0.3 ms each: a minute per epoch of
        200k pairs, with the GPU idle). The same lengths give the same order."""
        from transformers.trainer_pt_utils import LengthGroupedSampler

        ds = self.train_dataset if train_dataset is None else train_dataset
        column = self.args.length_column_name
        if self.args.train_sampling_strategy != "group_by_length" or column not in getattr(ds, "column_names", ()):
            return super()._get_train_sampler(train_dataset)
        lengths = ds.with_format("arrow")[column].to_pylist()  # the whole column at once (< 1 ms per 10k)
        return LengthGroupedSampler(self.args.train_batch_size * self.args.gradient_accumulation_steps, lengths=lengths)

    def create_optimizer(self, model=None):
        if self.optimizer is None:
            model = model or self.model
            decay = set(self.get_decay_parameter_names(model))
            groups = []
            for is_head in (False, True):
                for with_decay in (True, False):
                    params = [
                        p
                        for n, p in model.named_parameters()
                        if is_head_parameter(model, n) == is_head and (n in decay) == with_decay and p.requires_grad
                    ]
                    groups.append(
                        {
                            "params": params,
                            "weight_decay": self.cfg.weight_decay if with_decay else 0.0,
                            "lr": self.cfg.head_learning_rate if is_head else self.cfg.learning_rate,
                            "is_head": is_head,
                        }
                    )
            self.optimizer = torch.optim.AdamW(groups, lr=self.cfg.learning_rate, betas=(0.9, 0.999), eps=1e-8)
        return self.optimizer

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        if self.lr_scheduler is None:
            optimizer = optimizer or self.optimizer
            warmup = max(1, math.ceil(self.cfg.warmup_ratio * num_training_steps))
            heads, encoder = lr_lambdas(num_training_steps, warmup, self.cfg.head_warmup_steps)
            fns = [heads if g["is_head"] else encoder for g in optimizer.param_groups]
            self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, fns)
        return self.lr_scheduler

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        nsp_labels = inputs.pop("next_sentence_label")
        outputs = model(**inputs)
        mlm, nsp = pretraining_losses(outputs, nsp_labels)
        self._sums["mlm_loss"] += float(mlm.detach())
        self._sums["nsp_loss"] += float(nsp.detach()) if nsp is not None else math.nan
        self._sums["n"] += 1
        loss = mlm + nsp if self.cfg.nsp else mlm  # the BERT pretraining objective, or MLM only
        return (loss, outputs) if return_outputs else loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self._sums["n"]:
            n = self._sums.pop("n")
            logs.update({k: round(v / n, 4) for k, v in self._sums.items() if not math.isnan(v)})  # no NSP: no nsp_loss
            self._sums = {"mlm_loss": 0.0, "nsp_loss": 0.0, "n": 0}
            now, seen = time.perf_counter(), self.state.num_input_tokens_seen
            last_t, last_seen = self._last
            if last_seen and now > last_t:
                logs["tokens_per_second"] = round((seen - last_seen) / (now - last_t), 1)
            self._last = (now, seen)
            # The Trainer's "learning_rate" is the first param group's: the encoder's.
            logs["head_learning_rate"] = next(g["lr"] for g in self.optimizer.param_groups if g["is_head"])
        super().log(logs, start_time)


# 3. evaluation ----------------------------------------------------------------------------------------


@torch.inference_mode()
def evaluate_pretraining(model, dataset, tokenizer, cfg: PretrainConfig, unit: str = "pairs") -> dict:
    """MLM accuracy and perplexity over masked tokens, NSP accuracy, on held-out pairs (``unit``
    "pairs"), or MLM alone on held-out packed blocks ("blocks").

    Masks come from a generator seeded from params and batches are length-sorted, so the base and
    the adapted model are scored on exactly the same masked inputs.
    """
    # epoch -1: evaluation masks differ from every training epoch's, and are the same every time
    collator = MlmNspCollator(tokenizer, cfg.mlm_probability, cfg.whole_word_masking, seed=cfg.seed, epoch=-1)
    model.eval()
    device = next(model.parameters()).device
    mlm_sum = nsp_sum = 0.0
    mlm_correct = n_masked = nsp_correct = 0
    for idx in scoring(length_batches(list(dataset["length"]), cfg.eval_batch_size), "held-out scoring"):
        feats = [dataset[i] for i in idx]
        batch = {k: v.to(device) for k, v in collator(feats).items()}
        nsp_labels = batch.pop("next_sentence_label")
        out = model(**batch)
        mlm_logits, mlm_labels, nsp_logits = out["mlm_logits"], out["mlm_labels"], out["nsp_logits"]
        mlm_sum += float(torch.nn.functional.cross_entropy(mlm_logits, mlm_labels, reduction="sum"))
        mlm_correct += int((mlm_logits.argmax(-1) == mlm_labels).sum())
        n_masked += len(mlm_labels)
        if nsp_logits is None or unit != "pairs":  # MLM-only model or packed blocks: no NSP to score
            nsp_sum = nsp_correct = math.nan
            continue
        nsp_sum += float(torch.nn.functional.cross_entropy(nsp_logits, nsp_labels, reduction="sum"))
        nsp_correct += int((nsp_logits.argmax(-1) == nsp_labels).sum())
    n = len(dataset)
    return {
        "mlm_accuracy": round(mlm_correct / n_masked, 4),
        "mlm_loss": round(mlm_sum / n_masked, 4),
        "perplexity": round(math.exp(mlm_sum / n_masked), 2),
        "nsp_accuracy": None if math.isnan(nsp_correct) else round(nsp_correct / n, 4),
        "nsp_loss": None if math.isnan(nsp_sum) else round(nsp_sum / n, 4),
        "masked_tokens": n_masked,
        unit: n,
    }


# 4. the stage ------------------------------------------------------------------------------------------


def freeze_nsp(model) -> None:
    """MLM-only pretraining: the NSP classifier and the pooler keep their loaded weights."""
    for name, p in model.named_parameters():
        if name.startswith(NSP_ONLY_PREFIXES):
            p.requires_grad_(False)


@dataclasses.dataclass
class PretrainResult:
    model: object
    tokenizer: object
    metrics: dict
    log_history: list[dict]
    is_main_process: bool
    unit: str = "pairs"  # the examples: NSP "pairs" or packed "blocks"
    data_summary: str = ""  # what the model card says it was trained on


def run_pretraining(
    data_dir: str | Path, model_cfg: ModelConfig, cfg: PretrainConfig, ckpt_dir: str | Path
) -> PretrainResult:
    """Pretrains on the examples of ``data_dir`` (written by :func:`minisci.pretrain.data.build_pretraining_data`)."""
    start = time.perf_counter()
    args = training_arguments(
        ckpt_dir,
        seed=cfg.seed,
        batch_size=cfg.batch_size,
        grad_accum=cfg.grad_accum,
        learning_rate=cfg.learning_rate,
        weight_decay=cfg.weight_decay,
        precision=cfg.precision,
        max_steps=cfg.max_steps,
        epochs=cfg.epochs,
        logging_steps=cfg.logging_steps,
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        eval_batch_size=cfg.eval_batch_size,
        dataloader_workers=cfg.dataloader_workers,
    )
    # 1. data: tokenised once for every seed, memory-mapped
    data = load_pretraining_data(data_dir, cfg)
    tokenizer, train_ds, held_ds, unit = data.tokenizer, data.train, data.heldout, data.layout

    # 2. model, checked against the lengths and the text; checkpoints of this exact configuration only
    model, random_heads = load_pretraining_model(model_cfg, data.manifest["base_vocab_size"], cfg.seed, nsp=cfg.nsp)
    check_at_load(model.config, tokenizer, {"pretrain.max_seq_length": cfg.max_seq_length}, model_cfg.base)
    if model_cfg.base != "scratch":  # a scratch model is random throughout, by definition
        report_random_init(model, random_heads, "pretrain", model_cfg.base)
    if data.plan.words:
        init_new_embeddings(model, data.new_ids, data.plan, len(tokenizer))
    if not cfg.nsp:
        freeze_nsp(model)
    # the examples' source (for pairs the hash of the pairs file, as before the data were tokenised
    # in their own stage), so a checkpoint of the same run on the same examples is resumed
    identity = run_id(dataclasses.asdict(model_cfg), cfg.result_params(), data.manifest["source_sha256"])
    with args.main_process_first(desc="checkpoint bookkeeping"):
        resume = checkpoint_to_resume(ckpt_dir, identity) if args.process_index == 0 else None
    if args.world_size > 1:  # every rank resumes from the checkpoint rank 0 chose
        obj = [str(resume) if resume else None]
        torch.distributed.broadcast_object_list(obj, src=0)
        resume = Path(obj[0]) if obj[0] else None
    print(
        f"resuming from {resume}" if resume else f"{ckpt_dir}: no checkpoint of this run; training from step 0",
        flush=True,
    )

    # 3. the base model before training (every rank computes it; only rank 0 writes)
    before = evaluate_pretraining(model.to(args.device), held_ds, tokenizer, cfg, unit)

    # 4. train
    collator = MlmNspCollator(
        tokenizer, cfg.mlm_probability, cfg.whole_word_masking, pad_to_multiple_of=8, seed=cfg.seed
    )
    trainer = PretrainTrainer(
        model=model,
        args=args,
        train_dataset=train_ds,
        processing_class=tokenizer,
        cfg=cfg,
        data_collator=collator,
        # live progress from rank 0 only, into the checkpoint directory (cleared above for a new run)
        callbacks=[
            EpochCallback(collator),
            *([live_callback(Path(ckpt_dir) / "live")] if args.process_index == 0 else []),
        ],
    )
    use_stage_progress(trainer, "pretraining")
    # Read before training: checkpoint rotation may delete the resume checkpoint.
    tokens_at_resume = (
        json.loads((resume / "trainer_state.json").read_text()).get("num_input_tokens_seen", 0) if resume else 0
    )
    train_seconds = train_or_restore(trainer, resume)  # a finished run's final checkpoint: no further step

    # 5. the adapted model
    after = evaluate_pretraining(trainer.model, held_ds, tokenizer, cfg, unit)
    state = trainer.state
    metrics = {
        "seed": cfg.seed,
        "before": before,
        "after": after,
        "delta_mlm_accuracy": round(after["mlm_accuracy"] - before["mlm_accuracy"], 4),
        "delta_nsp_accuracy": None
        if after["nsp_accuracy"] is None
        else round(after["nsp_accuracy"] - before["nsp_accuracy"], 4),
        "train": {
            "steps": state.global_step,
            "epochs": round(state.epoch or 0.0, 3),
            unit: len(train_ds),
            "tokens_seen": int(state.num_input_tokens_seen),
            "final_loss": next((e["loss"] for e in reversed(state.log_history) if "loss" in e), None),
            "resumed_from_step": int(resume.name.split("-")[1]) if resume else 0,
            "train_seconds_this_run": round(train_seconds, 1),
            "tokens_per_second": round((state.num_input_tokens_seen - tokens_at_resume) / max(train_seconds, 1e-9), 1),
            "world_size": args.world_size,
            "random_head_weights": len(random_heads),
        },
        "unk_rate": data.manifest["unk_rate"],
        "environment": run_environment(cfg.precision),
        "wall_seconds": round(time.perf_counter() - start, 1),
    }
    if data.plan.words:  # only then: the default run's metrics keep their keys
        metrics["vocab"] = {"added_tokens": len(data.plan.words), "most_frequent": list(data.plan.words[:10])}
    if trainer.is_world_process_zero():  # a forced rerun keeps the trained run's timings
        metrics = keep_run_metrics(metrics, Path(ckpt_dir) / RUN_METRICS)
    m = data.manifest
    summary = (
        f"{len(train_ds)} sentence pairs from {m['source']}"
        if unit == "pairs"
        else f"{len(train_ds)} packed blocks of {m['max_seq_length']} word pieces from {m['source']}"
    )
    return PretrainResult(
        trainer.model, tokenizer, metrics, state.log_history, trainer.is_world_process_zero(), unit, summary
    )
