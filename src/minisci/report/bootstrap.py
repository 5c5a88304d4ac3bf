"""Paired bootstraps: is the adapted model's difference from the baseline real?

One fine-tuning seed per arm (:func:`paired_bootstrap`): both systems are scored on the same
resampled test sets (examples drawn with replacement), which keeps the pairing. The 95% interval is
the percentile interval of the resampled differences; the two-sided p-value uses the bootstrap
distribution shifted to the null (difference 0): p = P(|d* - mean(d*)| >= |d_observed|). Identical
systems give d* = 0 everywhere and p = 1.

Several fine-tuning seeds per arm (:func:`seed_bootstrap`): the quantity compared is the mean over
seeds of each arm's test score, and its uncertainty has two sources, the test sample and the
fine-tuning seed. Seeds are paired by index (seed s of the baseline and seed s of the adapted arm
share the seed value, hence data order and head initialisation). Each bootstrap replicate

1. draws one multiset of test examples with replacement (multinomial multiplicities), and
2. draws S seed indices with replacement (S = number of seeds),

then scores both arms of each drawn seed on the drawn examples and averages the per-seed
differences. The examples are drawn once per replicate, for every seed and both arms, because every
seed is evaluated on the *same* test set: its sampling error is common to all seeds and does not
shrink with more seeds (drawing examples independently per seed would treat S seeds as S test sets
and understate the interval). Interval and p-value are computed from the replicates exactly as in
the one-seed case. With one seed, step 2 always draws that seed and the result is
:func:`paired_bootstrap`'s, bit for bit (the seed draws use their own random stream).

Calibration (checked on synthetic data in tests/report/test_seed_bootstrap.py): resampling both levels
counts the per-run example noise twice (once through the examples, once through the spread of the
per-seed scores), while the spread of S resampled seeds has divisor S, not S - 1. When seed-to-seed
variation is larger than a single run's example noise, as for BERT fine-tuning (0.3-0.5 F1 between
seeds on BC5CDR, against a per-run bootstrap sd of ~0.2), the two roughly cancel and p-values under
no difference are close to uniform; when it is smaller, the test is conservative. With 3 seeds only
10 distinct seed multisets exist, so the report also gives the per-seed differences and the number of seeds
the adapted model won.

Verdicts (:func:`verdict`): a difference is ``better`` or ``worse`` when its 95% interval excludes 0
and its p-value is below alpha (the percentile interval and the null-shifted p-value are two readings
of the same replicates and can disagree at the edge, e.g. an interval ending at -0.0005 with
p = 0.051: the verdict then claims no difference, and no reader sees a claim its p-value contradicts),
``equivalent`` when two one-sided tests (TOST) on the same bootstrap replicates reject both
"the difference is <= -m" and ">= +m" for the declared margin m (:func:`equivalence_p`; at
alpha = 0.05 this is the 90% percentile interval lying inside (-m, +m)), and ``inconclusive``
otherwise: "not significant" alone is not evidence of no effect.

The design's power (:func:`minimum_detectable_effect`): the standard error of the mean-over-seeds
difference is modelled as sqrt(v_ex * n0 / n + v_seed / S), where v_ex is the variance of the
replicates' seed-mean difference under example resampling alone (the test sample, shared by all
seeds, so it does not shrink with seeds) at the observed test size n0, and v_seed the sample
variance of the per-seed differences (seed-to-seed variation; it includes each seed's own example
noise, so the model is slightly conservative). The minimum detectable effect at power 1 - beta and
two-sided alpha is (z_{1-alpha/2} + z_{1-beta}) * SE (normal approximation). With one seed v_seed is
unknown and the estimate covers the test sample only.

Several pretraining seeds (:func:`multi_bootstrap`, the Multi-Bootstrap of MultiBERTs, Sellam et al.
2022): the adapted arm is a *procedure* (continued pretraining with a random seed), so its runs come
from P adapted checkpoints, K fine-tuning runs on each (K = 1: the paired design, fine-tuning seed i
on pretraining seed i; K = S: the full cross). What pairing survives:

* the test examples, fully: every run of both arms is scored on the same test set, so each replicate
  draws the examples once, shared by everything (as above);
* the fine-tuning seed, by value: adapted run (p, s) is paired with the baseline run of fine-tuning
  seed s (same data order and head initialisation), its *partner*; the difference of a run is
  d(p, s) = adapted(p, s) - baseline(s);
* the pretraining seed: none. The baseline has no pretraining seed (its encoder is the base model,
  a fixed object, not a draw), so pretraining seeds are drawn for the adapted arm alone, and the
  baseline follows through the partners of the drawn runs.

Each replicate draws (1) the test examples, (2) P pretraining seeds with replacement and (3) within
each drawn pretraining seed, K of its runs with replacement, then averages the drawn runs' d over the
drawn examples. The examples use the stream of :func:`paired_bootstrap`, step (3) that of the seed
draws of :func:`seed_bootstrap` and step (2) a third stream, so with one pretraining seed (P = 1,
K = S) step (2) always draws it and the result is :func:`seed_bootstrap`'s bit for bit. Interval,
p-value, TOST and the verdict are computed from these replicates as before (Holm on their p-values).
Beside them: the same replicates with the pretraining seeds held fixed (step 2 keeps every seed once):
the verdict that ignores pretraining variance, about these P checkpoints rather than the procedure.
In the paired design (K = 1) holding the checkpoints fixed also holds each checkpoint's one
fine-tuning run fixed, so that interval is the test sample's alone.

Variance components (:func:`pretrain_components`) of one run's difference d, estimated from the
observed scores: v_ft (fine-tuning seed) and v_pre (pretraining seed). With K >= 2 runs per
checkpoint, one-way analysis of variance of d by checkpoint: v_ft = W, the pooled within-checkpoint
variance, and v_pre = max(0, B - W / K), B the variance of the checkpoints' mean differences. With
K = 1 the two are confounded in d; the baseline tells them apart: v_pre = Var(adapted runs) -
Var(baseline runs), clipped to [0, Var(d)] (the fine-tuning seed is assumed to move both arms' scores
equally), and v_ft = Var(d) - v_pre. With P = 1, v_ft = v_seed above and v_pre is unknown. The
variance of the mean difference is modelled as V = v_ex * n0 / n + v_ft / N + v_pre / P (N = P * K
adapted runs): the minimum detectable effect is (z_{1-alpha/2} + z_{1-beta}) * sqrt(V), and the
pretraining seeds that reach a margin m are the fewest P with that at most m, K runs each
(:func:`seeds_for_margin` with seed variance v_ft / K + v_pre). The variance shares of the report
are v_ex / V, (v_ft / N) / V and (v_pre / P) / V; they add up to 1 (with P = 1 the pretraining share
is unknown and the other two add up to 1).

A pretraining seed is marked as an outlier when the mean adapted score of its runs lies farther from
the mean of the other checkpoints' than fine-tuning seeds alone explain: more than t_{df, 1-alpha/(2P)}
(Student t, Bonferroni over the P checkpoints) standard errors sqrt(v_r / K * (1 + 1 / (P - 1))),
v_r the variance of a run's score around its own encoder's mean (what fine-tuning seeds alone do to
a score), pooled over the baseline's runs and the runs within each checkpoint (df = S - 1 + P(K - 1);
a t, not a normal quantile, because three seeds estimate a variance badly). Only the farthest
checkpoint can be marked, and only with P >= 3 (with two, neither is "the odd one").
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np


class DesignError(ValueError):
    """The runs or examples given do not form the design a bootstrap needs (unequal examples, unpaired
    or unbalanced runs): bad input for the caller to name, not a fault in the computation."""


def _interval(diffs: np.ndarray, observed: float) -> dict:
    """The observed difference, the 95% percentile interval of the resampled ones, and the two-sided
    p-value of the bootstrap distribution shifted to the null."""
    centred = np.abs(diffs - diffs.mean())
    p = float((np.sum(centred >= abs(observed) - 1e-12) + 1) / (len(diffs) + 1))
    return {
        "difference": round(observed, 4),
        "ci_low": round(float(np.percentile(diffs, 2.5)), 4),
        "ci_high": round(float(np.percentile(diffs, 97.5)), 4),
        "p_value": round(min(1.0, p), 4),
        "resamples": len(diffs),
    }


def paired_bootstrap(counts_a: np.ndarray, counts_b: np.ndarray, metric, n_resamples: int, seed: int) -> dict:
    """Difference metric(b) - metric(a) on the test set, its 95% interval and two-sided p-value.

    ``counts_*`` are per-example additive statistics; ``metric`` maps summed counts to a score.
    """
    if counts_a.shape != counts_b.shape:
        raise DesignError(f"paired bootstrap needs the same examples: {counts_a.shape} vs {counts_b.shape}")
    n = len(counts_a)
    rng = np.random.default_rng(seed)
    observed = float(metric(counts_b.sum(0)) - metric(counts_a.sum(0)))
    diffs = np.empty(n_resamples)
    for start in range(0, n_resamples, 200):  # chunks keep memory at 200 x n multiplicities
        m = rng.multinomial(n, np.full(n, 1.0 / n), size=min(200, n_resamples - start)).astype(float)
        diffs[start : start + len(m)] = metric(m @ counts_b) - metric(m @ counts_a)
    return _interval(diffs, observed)


def _resampled_scores(per_seed: list[np.ndarray], weights: np.ndarray, metric) -> np.ndarray:
    """Scores [n_resamples, n_seeds] of each seed's counts under each row of example weights."""
    return np.stack([metric(weights @ c) for c in per_seed], axis=1)


def seed_bootstrap(
    counts_a: list[np.ndarray],
    counts_b: list[np.ndarray],
    metric,
    n_resamples: int,
    seed: int,
    margin: float | None = None,
) -> dict:
    """Mean-over-seeds difference metric(b) - metric(a), its 95% interval and two-sided p-value
    from a hierarchical bootstrap over seeds and test examples (see the module docstring).

    ``counts_*`` hold one per-example count array per fine-tuning seed (as
    :meth:`minisci.tasks.kind.TaskKind.counts` returns), paired by index between the arms. Besides the keys of
    :func:`paired_bootstrap`: ``seeds``, each arm's mean and sample sd over seeds, the per-seed
    differences, ``seeds_b_better`` (seeds where b scores strictly higher), the variance components
    ``example_var`` and ``seed_var`` and the test size ``examples`` (:func:`minimum_detectable_effect`),
    and with a ``margin`` the TOST p-value ``p_equivalence`` (:func:`equivalence_p`).
    """
    if len(counts_a) != len(counts_b) or not counts_a:
        raise DesignError(f"seed bootstrap needs the same seeds in both arms: {len(counts_a)} vs {len(counts_b)}")
    shapes = {c.shape for c in (*counts_a, *counts_b)}
    if len(shapes) != 1:
        raise DesignError(f"seed bootstrap needs the same examples in every run: shapes {sorted(shapes)}")
    n, n_seeds = len(counts_a[0]), len(counts_a)
    rng = np.random.default_rng(seed)  # the example draws: the same stream as paired_bootstrap's
    seed_rng = np.random.default_rng([seed, 1])  # the seed draws, apart so that one seed changes nothing
    score_a = np.array([float(metric(c.sum(0))) for c in counts_a])
    score_b = np.array([float(metric(c.sum(0))) for c in counts_b])
    per_seed = score_b - score_a
    observed = float(score_b.mean() - score_a.mean())
    diffs = np.empty(n_resamples)
    example_only = np.empty(n_resamples)  # the seed-mean difference with the seeds kept: test-sample noise
    for start in range(0, n_resamples, 200):  # chunks keep memory at 200 x n multiplicities
        m = rng.multinomial(n, np.full(n, 1.0 / n), size=min(200, n_resamples - start)).astype(float)
        delta = _resampled_scores(counts_b, m, metric) - _resampled_scores(counts_a, m, metric)
        drawn = seed_rng.integers(n_seeds, size=delta.shape)
        diffs[start : start + len(m)] = np.take_along_axis(delta, drawn, axis=1).mean(axis=1)
        example_only[start : start + len(m)] = delta.mean(axis=1)
    sd = 1 if n_seeds > 1 else 0  # sample sd; 0 for a single seed
    extra = {} if margin is None else {"margin": margin, "p_equivalence": equivalence_p(diffs, margin)}
    return {
        **_interval(diffs, observed),
        **extra,
        "seeds": n_seeds,
        "mean_a": round(float(score_a.mean()), 4),
        "sd_a": round(float(score_a.std(ddof=sd)), 4),
        "mean_b": round(float(score_b.mean()), 4),
        "sd_b": round(float(score_b.std(ddof=sd)), 4),
        "seed_differences": [round(float(d), 4) for d in per_seed],
        "seeds_b_better": int(np.sum(per_seed > 0)),
        "examples": n,
        "example_var": float(example_only.var(ddof=1)),
        "seed_var": float(per_seed.var(ddof=1)) if n_seeds > 1 else None,
    }


# verdicts, power and multiplicity ------------------------------------------------------------------------

ALPHA = 0.05  # two-sided level of every test and interval in the report
POWER = 0.8  # the power the minimum detectable effect is quoted at (Cohen's convention)


def equivalence_p(diffs: np.ndarray, margin: float) -> float:
    """TOST p-value from bootstrap replicates of the difference: the larger of the two one-sided
    p-values P*(d <= -margin) and P*(d >= +margin) (each with the +1 correction of a permutation-style
    p-value). Below alpha, both "worse by at least the margin" and "better by at least it" are
    rejected: equivalent within +-margin."""
    n = len(diffs)
    low = (np.sum(diffs <= -margin) + 1) / (n + 1)
    high = (np.sum(diffs >= margin) + 1) / (n + 1)
    return round(float(max(low, high)), 4)


def verdict(boot: dict, alpha: float = ALPHA) -> str:
    """better / worse (the 95% interval excludes 0 and p < alpha), equivalent (TOST rejects both
    margins), inconclusive (neither: the data cannot tell a difference of the margin's size from none)."""
    if boot["ci_low"] > 0 and boot["p_value"] < alpha:
        return "better"
    if boot["ci_high"] < 0 and boot["p_value"] < alpha:
        return "worse"
    if boot.get("p_equivalence") is not None and boot["p_equivalence"] < alpha:
        return "equivalent"
    return "inconclusive"


def _z_sum(alpha: float, power: float) -> float:
    z = NormalDist().inv_cdf
    return z(1 - alpha / 2) + z(power)


def minimum_detectable_effect(
    example_var: float,
    seed_var: float | None,
    seeds: int,
    examples: int,
    n_examples: int,
    alpha: float = ALPHA,
    power: float = POWER,
) -> float:
    """The smallest true difference the design (``seeds`` seeds x ``examples`` test examples) detects
    with probability ``power`` at two-sided ``alpha``, from the variance components observed at
    ``n_examples`` test examples (see the module docstring). ``seed_var`` None (one seed): test
    sample only."""
    var = example_var * n_examples / examples + (seed_var or 0.0) / seeds
    return _z_sum(alpha, power) * math.sqrt(var)


def seeds_for_margin(
    margin: float, example_var: float, seed_var: float | None, alpha: float = ALPHA, power: float = POWER
) -> int | None:
    """The fewest seeds whose minimum detectable effect (same test set) is at most ``margin``; None
    when no number of seeds can (the test sample alone is too noisy) or the seed variance is unknown."""
    room = (margin / _z_sum(alpha, power)) ** 2 - example_var
    if seed_var is None or room <= 0:
        return None
    return max(1, math.ceil(seed_var / room - 1e-9))


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment (family-wise error rate), in the input order: the k-th smallest of
    m p-values is multiplied by m - k + 1, then made non-decreasing and capped at 1."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    out, running = [0.0] * len(p_values), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        out[i] = round(running, 4)
    return out


# pretraining seeds: the Multi-Bootstrap -------------------------------------------------------------------


def _design(pretrain_seeds: list[int], partners: list[int], n_a: int, n_b: int) -> list[list[int]]:
    """The adapted runs grouped by pretraining seed (first appearance first), after checking that the
    design is balanced: the same number of runs on every checkpoint, every baseline run the partner of
    the same number of adapted runs (so the replicates' baseline mean is the baseline's mean)."""
    if n_b == 0 or len(pretrain_seeds) != n_b or len(partners) != n_b:
        raise DesignError(
            f"multi-bootstrap needs one pretraining seed and one baseline partner per adapted run: "
            f"{n_b} runs, {len(pretrain_seeds)} pretraining seeds, {len(partners)} partners"
        )
    if any(not 0 <= j < n_a for j in partners):
        raise DesignError(f"multi-bootstrap partners must index the {n_a} baseline runs: {partners}")
    groups: dict[int, list[int]] = {}
    for run, p in enumerate(pretrain_seeds):
        groups.setdefault(p, []).append(run)
    sizes = {p: len(g) for p, g in groups.items()}
    if len(set(sizes.values())) != 1:
        raise DesignError(f"multi-bootstrap needs the same number of runs on every pretraining seed: {sizes}")
    uses = [partners.count(j) for j in range(n_a)]
    if len(set(uses)) != 1:
        raise DesignError(f"multi-bootstrap needs every baseline run to partner as many adapted runs: {uses}")
    return list(groups.values())


def pretrain_components(
    score_b: np.ndarray, score_a: np.ndarray, partners: list[int], groups: list[list[int]]
) -> tuple[float | None, float | None]:
    """(v_ft, v_pre): the fine-tuning-seed and pretraining-seed variance of one run's difference, from
    the observed per-run scores (see the module docstring); None where the design cannot tell."""
    d = score_b - score_a[partners]
    n_pre, per = len(groups), len(groups[0])
    if n_pre == 1:
        return (float(d.var(ddof=1)) if per > 1 else None), None
    if per > 1:  # one-way analysis of variance by checkpoint
        within = float(np.mean([d[g].var(ddof=1) for g in groups]))
        between = float(np.var([d[g].mean() for g in groups], ddof=1))
        return within, max(0.0, between - within / per)
    total = float(d.var(ddof=1))
    extra = float(score_b.var(ddof=1) - score_a[partners].var(ddof=1)) if len(score_a) > 1 else 0.0
    v_pre = min(total, max(0.0, extra))
    return total - v_pre, v_pre


def variance_shares(
    example_var: float, ft_var: float | None, pretrain_var: float | None, runs: int, n_pre: int
) -> dict:
    """Shares of the mean difference's variance V = v_ex + v_ft / N + v_pre / P from the test sample,
    the fine-tuning seeds and the pretraining seeds (None: unknown); the known ones add up to 1."""
    parts = {
        "test": example_var,
        "finetune": None if ft_var is None else ft_var / runs,
        "pretrain": None if pretrain_var is None else pretrain_var / n_pre,
    }
    total = sum(v for v in parts.values() if v is not None)
    return {k: (None if v is None else (v / total if total > 0 else 0.0)) for k, v in parts.items()}


def _outlier(score_b: np.ndarray, score_a: np.ndarray, groups: list[list[int]]) -> tuple[list[float | None], float]:
    """Per checkpoint: how many fine-tuning standard errors its mean adapted score lies from the mean
    of the other checkpoints' (None with fewer than 3 checkpoints or no replicated run), and the
    Student-t critical value an outlier exceeds (see the module docstring)."""
    from scipy.stats import t as student_t  # scipy comes with scikit-learn

    n_pre, per = len(groups), len(groups[0])
    squares = float(np.sum((score_a - score_a.mean()) ** 2))
    squares += sum(float(np.sum((score_b[g] - score_b[g].mean()) ** 2)) for g in groups)
    df = (len(score_a) - 1) + n_pre * (per - 1)
    if n_pre < 3 or df < 1 or squares <= 0:
        return [None] * n_pre, math.inf
    means = np.array([score_b[g].mean() for g in groups])
    se = math.sqrt(squares / df / per * (1 + 1 / (n_pre - 1)))
    crit = float(student_t.ppf(1 - ALPHA / (2 * n_pre), df))
    return [float((means[i] - np.delete(means, i).mean()) / se) for i in range(n_pre)], crit


def multi_bootstrap(
    counts_a: list[np.ndarray],
    counts_b: list[np.ndarray],
    pretrain_seeds: list[int],
    metric,
    n_resamples: int,
    seed: int,
    margin: float | None = None,
    partners: list[int] | None = None,
) -> dict:
    """Mean difference metric(b) - metric(a) when arm b's runs come from several pretraining seeds:
    the Multi-Bootstrap over test examples, pretraining seeds and the fine-tuning runs within each
    (see the module docstring).

    ``counts_a``: one per-example count array per baseline run (fine-tuning seed); ``counts_b``: one
    per adapted run, ``pretrain_seeds[j]`` the pretraining seed run j was fine-tuned from and
    ``partners[j]`` the index of its baseline run (the same fine-tuning seed; default: run j). Returns
    the keys of :func:`seed_bootstrap` (``seeds``: the adapted runs), equal to its result bit for
    bit with one pretraining seed, and ``pretrain_seeds`` (P), ``runs_per_pretrain_seed`` (K),
    ``ft_var`` and ``pretrain_var`` (:func:`pretrain_components`), ``shares``
    (:func:`variance_shares`), ``per_pretrain_seed`` (each checkpoint's mean scores, difference and
    ``outlier``), the replicates' variance ``replicate_var`` and ``fixed``: interval, p-values, TOST
    and replicate variance with the pretraining seeds held fixed.
    """
    partners = list(range(len(counts_b))) if partners is None else list(partners)
    groups = _design(list(pretrain_seeds), partners, len(counts_a), len(counts_b))
    shapes = {c.shape for c in (*counts_a, *counts_b)}
    if len(shapes) != 1:
        raise DesignError(f"multi-bootstrap needs the same examples in every run: shapes {sorted(shapes)}")
    # 1. observed scores; the difference is taken run by run against each run's baseline partner
    n, n_pre, per = len(counts_b[0]), len(groups), len(groups[0])
    score_a = np.array([float(metric(c.sum(0))) for c in counts_a])
    score_b = np.array([float(metric(c.sum(0))) for c in counts_b])
    per_run = score_b - score_a[partners]
    observed = float(score_b.mean() - score_a[partners].mean())
    # 2. replicates: three streams, so that one pretraining seed leaves seed_bootstrap's two untouched
    rng = np.random.default_rng(seed)  # the example draws
    seed_rng = np.random.default_rng([seed, 1])  # the fine-tuning runs within each drawn checkpoint
    pre_rng = np.random.default_rng([seed, 2])  # the pretraining seeds
    table = np.array(groups)  # [P, K] run indices
    diffs, fixed, example_only = (np.empty(n_resamples) for _ in range(3))
    for start in range(0, n_resamples, 200):  # chunks keep memory at 200 x n multiplicities
        m = rng.multinomial(n, np.full(n, 1.0 / n), size=min(200, n_resamples - start)).astype(float)
        delta = _resampled_scores(counts_b, m, metric) - _resampled_scores(counts_a, m, metric)[:, partners]
        within = seed_rng.integers(per, size=(len(m), n_pre, per))
        drawn = pre_rng.integers(n_pre, size=(len(m), n_pre))
        rows, chunk = np.arange(len(m))[:, None], slice(start, start + len(m))
        diffs[chunk] = delta[rows, table[drawn[:, :, None], within].reshape(len(m), -1)].mean(axis=1)
        kept = np.broadcast_to(np.arange(n_pre)[None, :, None], within.shape)
        fixed[chunk] = delta[rows, table[kept, within].reshape(len(m), -1)].mean(axis=1)
        example_only[chunk] = delta.mean(axis=1)
    # 3. the result: seed_bootstrap's keys, then the pretraining-seed ones
    sd = 1 if len(counts_b) > 1 else 0
    extra = {} if margin is None else {"margin": margin, "p_equivalence": equivalence_p(diffs, margin)}
    fixed_extra = {} if margin is None else {"margin": margin, "p_equivalence": equivalence_p(fixed, margin)}
    ft_var, pretrain_var = pretrain_components(score_b, score_a, partners, groups)
    example_var = float(example_only.var(ddof=1))
    z, crit = _outlier(score_b, score_a, groups)
    worst = None if z[0] is None else int(np.argmax(np.abs(z)))  # only the farthest can be the odd one
    return {
        **_interval(diffs, observed),
        **extra,
        "seeds": len(counts_b),
        "mean_a": round(float(score_a.mean()), 4),
        "sd_a": round(float(score_a.std(ddof=1 if len(counts_a) > 1 else 0)), 4),
        "mean_b": round(float(score_b.mean()), 4),
        "sd_b": round(float(score_b.std(ddof=sd)), 4),
        "seed_differences": [round(float(d), 4) for d in per_run],
        "seeds_b_better": int(np.sum(per_run > 0)),
        "examples": n,
        "example_var": example_var,
        "seed_var": float(per_run.var(ddof=1)) if len(counts_b) > 1 else None,
        "pretrain_seeds": n_pre,
        "runs_per_pretrain_seed": per,
        "ft_var": ft_var,
        "pretrain_var": pretrain_var,
        "shares": variance_shares(example_var, ft_var, pretrain_var, len(counts_b), n_pre),
        "per_pretrain_seed": [
            {
                "pretrain_seed": pretrain_seeds[g[0]],
                "runs": len(g),
                "mean_a": round(float(score_a[[partners[j] for j in g]].mean()), 4),
                "mean_b": round(float(score_b[g].mean()), 4),
                "difference": round(float(per_run[g].mean()), 4),
                "z": None if z[i] is None else round(z[i], 2),
                "outlier": worst is not None and i == worst and abs(z[i]) > crit,
            }
            for i, g in enumerate(groups)
        ],
        "replicate_var": float(diffs.var(ddof=1)),
        "fixed": {**_interval(fixed, observed), **fixed_extra, "replicate_var": float(fixed.var(ddof=1))},
    }


def multi_power(boot: dict, margin: float, alpha: float = ALPHA, power: float = POWER) -> dict:
    """The Multi-Bootstrap design's minimum detectable effect (P pretraining seeds x K runs each x
    the test set), sqrt(v_ex + v_ft / N + v_pre / P) x (z_{1-alpha/2} + z_{1-beta}), and the fewest
    pretraining seeds (K runs each) whose minimum detectable effect is at most ``margin`` (None:
    unknown with one pretraining seed, or unreachable on this test set). With one pretraining seed
    the MDE is :func:`minimum_detectable_effect`'s for the fine-tuning seeds."""
    n_pre, per = boot["pretrain_seeds"], boot["runs_per_pretrain_seed"]
    ft, pre = boot["ft_var"], boot["pretrain_var"]
    unit = None if ft is None and pre is None else (ft or 0.0) / per + (pre or 0.0)  # one checkpoint's K runs
    mde = minimum_detectable_effect(boot["example_var"], unit, n_pre, boot["examples"], boot["examples"], alpha, power)
    need = seeds_for_margin(margin, boot["example_var"], unit, alpha, power) if pre is not None else None
    return {"mde": round(mde, 4), "pretrain_seeds_for_margin": need, "margin_reachable": mde <= margin}
