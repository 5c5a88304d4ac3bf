"""Verdicts and the report section for the retrieval benchmark of ``finetune_embeddings``.

The same statistics as the NER and classification headline (:mod:`minisci.report.bootstrap`): a
paired bootstrap over *queries* (both systems ranked the same resampled queries), the 95% interval
and two-sided p of the MRR@10 difference, TOST against the declared margin
(``finetune_embeddings.equivalence_margin``) and the minimum detectable effect of the design. A
query's term of MRR@10 is additive (1/rank or 0), so its counts are ``[term, 1]`` and the metric is
their ratio.
"""

from __future__ import annotations

import numpy as np

from minisci.report.bootstrap import minimum_detectable_effect, seed_bootstrap, verdict

SHIPPED = "shipped"  # the baseline of every comparison: the base model as its authors ship it


def _counts(terms: np.ndarray) -> np.ndarray:
    return np.stack([np.asarray(terms, dtype=float), np.ones(len(terms))], axis=1)


def _mean(counts: np.ndarray) -> np.ndarray:
    return counts[..., 0] / counts[..., 1]


def mrr_interval(terms: np.ndarray, n_resamples: int, seed: int) -> tuple[float, float]:
    """95% percentile bootstrap interval of one system's MRR@10 over queries."""
    terms = np.asarray(terms, dtype=float)
    rng = np.random.default_rng(seed)
    means = rng.multinomial(len(terms), np.full(len(terms), 1.0 / len(terms)), size=n_resamples) @ terms / len(terms)
    return round(float(np.percentile(means, 2.5)), 4), round(float(np.percentile(means, 97.5)), 4)


def compare(terms_a: np.ndarray, terms_b: np.ndarray, margin: float, n_resamples: int, seed: int) -> dict:
    """MRR@10(b) - MRR@10(a) over the same queries: interval, p, TOST p, MDE and the verdict."""
    boot = seed_bootstrap([_counts(terms_a)], [_counts(terms_b)], _mean, n_resamples, seed, margin=margin)
    n = boot["examples"]
    out = {k: boot[k] for k in ("difference", "ci_low", "ci_high", "p_value", "p_equivalence", "margin", "examples")}
    out["mde"] = round(minimum_detectable_effect(boot["example_var"], None, 1, n, n), 4)
    out["verdict"] = verdict(out)
    return out


def retrieval_verdicts(terms: dict[str, dict[str, np.ndarray]], pairs, margin: float, n_resamples: int, seed: int):
    """Per query kind, ``b vs a`` for each (a, b) in ``pairs``; ``terms[kind][system]``: per-query MRR@10 terms."""
    return {
        kind: {
            f"{b} vs {a}": compare(per[a], per[b], margin, n_resamples, seed) for a, b in pairs if a in per and b in per
        }
        for kind, per in terms.items()
    }


# the report section -----------------------------------------------------------------------------------------


def _signed(x: float) -> str:
    return f"{x:+.4f}"


def _verdict_cell(c: dict) -> str:
    return (
        f"{_signed(c['difference'])} [{_signed(c['ci_low'])}, {_signed(c['ci_high'])}], p = {c['p_value']:.3f}, "
        f"MDE {c['mde']:.4f}: **{c['verdict']}**"
        + (f" (±{c['margin']})" if c["verdict"] in ("equivalent", "inconclusive") else "")
    )


def report_rows(e: dict, base: str) -> list[str]:
    """The "Sentence embeddings" section of metrics/report.md from finetune_embeddings.json."""
    b = e["benchmark"]
    negatives = ", BM25 hard negatives)" if e.get("hard_negatives") else ", in-batch negatives)"
    names = {
        SHIPPED: f"`{base}` as shipped",
        **{f"from_{s}": f"fine-tuned from the {s} encoder ({e['train_pairs']} pairs{negatives}" for s in e["starts"]},
        "bm25": "BM25 (`bm25s`, Lucene scoring)",
        "hybrid": f"hybrid: BM25 + {system_name(e['served']['encoder'])} (reciprocal rank fusion)",
    }
    lines = [
        f"## Sentence embeddings (retrieval among {b['candidates']:,} documents)",
        "",
        f"Queries from {b['query_documents']:,} titled abstracts that neither pretraining nor embedding training saw; "
        f"candidates: those abstracts plus {b['candidates'] - b['query_documents']:,} other pool documents no longer "
        "than the longest of them. `title`: a paper's title finds its abstract; `sentence`: a sentence from the second "
        "half of the abstract, removed from it, finds the rest (inverse cloze). MRR@10 with its 95% bootstrap "
        "interval over queries.",
        "",
        "| query kind | system | MRR@10 [95% CI] | recall@1 | recall@10 |",
        "|---|---|---|---|---|",
    ]
    for kind, per in e["test"].items():
        for system, name in names.items():
            if system in per:
                r = per[system]
                lines.append(
                    f"| {kind} | {name} | {r['mrr_at_10']:.4f} [{r['ci_low']:.4f}, {r['ci_high']:.4f}] "
                    f"| {r['recall_at_1']:.4f} | {r['recall_at_10']:.4f} |"
                )
    lines += ["", "| query kind | comparison | MRR@10 difference [95% CI], p, MDE: verdict |", "|---|---|---|"]
    for kind, comps in e["verdicts"].items():
        for name, c in comps.items():
            lines.append(f"| {kind} | {name} | {_verdict_cell(c)} |")
    lines += ["", served_sentence(e), "", REVIEWERS_NOTE, ""]
    return lines


REVIEWERS_NOTE = (
    "Reviewer recommendation is not measured here: the pool's documents carry no authors. "
    "`minisci.serve.search.author_holdout` scores it on a collection that has them (each author's latest paper "
    "held out and used as the query; found when the author ranks among the top k); the 20 fixture papers "
    "(`tests/fixtures/papers.jsonl`, 9 authors) are too few for a verdict."
)


def system_name(system: str) -> str:
    """``shipped`` / ``from_<start>`` in the report's words."""
    return (
        "the shipped model"
        if system == SHIPPED
        else f"the model fine-tuned from the {system.removeprefix('from_')} encoder"
    )


def served_sentence(e: dict) -> str:
    """What `minisci index` serves and why (the dev queries choose), and what the test queries say
    of that choice, in the report's words."""
    s, dev = e["served"], e["dev"]
    best = f"from_{e['start_encoder']}"
    chosen = (
        "Dev MRR@10 after fine-tuning from "
        + ", ".join(f"the {k} encoder {v:.4f}" for k, v in e["start_encoder_dev_mrr"].items())
        + f"; the shipped model {dev[SHIPPED]:.4f}. "
    )
    tests = {kind: comps[f"{best} vs {SHIPPED}"] for kind, comps in e["verdicts"].items()}
    on_test = "; ".join(
        f"{kind} {_signed(c['difference'])} [{_signed(c['ci_low'])}, {_signed(c['ci_high'])}], {c['verdict']}"
        for kind, c in tests.items()
    )
    if s["encoder"] == SHIPPED:
        why = f"The shipped model is served: on the dev queries {system_name(best)}, the better one there, did not beat it. "
        if all(c["verdict"] == "worse" for c in tests.values()):
            why += f"**The shipped model is better** on the test queries too ({on_test})"
        else:
            why += f"On the test queries, {system_name(best)} against the shipped model: {on_test}"
    else:
        why = (
            f"{system_name(best)[0].upper()}{system_name(best)[1:]} is served: the better dev MRR@10, and above the "
            f"shipped model's. On the test queries, against the shipped model: {on_test}"
        )
    return (
        chosen
        + why
        + f". `minisci index` uses models/embeddings with the **{s['retriever']}** retriever (best on dev)."
    )


def summary_keys(e: dict) -> dict:
    """Flat keys for summary.json: test MRR@10 per system and query kind."""
    return {
        f"embeddings.{kind}.{system}.mrr_at_10": r["mrr_at_10"]
        for kind, per in e["test"].items()
        for system, r in per.items()
    }
