"""What both fine-tuning stages share: class weights, a Trainer with a weighted loss, model
selection on dev at each epoch end with resumable epoch checkpoints, length-sorted batched
inference, and seed aggregation."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import statistics
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_model, save_model
from transformers import Trainer, TrainerCallback

from minisci.batching import length_batches
from minisci.cards import write_model_card
from minisci.errors import MinisciError
from minisci.io import atomic_path, sha256_file, write_json, write_jsonl
from minisci.training import checkpoint_to_resume, fingerprint, training_arguments

# 1. class weights ------------------------------------------------------------------------------------


def welt_weights(tags: list[str], labels: list[str]) -> list[float]:
    """WELT cost-sensitive weights, per label, from the training tags.

    Per class c in {O, B, I}: w_c = 1 - n_c / N, then a softmax over the three weights; every B-x
    and I-x label takes the weight of its prefix, so this works with several entity types.
    """
    prefix = Counter(t[0] for t in tags)  # "O", "B" or "I"
    n = sum(prefix.values())
    raw = {c: 1.0 - prefix.get(c, 0) / n for c in "OBI"}
    z = sum(math.exp(v) for v in raw.values())
    soft = {c: math.exp(v) / z for c, v in raw.items()}
    return [soft[label[0]] for label in labels]


def frequency_weights(values: list[str], labels: list[str], loss: str, beta: float) -> list[float]:
    """Inverse-frequency (N / (K n_c)) or effective-number ((1 - beta) / (1 - beta^n_c)) weights,
    normalised to mean 1 over the labels. Labels absent from training get weight 1."""
    counts = Counter(values)
    if loss == "inverse_frequency":
        raw = [len(values) / (len(labels) * counts[c]) if counts[c] else 1.0 for c in labels]
    elif loss == "effective_number":
        raw = [(1 - beta) / (1 - beta ** counts[c]) if counts[c] else 1.0 for c in labels]
    else:
        raise ValueError(f"unknown frequency weighting {loss!r}")
    mean = sum(raw) / len(raw)
    return [w / mean for w in raw]


def class_weights(values: list[str], labels: list[str], loss: str, beta: float) -> list[float] | None:
    if loss == "ce":
        return None
    if loss == "welt":
        return welt_weights(values, labels)
    return frequency_weights(values, labels, loss, beta)


# 2. training --------------------------------------------------------------------------------------------


class WeightedLossTrainer(Trainer):
    """Cross-entropy with optional per-class weights (labels -100 are ignored), or the model's own
    CRF loss when it has one."""

    def __init__(self, *args, class_weights: list[float] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.class_weights = torch.tensor(class_weights) if class_weights else None
        self.loss_is_scaled_for_ga = False  # compute_loss returns a per-batch mean

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        logits = outputs.logits
        crf_loss = getattr(self.accelerator.unwrap_model(model), "crf_loss", None)
        if crf_loss is not None:  # a CRF head: sequence negative log-likelihood instead
            loss = crf_loss(logits, labels)
            return (loss, outputs) if return_outputs else loss
        weight = self.class_weights.to(logits.device) if self.class_weights is not None else None
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), weight=weight, ignore_index=-100
        )
        return (loss, outputs) if return_outputs else loss


class DevSelection(TrainerCallback):
    """Model selection on dev, and the epoch checkpoints that make fine-tuning resumable.

    At each epoch end: score dev with ``evaluate(model) -> metrics``, log it, write the weights of
    the best epoch so far (by ``key``) to ``state_dir/best-<step>.safetensors`` and the dev history
    to ``state_dir/dev_selection.json``, then ask the Trainer for a checkpoint. ``restore`` loads
    the best weights after training. ``resume(step)`` takes the history back to a checkpoint: the
    entries up to ``step`` (a kill between the dev write and the checkpoint drops that epoch, which
    is then retrained identically). The previous best weights are deleted only once the new epoch's
    checkpoint is complete (``on_save``), so the best of every resumable state stays on disk.
    """

    STATE = "dev_selection.json"

    def __init__(self, evaluate: Callable, key: str, state_dir: str | Path):
        self.evaluate, self.key, self.state_dir = evaluate, key, Path(state_dir)
        self.history: list[dict] = []
        self.best: dict | None = None

    def _weights(self, step: int) -> Path:
        return self.state_dir / f"best-{step}.safetensors"

    def on_epoch_end(self, args, state, control, model=None, **kwargs):
        metrics = self.evaluate(model)
        entry = {"epoch": round(state.epoch), "step": state.global_step, **metrics}
        self.history.append(entry)
        state.log_history.append(
            {"step": state.global_step, **{f"dev_{k}": v for k, v in metrics.items() if isinstance(v, (int, float))}}
        )
        print(f"epoch {entry['epoch']}: dev {self.key} {metrics[self.key]:.4f}", flush=True)
        if self.best is None or metrics[self.key] > self.best["metrics"][self.key]:
            self.best = {"epoch": entry["epoch"], "step": state.global_step, "metrics": metrics}
            with atomic_path(self._weights(state.global_step)) as tmp:
                save_model(model, str(tmp))
        write_json(self.state_dir / self.STATE, {"history": self.history, "best": self.best})
        control.should_save = True  # the Trainer checkpoints right after this callback
        model.train()

    def on_save(self, args, state, control, **kwargs):
        if self.best is not None:
            self._drop_weights(keep=self.best["step"])

    def _drop_weights(self, keep: int | None, above: int | None = None) -> None:
        for p in self.state_dir.glob("best-*.safetensors"):
            step = int(p.stem.split("-")[1])
            if step != keep and (above is None or step > above):
                p.unlink()

    def resume(self, step: int) -> None:
        path = self.state_dir / self.STATE
        history = json.loads(path.read_text())["history"] if path.is_file() else []
        self.history = [h for h in history if h["step"] <= step]
        self.best = None
        for h in self.history:  # the same rule as on_epoch_end: the first strictly best epoch
            if self.best is None or h[self.key] > self.best["metrics"][self.key]:
                self.best = {
                    "epoch": h["epoch"],
                    "step": h["step"],
                    "metrics": {k: v for k, v in h.items() if k not in ("epoch", "step")},
                }
        if self.best is not None and not self._weights(self.best["step"]).is_file():
            raise MinisciError(
                f"{self.state_dir}: the weights of the best epoch so far are missing; "
                f"delete the directory to start afresh"
            )
        self._drop_weights(keep=self.best["step"] if self.best else None, above=step)

    def restore(self, model) -> dict:
        if self.best is None:
            raise MinisciError("no epoch was scored on dev (epochs < 1?)")
        load_model(model, str(self._weights(self.best["step"])))
        return self.best


def run_fingerprint(cfg, seed: int, model_dir: str | Path, data: object) -> str:
    """What makes two fine-tuning runs the same: params, seed, base weights and the data."""
    model_dir = Path(model_dir)
    weights = {p.name: sha256_file(p) for p in sorted(model_dir.glob("*.safetensors")) + [model_dir / "config.json"]}
    return fingerprint(dataclasses.asdict(cfg), seed, weights, data)


def fit_and_select(
    model,
    tokenizer,
    train_ds,
    collator,
    class_weights: list[float] | None,
    score_dev: Callable,
    key: str,
    cfg,
    seed: int,
    work_dir: Path,
    model_dir: Path,
    data: object,
) -> tuple[dict, list[dict], list[dict]]:
    """Fine-tune ``model`` with dev selection at every epoch end (``score_dev(model) -> metrics``, best by
    ``key``), resuming from the newest complete epoch checkpoint of this very run in ``work_dir``
    (checkpoints of other params, data, base model or code are discarded; ``data`` is what identifies
    the data). Loads the best epoch's weights into ``model``; returns that epoch, the dev history and
    the Trainer's log history."""
    selection = DevSelection(score_dev, key=key, state_dir=work_dir)
    args = training_arguments(
        work_dir,
        seed=seed,
        batch_size=cfg.batch_size,
        learning_rate=cfg.learning_rate,
        weight_decay=cfg.weight_decay,
        precision=cfg.precision,
        epochs=cfg.epochs,
        warmup=cfg.warmup_ratio,
        logging_steps=cfg.logging_steps,
        eval_batch_size=cfg.eval_batch_size,
        save_total_limit=1,
    )
    trainer = WeightedLossTrainer(
        model=model,
        args=args,
        train_dataset=train_ds,
        processing_class=tokenizer,
        data_collator=collator,
        class_weights=class_weights,
        callbacks=[selection],
    )
    resume = checkpoint_to_resume(work_dir, run_fingerprint(cfg, seed, model_dir, data))
    step = json.loads((resume / "trainer_state.json").read_text())["global_step"] if resume else 0
    selection.resume(step)  # step 0: a fresh start; clears what a run killed before its first checkpoint left
    if resume is not None:
        print(f"resuming from {resume}", flush=True)
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    return selection.restore(model), selection.history, trainer.state.log_history


def save_finetuned(out: str | Path, result, **card) -> None:
    """A fine-tuned model in Hugging Face format with its test predictions and model card, published
    atomically (``card``: the arguments of :func:`minisci.cards.write_model_card` after the directory)."""
    with atomic_path(out) as tmp:
        result.model.save_pretrained(tmp)
        result.tokenizer.save_pretrained(tmp)
        write_jsonl(tmp / "test_predictions.jsonl", result.test_predictions)
        write_model_card(tmp, **card)


# 3. inference ---------------------------------------------------------------------------------------------


@torch.inference_mode()
def sorted_logits(model, features: list[dict], collate: Callable, batch_size: int) -> list[torch.Tensor]:
    """Logits per feature, computed in length-sorted batches (little padding), in input order."""
    model.eval()
    device = next(model.parameters()).device
    out: list[torch.Tensor | None] = [None] * len(features)
    for idx in length_batches([len(f["input_ids"]) for f in features], batch_size):
        batch = collate([{"input_ids": features[i]["input_ids"]} for i in idx])
        batch = {k: v.to(device) for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
        logits = model(**batch).logits.float().cpu()
        for j, i in enumerate(idx):
            out[i] = logits[j, : len(features[i]["input_ids"])] if logits.dim() == 3 else logits[j]
    return out


def subsample(examples: list, n: int, seed: int) -> list:
    """A seeded random subset of ``n`` training examples in their original order (0 = all)."""
    if not n or n >= len(examples):
        return examples
    keep = sorted(random.Random(seed).sample(range(len(examples)), n))
    return [examples[i] for i in keep]


# 4. seeds -------------------------------------------------------------------------------------------------


def aggregate_seeds(per_seed: dict[int, dict], keys: tuple[str, ...]) -> dict:
    """Mean and sample standard deviation over seeds of the given (flat) test metrics."""
    out = {}
    for k in keys:
        values = [m[k] for m in per_seed.values()]
        out[f"{k}_mean"] = round(statistics.fmean(values), 4)
        out[f"{k}_sd"] = round(statistics.stdev(values), 4) if len(values) > 1 else 0.0
    return out
