import json
from types import SimpleNamespace

import pytest
import yaml
from conftest import REPO, learnable_scicite_files, prepare

from minisci.config import FinetuneClassificationConfig, from_dict
from minisci.finetune.classification import run_finetune_classification
from minisci.tasks.classification import classification_metrics


def cfg(**kw):
    params = yaml.safe_load((REPO / "params.yaml").read_text())["finetune_classification"]
    fast = {"epochs": 5.0, "batch_size": 8, "learning_rate": 5.0e-3, "max_length": 32, "logging_steps": 5}
    params.update({**fast, "seeds": [13], **kw})  # one seed, whatever the default's count
    return from_dict(FinetuneClassificationConfig, params, "finetune_classification")


def test_classification_metrics_known_values():
    gold = ["background", "background", "method", "result"]
    pred = ["background", "method", "method", "background"]
    m = classification_metrics(gold, pred, ["background", "method", "result"])
    assert m["accuracy"] == 0.5 and m["micro_f1"] == 0.5
    assert m["per_class"]["method"] == {"precision": 0.5, "recall": 1.0, "f1": 0.6667, "support": 1}
    assert m["macro_f1"] == pytest.approx((0.5 + 0.6667 + 0.0) / 3, abs=1e-4)
    assert m["confusion_matrix"] == [[1, 1, 0], [0, 1, 0], [1, 0, 0]]


# the weighted loss trains the same way: its run is slow-only (the weights are tested in finetune/test_ner.py).
# The cross-entropy run is the session's tiny_finetuned citation model (this file's cfg(), seed 1, on the
# same learnable files and tiny BERT), trained once for every test that needs it; several seeds are tested below.
@pytest.mark.parametrize("loss", ["ce", pytest.param("inverse_frequency", marks=pytest.mark.slow)])
def test_tiny_model_learns_trivial_citation_intents(tmp_path, tiny_model_dir, tiny_finetuned, loss):
    from transformers import pipeline

    if loss == "ce":
        raw, model_dir = tiny_finetuned["data"], tiny_finetuned["cite"]
        r = SimpleNamespace(
            **{
                k: json.loads((tiny_finetuned["cite_run"] / f"{k}.json").read_text())
                for k in ("metrics", "test_predictions")
            }
        )
    else:
        raw = learnable_scicite_files(tmp_path / "data")
        data = prepare(raw, "scicite", tmp_path / "prepared")
        r = run_finetune_classification(data, tiny_model_dir, cfg(loss=loss, seeds=[1]), tmp_path / "work")
    assert r.metrics["test"]["accuracy"] > 0.9 and r.metrics["test"]["macro_f1"] > 0.9, r.metrics["dev_per_epoch"]
    assert len(r.test_predictions) == 50 and {"gold", "pred", "probs"} <= set(r.test_predictions[0])
    if loss == "ce":  # the saved model directory works with transformers.pipeline, and predicts as the stage did
        clf = pipeline("text-classification", model=str(model_dir), device="cpu")
        texts = [
            e["text"] for e in map(json.loads, (raw / "classification/scicite/test.jsonl").read_text().splitlines())
        ]
        assert [o["label"] for o in clf(texts)] == [row["pred"] for row in r.test_predictions]


def test_macro_f1_averages_over_labels_in_gold_or_predictions():
    """A declared class that neither occurs nor is predicted does not pull macro-F1 towards 0."""
    m = classification_metrics(["a", "a", "b"], ["a", "b", "b"], ["a", "b", "c"])
    assert m["macro_f1"] == pytest.approx((0.6667 + 0.6667) / 2, abs=1e-4)
    assert m["per_class"]["c"]["support"] == 0 and len(m["confusion_matrix"]) == 3


def test_seed_predictions_are_kept_for_the_seed_aware_bootstrap(tmp_path, tiny_model_dir):
    data = prepare(learnable_scicite_files(tmp_path / "raw", n=30), "scicite", tmp_path / "prepared")
    r = run_finetune_classification(data, tiny_model_dir, cfg(epochs=1.0, seeds=[3, 4]), tmp_path / "work")
    assert set(r.test_predictions[0]["preds"]) == {"3", "4"}
    assert set(r.metrics["per_seed"]) == {"3", "4"} and "accuracy_sd" in r.metrics["test_over_seeds"]
    assert r.metrics["train_duplicate_rows"] == 0 and "test_texts_in_train" in r.metrics


def test_a_folder_of_encoders_runs_fine_tuning_seed_i_on_pretraining_seed_i(tmp_path, tiny_model_dir):
    """``models/adapted`` with one encoder per pretraining seed: the paired plan, each run's
    pretraining seed in the metrics, the saved model from the first encoder; a folder that does not
    hold exactly the declared seeds, and the cross design, are refused in one line."""
    import shutil

    from minisci.errors import MinisciError
    from minisci.pretrain.seeds import PretrainSeeds

    data = prepare(learnable_scicite_files(tmp_path / "raw", n=30), "scicite", tmp_path / "prepared")
    adapted = tmp_path / "adapted"
    for seed in (13, 14):
        shutil.copytree(tiny_model_dir, adapted / str(seed))
    r = run_finetune_classification(
        data, adapted, cfg(epochs=1.0, seeds=[3, 4]), tmp_path / "work", PretrainSeeds((13, 14))
    )
    assert {s: m["pretrain_seed"] for s, m in r.metrics["per_seed"].items()} == {"3": 13, "4": 14}
    assert r.encoder == adapted / "13"
    with pytest.raises(MinisciError, match=r"adapted: expected one encoder folder per pretraining seed \[13, 14, 15\]"):
        run_finetune_classification(data, adapted, cfg(seeds=[3, 4, 5]), tmp_path / "w2", PretrainSeeds((13, 14, 15)))
    with pytest.raises(MinisciError, match="the fine-tuning stages run paired, not cross"):
        run_finetune_classification(data, adapted, cfg(), tmp_path / "w3", PretrainSeeds((13, 14), "cross"))
