"""Fine-tuning throughput of minisci's training path vs the stock Trainer, and the bf16 speed-up.

Usage: python benchmarks/finetune_throughput.py [--task ner|cite] [--data data/prepared/bc5cdr]
           [--model models/adapted/13] [--steps 100 | --epochs E] [--seeds 0 1 2] [--eval-every N [--target S]]
           [--precision fp32|bf16 [--emulated-bf16] | --attention-dropout-off | --random-batches | --shuffled-groups]

``--task ner`` (default): BC5CDR NER with the finetune_ner hyperparameters; ``--task cite``: SciCite
citation intent (``data/prepared/scicite``) with the finetune_classification ones. Same prepared data
(``dvc repro prepare_data``), same features (NER: minisci's word-piece windows, labels on each word's
first piece; citations: texts truncated at max_length), same initial weights per seed, same number of
optimizer steps and the same hyperparameters from --params. Peer: the stock ``Trainer`` with stock
``TrainingArguments`` (random batches, each padded to its longest by the stock collator). Ours: the
stage's own trainer, built by ``minisci.finetune.common.build_trainer`` (``training_arguments``:
length-grouped batches; ``WeightedLossTrainer``), without the stage's per-epoch dev selection so both
sides stop at --steps. Prints
real (non-padding) word pieces per second, the time to --steps, and both sides' dev score after them
(NER: seqeval F1; citations: macro-F1, the stage's selection score). NER trains a softmax
token-classification head whatever ``finetune_ner.crf`` says: the stock ``Trainer`` has no CRF head to
compare with, and what is compared is the training loop (batching, padding, loss), which the CRF head's
emissions go through unchanged.

``--precision bf16``: ours in fp32 against ours in bf16 autocast over --seeds: speed-up and dev-score
drift (bf16 minus fp32, paired by seed, against the fp32 seeds' spread). Refused, with one line, on a CPU
without native bf16 (see ``minisci.training.resolve_precision``), unless ``--emulated-bf16``: then bf16
autocast runs anyway, with its matrix products computed as native bf16 hardware computes them (bf16
inputs, products summed in fp32, the result rounded to bf16) on the fp32 kernels: see
``finetune_variants.EmulatedBf16Gemms``. The CPU's own emulated bf16 products are ~25x slower than
fp32, which would make three seeds take hours. So the drift row holds, but the speed row says nothing
about a native-bf16 CPU and is labelled so. Before the runs, one check step says how far emulated bf16 and the CPU's own
bf16 autocast each move the gradients from fp32 (they should move them alike).

``--epochs E``: E passes over the training set instead of --steps (the stage's schedule: its warm-up and
linear decay over the whole run). ``--eval-every N``: the dev score every N steps and after the last, the
clock paused while it is scored (evaluation changes nothing in training: no dropout, no random draws).
Prints each side's dev curve (mean over seeds) and its **time to the same dev score**: the training
seconds until a seed's dev score first reaches --target (default: the lowest final score among the first
side's seeds, a score every seed of the reference reached), with how many seeds reached it, and the
ratio of those times.

``--random-batches``: ours against ours with random batches (the stock Trainer's sampling; ours groups
batches by length): what the batching alone does to the speed and to the dev score.
``--shuffled-groups``: ours against ours with the same length-grouped batches in shuffled order (a
candidate: the speed of grouping, without runs of batches that go from the longest texts to the shortest).

``--attention-dropout-off``: ours against ours with the attention probabilities' dropout at 0 (the
model config's ``attention_probs_dropout_prob``; a recipe change): speed-up and dev-F1 drift. With
dropout, PyTorch's CPU attention falls back to the unfused product, softmax and mask; without, its
fused kernel runs.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

from machine import HelpFormatter, positive_float, positive_int, print_machine

from minisci.config import FinetuneClassificationConfig, FinetuneNerConfig, finetune_config, load_section
from minisci.data.readers import Prepared, load_prepared
from minisci.errors import ConfigError
from minisci.serve.models import read_config
from minisci.stage import run_command
from minisci.tasks import registry
from minisci.tasks.kind import TaskKind

REPO = Path(__file__).resolve().parents[1]  # default inputs are this checkout's, from any folder
# torch and transformers (and finetune_variants.py, which subclasses theirs) are imported where they are
# used, after the arguments are parsed: --help and usage errors do not wait the seconds their import takes.


@dataclasses.dataclass(frozen=True)
class Features:
    """The training features both sides train on, and the dev score the stage selects on; what
    differs between task kinds is read from the kind (:mod:`minisci.tasks`)."""

    kind: TaskKind
    data: Prepared
    labels: list[str]
    train: list[dict]  # features: input_ids and labels
    weights: list[float] | None  # the configured loss's class weights (ours only)

    @classmethod
    def build(cls, kind: TaskKind, data: Prepared, tokenizer, cfg) -> Features:
        from minisci.finetune.common import class_weights

        labels = kind.model_labels(data.labels)
        train = kind.encode(data.splits["train"], tokenizer, {v: k for k, v in enumerate(labels)}, cfg.max_length)
        weights = class_weights(kind.values(data.splits["train"]), labels, cfg.loss, cfg.beta)
        return cls(kind, data, labels, train, weights)

    @property
    def score_name(self) -> str:
        return f"dev {self.kind.score_word}"

    def score(self, model, tokenizer, cfg) -> float:
        from minisci.finetune.common import score

        dev = self.data.splits["dev"]
        return score(self.kind, model, tokenizer, dev, model.config.id2label, cfg)[0][self.kind.selection_key]

    def model_class(self):
        import transformers

        return getattr(transformers, self.kind.auto_class)

    def collator(self, tokenizer):
        return self.kind.collate(tokenizer)


@dataclasses.dataclass(frozen=True)
class Side:
    """One side of the comparison: its task config, and what it changes from ours fp32: the model
    config (``model_config``), ``training_arguments``' own or the trainer class (``arguments``), bf16
    emulated on fp32 kernels (``emulated``), or the stock Trainer instead of ours (``stock``)."""

    cfg: FinetuneNerConfig | FinetuneClassificationConfig
    model_config: dict = dataclasses.field(default_factory=dict)
    arguments: dict = dataclasses.field(default_factory=dict)
    emulated: bool = False
    stock: bool = False


def load_model(model_dir: str, work: Features, seed: int, **config):
    """The encoder with a fresh task head; ``config`` overrides its config's values."""
    from transformers import set_seed

    set_seed(seed)  # the head's initialisation: the same on both sides
    id2label = dict(enumerate(work.labels))
    return work.model_class().from_pretrained(
        model_dir,
        num_labels=len(work.labels),
        id2label=id2label,
        label2id={v: k for k, v in id2label.items()},
        use_safetensors=True,
        local_files_only=True,
        **config,
    )


def stock_trainer(model, tokenizer, ds, work: Features, cfg, seed: int, steps: int, out: str):
    """What a user of the Hugging Face examples runs: stock arguments, random batches, stock loss."""
    import torch
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(
        output_dir=out,
        report_to="none",
        seed=seed,
        per_device_train_batch_size=cfg.batch_size,
        learning_rate=cfg.learning_rate,
        weight_decay=cfg.weight_decay,
        warmup_steps=cfg.warmup_ratio,
        max_steps=steps,
        save_strategy="no",
        use_cpu=not torch.cuda.is_available(),
        disable_tqdm=True,
        include_num_input_tokens_seen="non_padding",  # counting only: the same measure as ours
    )
    return Trainer(model=model, args=args, train_dataset=ds, data_collator=work.collator(tokenizer))


def minisci_trainer(
    model,
    tokenizer,
    ds,
    work: Features,
    cfg,
    seed: int,
    steps: int,
    out: str,
    emulated_bf16=False,
    trainer_cls=None,
    **arguments,
):
    """The stage's own trainer (``build_trainer``, which ``fit_and_select`` calls), stopping after ``steps``.
    ``emulated_bf16``: bf16 autocast on a CPU without native bf16, which ``training_arguments`` (rightly)
    refuses for a stage's run; ``arguments``: ``training_arguments``' own (``group_by_length=False``: random
    batches); ``trainer_cls``: a subclass of ours (``finetune_variants.ShuffledGroupsTrainer``; default ours,
    ``WeightedLossTrainer``)."""
    from minisci.finetune.common import WeightedLossTrainer, build_trainer

    if emulated_bf16:
        cfg, arguments = dataclasses.replace(cfg, precision="fp32"), {**arguments, "bf16": True}
    return build_trainer(
        model,
        tokenizer,
        ds,
        work.collator(tokenizer),
        work.weights,
        cfg,
        seed,
        out,
        trainer_cls=trainer_cls or WeightedLossTrainer,
        max_steps=steps,
        **arguments,
    )


def timed_run(
    build, model_dir, work: Features, tokenizer, cfg, seed: int, emulated_bf16=False, eval_every=None, **config
) -> dict:
    """Train one side for cfg's steps; real pieces per second, seconds, the dev score, and with
    ``eval_every`` the dev curve (the training seconds exclude its scoring)."""
    from finetune_variants import DevCurve, EmulatedBf16Gemms
    from transformers.trainer_callback import PrinterCallback

    from minisci.trainer_progress import StageProgress

    model = load_model(model_dir, work, seed, **config)
    curve = DevCurve(eval_every, lambda m: work.score(m, tokenizer, cfg)) if eval_every else None
    with tempfile.TemporaryDirectory() as out:
        trainer = build(model, out)
        trainer.remove_callback(PrinterCallback)  # the rows below say what matters
        trainer.remove_callback(StageProgress)
        if curve:
            trainer.add_callback(curve)
        start = time.perf_counter()
        with EmulatedBf16Gemms() if emulated_bf16 else contextlib.nullcontext():
            trainer.train()
        seconds = time.perf_counter() - start - (curve.excluded if curve else 0.0)
    dev = curve.points[-1][2] if curve else work.score(model, tokenizer, cfg)
    run = {"tokens/s": trainer.state.num_input_tokens_seen / seconds, "seconds": seconds, "dev": dev}
    return {**run, "curve": curve.points} if curve else run


def summary(runs: list[dict], key: str, fmt: str) -> str:
    values = [r[key] for r in runs]
    spread = f" ± {statistics.stdev(values):{fmt}}" if len(values) > 1 else ""
    return f"{statistics.mean(values):{fmt}}{spread} (min {min(values):{fmt}}, max {max(values):{fmt}})"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=HelpFormatter)
    p.add_argument(
        "--task",
        choices=tuple(k.command for k in registry.KINDS.values()),
        default=registry.NER.command,
        help="ner: BC5CDR; cite: SciCite citation intent",
    )
    p.add_argument(
        "--data",
        help="a prepared dataset of the task (prepare_data); default: the task's first dataset in --params "
        "(BC5CDR, SciCite), under this checkout's data/prepared",
    )
    p.add_argument("--model", default=str(REPO / "models/adapted/13"), help="encoder directory")
    p.add_argument("--params", default=str(REPO / "params.yaml"), help="the task's hyperparameters are read from here")
    length = p.add_mutually_exclusive_group()
    length.add_argument(
        "--steps", type=positive_int, default=100, help="optimizer steps per run, the same on both sides"
    )
    length.add_argument("--epochs", type=positive_float, help="passes over the training set instead of --steps")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="one run per side and seed")
    p.add_argument("--batch-size", type=positive_int, help="override the task's batch_size")
    p.add_argument("--max-length", type=positive_int, help="override the task's max_length (word pieces)")
    p.add_argument(
        "--eval-every", type=positive_int, help="dev score every N steps (clock paused): curves and time to a dev score"
    )
    p.add_argument(
        "--target",
        type=float,
        help="with --eval-every: the dev score to time each side to (default: the first side's lowest final score)",
    )
    compare = p.add_mutually_exclusive_group()
    compare.add_argument("--precision", choices=("fp32", "bf16"), default="fp32", help="bf16: ours fp32 vs ours bf16")
    compare.add_argument(
        "--attention-dropout-off",
        action="store_true",
        help="ours vs ours with the attention probabilities' dropout at 0 (a recipe change)",
    )
    compare.add_argument(
        "--random-batches", action="store_true", help="ours vs ours with random batches instead of length-grouped ones"
    )
    compare.add_argument(
        "--shuffled-groups", action="store_true", help="ours vs ours with its length-grouped batches in shuffled order"
    )
    p.add_argument(
        "--emulated-bf16",
        action="store_true",
        help="with --precision bf16 on a CPU without native bf16: run it emulated, for the drift (not the speed); "
        "where the CPU has native bf16, bf16 runs natively",
    )
    args = p.parse_args(argv)
    if args.emulated_bf16 and args.precision != "bf16":
        p.error("--emulated-bf16 goes with --precision bf16")
    if args.target is not None and not args.eval_every:
        p.error("--target goes with --eval-every")
    from finetune_variants import ShuffledGroupsTrainer, emulation_check
    from transformers.utils import logging as hf_logging

    from minisci.training import resolve_precision

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()

    # 1. environment, and the refusal of bf16 where the CPU has none, before any work
    print_machine()
    emulated = False
    if args.precision == "bf16":
        try:
            resolve_precision("bf16")
        except ConfigError:
            if not args.emulated_bf16:
                raise
            emulated = True  # the CPU has no native bf16: drift only
    kind = registry.of_command(args.task)
    cfg = load_section(finetune_config(kind), kind.stage, args.params)
    overrides = {k: v for k, v in (("batch_size", args.batch_size), ("max_length", args.max_length)) if v}
    cfg = dataclasses.replace(cfg, precision="fp32", **overrides)

    # 2. data: the same features on both sides
    import datasets
    from transformers import AutoTokenizer

    read_config(args.model)  # a missing or broken model directory: one line, not the hub's repo-id error
    tokenizer = AutoTokenizer.from_pretrained(args.model, local_files_only=True)
    data = load_prepared(args.data or REPO / "data/prepared" / cfg.datasets[0], task=kind.name)
    work = Features.build(kind, data, tokenizer, cfg)
    ds = datasets.Dataset.from_list(work.train)
    steps = max(1, round(args.epochs * math.ceil(len(ds) / cfg.batch_size))) if args.epochs else args.steps
    mean_len = sum(len(f["input_ids"]) for f in work.train) / len(work.train)
    print(
        f"data: {data.name}, {len(work.train)} training {kind.feature_unit}, "
        f"mean {mean_len:.1f} word pieces | batch {cfg.batch_size}, {steps} steps"
        f"{f' ({args.epochs:g} epochs)' if args.epochs else ''}, lr {cfg.learning_rate}, "
        f"loss {cfg.loss}, seeds {args.seeds}"
    )

    # 3. the sides, interleaved per seed so machine noise hits them alike; at most one differs from ours fp32
    sides, change = {"ours fp32": Side(cfg)}, None
    if args.precision == "bf16":
        name = "ours bf16 emulated (no native bf16, so drift only, not a speed)" if emulated else "ours bf16"
        change, sides[name] = ("bf16", "fp32"), Side(dataclasses.replace(cfg, precision="bf16"), emulated=emulated)
    if args.attention_dropout_off:
        name, change = "ours fp32, attention dropout off", ("dropout off", "on")
        sides[name] = Side(cfg, model_config={"attention_probs_dropout_prob": 0.0})
    if args.random_batches:
        name, change = "ours fp32, random batches", ("random", "length-grouped")
        sides[name] = Side(cfg, arguments={"group_by_length": False})
    if args.shuffled_groups:
        name, change = "ours fp32, shuffled groups", ("shuffled", "length-grouped")
        sides[name] = Side(cfg, arguments={"trainer_cls": ShuffledGroupsTrainer})
    if not change:
        sides = {"stock Trainer fp32": Side(cfg, stock=True), **sides}
    results = {name: [] for name in sides}
    if emulated:
        batch = work.collator(tokenizer)(work.train[: cfg.batch_size])
        print(emulation_check(load_model(args.model, work, args.seeds[0]), batch), flush=True)
    for i, seed in enumerate(args.seeds):
        for name in list(sides)[:: 1 if i % 2 else -1]:  # alternate which side runs first (warm caches)
            side = sides[name]

            def build(m, o, side=side, seed=seed):
                if side.stock:
                    return stock_trainer(m, tokenizer, ds, work, side.cfg, seed, steps, o)
                return minisci_trainer(
                    m, tokenizer, ds, work, side.cfg, seed, steps, o, side.emulated, **side.arguments
                )

            run = timed_run(
                build, args.model, work, tokenizer, side.cfg, seed, side.emulated, args.eval_every, **side.model_config
            )
            results[name].append(run)

    # 4. rows: the first side is the reference of the ratio
    reference = next(iter(results))
    base = statistics.mean(r["tokens/s"] for r in results[reference])
    for name, runs in results.items():
        ratio = statistics.mean(r["tokens/s"] for r in runs) / base
        print(
            f"  {name}: {summary(runs, 'tokens/s', '8.1f')} real tokens/s | ratio {ratio:4.2f}x | "
            f"{steps} steps in {summary(runs, 'seconds', '.1f')} s | {work.score_name} {summary(runs, 'dev', '.4f')}",
            flush=True,
        )
    if change:
        print(drift_line(results["ours fp32"], results[list(sides)[-1]], work.score_name, change))
    if args.eval_every:
        target, why = args.target, "--target"
        if target is None:
            target, why = min(r["dev"] for r in results[reference]), f"the lowest final score among {reference}'s seeds"
        print(f"  time to {work.score_name} >= {target:.4f} ({why}), dev scored every {args.eval_every} steps:")
        print("\n".join(time_to_score_lines(results, target)))


def time_to_score_lines(results: dict[str, list[dict]], target: float) -> list[str]:
    """Per side: its dev curve (mean over seeds) and the training seconds until each seed first reached
    ``target``, with the ratio of the mean times to the first side's (only where every seed reached it)."""
    lines, times = [], {}
    for name, runs in results.items():
        reached = [next((sec for _, sec, dev in r["curve"] if dev >= target), None) for r in runs]
        times[name] = [t for t in reached if t is not None]
        curve = ", ".join(
            f"{step} {statistics.mean(r['curve'][k][2] for r in runs):.4f}"
            for k, (step, _, _) in enumerate(runs[0]["curve"])
        )
        lines.append(f"  {name}: dev curve (step, mean score) {curve}")
    reference = next(iter(results))
    for name, runs in results.items():
        got = times[name]
        if not got:
            lines.append(f"  {name}: time to the score: reached by 0/{len(runs)} seeds")
            continue
        spread = f" ± {statistics.stdev(got):.1f}" if len(got) > 1 else ""
        line = (
            f"  {name}: time to the score {statistics.mean(got):.1f}{spread} s "
            f"(min {min(got):.1f}, max {max(got):.1f}), reached by {len(got)}/{len(runs)} seeds"
        )
        if all(len(times[n]) == len(results[n]) for n in (reference, name)):
            line += f" | {statistics.mean(times[reference]) / statistics.mean(got):4.2f}x faster than {reference}"
        lines.append(line)
    return lines


def drift_line(reference: list[dict], changed: list[dict], score_name: str, change=("bf16", "fp32")) -> str:
    """The dev-score drift of a change (``changed`` minus ``reference``, paired by seed; ``change`` names
    the two), against the spread of the reference's seeds (the noise it must stay in)."""
    new, old = change
    diffs = [b["dev"] - f["dev"] for f, b in zip(reference, changed)]
    spread = f"sd {statistics.stdev(diffs):.4f}, " if len(diffs) > 1 else ""
    line = (
        f"  drift of the {score_name} ({new} - {old}, paired by seed): mean {statistics.mean(diffs):+.4f} "
        f"({spread}min {min(diffs):+.4f}, max {max(diffs):+.4f})"
    )
    if len(reference) < 2:
        return line + " | one seed: no seed noise to compare with"
    noise = statistics.stdev(f["dev"] for f in reference)
    within = abs(statistics.mean(diffs)) <= noise
    return line + f" | {old} seeds' sd {noise:.4f}: {'within' if within else 'outside'} seed noise"


if __name__ == "__main__":
    sys.exit(run_command(main))  # a missing model, data or params file: one line, exit 1
