"""The report's pretraining-seed part: which pretraining seed each adapted run used, the comparison
under the Multi-Bootstrap (:func:`minisci.report.bootstrap.multi_bootstrap`) beside the verdict that
holds the pretraining seeds fixed, the variance shares and each pretraining seed's scores.

An adapted run's pretraining seed is read from its arm's metrics file: ``per_seed[<fine-tuning
seed>].pretrain_seed``, else the arm's top-level ``pretrain_seed``. A run that names none (every run
written before pretraining seeds existed) was fine-tuned from the one adapted encoder there was: all
such runs share one pretraining seed, and the comparison is today's seed bootstrap, bit for bit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from minisci.errors import MinisciError
from minisci.report.bootstrap import ALPHA, DesignError, multi_bootstrap, verdict

UNNAMED = -1  # the pretraining seed of runs whose metrics name none: the single adapted encoder


def run_pretrain_seeds(metrics: dict, path: Path | str = "adapted.json") -> list[int]:
    """Per fine-tuning seed of an arm's metrics (in ``seeds`` order), the pretraining seed its run
    started from; :data:`UNNAMED` for every run when none names one."""
    per_seed, default = metrics.get("per_seed") or {}, metrics.get("pretrain_seed")
    named = [(per_seed.get(str(s)) or {}).get("pretrain_seed", default) for s in metrics["seeds"]]
    if all(p is None for p in named):
        return [UNNAMED] * len(named)
    missing = [s for s, p in zip(metrics["seeds"], named) if p is None]
    if missing:
        raise MinisciError(f"{path}: fine-tuning seeds {missing} name no pretrain_seed while the others do")
    return [int(p) for p in named]


def partners(baseline: dict, adapted: dict, path: Path | str = "adapted.json") -> list[int]:
    """Per adapted run, the index of the baseline run with the same fine-tuning seed."""
    index = {s: i for i, s in enumerate(baseline["seeds"])}
    unknown = [s for s in adapted["seeds"] if s not in index]
    if unknown:
        raise MinisciError(f"{path}: fine-tuning seeds {unknown} have no baseline run (baseline: {baseline['seeds']})")
    return [index[s] for s in adapted["seeds"]]


def compare(
    counts_a: list[np.ndarray],
    counts_b: list[np.ndarray],
    arms: dict,
    metric,
    n_resamples: int,
    seed: int,
    margin: float,
    path: Path | str = "adapted.json",
) -> dict:
    """The Multi-Bootstrap of one comparison (baseline ``counts_a``, adapted ``counts_b``, one array
    per run in each arm's ``seeds`` order), each run's pretraining seed and partner read from
    ``arms``' metrics; the verdict with the pretraining seeds held fixed in ``fixed``."""
    try:
        boot = multi_bootstrap(
            counts_a,
            counts_b,
            run_pretrain_seeds(arms["adapted"], path),
            metric,
            n_resamples,
            seed,
            margin=margin,
            partners=partners(arms["baseline"], arms["adapted"], path),
        )
    except DesignError as e:  # an unbalanced design, from the metrics files: name them
        raise MinisciError(f"{path}: {e}") from None
    boot["fixed"]["verdict"] = verdict(boot["fixed"])
    return boot


# the report section ----------------------------------------------------------------------------------------


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.2f}"


def _ci(b: dict) -> str:
    return f"[{100 * b['ci_low']:+.2f}, {100 * b['ci_high']:+.2f}]"


PAIRED_SHARES_NOTE = (
    "With one fine-tuning run per pretraining seed ({datasets}), the fine-tuning and pretraining seeds move "
    "each run's difference together and cannot be told apart in it. The pretraining share is then the adapted "
    "runs' variance beyond the baseline runs' (none when it is not larger), from a handful of runs: a rough "
    "estimate, and 0% means the adapted runs varied no more than the baseline's, not that pretraining seeds "
    "do not matter. The Multi-Bootstrap's interval does not depend on this split. Two or more fine-tuning "
    "runs per pretraining seed (fine-tuning seeds a multiple of the pretraining seeds) separate the two."
)


def _verdict(v: str, margin: float) -> str:
    return f"equivalent within ±{100 * margin:.1f}" if v == "equivalent" else v


def _share(x: float | None) -> str:
    return "unknown" if x is None else f"{100 * x:.0f}%"


def _seed_name(p: int) -> str:
    return "the one adapted encoder" if p == UNNAMED else f"pretraining seed {p}"


def _need(b: dict) -> str:
    if b["pretrain_seeds"] == 1:
        return "unknown (one pretraining seed: no pretraining variance)"
    need = b.get("pretrain_seeds_for_margin")
    return "none: the test set alone is too small" if need is None else f"{need} × {b['runs_per_pretrain_seed']} runs"


def report_rows(comparisons: list[tuple[str, dict, float]]) -> list[str]:
    """The section: per comparison (dataset, bootstrap, margin) the verdict under the Multi-Bootstrap
    beside the one with the pretraining seeds held fixed, the design's MDE, the pretraining seeds the
    margin needs and the variance shares; then each pretraining seed's scores, outliers marked."""
    lines = [
        "## Pretraining seeds (adaptation as a procedure)",
        "",
        "The adapted arm is continued pretraining *as a procedure*: each pretraining seed gives its own adapted "
        "encoder. The Multi-Bootstrap resamples the test examples (shared), the pretraining seeds and the "
        "fine-tuning runs within each; the verdict beside it holds the pretraining seeds fixed (a verdict about "
        "these checkpoints, not the procedure; with one run per pretraining seed, the paired design, that leaves "
        "the test sample alone). Shares: of the mean difference's variance, from the test sample, "
        "the fine-tuning seeds and the pretraining seeds. Method: `src/minisci/report/bootstrap.py`.",
        "",
        "| dataset | pretraining seeds × runs | verdict (Multi-Bootstrap) | 95% CI | verdict, pretraining seeds "
        "fixed | 95% CI | minimum detectable effect | pretraining seeds to detect ±margin | test / fine-tuning / "
        "pretraining share |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for ds, b, m in comparisons:
        s = b["shares"]
        lines.append(
            f"| {ds} | {b['pretrain_seeds']} × {b['runs_per_pretrain_seed']} | {_verdict(b['verdict'], m)} | {_ci(b)} | "
            f"{_verdict(b['fixed']['verdict'], m)} | {_ci(b['fixed'])} | {_pct(b['mde'])} | {_need(b)} | "
            f"{_share(s['test'])} / {_share(s['finetune'])} / {_share(s['pretrain'])} |"
        )
    paired = [ds for ds, b, _m in comparisons if b["pretrain_seeds"] > 1 and b["runs_per_pretrain_seed"] == 1]
    if paired:
        lines += ["", PAIRED_SHARES_NOTE.format(datasets=", ".join(paired))]
    lines.append("")
    for ds, b, _m in comparisons:
        parts = []
        for g in b["per_pretrain_seed"]:
            mark = " **(outlier)**" if g["outlier"] else ""
            parts.append(
                f"{_seed_name(g['pretrain_seed'])}: adapted {_pct(g['mean_b'])}, baseline {_pct(g['mean_a'])}, "
                f"difference {100 * g['difference']:+.2f} ({g['runs']} run{'s' if g['runs'] > 1 else ''}){mark}"
            )
        lines.append(f"- **{ds}**: " + "; ".join(parts) + ".")
        if any(g["outlier"] for g in b["per_pretrain_seed"]):
            lines.append(
                f"  An outlier's runs lie farther from the other pretraining seeds' than fine-tuning seeds alone "
                f"explain (Bonferroni, α = {ALPHA})."
            )
    return lines + [""]
