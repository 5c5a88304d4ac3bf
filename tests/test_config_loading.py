"""Bad ``params.yaml`` files: each is one line naming the file and line (or the option), both from
the loader and from a stage's exit code and stderr."""

from __future__ import annotations

import fetch_data  # noqa: E402
import pytest
import yaml
from conftest import REPO, TINY_MODEL

from minisci import config
from minisci.config import (
    FetchDataConfig,
    ModelConfig,
    PretrainConfig,
    check_scratch_config,
    from_dict,
    load_params,
    load_section,
)
from minisci.errors import ConfigError
from minisci.pretrain.seeds import load_pretrain, run_section
from minisci.stage import run_stage

BAD_FILES = [
    ("not yaml", b"fetch_data:\n  mirror: [a,\n", r"params.yaml:3: invalid YAML \(expected"),
    ("tabs", b"fetch_data:\n\tmirror: x\n", r"params.yaml:2: invalid YAML .*use spaces"),
    ("not utf-8", b"# caf\xe9\nfetch_data:\n  mirror: x\n", r"params.yaml:1: not UTF-8: byte 0xe9 at byte offset 5"),
    (
        "duplicate key",
        b"fetch_data:\n  mirror: a\n  mirror: b\n",
        r"params.yaml:3: duplicate key 'mirror' \(first at line 2\)",
    ),
    (
        "duplicate section",
        b"fetch_data: {mirror: a}\nfetch_data: {mirror: b}\n",
        r"params.yaml:2: duplicate key 'fetch_data'",
    ),
    ("not a mapping", b"- fetch_data\n", r"params.yaml: expected a mapping of sections"),
    ("missing section", b"other: {}\n", r"params.yaml: missing section 'fetch_data'"),
]


@pytest.mark.parametrize("data, match", [c[1:] for c in BAD_FILES], ids=[c[0] for c in BAD_FILES])
def test_bad_params_file_is_one_line_with_file_and_line(tmp_path, capsys, data, match):
    params = tmp_path / "params.yaml"
    params.write_bytes(data)
    with pytest.raises(ConfigError, match=match):
        load_section(FetchDataConfig, "fetch_data", params)
    argv = ["--manifest", str(tmp_path / "m.tsv"), "--out", str(tmp_path / "raw"), "--params", str(params)]
    assert run_stage(fetch_data.main, argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert not (tmp_path / "raw").exists()


def test_params_file_missing_or_a_directory(tmp_path):
    with pytest.raises(ConfigError, match="nope.yaml: params file not found"):
        load_params(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match=r"params file not found \(it is a directory\)"):
        load_params(tmp_path)


def _pretrain(**changes) -> dict:
    return {**run_section(load_params(REPO / "params.yaml")["pretrain"]), **changes}


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"epochs": float("inf")}, r"params pretrain.epochs: expected a finite number, got inf"),
        ({"learning_rate": float("nan")}, r"params pretrain.learning_rate: expected a finite number, got nan"),
        ({"learning_rate": "inf"}, r"params pretrain.learning_rate: expected float, got 'inf'"),
        ({"learning_rate": "1e-4x"}, r"params pretrain.learning_rate: expected float, got '1e-4x'"),
        ({"batch_size": "1e2"}, r"params pretrain.batch_size: expected int, got '1e2' \(write integers without"),
        ({"batch_size": 16.0}, r"params pretrain.batch_size: expected int, got 16.0"),
    ],
)
def test_bad_float_and_int_values(changes, match):
    with pytest.raises(ConfigError, match=match):
        from_dict(PretrainConfig, _pretrain(**changes), "pretrain")


def test_exponent_without_a_dot_is_a_float(tmp_path):
    """PyYAML (YAML 1.1) reads ``1e-4`` as a string; for a float param it means the number."""
    text = (REPO / "params.yaml").read_text().replace("learning_rate: ", "learning_rate: 3e-4 #", 1)
    (tmp_path / "params.yaml").write_text(text)
    assert load_params(tmp_path / "params.yaml")["pretrain"]["learning_rate"] == "3e-4"
    assert load_pretrain(tmp_path / "params.yaml")[0].learning_rate == 3e-4


@pytest.mark.parametrize(
    "scratch, match",
    [
        (
            {"hidden_size": 30, "num_attention_heads": 4},
            r"hidden_size \(30\) must be divisible by num_attention_heads \(4\)",
        ),
        ({"hiden_size": 32}, r"scratch_config has unknown or reserved keys \['hiden_size'\]"),
        ({"vocab_size": 100}, r"unknown or reserved keys \['vocab_size'\]"),
        ({"num_hidden_layers": 0}, r"scratch_config.num_hidden_layers must be a positive int, got 0"),
        ({"hidden_size": "32"}, r"scratch_config.hidden_size must be a positive int, got '32'"),
    ],
)
def test_scratch_config_is_checked_against_bert_config(scratch, match):
    cfg = from_dict(ModelConfig, {**TINY_MODEL, "scratch_config": {**TINY_MODEL["scratch_config"], **scratch}}, "model")
    with pytest.raises(ConfigError, match=match):
        check_scratch_config(cfg.scratch_config)


def test_the_bert_config_table_is_the_installed_transformers_own():
    """The table check_scratch_config reads in place of importing BertConfig is the pinned
    transformers' (requirements.txt), and that is the one installed. After a transformers upgrade,
    write the new version, ``sorted(BertConfig().to_dict())`` and the sizes' defaults into
    ``minisci.config.pinned_bert_config``."""
    from importlib.metadata import version

    from transformers import BertConfig

    pinned = next(
        line for line in (REPO / "requirements.txt").read_text().splitlines() if line.startswith("transformers==")
    )
    assert (
        pinned
        == f"transformers=={config.pinned_bert_config()['transformers']}"
        == f"transformers=={version('transformers')}"
    )
    defaults = BertConfig().to_dict()
    assert config.bert_config_fields() == (set(defaults), {k: defaults[k] for k in config._SCRATCH_SIZES})


def test_another_transformers_is_asked_for_its_bert_config(monkeypatch):
    monkeypatch.setattr(config, "pinned_bert_config", lambda: {"transformers": "0.0", "keys": [], "sizes": {}})
    keys, sizes = config.bert_config_fields()
    assert "hidden_size" in keys and sizes["num_attention_heads"] == 12
    with pytest.raises(ConfigError, match=r"unknown or reserved keys \['hiden_size'\]"):
        check_scratch_config({"hiden_size": 32})


def test_tiny_scratch_config_is_accepted():
    assert from_dict(ModelConfig, TINY_MODEL, "model").scratch_config == TINY_MODEL["scratch_config"]


SECTION_RANGES = [
    (
        "pretrain",
        "seed",
        -1,
        r"params section 'pretrain': seed must be in \[0, 2\*\*32 - 1\] \(numpy's and torch's seed range\), got -1$",
    ),
    ("pretrain", "weight_decay", -0.5, r"params section 'pretrain': weight_decay must be >= 0 \(0 = off\), got -0.5"),
    ("finetune_ner", "seeds", [1, 2**32], "params section 'finetune_ner': seeds must be in .* got 4294967296"),
    ("finetune_classification", "weight_decay", -1, "params section 'finetune_classification': weight_decay must"),
    ("sample_corpus", "seed", -3, "params section 'sample_corpus': seed must be in"),
    ("make_pairs", "seed", 2**32, "params section 'make_pairs': seed must be in"),
    ("finetune_embeddings", "seed", -1, "params section 'finetune_embeddings': seed must be in"),
    ("finetune_embeddings", "learning_rate", 0.0, "params section 'finetune_embeddings': learning_rate must be > 0$"),
    (
        "finetune_embeddings",
        "warmup_ratio",
        1.0,
        r"params section 'finetune_embeddings': warmup_ratio must be in \[0, 1\)$",
    ),
    ("export_metrics", "seed", -1, "params section 'export_metrics': seed must be in"),
]


@pytest.mark.parametrize("section, key, value, match", SECTION_RANGES, ids=[f"{c[0]}.{c[1]}" for c in SECTION_RANGES])
def test_ranges_are_checked_by_the_library(section, key, value, match):
    """The checks an API user meets too, from the section's own class, not only in the pipeline's
    ``code_fingerprint`` stage: seeds in numpy's range, no negative weight decay, and each of
    learning rate and warmup named alone."""
    params = load_params(REPO / "params.yaml")
    data = run_section(params["pretrain"]) if section == "pretrain" else dict(params[section])
    cls = {
        "pretrain": PretrainConfig,
        "finetune_ner": config.FinetuneNerConfig,
        "finetune_classification": config.FinetuneClassificationConfig,
        "sample_corpus": config.SampleCorpusConfig,
        "make_pairs": config.MakePairsConfig,
        "finetune_embeddings": config.FinetuneEmbeddingsConfig,
        "export_metrics": config.ExportMetricsConfig,
    }[section]
    with pytest.raises(ConfigError, match=match):
        from_dict(cls, {**data, key: value}, section)


def test_pretraining_seeds_out_of_range_and_a_section_that_is_not_a_mapping(tmp_path):
    params = load_params(REPO / "params.yaml")
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({**params, "pretrain": {**params["pretrain"], "seeds": [13, -1]}}))
    with pytest.raises(ConfigError, match=r"params section 'pretrain': seeds must be in \[0, 2\*\*32 - 1\].* got -1"):
        load_pretrain(path)
    path.write_text(yaml.safe_dump({**params, "pretrain": 5}))
    with pytest.raises(ConfigError, match=r"^params section 'pretrain' must be a mapping, got int$"):
        load_pretrain(path)
    path.write_text(yaml.safe_dump({k: v for k, v in params.items() if k != "pretrain"}))
    with pytest.raises(ConfigError, match=r"params.yaml: missing section 'pretrain'$"):
        load_pretrain(path)
