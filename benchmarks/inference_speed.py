"""Speed of `minisci ner` / `minisci cite` inference vs the transformers pipeline, and agreement.

Usage: python benchmarks/inference_speed.py [--ner-model models/finetune_ner/bc5cdr/adapted]
           [--cite-model models/finetune_scicite/adapted] [--n 400]

Both sides use the same model and the pipeline's own pre/post-processing; ours batches
length-sorted texts under torch.inference_mode, the pipeline processes one text at a time (its
default). Texts: the first --n BC5CDR test sentences and SciCite test citations. Runs alternate
(ours, pipeline, ours, pipeline) and the best of each is kept; prints texts/s and the ratio.
"""

from __future__ import annotations

import argparse
import time

from minisci.inference import classify, tag, text_classifier, token_classifier
from minisci.readers import load_ner_split, load_scicite_split


def best_time(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def compare(name: str, pipe, texts: list[str], ours, same, rounds: int) -> None:
    ref = pipe(texts if name == "cite" else list(texts))
    agree = sum(same(a, b) for a, b in zip(ours(), ref)) / len(texts)
    t_ours = best_time(ours, rounds)
    t_pipe = best_time(lambda: [pipe(t) for t in texts], rounds)
    print(f"{name}: {len(texts)} texts | ours {len(texts) / t_ours:7.1f} texts/s | pipeline {len(texts) / t_pipe:7.1f} texts/s "
          f"| ratio {t_pipe / t_ours:.2f}x | identical predictions {agree:.1%}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="data/raw")
    p.add_argument("--ner-model", default="models/finetune_ner/bc5cdr/adapted")
    p.add_argument("--cite-model", default="models/finetune_scicite/adapted")
    p.add_argument("--n", type=int, default=400)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)

    ner = token_classifier(args.ner_model)
    sents = [" ".join(s.tokens) for s in load_ner_split("bc5cdr", "test", args.data)[: args.n]]
    key = lambda ents: [(e["entity_group"], e["start"], e["end"]) for e in ents]  # noqa: E731
    compare("ner", ner, sents, lambda: tag(ner, sents), lambda a, b: key(a) == key(b), args.rounds)

    cite = text_classifier(args.cite_model)
    cites = [e.text for e in load_scicite_split("test", args.data)[: args.n]]
    compare("cite", cite, cites, lambda: classify(cite, cites), lambda a, b: a["label"] == b[0]["label"], args.rounds)


if __name__ == "__main__":
    main()
