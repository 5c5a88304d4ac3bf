"""Fine-tuning throughput of minisci's NER training path vs the stock Trainer, and the bf16 speed-up.

Usage: python benchmarks/finetune_throughput.py [--data data/prepared/bc5cdr] [--model models/adapted]
           [--steps 100] [--seeds 0 1 2] [--precision fp32|bf16] [--attention-dropout-off]

Same prepared data (``dvc repro prepare_data``), same features (minisci's word-piece windows, labels on
each word's first piece), same initial weights per seed, same number of optimizer steps and the same
finetune_ner hyperparameters from --params. Peer: the stock ``Trainer`` with stock ``TrainingArguments``
(random batches, each padded to its longest by ``DataCollatorForTokenClassification``). Ours: what
``minisci.finetune.common.fit_and_select`` builds (``training_arguments``: length-grouped batches;
``WeightedLossTrainer``), without its per-epoch dev selection so both sides stop at --steps. Prints
real (non-padding) word pieces per second, the time to --steps, and both sides' dev F1 after them.
Both sides train a softmax token-classification head whatever ``finetune_ner.crf`` says: the stock
``Trainer`` has no CRF head to compare with, and what is compared is the training loop (batching,
padding, loss), which the CRF head's emissions go through unchanged.

``--precision bf16``: ours in fp32 against ours in bf16 autocast over --seeds: speed-up and dev-F1
drift. Refused, with one line, on a CPU without native bf16 (see ``minisci.training.resolve_precision``).

``--attention-dropout-off``: ours against ours with the attention probabilities' dropout at 0 (the
model config's ``attention_probs_dropout_prob``; a recipe change): speed-up and dev-F1 drift. With
dropout, PyTorch's CPU attention falls back to the unfused product, softmax and mask; without, its
fused kernel runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time

import torch
from machine import positive_int, print_machine
from transformers.utils import logging as hf_logging

from minisci.config import FinetuneNerConfig, load_section
from minisci.data.readers import load_prepared
from minisci.finetune.common import WeightedLossTrainer, class_weights
from minisci.finetune.ner import encode_sentences, evaluate, label_list
from minisci.serve.models import read_config
from minisci.stage import run_stage
from minisci.training import resolve_precision, training_arguments


def load_model(model_dir: str, labels: list[str], seed: int, **config):
    """The encoder with a fresh token-classification head; ``config`` overrides its config's values."""
    from transformers import AutoModelForTokenClassification, set_seed

    set_seed(seed)  # the head's initialisation: the same on both sides
    id2label = dict(enumerate(labels))
    return AutoModelForTokenClassification.from_pretrained(
        model_dir,
        num_labels=len(labels),
        id2label=id2label,
        label2id={v: k for k, v in id2label.items()},
        use_safetensors=True,
        local_files_only=True,
        **config,
    )


def stock_trainer(model, tokenizer, ds, cfg: FinetuneNerConfig, seed: int, steps: int, work: str):
    """What a user of the Hugging Face examples runs: stock arguments, random batches, stock loss."""
    from transformers import DataCollatorForTokenClassification, Trainer, TrainingArguments

    args = TrainingArguments(
        output_dir=work,
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
    return Trainer(
        model=model, args=args, train_dataset=ds, data_collator=DataCollatorForTokenClassification(tokenizer)
    )


def minisci_trainer(model, tokenizer, ds, cfg: FinetuneNerConfig, seed: int, steps: int, work: str, weights):
    """The trainer ``fit_and_select`` builds, stopping after ``steps``."""
    from transformers import DataCollatorForTokenClassification

    args = training_arguments(
        work,
        seed=seed,
        batch_size=cfg.batch_size,
        learning_rate=cfg.learning_rate,
        weight_decay=cfg.weight_decay,
        precision=cfg.precision,
        max_steps=steps,
        warmup=cfg.warmup_ratio,
        logging_steps=cfg.logging_steps,
        eval_batch_size=cfg.eval_batch_size,
    )
    collator = DataCollatorForTokenClassification(tokenizer)
    return WeightedLossTrainer(model=model, args=args, train_dataset=ds, data_collator=collator, class_weights=weights)


def timed_run(build, model_dir, data, labels, tokenizer, cfg, seed: int, **config) -> dict:
    """Train one side for cfg's steps; real pieces per second, seconds, and dev F1."""
    from transformers.trainer_callback import PrinterCallback

    model = load_model(model_dir, labels, seed, **config)
    with tempfile.TemporaryDirectory() as work:
        trainer = build(model, work)
        trainer.remove_callback(PrinterCallback)  # the rows below say what matters
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
    dev = evaluate(model, tokenizer, data.splits["dev"], model.config.id2label, cfg)[0]
    return {"tokens/s": trainer.state.num_input_tokens_seen / seconds, "seconds": seconds, "dev_f1": dev["f1"]}


def summary(runs: list[dict], key: str, fmt: str) -> str:
    values = [r[key] for r in runs]
    spread = f" ± {statistics.stdev(values):{fmt}}" if len(values) > 1 else ""
    return f"{statistics.mean(values):{fmt}}{spread} (min {min(values):{fmt}}, max {max(values):{fmt}})"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="data/prepared/bc5cdr", help="a prepared NER dataset (prepare_data)")
    p.add_argument("--model", default="models/adapted", help="encoder directory")
    p.add_argument("--params", default="params.yaml", help="finetune_ner hyperparameters are read from here")
    p.add_argument("--steps", type=positive_int, default=100, help="optimizer steps per run, the same on both sides")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--batch-size", type=positive_int, help="override finetune_ner.batch_size")
    p.add_argument("--max-length", type=positive_int, help="override finetune_ner.max_length (word pieces per window)")
    compare = p.add_mutually_exclusive_group()
    compare.add_argument("--precision", choices=("fp32", "bf16"), default="fp32", help="bf16: ours fp32 vs ours bf16")
    compare.add_argument(
        "--attention-dropout-off",
        action="store_true",
        help="ours vs ours with the attention probabilities' dropout at 0 (a recipe change)",
    )
    args = p.parse_args(argv)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()

    # 1. environment, and the refusal of bf16 where the CPU has none, before any work
    print_machine()
    resolve_precision(args.precision)
    cfg = load_section(FinetuneNerConfig, "finetune_ner", args.params)
    overrides = {k: v for k, v in (("batch_size", args.batch_size), ("max_length", args.max_length)) if v}
    cfg = dataclasses.replace(cfg, precision="fp32", **overrides)

    # 2. data: the same features on both sides
    import datasets
    from transformers import AutoTokenizer

    read_config(args.model)  # a missing or broken model directory: one line, not the hub's repo-id error
    tokenizer = AutoTokenizer.from_pretrained(args.model, local_files_only=True)
    data = load_prepared(args.data, task="ner")
    labels = label_list(data.labels)
    label2id = {v: k for k, v in enumerate(labels)}
    feats = [
        {"input_ids": f["input_ids"], "labels": f["labels"]}
        for f in encode_sentences(data.splits["train"], tokenizer, label2id, cfg.max_length)
    ]
    ds = datasets.Dataset.from_list(feats)
    weights = class_weights([t for s in data.splits["train"] for t in s.tags], labels, cfg.loss, cfg.beta)
    mean_len = sum(len(f["input_ids"]) for f in feats) / len(feats)
    print(
        f"data: {len(feats)} training windows, mean {mean_len:.1f} word pieces | batch {cfg.batch_size}, "
        f"{args.steps} steps, lr {cfg.learning_rate}, loss {cfg.loss}, seeds {args.seeds}"
    )

    # 3. the sides, interleaved per seed so machine noise hits them alike
    sides, config = {"ours fp32": cfg}, {}
    if args.precision == "bf16":
        sides["ours bf16"] = dataclasses.replace(cfg, precision="bf16")
    if args.attention_dropout_off:
        sides["ours fp32, attention dropout off"] = cfg
        config["ours fp32, attention dropout off"] = {"attention_probs_dropout_prob": 0.0}
    with_stock = len(sides) == 1
    results = {name: [] for name in (["stock Trainer fp32"] if with_stock else []) + list(sides)}
    for i, seed in enumerate(args.seeds):
        builders = {
            name: lambda m, w, c=side, s=seed: minisci_trainer(m, tokenizer, ds, c, s, args.steps, w, weights)
            for name, side in sides.items()
        }
        if with_stock:
            builders["stock Trainer fp32"] = lambda m, w, s=seed: stock_trainer(m, tokenizer, ds, cfg, s, args.steps, w)
        for name in list(builders)[:: 1 if i % 2 else -1]:  # alternate which side runs first (warm caches)
            side_cfg = sides.get(name, cfg)
            results[name].append(
                timed_run(builders[name], args.model, data, labels, tokenizer, side_cfg, seed, **config.get(name, {}))
            )

    # 4. rows: the first side is the reference of the ratio
    reference = next(iter(results))
    base = statistics.mean(r["tokens/s"] for r in results[reference])
    for name, runs in results.items():
        ratio = statistics.mean(r["tokens/s"] for r in runs) / base
        print(
            f"  {name}: {summary(runs, 'tokens/s', '8.1f')} real tokens/s | ratio {ratio:4.2f}x | "
            f"{args.steps} steps in {summary(runs, 'seconds', '.1f')} s | dev F1 {summary(runs, 'dev_f1', '.4f')}",
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(run_stage(main))  # a missing model, data or params file: one line, exit 1
