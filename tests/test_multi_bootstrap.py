"""The Multi-Bootstrap over test examples, pretraining seeds and fine-tuning runs, on synthetic data
with a known answer: one pretraining seed is today's seed bootstrap bit for bit; planted
pretraining-seed variance widens the interval as the formula says, and without it the interval is
today's; the variance components recover what was planted; the shares add up; an outlier seed shows."""

import numpy as np
import pytest
from helpers import ner_counts, ner_rows

from minisci.report.bootstrap import (
    minimum_detectable_effect,
    multi_bootstrap,
    multi_power,
    paired_bootstrap,
    pretrain_components,
    seed_bootstrap,
    seeds_for_margin,
)
from minisci.tasks.counting import f1 as f1_from_counts


def procedure_arms(n=600, ft_seeds=3, offsets=(0.0,), runs_per_seed=None, seed_sd=0.01, effect=0.0, rng=0):
    """Baseline runs (one per fine-tuning seed) and adapted runs (pretraining seed p, fine-tuning
    seed s) as NER-style counts with one gold and one predicted entity per example (F1 = accuracy).

    ``offsets`` plants each pretraining seed's shift of the adapted arm's success probability (its
    length is the number of pretraining seeds); ``runs_per_seed`` None is the full cross (every
    fine-tuning seed on every pretraining seed), 1 the paired design (fine-tuning seed i on
    pretraining seed i). The uniform draws behind every run are fixed by ``rng`` alone, so two calls
    that differ only in ``offsets`` differ only by the planted shifts.
    """
    gen = np.random.default_rng(rng)
    difficulty = gen.beta(4, 1.5, size=n)
    gain = gen.normal(effect, 0.05, size=n)
    n_pre = len(offsets)
    runs = (
        [(p, s) for p in range(n_pre) for s in range(ft_seeds)]
        if runs_per_seed is None
        else [(i % n_pre, i) for i in range(ft_seeds)]
    )

    def counts(prob):
        tp = (gen.random(n) < np.clip(prob, 0, 1)).astype(float)
        return np.stack([tp, np.ones(n), np.ones(n)], axis=1)

    ft_a = gen.normal(0, seed_sd, size=ft_seeds)
    ft_b = gen.normal(0, seed_sd, size=len(runs))
    baseline = [counts(difficulty + ft_a[s]) for s in range(ft_seeds)]
    adapted = [counts(difficulty + gain + offsets[p] + ft_b[j]) for j, (p, _s) in enumerate(runs)]
    return baseline, adapted, [100 + p for p, _ in runs], [s for _, s in runs]


def test_one_pretraining_seed_is_the_seed_bootstrap_bit_for_bit():
    a, b, pre, partners = procedure_arms(n=300, ft_seeds=3)
    assert set(pre) == {100}
    today = seed_bootstrap(a, b, f1_from_counts, 450, seed=7, margin=0.02)  # 450: a partial last chunk too
    multi = multi_bootstrap(a, b, pre, f1_from_counts, 450, seed=7, margin=0.02, partners=partners)
    assert {k: multi[k] for k in today} == today
    assert {k: multi["fixed"][k] for k in ("ci_low", "ci_high", "p_value", "p_equivalence")} == {
        k: today[k] for k in ("ci_low", "ci_high", "p_value", "p_equivalence")
    }
    assert multi["pretrain_seeds"] == 1 and multi["pretrain_var"] is None and multi["ft_var"] == today["seed_var"]
    # the power of the design: today's minimum detectable effect; pretraining seeds needed unknown
    mde = minimum_detectable_effect(today["example_var"], today["seed_var"], 3, 300, 300)
    assert multi_power(multi, 0.02) == {
        "mde": round(mde, 4),
        "pretrain_seeds_for_margin": None,
        "margin_reachable": mde <= 0.02,
    }


def test_one_run_is_the_paired_bootstrap_bit_for_bit():
    a, b = ner_counts(ner_rows(150, 0.7, 1)), ner_counts(ner_rows(150, 0.8, 2))
    paired = paired_bootstrap(a, b, f1_from_counts, 450, seed=7)
    multi = multi_bootstrap([a], [b], [13], f1_from_counts, 450, seed=7)
    assert {k: multi[k] for k in paired} == paired
    assert multi["shares"] == {"test": 1.0, "finetune": None, "pretrain": None}


def _widening(offsets, **design):
    calm_data = procedure_arms(offsets=(0.0,) * len(offsets), **design)
    planted_data = procedure_arms(offsets=offsets, **design)
    calm, planted = (
        multi_bootstrap(a, b, pre, f1_from_counts, 2000, seed=1, partners=part)
        for a, b, pre, part in (calm_data, planted_data)
    )
    return calm, planted


def _checkpoint_means(boot):
    return np.array([g["difference"] for g in boot["per_pretrain_seed"]])


@pytest.mark.parametrize(
    "design",
    [{"ft_seeds": 3}, {"ft_seeds": 6, "runs_per_seed": 1}],
    ids=["cross 6 x 3", "paired 6 x 1"],
)
def test_planted_pretraining_variance_widens_the_interval_as_the_formula_says(design):
    """The same runs with and without planted pretraining-seed shifts: drawing P checkpoints with
    replacement adds var0(checkpoint means) / P to the replicates' variance (var0: divisor P), and
    holding the checkpoints fixed adds nothing."""
    offsets = (0.04, -0.03, 0.0, 0.05, -0.05, 0.01)
    calm, planted = _widening(offsets, **design)
    added = planted["replicate_var"] - calm["replicate_var"]
    formula = (np.var(_checkpoint_means(planted)) - np.var(_checkpoint_means(calm))) / len(offsets)
    assert added == pytest.approx(formula, rel=0.15)
    assert planted["fixed"]["replicate_var"] == pytest.approx(calm["fixed"]["replicate_var"], rel=0.15)
    width = {k: b["ci_high"] - b["ci_low"] for k, b in (("calm", calm), ("planted", planted))}
    ratio = np.sqrt(planted["replicate_var"] / calm["replicate_var"])
    assert ratio > 1.2 and width["planted"] / width["calm"] == pytest.approx(ratio, rel=0.1)
    # the power: the planted variance is in the MDE, and more pretraining seeds are needed for a margin
    assert multi_power(planted, 0.03)["mde"] > 1.2 * multi_power(calm, 0.03)["mde"]


def test_without_pretraining_variance_the_interval_is_todays():
    """No planted shift (paired design, three pretraining seeds): the Multi-Bootstrap's interval is
    the seed bootstrap's over the same runs, up to Monte Carlo error (drawing one-run checkpoints with
    replacement is drawing runs with replacement)."""
    a, b, pre, partners = procedure_arms(n=600, ft_seeds=3, offsets=(0.0, 0.0, 0.0), runs_per_seed=1)
    multi = multi_bootstrap(a, b, pre, f1_from_counts, 3000, seed=3, partners=partners)
    today = seed_bootstrap(a, b, f1_from_counts, 3000, seed=3)
    assert multi["difference"] == today["difference"] and multi["seed_differences"] == today["seed_differences"]
    assert multi["ci_high"] - multi["ci_low"] == pytest.approx(today["ci_high"] - today["ci_low"], rel=0.1)
    assert multi["p_value"] == pytest.approx(today["p_value"], abs=0.05)


@pytest.mark.parametrize("runs_per_seed", [None, 1], ids=["cross", "paired"])
def test_components_recover_the_planted_variances(runs_per_seed):
    """Many pretraining seeds: the estimated pretraining-seed variance is the planted one, and close to
    0 without it; the fine-tuning part stays where the fine-tuning seeds put it."""
    gen = np.random.default_rng(5)
    offsets = tuple(gen.normal(0, 0.03, size=40))
    design = {"n": 800, "offsets": offsets, "runs_per_seed": runs_per_seed, "seed_sd": 0.01}
    design["ft_seeds"] = 40 if runs_per_seed == 1 else 2
    ft = []
    for planted, want in ((offsets, np.var(offsets, ddof=1)), ((0.0,) * 40, 0.0)):
        a, b, pre, part = procedure_arms(**{**design, "offsets": planted})
        score_a, score_b = (np.array([f1_from_counts(c.sum(0)) for c in arm]) for arm in (a, b))
        groups = [[j for j, p in enumerate(pre) if p == q] for q in dict.fromkeys(pre)]
        ft_var, pre_var = pretrain_components(score_b, score_a, part, groups)
        assert pre_var == pytest.approx(want, abs=0.35 * 0.03**2)
        ft.append(ft_var)
    assert ft[0] == pytest.approx(ft[1], abs=0.35 * 0.03**2)


@pytest.mark.parametrize(
    ("design", "offsets"),
    [
        ({"ft_seeds": 3}, (0.0,)),
        ({"ft_seeds": 3, "runs_per_seed": 1}, (0.0, 0.03, -0.02)),
        ({"ft_seeds": 2}, (0.0, 0.02)),
    ],
    ids=["one pretraining seed", "paired", "cross"],
)
def test_variance_shares_add_up(design, offsets):
    a, b, pre, partners = procedure_arms(n=400, offsets=offsets, **design)
    boot = multi_bootstrap(a, b, pre, f1_from_counts, 300, seed=0, partners=partners)
    shares = boot["shares"]
    known = [v for v in shares.values() if v is not None]
    assert sum(known) == pytest.approx(1.0, abs=1e-12) and all(0 <= v <= 1 for v in known)
    assert (shares["pretrain"] is None) == (len(offsets) == 1)
    # the shares are the parts of the MDE's variance: V = v_ex + v_ft / N + v_pre / P
    var = boot["example_var"] + boot["ft_var"] / len(b) + (boot["pretrain_var"] or 0.0) / len(offsets)
    assert shares["test"] == pytest.approx(boot["example_var"] / var)
    assert multi_power(boot, 0.01)["mde"] == pytest.approx((1.959964 + 0.841621) * np.sqrt(var), abs=1e-4)


def test_pretraining_seeds_for_the_margin():
    """The fewest pretraining seeds (K runs each) whose MDE reaches the margin: the seed-count formula
    with one checkpoint's variance v_ft / K + v_pre."""
    a, b, pre, partners = procedure_arms(ft_seeds=2, offsets=(0.0, 0.03, -0.02))
    boot = multi_bootstrap(a, b, pre, f1_from_counts, 300, seed=0, partners=partners)
    power = multi_power(boot, 0.05)
    unit = boot["ft_var"] / 2 + boot["pretrain_var"]
    assert power["pretrain_seeds_for_margin"] == seeds_for_margin(0.05, boot["example_var"], unit)
    need = power["pretrain_seeds_for_margin"]
    assert minimum_detectable_effect(boot["example_var"], unit, need, 1, 1) <= 0.05
    assert need == 1 or minimum_detectable_effect(boot["example_var"], unit, need - 1, 1, 1) > 0.05


def test_an_outlier_pretraining_seed_is_marked():
    a, b, pre, partners = procedure_arms(ft_seeds=2, offsets=(0.0, 0.0, 0.1, 0.0), seed_sd=0.01)
    boot = multi_bootstrap(a, b, pre, f1_from_counts, 200, seed=0, partners=partners)
    assert [g["outlier"] for g in boot["per_pretrain_seed"]] == [False, False, True, False]
    assert boot["per_pretrain_seed"][2]["difference"] > boot["per_pretrain_seed"][0]["difference"] + 0.05
    a, b, pre, partners = procedure_arms(ft_seeds=2, offsets=(0.0, 0.0, 0.0, 0.0), seed_sd=0.01)
    boot = multi_bootstrap(a, b, pre, f1_from_counts, 200, seed=0, partners=partners)
    assert not any(g["outlier"] for g in boot["per_pretrain_seed"])


@pytest.mark.parametrize(
    ("pre", "partners", "match"),
    [
        ([1, 1, 2], [0, 1, 2], "same number of runs on every pretraining seed"),
        ([1, 2, 3], [0, 0, 1], "every baseline run to partner as many"),
        ([1, 2], [0, 1], "one pretraining seed and one baseline partner per adapted run"),
        ([1, 2, 3], [0, 1, 5], "partners must index the 3 baseline runs"),
    ],
)
def test_an_unbalanced_design_raises(pre, partners, match):
    runs = [np.ones((4, 3))] * 3
    with pytest.raises(ValueError, match=match):
        multi_bootstrap(runs, runs, pre, f1_from_counts, 10, seed=0, partners=partners)
