"""The quick profile's scoring cap: dev and test scored on a seeded subset, the same for every seed."""

import yaml
from conftest import REPO, learnable_scicite_files, prepare

from minisci.config import FinetuneClassificationConfig, from_dict
from minisci.finetune.classification import run_finetune_classification
from minisci.profiles import load_profile


def cfg(**kw):
    params = yaml.safe_load((REPO / "params.yaml").read_text())["finetune_classification"]
    fast = {"epochs": 1.0, "batch_size": 8, "max_length": 32, "logging_steps": 5}
    return from_dict(FinetuneClassificationConfig, {**params, **fast, "seeds": [3, 4], **kw}, "finetune_classification")


def test_max_eval_examples_scores_a_seeded_subset_of_dev_and_test(tmp_path, tiny_model_dir):
    data = prepare(learnable_scicite_files(tmp_path / "raw", n=30), "scicite", tmp_path / "prepared")
    r = run_finetune_classification(data, tiny_model_dir, cfg(max_eval_examples=7), tmp_path / "work")
    assert len(r.test_predictions) == 7 and set(r.test_predictions[0]["preds"]) == {"3", "4"}
    assert len((data / "test.jsonl").read_text().splitlines()) > 7


def test_quick_profile_caps_scoring_and_default_scores_everything():
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    assert params["finetune_ner"]["max_eval_examples"] == 0 == params["finetune_classification"]["max_eval_examples"]
    quick = load_profile("quick")
    assert quick["finetune_ner.max_eval_examples"] > 0 and quick["finetune_classification.max_eval_examples"] > 0
