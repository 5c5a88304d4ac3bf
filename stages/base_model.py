"""Stage base_model: the un-adapted base encoder (model.base) copied into models/baseline, in
Hugging Face format, so both fine-tuning arms depend on a model directory and a pretraining change
reruns only the adapted arms.

Usage: python stages/base_model.py --out models/baseline
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from minisci.cards import write_model_card
from minisci.config import ModelConfig, load_section
from minisci.io import atomic_path
from minisci.pretrain.model import load_pretraining_model, load_tokenizer
from minisci.pretrain.seeds import load_seed_design
from minisci.stage import description, run_stage
from minisci.training import quiet_load_reports


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=description(__doc__))
    p.add_argument("--out", required=True)
    p.add_argument("--params", default="params.yaml")
    args = p.parse_args(argv)

    model_cfg = load_section(ModelConfig, "model", args.params)
    seed = load_seed_design(args.params).first  # the heads start as those of pretrain@<first seed>
    quiet_load_reports()  # no LOAD REPORT table or weight bars in a log file
    tokenizer = load_tokenizer(model_cfg)
    model, random_heads = load_pretraining_model(model_cfg, len(tokenizer), seed)  # any masked-LM encoder
    with atomic_path(args.out) as out:
        model.save_pretrained(out)  # safetensors; the random heads are unused by fine-tuning
        tokenizer.save_pretrained(out)
        write_model_card(
            out,
            title="minisci baseline encoder",
            summary="The base encoder as is (no adaptation): the baseline arm of every comparison. "
            f"Pretraining heads missing from the base checkpoint are freshly initialised ({len(random_heads)} tensors) "
            "and unused by fine-tuning.",
            base=model_cfg.base,
            data="none (not trained)",
            params={"model": dataclasses.asdict(model_cfg), "seed": seed},
            metrics={},
            usage=f'from transformers import AutoModel\nmodel = AutoModel.from_pretrained("{args.out}")',
            pipeline_tag="fill-mask",
        )
    print(
        f"base_model: {model_cfg.base} -> {args.out} ({sum(p.numel() for p in model.base_model.parameters()):,} encoder parameters)"
    )


if __name__ == "__main__":
    sys.exit(run_stage(main))
