"""Stage pretrain_data: the pretraining examples, tokenised once for every pretraining seed ->
data/pretrain (Arrow, memory-mapped by pretrain@<seed>), with the tokenizer they were tokenised by.

Usage: python stages/pretrain_data.py --pairs data/pairs --docs data/corpus/documents.jsonl \\
           --out data/pretrain --metrics metrics/pretrain_data.json

pretrain.nsp true (BERT): the NSP pairs of make_pairs. false (MLM only; any encoder): the sampled
documents packed into full blocks of pretrain.max_seq_length word pieces, each corpus on its own,
held-out blocks from make_pairs's held-out documents. pretrain.vocab_extension adds its whole-word
tokens to the tokenizer first. The metrics give word pieces per corpus.
"""

from __future__ import annotations

import argparse
import sys

from minisci.config import MakePairsConfig, ModelConfig, load_section
from minisci.errors import MinisciError
from minisci.io import atomic_path, write_json
from minisci.pretrain.data import build_pretraining_data
from minisci.pretrain.seeds import load_pretrain
from minisci.stage import description, run_stage


def check_maskable(out, tokenizer_name: str, source: str) -> None:
    """Each split has an example with a word piece the MLM can mask (not a special token): a tokenizer
    that reads the text as nothing but [UNK] (another vocabulary, a folder of special tokens only)
    would otherwise train on no target and end in a division by zero when pretrain scores it. Stops
    at the first such example, so it reads one batch of a normal run."""
    import datasets
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(out / "tokenizer"), local_files_only=True, trust_remote_code=False)
    special = set(tokenizer.all_special_ids)
    for name in ("train", "heldout"):
        split = datasets.load_from_disk(str(out / name))
        if not any(not special.issuperset(ids) for batch in split.iter(batch_size=256) for ids in batch["input_ids"]):
            raise MinisciError(
                f"{source}: every {name} example is special tokens only after tokenising with {tokenizer_name!r} "
                f"(words read as {tokenizer.unk_token}): the tokenizer does not fit the text; use the model's own"
            )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=description(__doc__))
    p.add_argument("--pairs", required=True, help="output of make_pairs: train.jsonl and heldout.jsonl")
    p.add_argument(
        "--docs",
        help="documents.jsonl from sample_corpus: word pieces per corpus, and the text of packed blocks (nsp: false)",
    )
    p.add_argument("--out", required=True, help="directory: train/, heldout/ (Arrow), tokenizer/, manifest.json")
    p.add_argument("--metrics", required=True)
    p.add_argument("--params", default="params.yaml")
    args = p.parse_args(argv)
    import datasets

    # the stage's own progress lines show the work; datasets' bars ("Generating train split", "Saving
    # the dataset (0/1 shards)") would fill the DVC log
    datasets.disable_progress_bars()
    model_cfg = load_section(ModelConfig, "model", args.params)
    cfg, _ = load_pretrain(args.params)  # the seed plays no part in the examples
    split = load_section(MakePairsConfig, "make_pairs", args.params)
    with atomic_path(args.out) as out:
        manifest = build_pretraining_data(args.pairs, args.docs, model_cfg, cfg, split, out)
        check_maskable(out, model_cfg.tokenizer or model_cfg.base, args.pairs if cfg.nsp else args.docs)
    metrics = {k: v for k, v in manifest.items() if k != "vocab"}
    metrics["vocab"] = {
        "added_tokens": len(manifest["vocab"]["words"]),
        "most_frequent": manifest["vocab"]["words"][:10],
    }
    write_json(args.metrics, metrics)
    tr, held = manifest["train"], manifest["heldout"]
    print(
        f"pretrain_data: {tr['examples']:,} training {manifest['layout']} ({tr['tokens']:,} word pieces), "
        f"{held['examples']:,} held-out -> {args.out}"
    )


if __name__ == "__main__":
    sys.exit(run_stage(main))
