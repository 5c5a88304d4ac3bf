"""Pretraining seeds outside the statistics: the ``pretrain.seeds`` design (which encoder each
adapted fine-tuning run starts from) and the report, which reads each run's pretraining seed from its
metrics file, treats a missing one as the single seed, and shows the Multi-Bootstrap's verdict beside
the one that holds the pretraining seeds fixed."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import REPO
from helpers import CFG, synthetic_run

from minisci.errors import ConfigError, MinisciError
from minisci.pretrain.seeds import PretrainSeeds, finetune_plan, pretrain_seeds
from minisci.report import export
from minisci.report import pretrain_seeds as report_seeds
from minisci.report.bootstrap import seed_bootstrap
from minisci.report.pretrain_seeds import UNNAMED, run_pretrain_seeds
from minisci.tasks import registry

# 1. the design ---------------------------------------------------------------------------------------------


def test_the_default_is_three_pretraining_seeds_paired_and_a_lone_seed_means_one():
    section = yaml.safe_load((REPO / "params.yaml").read_text())["pretrain"]
    design = pretrain_seeds(section)
    assert design == PretrainSeeds((13, 14, 15), "paired") and design.first == 13
    assert design.runs([13, 14, 15]) == [(13, 13), (14, 14), (15, 15)]
    lone = pretrain_seeds({"seed": 7})  # a params file from before pretraining seeds: that one seed
    assert lone == PretrainSeeds((7,), "paired") and lone.runs([13, 14, 15]) == [(7, 13), (7, 14), (7, 15)]


def test_paired_and_cross_runs():
    paired, cross = PretrainSeeds((13, 14, 15)), PretrainSeeds((13, 14), "cross")
    assert paired.runs([13, 14, 15]) == [(13, 13), (14, 14), (15, 15)]
    assert PretrainSeeds((1, 2)).runs([13, 14, 15, 16]) == [(1, 13), (2, 14), (1, 15), (2, 16)]
    assert cross.runs([13, 14, 15]) == [(13, 13), (13, 14), (13, 15), (14, 13), (14, 14), (14, 15)]
    assert paired.finetune_seeds_on(14, [13, 14, 15]) == [14] and cross.finetune_seeds_on(14, [1, 2]) == [1, 2]


@pytest.mark.parametrize(
    ("section", "match"),
    [
        ({"seed": 13, "seeds": [13, 14]}, "set seeds .a list. or seed .one seed., not both"),
        ({"epochs": 1.0}, "missing key 'seeds'"),
        ({"seeds": []}, "seeds must list distinct seeds"),
        ({"seeds": [13, 13]}, "seeds must list distinct seeds"),
        ({"seeds": 13}, "expected a list of integers"),
        ({"seeds": [13, "14"]}, "expected a list of integers"),
        ({"seeds": [13], "seed_design": "nested"}, "seed_design must be one of"),
    ],
)
def test_bad_seeds_name_the_key(section, match):
    with pytest.raises(ConfigError, match=match):
        pretrain_seeds(section)


def test_paired_needs_a_multiple_of_the_pretraining_seeds():
    with pytest.raises(ConfigError, match="paired needs a multiple of 2 fine-tuning seeds .* got 3"):
        PretrainSeeds((1, 2)).runs([13, 14, 15])


def _encoder(path):
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


def test_finetune_plan_reads_one_encoder_or_one_per_seed(tmp_path):
    one = _encoder(tmp_path / "baseline")
    assert finetune_plan(one, PretrainSeeds((13, 14, 15)), [13, 14, 15]) == [(None, s, one) for s in (13, 14, 15)]
    per_seed = {p: _encoder(tmp_path / "adapted" / str(p)) for p in (13, 14, 15)}
    plan = finetune_plan(tmp_path / "adapted", PretrainSeeds((13, 14, 15)), [13, 14, 15])
    assert plan == [(13, 13, per_seed[13]), (14, 14, per_seed[14]), (15, 15, per_seed[15])]
    cross = finetune_plan(tmp_path / "adapted", PretrainSeeds((15, 13, 14), "cross"), [1])
    assert [(p, s) for p, s, _ in cross] == [(15, 1), (13, 1), (14, 1)]


def test_finetune_plan_names_missing_encoders(tmp_path):
    _encoder(tmp_path / "adapted" / "13")
    with pytest.raises(
        MinisciError, match=r"adapted: expected one encoder folder per pretraining seed \[13, 14\], found \[13\]"
    ):
        finetune_plan(tmp_path / "adapted", PretrainSeeds((13, 14)), [13, 14])


# 2. the report -----------------------------------------------------------------------------------------


def _with_pretrain_seeds(root, seeds: dict | None) -> None:
    """Name each adapted NER run's pretraining seed in its metrics file, as the stage will."""
    path = root / "metrics" / "finetune_ner" / "toyner" / "adapted.json"
    m = json.loads(path.read_text())
    m["per_seed"] = {str(s): {"pretrain_seed": p} for s, p in seeds.items()}
    path.write_text(json.dumps(m))


def _collect(root):
    runs = {"ner": ["toyner"], "classification": ["toycls"]}
    return export.collect(root / "metrics", root / "models", CFG, runs, {}, root / "data/prepared", "enc")


def test_runs_without_a_pretraining_seed_are_the_single_seed(tmp_path):
    data = synthetic_run(tmp_path)
    for t in data["tasks"].values():
        b = t["bootstrap"]
        assert b["pretrain_seeds"] == 1 and b["fixed"]["verdict"] == b["verdict"]
        assert (b["fixed"]["ci_low"], b["fixed"]["ci_high"]) == (b["ci_low"], b["ci_high"])
    text = export.report(data, CFG)
    assert "## Pretraining seeds (adaptation as a procedure)" in text
    assert "| toyner | 1 × 3 |" in text and "unknown (one pretraining seed: no pretraining variance)" in text
    assert "the one adapted encoder: adapted" in text
    assert "With one fine-tuning run per pretraining seed" not in text, "one pretraining seed: nothing to split"


def test_one_named_pretraining_seed_is_todays_bootstrap(tmp_path):
    synthetic_run(tmp_path)
    _with_pretrain_seeds(tmp_path, {13: 7, 14: 7, 15: 7})
    boot = _collect(tmp_path)["tasks"][("ner", "toyner")]["bootstrap"]
    rows = [
        json.loads(line) for line in (tmp_path / "models/finetune_ner/toyner/adapted/test_predictions.jsonl").open()
    ]
    base = [
        json.loads(line) for line in (tmp_path / "models/finetune_ner/toyner/baseline/test_predictions.jsonl").open()
    ]
    kind = registry.get("ner")
    labels = json.loads((tmp_path / "metrics/finetune_ner/toyner/baseline.json").read_text())["labels"]
    runs = [[[{**r, "pred": r["preds"][str(s)]} for r in arm] for s in (13, 14, 15)] for arm in (base, rows)]
    items = kind.items([r["gold"] for r in base], [[r["pred"] for r in run] for arm in runs for run in arm], labels)
    counts = [[kind.counts(run, items) for run in arm] for arm in runs]
    today = seed_bootstrap(
        *counts, kind.headline(len(items)), CFG.bootstrap_resamples, CFG.seed, margin=CFG.margin("ner")
    )
    assert {k: boot[k] for k in today} == today
    assert boot["per_pretrain_seed"][0]["pretrain_seed"] == 7


def test_three_pretraining_seeds_in_the_report(tmp_path):
    synthetic_run(tmp_path)
    _with_pretrain_seeds(tmp_path, {13: 13, 14: 14, 15: 15})
    data = _collect(tmp_path)
    b = data["tasks"][("ner", "toyner")]["bootstrap"]
    assert (b["pretrain_seeds"], b["runs_per_pretrain_seed"]) == (3, 1)
    assert sum(b["shares"].values()) == pytest.approx(1.0)
    text = export.report(data, CFG)
    assert "| toyner | 3 × 1 |" in text
    assert "pretraining seed 14: adapted" in text and "(1 run)" in text
    assert "With one fine-tuning run per pretraining seed (toyner), the fine-tuning and pretraining" in text
    # the classification arm names none: it stays the single seed
    assert data["tasks"][("classification", "toycls")]["bootstrap"]["pretrain_seeds"] == 1


def test_some_runs_without_a_pretraining_seed_is_an_error(tmp_path):
    synthetic_run(tmp_path)
    _with_pretrain_seeds(tmp_path, {13: 13, 14: 14})
    with pytest.raises(MinisciError, match=r"adapted.json: fine-tuning seeds \[15\] name no pretrain_seed"):
        _collect(tmp_path)


def test_an_unbalanced_design_names_the_file(tmp_path):
    synthetic_run(tmp_path)
    _with_pretrain_seeds(tmp_path, {13: 1, 14: 1, 15: 2})
    with pytest.raises(MinisciError, match="adapted.json: multi-bootstrap needs the same number of runs"):
        _collect(tmp_path)


def test_run_pretrain_seeds_reads_the_arm_default():
    assert run_pretrain_seeds({"seeds": [13]}) == [UNNAMED]
    assert run_pretrain_seeds({"seeds": [13], "pretrain_seed": 5}) == [5]
    assert run_pretrain_seeds({"seeds": [13, 14], "per_seed": {"13": {"pretrain_seed": 5}}, "pretrain_seed": 6}) == [
        5,
        6,
    ]


def test_a_fault_inside_the_bootstrap_is_not_blamed_on_the_metrics_file(tmp_path, monkeypatch):
    """Only a design the metrics files describe wrongly is reported against them; any other ValueError
    (a fault in the computation) stays what it is."""
    synthetic_run(tmp_path)
    _with_pretrain_seeds(tmp_path, {13: 7, 14: 7, 15: 7})

    def broken(*args, **kwargs):
        raise ValueError("operands could not be broadcast together")

    monkeypatch.setattr(report_seeds, "multi_bootstrap", broken)
    with pytest.raises(ValueError, match="broadcast") as caught:
        _collect(tmp_path)
    assert not isinstance(caught.value, MinisciError)
