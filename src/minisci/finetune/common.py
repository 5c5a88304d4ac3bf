"""What every fine-tuning task shares: class weights, a Trainer with a weighted loss, model
selection on dev at each epoch end with resumable epoch checkpoints, and the one seed loop with its
one result type.

The seed loop (:func:`run_seeds`, :func:`train_one_seed`) owns the flow: it encodes, trains, predicts
and scores through the functions of the dataset's task kind (:mod:`minisci.tasks`), used as data.
The ``ner`` and ``classification`` modules keep only their entry points.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_model, save_model
from transformers import Trainer, TrainerCallback

from minisci.cards import write_model_card
from minisci.errors import MinisciError
from minisci.io import atomic_path, sha256_file, write_json, write_jsonl
from minisci.pretrain.seeds import PretrainSeeds, finetune_plan
from minisci.tasks.kind import TaskKind
from minisci.trainer_progress import use_stage_progress
from minisci.training import (
    RUN_METRICS,
    check_at_load,
    check_unk_rate,
    checkpoint_to_resume,
    keep_run_metrics,
    live_callback,
    quiet_load_reports,
    report_random_init,
    run_environment,
    run_id,
    train_or_restore,
    training_arguments,
    write_curves,
)

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

    At each epoch end from epoch ``delay`` on, and always after the last (Hugging Face's
    ``eval_delay``; earlier epochs are trained and checkpointed, not scored): score dev with
    ``evaluate(model) -> metrics``, log it, write the weights of
    the best epoch so far (by ``key``) to ``state_dir/best-<step>.safetensors`` and the dev history
    to ``state_dir/dev_selection.json``, then ask the Trainer for a checkpoint. ``restore`` loads
    the best weights after training. ``resume(step)`` takes the history back to a checkpoint: the
    entries up to ``step`` (a kill between the dev write and the checkpoint drops that epoch, which
    is then retrained identically). The previous best weights are deleted only once the new epoch's
    checkpoint is complete (``on_save``), so the best of every resumable state stays on disk.
    """

    STATE = "dev_selection.json"

    def __init__(self, evaluate: Callable, key: str, state_dir: str | Path, delay: int = 0):
        self.evaluate, self.key, self.state_dir, self.delay = evaluate, key, Path(state_dir), delay
        self.history: list[dict] = []
        self.best: dict | None = None

    def _weights(self, step: int) -> Path:
        return self.state_dir / f"best-{step}.safetensors"

    def on_epoch_end(self, args, state, control, model=None, **kwargs):
        control.should_save = True  # the Trainer checkpoints right after this callback
        epoch = round(state.epoch)
        if epoch < self.delay and state.global_step < state.max_steps:
            print(f"epoch {epoch}: dev not scored (eval_delay {self.delay})", flush=True)
            return
        metrics = self.evaluate(model)
        entry = {"epoch": epoch, "step": state.global_step, **metrics}
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


def finetune_run_id(cfg, seed: int, model_dir: str | Path, data: object) -> str:
    """What makes two fine-tuning runs the same: params, seed, base weights and the data."""
    model_dir = Path(model_dir)
    weights = {p.name: sha256_file(p) for p in sorted(model_dir.glob("*.safetensors")) + [model_dir / "config.json"]}
    return run_id(cfg.result_params(), seed, weights, data)


def build_trainer(
    model,
    tokenizer,
    train_ds,
    collator,
    class_weights: list[float] | None,
    cfg,
    seed: int,
    work_dir: str | Path,
    *,
    callbacks: list | None = None,
    trainer_cls: type | None = None,
    **arguments,
):
    """The fine-tuning Trainer of a task config ``cfg`` (batch size, learning rate, weight decay,
    precision, epochs, warm-up, logging): a :class:`WeightedLossTrainer` (or ``trainer_cls``, a
    subclass) on ``training_arguments``. ``arguments`` set or override those arguments (the
    benchmark's ``max_steps``, ``group_by_length``). The stage's :func:`fit_and_select` and the
    fine-tuning benchmark both build their trainer here, so the benchmark measures the stage's."""
    args = training_arguments(
        work_dir,
        **{
            "seed": seed,
            "batch_size": cfg.batch_size,
            "learning_rate": cfg.learning_rate,
            "weight_decay": cfg.weight_decay,
            "precision": cfg.precision,
            "epochs": cfg.epochs,
            "warmup": cfg.warmup_ratio,
            "logging_steps": cfg.logging_steps,
            "eval_batch_size": cfg.eval_batch_size,
            "save_total_limit": 1,
            **arguments,
        },
    )
    trainer = (trainer_cls or WeightedLossTrainer)(
        model=model,
        args=args,
        train_dataset=train_ds,
        processing_class=tokenizer,
        data_collator=collator,
        class_weights=class_weights,
        callbacks=callbacks,
    )
    return use_stage_progress(trainer, f"fine-tuning, seed {seed}")


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
    the data; a checkpoint at the final step is restored, not trained further). Loads the best epoch's
    weights into ``model``; returns that epoch, the dev history and the Trainer's log history."""
    selection = DevSelection(score_dev, key=key, state_dir=work_dir, delay=cfg.eval_delay)
    trainer = build_trainer(
        model, tokenizer, train_ds, collator, class_weights, cfg, seed, work_dir, callbacks=[selection]
    )
    left = work_dir.is_dir() and any(work_dir.iterdir())  # a killed or other run's files, before the check
    resume = checkpoint_to_resume(work_dir, finetune_run_id(cfg, seed, model_dir, data))
    step = json.loads((resume / "trainer_state.json").read_text())["global_step"] if resume else 0
    selection.resume(step)  # step 0: a fresh start; clears what a run killed before its first checkpoint left
    if resume is not None:
        print(f"resuming from {resume}", flush=True)
    elif left:  # said, as pretraining says it: a rerun after a kill that starts over is not silent
        print(f"{work_dir}: no complete checkpoint of this run; training from step 0", flush=True)
    trainer.add_callback(live_callback(work_dir / "live"))  # after the resume check, which may clear work_dir
    train_or_restore(trainer, resume)
    return selection.restore(model), selection.history, trainer.state.log_history


def load_head_model(model_cls, model_dir: str | Path, where: str, **config):
    """``model_cls`` (a task head class) from the encoder in ``model_dir`` with ``config`` overrides,
    safetensors only, no remote code; the weights that start random named in one line (instead of
    transformers' load report)."""
    quiet_load_reports()
    model, info = model_cls.from_pretrained(
        model_dir,
        use_safetensors=True,
        local_files_only=True,
        trust_remote_code=False,
        output_loading_info=True,
        **config,
    )
    report_random_init(model, info["missing_keys"], where, model_dir)
    return model


def training_words(data) -> list[str]:
    """The training examples as whitespace-separated text: an NER sentence's words, or a text."""
    return [ex.text if hasattr(ex, "text") else " ".join(ex.tokens) for ex in data.splits["train"]]


def stage_arguments(description: str) -> argparse.ArgumentParser:
    """The command line both fine-tuning stages share: every path they touch."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--data", required=True, help="a prepared dataset (output of prepare_data)")
    p.add_argument(
        "--model",
        required=True,
        help="an encoder directory (models/baseline), or a folder of one per pretraining seed (models/adapted)",
    )
    p.add_argument("--out", required=True, help="directory: the fine-tuned model, test predictions, model card")
    p.add_argument("--metrics", required=True, help="JSON metrics file")
    p.add_argument("--plots", required=True, help="directory: training curves (DVCLive) and other plot data")
    p.add_argument("--checkpoints", required=True, help="epoch checkpoints, kept across runs for resume")
    p.add_argument("--params", default="params.yaml")
    # a seed run by a worker process of the stage (seed_processes > 1; see SeedWorkers)
    p.add_argument("--seed-worker", nargs=2, metavar=("SEED", "RESULT"), help=argparse.SUPPRESS)
    return p


@dataclasses.dataclass(frozen=True)
class SeedWorkers:
    """How a stage fine-tunes its seeds in processes of its own (``seed_processes`` > 1): the stage's
    process runs the first seed and re-runs its own ``command`` with ``--seed-worker SEED RESULT`` for
    the others; such a worker (``only``) trains that seed alone, as the stage's process would, and
    writes its metrics and test predictions to ``result`` (JSON) for the stage's process to gather."""

    command: tuple[str, ...] | None = None
    only: int | None = None
    result: Path | None = None

    @classmethod
    def of_stage(cls, args: argparse.Namespace, script: str, argv: list[str] | None) -> SeedWorkers:
        if args.seed_worker:
            seed, result = args.seed_worker
            if not seed.lstrip("-").isdigit():
                raise MinisciError(f"--seed-worker: seed {seed!r} is not an integer")
            return cls(only=int(seed), result=Path(result))
        return cls(command=(sys.executable, str(Path(script).resolve()), *(sys.argv[1:] if argv is None else argv)))


def publish(
    result: FinetuneResult, args: argparse.Namespace, curves: tuple[str, ...], card: dict, plots: dict | None = None
) -> None:
    """Everything a fine-tuning stage writes: the model directory, its curves and plot data, and
    the metrics file last (a metrics file means the stage's other outputs are complete)."""
    save_finetuned(args.out, result, **card)
    write_curves(result.log_history, args.plots, curves, extra=plots)
    write_json(args.metrics, result.metrics)


def save_finetuned(out: str | Path, result, **card) -> None:
    """A fine-tuned model in Hugging Face format with its test predictions and model card, published
    atomically (``card``: the arguments of :func:`minisci.cards.write_model_card` after the directory)."""
    with atomic_path(out) as tmp:
        result.model.save_pretrained(tmp)
        result.tokenizer.save_pretrained(tmp)
        write_jsonl(tmp / "test_predictions.jsonl", result.test_predictions)
        write_model_card(tmp, **card)


# 3. data ---------------------------------------------------------------------------------------------------


def subsample(examples: list, n: int, seed: int) -> list:
    """A seeded random subset of ``n`` training examples in their original order (0 = all)."""
    if not n or n >= len(examples):
        return examples
    keep = sorted(random.Random(seed).sample(range(len(examples)), n))
    return [examples[i] for i in keep]


# 4. seeds -------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class SeedRun:
    """One seed's fine-tuned model, its metrics (best_epoch, dev, test, dev_per_epoch, ...), its
    test predictions (one per test example) and the Trainer's log history."""

    model: object
    metrics: dict
    predictions: list
    log_history: list[dict]


def head_class(kind: TaskKind):
    """The model class of a kind's head: the one its stage set (:attr:`TaskKind.head_class`, the NER
    stage's CRF tagger), else its transformers Auto class."""
    if kind.head_class is not None:
        return kind.head_class
    import transformers

    return getattr(transformers, kind.auto_class)


def score(
    kind: TaskKind, model, tokenizer, examples: list, id2label: dict[int, str], cfg, features: list | None = None
) -> tuple[dict, list]:
    """The kind's metrics of ``model`` on ``examples``, and its predictions; ``features``: the examples'
    model inputs (``kind.features``), when already encoded."""
    predictions = kind.predict(model, tokenizer, examples, id2label, cfg, features)
    return kind.score(examples, kind.decode(predictions), list(id2label.values())), predictions


def train_one_seed(kind: TaskKind, model_dir: Path, tokenizer, data, cfg, seed: int, work_dir: Path) -> SeedRun:
    """One seed: a fresh head on the encoder, trained with dev selection, then scored on test once."""
    import datasets
    from transformers import set_seed

    # 1. the model: the seed sets the head's initialisation
    set_seed(seed)
    splits, labels = data.splits, kind.model_labels(data.labels)
    id2label = dict(enumerate(labels))
    model = load_head_model(
        head_class(kind),
        model_dir,
        kind.stage,
        num_labels=len(labels),
        id2label=id2label,
        label2id={l: i for i, l in id2label.items()},
    )
    # 2. the training features and class weights
    train_ds = datasets.Dataset.from_list(
        kind.encode(splits["train"], tokenizer, model.config.label2id, cfg.max_length)
    )
    weights = class_weights(kind.values(splits["train"]), labels, cfg.loss, cfg.beta)
    dev = kind.features(splits["dev"], tokenizer, cfg)  # encoded once, scored every epoch
    # 3. train, choosing the epoch on dev
    best, dev_history, log_history = fit_and_select(
        model,
        tokenizer,
        train_ds,
        kind.collate(tokenizer),
        weights,
        lambda m: score(kind, m, tokenizer, splits["dev"], id2label, cfg, dev)[0],
        kind.selection_key,
        cfg,
        seed,
        work_dir,
        model_dir,
        data=[kind.identity(e) for sp in ("train", "dev") for e in splits[sp]],
    )
    # 4. test, once, with the chosen weights
    test_metrics, predictions = score(kind, model, tokenizer, splits["test"], id2label, cfg)
    metrics = {
        "labels": labels,
        "best_epoch": best["epoch"],
        "dev": best["metrics"],
        "test": test_metrics,
        "dev_per_epoch": [kind.trim_dev(h) for h in dev_history],
        **({"class_weights": weights} if kind.weights_in_metrics else {}),
    }
    return SeedRun(model, metrics, predictions, log_history)


@dataclasses.dataclass
class FinetuneResult:
    """The first seed's model and predictions (what the stage saves), metrics over all seeds;
    ``encoder``: the folder the first seed was fine-tuned from."""

    model: object
    tokenizer: object
    metrics: dict
    test_predictions: list[dict]
    log_history: list[dict]
    encoder: Path


def train_seeds(kind: TaskKind, encoder_of: dict, tokenizer, data, cfg, work_dir: Path, workers) -> dict:
    """Every seed's run, in ``cfg.seeds`` order: one after another in this process, or, with
    ``cfg.seed_processes`` > 1 and the stage's :class:`SeedWorkers`, the first here while worker
    processes train the others, at most ``seed_processes`` at once (on a GPU they share it: a
    MiniLM-sized fine-tuning step leaves it mostly idle). Each seed computes what it would alone."""

    def here(seed: int) -> SeedRun:
        return train_one_seed(kind, encoder_of[seed], tokenizer, data, cfg, seed, work_dir / f"seed{seed}")

    n = min(cfg.seed_processes, len(cfg.seeds))
    if n == 1 or workers is None or workers.command is None:
        return {seed: here(seed) for seed in cfg.seeds}
    env = dict(os.environ)
    if torch.cuda.is_available():  # the processes share the node's cores (a CPU run keeps its threads, and its bytes)
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or n) // n)))
    pending, running, done = list(cfg.seeds[1:]), {}, {}

    def launch() -> None:
        seed = pending.pop(0)
        out = work_dir / f"seed{seed}" / "worker-result.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.unlink(missing_ok=True)
        running[seed] = (subprocess.Popen([*workers.command, "--seed-worker", str(seed), str(out)], env=env), out)

    def gather(seed: int) -> None:
        proc, out = running.pop(seed)
        if proc.returncode != 0:
            raise MinisciError(
                f"{kind.stage}: the process of seed {seed} failed (exit {proc.returncode}; its error is above)"
            )
        r = json.loads(out.read_text(encoding="utf-8"))
        done[seed] = SeedRun(None, r["metrics"], r["predictions"], [])

    try:
        while pending and len(running) < n - 1:
            launch()
        done[cfg.seeds[0]] = here(cfg.seeds[0])  # meanwhile, in this process
        while running:
            for seed in [s for s, (p, _) in running.items() if p.poll() is not None]:
                gather(seed)
                if pending:
                    launch()
            time.sleep(0.2)
    finally:
        for proc, _ in running.values():  # a failure leaves no worker behind
            proc.kill()
            proc.wait()
    return {seed: done[seed] for seed in cfg.seeds}


def run_seeds(
    kind: TaskKind,
    data,
    model_dir: str | Path,
    cfg,
    work_dir: str | Path,
    design: PretrainSeeds | None = None,
    workers: SeedWorkers | None = None,
) -> FinetuneResult | None:
    """Fine-tune once per seed of ``cfg.seeds`` (each resumable in ``work_dir/seed<N>``); metrics of
    the first seed as the headline, every seed's in ``per_seed`` and ``test_over_seeds``, and every
    seed's test predictions in the rows (``preds``) for the seed-aware bootstrap.

    ``model_dir`` is one encoder, or a folder of one encoder per pretraining seed (``models/adapted``):
    then ``design`` says which fine-tuning seed runs on which (:func:`minisci.pretrain.seeds.finetune_plan`),
    and each run's pretraining seed is recorded as ``per_seed.<s>.pretrain_seed`` (``pretrain_seed``
    with one fine-tuning seed), which the report's Multi-Bootstrap reads.

    ``workers``: the stage's :class:`SeedWorkers` (see :func:`train_seeds`); in a worker process
    (``workers.only``) this trains that seed, writes its result and returns None."""
    from transformers import AutoConfig, AutoTokenizer

    start = time.perf_counter()
    quiet_load_reports()
    if design is not None and design.design != "paired":
        raise MinisciError(
            f"pretrain.seed_design: the fine-tuning stages run paired, not {design.design} "
            "(cross is for studies: minisci.report.bootstrap.pretrain_components)"
        )
    plan = (
        finetune_plan(model_dir, design, cfg.seeds)
        if design is not None
        else [(None, s, Path(model_dir)) for s in cfg.seeds]
    )
    encoder_of = {s: d for _, s, d in plan}
    pretrain_of = {s: p for p, s, _ in plan if p is not None}
    model_dir = encoder_of[cfg.seeds[0]]  # the tokenizer and config: every seed's encoder shares them
    # 1. data: the subsets are drawn once, from the first seed, so every seed (and both arms) sees the same data
    limits = {"train": cfg.max_train_examples, "dev": cfg.max_eval_examples, "test": cfg.max_eval_examples}
    splits = {sp: subsample(data.splits[sp], n, cfg.seeds[0]) for sp, n in limits.items()}
    # a score on a subset must say so wherever it goes (the model card's model-index above all)
    subsets = {
        sp: {"examples": len(splits[sp]), "of": len(data.splits[sp])}
        for sp in ("dev", "test")
        if len(splits[sp]) < len(data.splits[sp])
    }
    data = dataclasses.replace(data, splits={**data.splits, **splits})
    section = kind.stage
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True, trust_remote_code=False)
    config = AutoConfig.from_pretrained(model_dir, local_files_only=True, trust_remote_code=False)
    check_at_load(config, tokenizer, {f"{section}.max_length": cfg.max_length}, model_dir)
    unk = check_unk_rate(tokenizer, training_words(data), section)
    # 2. train and select on dev, once per seed; 3. test once per seed with the chosen weights
    if workers is not None and workers.only is not None:
        seed = workers.only
        if seed not in cfg.seeds:
            raise MinisciError(f"--seed-worker: seed {seed} is not one of {kind.stage}.seeds {list(cfg.seeds)}")
        run = train_one_seed(kind, encoder_of[seed], tokenizer, data, cfg, seed, Path(work_dir) / f"seed{seed}")
        write_json(workers.result, {"metrics": run.metrics, "predictions": run.predictions})
        return None
    runs = train_seeds(kind, encoder_of, tokenizer, data, cfg, Path(work_dir), workers)
    first = runs[cfg.seeds[0]]
    head = first.metrics
    metrics = {
        "dataset": data.name,
        "labels": head.get("labels", data.labels),
        "seeds": list(cfg.seeds),
        **kind.describe(data, cfg, tokenizer),
        "unk_rate": unk,
        **({"pretrain_seed": pretrain_of[cfg.seeds[0]]} if pretrain_of and len(cfg.seeds) == 1 else {}),
        **({"eval_subsets": subsets} if subsets else {}),
        **{k: v for k, v in head.items() if k != "labels"},
    }
    # 4. every seed, when there are several
    test = data.splits["test"]
    rows = kind.rows(test, first.predictions)
    if len(cfg.seeds) > 1:
        key = kind.selection_key
        metrics["per_seed"] = {
            str(s): {
                "best_epoch": r.metrics["best_epoch"],
                f"dev_{key}": r.metrics["dev"][key],
                **{k: r.metrics["test"][k] for k in kind.seed_keys},
                **({"pretrain_seed": pretrain_of[s]} if s in pretrain_of else {}),
            }
            for s, r in runs.items()
        }
        metrics["test_over_seeds"] = aggregate_seeds({s: r.metrics["test"] for s, r in runs.items()}, kind.seed_keys)
        by_seed = {str(s): kind.rows(test, r.predictions) for s, r in runs.items()}
        for i, row in enumerate(rows):
            row["preds"] = {s: seed_rows[i]["pred"] for s, seed_rows in by_seed.items()}
    metrics["environment"] = run_environment(cfg.precision)  # so a run on another machine explains itself
    metrics["wall_seconds"] = round(time.perf_counter() - start, 1)
    # a forced rerun keeps the trained run's timings; the first seed's folder is cleared with its run
    metrics = keep_run_metrics(metrics, Path(work_dir) / f"seed{cfg.seeds[0]}" / RUN_METRICS)
    return FinetuneResult(first.model, tokenizer, metrics, rows, first.log_history, model_dir)


def aggregate_seeds(per_seed: dict[int, dict], keys: tuple[str, ...]) -> dict:
    """Mean and sample standard deviation over seeds of the given (flat) test metrics."""
    out = {}
    for k in keys:
        values = [m[k] for m in per_seed.values()]
        out[f"{k}_mean"] = round(statistics.fmean(values), 4)
        out[f"{k}_sd"] = round(statistics.stdev(values), 4) if len(values) > 1 else 0.0
    return out
