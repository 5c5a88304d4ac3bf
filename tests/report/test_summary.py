"""The headline DVC metric is the flat ``metrics/summary.json``, with at most 40 keys for the default
pipeline (one NER and one classification dataset) and no timings, so ``dvc exp show`` recipes and
``dvc metrics diff --targets metrics/summary.json`` stay readable. Each stage's own JSON file is a
metric too, so that DVC's run-cache can restore the stage (tests/pipeline/test_dvc_deps.py)."""

import re

import pytest
import yaml
from conftest import REPO, synthetic_embeddings_metrics

from minisci.report.export import summary

MAX_KEYS = 40
TIMING = re.compile(r"second|wall|time|per_s|duration|elapsed", re.IGNORECASE)


def arm(metric_values: dict, seeds: int) -> dict:
    m = {"test": dict(metric_values), "dev": dict(metric_values), "wall_seconds": 12.5}
    if seeds > 1:
        m["test_over_seeds"] = {f"{k}_{s}": 0.5 for k in metric_values for s in ("mean", "sd")}
    return m


def synthetic_data(seeds: int) -> dict:
    """What :func:`minisci.report.export.collect` returns for 1 NER + 1 classification dataset."""
    ner = {"precision": 0.8, "recall": 0.7, "f1": 0.75, "macro_f1": 0.75, "token_accuracy": 0.9}
    cls = {"accuracy": 0.85, "macro_f1": 0.83, "micro_f1": 0.85}
    boot = {"difference": 0.01, "ci_low": -0.01, "ci_high": 0.02, "p_value": 0.2, "seeds": seeds, "seeds_b_better": 1}
    return {
        "tasks": {
            ("ner", "bc5cdr"): {"arms": {a: arm(ner, seeds) for a in ("baseline", "adapted")}, "bootstrap": boot},
            ("classification", "scicite"): {
                "arms": {a: arm(cls, seeds) for a in ("baseline", "adapted")},
                "bootstrap": boot,
            },
        },
        "pretrain": {  # by pretraining seed
            13: {
                "before": {"mlm_accuracy": 0.1, "perplexity": 100.0, "nsp_accuracy": 0.5},
                "after": {"mlm_accuracy": 0.2, "perplexity": 50.0, "nsp_accuracy": 0.6},
                "train": {"tokens_seen": 1000, "tokens_per_second": 1400.0},
                "wall_seconds": 600.0,
            }
        },
        "embeddings": synthetic_embeddings_metrics(),
    }


def test_default_summary_is_small_flat_and_free_of_timings():
    out = summary(synthetic_data(seeds=1))
    assert len(out) <= MAX_KEYS, f"{len(out)} metric keys"
    assert [k for k in out if TIMING.search(k)] == []
    assert all(isinstance(v, (int, float)) for v in out.values()), "flat: numbers only"


@pytest.mark.parametrize("seeds", [1, 3])
def test_summary_has_no_timings_with_any_number_of_seeds(seeds):
    assert [k for k in summary(synthetic_data(seeds)) if TIMING.search(k)] == []


def declared_metrics(node) -> list[str]:
    """Every path under a ``metrics:`` key anywhere in dvc.yaml (stages, matrix/foreach, top level)."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "metrics":
                found += [m if isinstance(m, str) else next(iter(m)) for m in value]
            else:
                found += declared_metrics(value)
    elif isinstance(node, list):
        for item in node:
            found += declared_metrics(item)
    return found


def test_metrics_are_git_tracked_json_and_the_report_writes_only_the_summary():
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    assert declared_metrics(stages["export_metrics"]) == ["metrics/summary.json"]
    for stage in stages.values():
        for metric in stage.get("do", stage).get("metrics", []):
            path, options = next(iter(metric.items()))
            assert path.startswith("metrics/") and path.endswith(".json") and options == {"cache": False}, path


def test_report_headline_shows_the_means_over_seeds_that_the_difference_compares():
    from minisci.report.export import _headline_rows

    data = synthetic_data(seeds=3)
    for t in data["tasks"].values():
        t["published"] = {}
        t["bootstrap"].update(mean_a=0.8153, sd_a=0.003, mean_b=0.8154, sd_b=0.0301, seeds_b_better=1)
    ner = next(line for line in _headline_rows(data) if line.startswith("| NER"))
    assert "| 3 | 81.53 ± 0.30 | 81.54 ± 3.01 | +1.00 |" in ner and "| 1 of 3 seeds |" in ner
    one = synthetic_data(seeds=1)
    for t in one["tasks"].values():
        t["published"] = {}
    ner = next(line for line in _headline_rows(one) if line.startswith("| NER"))
    assert "| 1 | 75.00 | 75.00 | +1.00 |" in ner
