"""Stage pretrain@<seed>: continued MLM (+ NSP for BERT) pretraining of the base encoder with one
pretraining seed of params.yaml ``pretrain.seeds`` -> models/adapted/<seed>.

Usage: python stages/pretrain.py --seed 13 --data data/pretrain --out models/adapted/13 \\
           --checkpoints models/pretrain_checkpoints/13 --metrics metrics/pretrain/13.json --plots plots/pretrain/13

Resumes from the newest complete checkpoint of the same configuration in --checkpoints (kept
across runs, outside DVC's outputs); a checkpoint at the final step gives the model without further
training, so a forced rerun is the same run. Force a fresh start with ``rm -rf models/pretrain_checkpoints/<seed>``.
Runs unchanged under ``torchrun --nproc_per_node N stages/pretrain.py ...`` (DDP). With
``pretrain.seed_processes`` > 1 the stage of a group's first seed trains the group's next seeds beside
its own, into their checkpoint folders, and their stages publish those runs (minisci.pretrain.seed_processes).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from minisci.cards import eval_result, write_model_card
from minisci.config import ModelConfig, load_section
from minisci.io import atomic_path, write_json
from minisci.pretrain import seed_processes
from minisci.pretrain.seed_processes import side_seeds
from minisci.pretrain.seeds import load_pretrain
from minisci.pretrain.trainer import CURVE_KEYS, run_pretraining
from minisci.stage import description, run_stage
from minisci.training import write_curves


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=description(__doc__))
    p.add_argument("--seed", type=int, help="one of pretrain.seeds (default: the first)")
    p.add_argument("--data", required=True, help="output of pretrain_data: the tokenised examples and their tokenizer")
    p.add_argument("--out", required=True, help="adapted model directory (Hugging Face format)")
    p.add_argument("--checkpoints", required=True, help="checkpoint directory kept across runs for resume")
    p.add_argument("--metrics", required=True)
    p.add_argument("--plots", required=True, help="DVCLive directory for training curves")
    p.add_argument("--params", default="params.yaml")
    # a process that an earlier seed's stage started to train this seed into --checkpoints (only)
    p.add_argument("--seed-worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    model_cfg = load_section(ModelConfig, "model", args.params)
    cfg, design = load_pretrain(args.params, args.seed)
    beside = [] if args.seed_worker else side_seeds(cfg.seed, design.seeds, cfg.seed_processes)
    side = seed_processes.start(__file__, beside, args, cfg.seed, cfg.seed_processes)
    try:
        publish(args, model_cfg, cfg, design)
        seed_processes.finish(side, args, cfg.seed)
    finally:
        seed_processes.stop(side)


def publish(args, model_cfg, cfg, design) -> None:
    """Trains (or restores) this seed's run and writes the stage's outputs; a side process only trains."""
    result = run_pretraining(args.data, model_cfg, cfg, args.checkpoints)
    if not result.is_main_process or args.seed_worker:
        return
    saved_as = type(result.model).__mro__[1].__name__  # BertForPreTraining, RobertaForMaskedLM, ...
    kind = "BERT" if saved_as == "BertForPreTraining" else result.model.config.model_type
    with_nsp = result.model.has_nsp_head and cfg.nsp
    objective = "masked-language-model + next-sentence-prediction" if with_nsp else "masked-language-model"
    with atomic_path(args.out) as out:
        result.model.save_pretrained(out)  # safetensors
        result.tokenizer.save_pretrained(out)
        write_model_card(
            out,
            title="minisci adapted encoder",
            summary=f"{kind} encoder after continued {objective} pretraining on a biomedical/general science "
            f"corpus (Mini-SciBERT recipe), pretraining seed {cfg.seed} of {list(design.seeds)}"
            + (" (the first: the adapted encoder minisci serves)" if cfg.seed == design.first else "")
            + f". Heads included ({saved_as}).",
            base=model_cfg.base,
            data=result.data_summary,
            params={"model": dataclasses.asdict(model_cfg), "pretrain": cfg.result_params()},
            metrics=result.metrics,
            usage=f'from transformers import AutoModel, AutoTokenizer\nmodel = AutoModel.from_pretrained("{args.out}")\n'
            f'tokenizer = AutoTokenizer.from_pretrained("{args.out}")',
            pipeline_tag="fill-mask",
            results=[
                eval_result(
                    "fill-mask", f"minisci-heldout-{result.unit}", k, result.metrics["after"][k], split="heldout"
                )
                for k in ("mlm_accuracy", "perplexity", "nsp_accuracy")
                if result.metrics["after"][k] is not None
            ],
        )
    write_curves(result.log_history, args.plots, CURVE_KEYS)
    write_json(args.metrics, result.metrics)
    m = result.metrics
    nsp = m["after"]["nsp_accuracy"] is not None
    print(
        f"pretrain (seed {cfg.seed}): {m['train']['steps']} steps, {m['train']['tokens_seen']:,} tokens, "
        f"MLM accuracy {m['before']['mlm_accuracy']:.3f} -> {m['after']['mlm_accuracy']:.3f}"
        + (f", NSP accuracy {m['before']['nsp_accuracy']:.3f} -> {m['after']['nsp_accuracy']:.3f}" if nsp else "")
    )


if __name__ == "__main__":
    sys.exit(run_stage(main))
