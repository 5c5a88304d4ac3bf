"""Stages that do not train start without importing what they do not use: torch and transformers
take 4 to 10 s to import on 2 cores, and code_fingerprint runs at every ``dvc repro``."""

import json
import subprocess
import sys

import pytest

# module -> packages importing it must not import
LIGHT = {
    "minisci.progress": {"torch", "transformers"},  # every stage's progress lines
    "minisci.data.corpus": {"torch", "transformers"},  # sample_corpus
    "minisci.fingerprint": {"torch", "transformers"},  # code_fingerprint
    "minisci.tasks.classification": {"torch", "evaluate"},  # export_metrics reads its report facets
}


def imported(code: str) -> set[str]:
    """Top-level packages in sys.modules after running ``code`` in a fresh interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return set(json.loads(out.splitlines()[-1]))


@pytest.mark.parametrize("module", sorted(LIGHT))
def test_light_modules_do_not_import_heavy_packages(module):
    assert not imported(f"import {module}") & LIGHT[module]


def test_checking_a_known_base_model_does_not_import_torch(tmp_path):
    """code_fingerprint's check of model.base reads transformers' generated table of model types as
    text: neither transformers nor torch is imported."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    code = f"from minisci.pretrain.model import check_base_model\ncheck_base_model('base', __import__('pathlib').Path({str(tmp_path)!r}))"
    assert not imported(code) & {"torch", "transformers"}


def test_the_model_types_read_as_text_are_the_generated_tables_literal():
    """The literal the generated module starts its table with (it adds a few more when run: those, and
    the aliases, are the full mapping's to answer)."""
    from transformers.models.auto.auto_mappings import CONFIG_MAPPING_NAMES

    from minisci.pretrain.model import _generated_model_types

    read = _generated_model_types()
    assert len(read) > 500 and {"bert", "roberta", "modernbert", "deberta-v2"} <= read <= set(CONFIG_MAPPING_NAMES)


@pytest.mark.parametrize(
    ("model_type", "known"), [("bert", True), ("gpt-sw3", True), ("mystery", False), (None, False)]
)
def test_known_model_types_are_transformers_own(model_type, known):
    """The fast table and the full mapping together: gpt-sw3 is an alias only the full mapping has."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    from minisci.pretrain.model import _known_model_type

    assert _known_model_type(model_type) is known is (model_type in CONFIG_MAPPING_NAMES)


def test_checking_a_scratch_config_does_not_import_torch():
    """code_fingerprint checks a scratch config against BertConfig's keys from a table read from the
    pinned transformers (tests/test_config_loading.py compares the two)."""
    code = "from minisci.config import check_scratch_config\ncheck_scratch_config({'hidden_size': 32, 'num_attention_heads': 4})"
    assert not imported(code) & {"torch", "transformers"}


def test_loading_a_scratch_model_section_does_not_import_torch():
    """export_metrics and pretrain_data read the model section; checking a scratch config against
    BertConfig is left to code_fingerprint and to building the model."""
    code = (
        "from minisci.config import ModelConfig, from_dict\n"
        "from_dict(ModelConfig, {'base': 'scratch', 'tokenizer': 't', 'scratch_config': {'hidden_size': 32}}, 'model')"
    )
    assert "torch" not in imported(code)
