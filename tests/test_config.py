import dataclasses
import shlex

import pytest
import yaml
from conftest import REPO

from minisci import config
from minisci.config import (
    FetchDataConfig,
    MakePairsConfig,
    ModelConfig,
    PretrainConfig,
    SampleCorpusConfig,
    from_dict,
    load_params,
    load_section,
)
from minisci.errors import ConfigError
from minisci.pretrain.seeds import load_pretrain, pretrain_seeds, run_section

SECTIONS = {
    "fetch_data": FetchDataConfig,
    "sample_corpus": SampleCorpusConfig,
    "make_pairs": MakePairsConfig,
    "model": ModelConfig,
    "finetune_ner": config.FinetuneNerConfig,
    "finetune_classification": config.FinetuneClassificationConfig,
}


def test_the_pretrain_section_is_one_config_per_seed():
    """``pretrain.seeds`` lists the runs; each run's config holds its own seed only (adding a seed
    changes no other seed's run); a seed not in the list is refused in one line."""
    first, design = load_pretrain(REPO / "params.yaml")
    assert design.seeds == (13, 14, 15) and design.design == "paired" and first.seed == 13
    second, _ = load_pretrain(REPO / "params.yaml", 14)
    assert dataclasses.replace(second, seed=13) == first
    with pytest.raises(ConfigError, match=r"--seed 99 is not one of .*params.yaml's pretrain.seeds \[13, 14, 15\]"):
        load_pretrain(REPO / "params.yaml", 99)


@pytest.mark.parametrize("section, cls", SECTIONS.items())
def test_every_section_of_params_yaml_loads(section, cls):
    cfg = load_section(cls, section, REPO / "params.yaml")
    assert dataclasses.is_dataclass(cfg)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(cfg, dataclasses.fields(cfg)[0].name, None)


def test_unknown_missing_and_mistyped_keys_raise():
    good = load_params(REPO / "params.yaml")["make_pairs"]
    with pytest.raises(ConfigError, match=r"make_pairs': unknown keys \['n_pair'\]"):
        from_dict(MakePairsConfig, {**good, "n_pair": 3}, "make_pairs")
    with pytest.raises(ConfigError, match="missing key 'seed'"):
        from_dict(MakePairsConfig, {k: v for k, v in good.items() if k != "seed"}, "make_pairs")
    with pytest.raises(ConfigError, match=r"make_pairs.n_pairs: expected int, got '10'"):
        from_dict(MakePairsConfig, {**good, "n_pairs": "10"}, "make_pairs")
    with pytest.raises(ConfigError, match="heldout_doc_fraction must be in"):
        from_dict(MakePairsConfig, {**good, "heldout_doc_fraction": 1.5}, "make_pairs")


def test_model_section_checks():
    with pytest.raises(ConfigError, match="base: scratch needs a scratch_config mapping"):
        from_dict(ModelConfig, {"base": "scratch", "tokenizer": "x"}, "model")
    with pytest.raises(ConfigError, match=r"model.scratch_config: expected a mapping"):
        from_dict(ModelConfig, {"base": "scratch", "tokenizer": "x", "scratch_config": [1]}, "model")
    good = run_section(load_params(REPO / "params.yaml")["pretrain"])
    with pytest.raises(ConfigError, match="precision must be one of"):
        from_dict(PretrainConfig, {**good, "precision": "fp8"}, "pretrain")


def test_dataset_lists_and_catalogue_lookups():
    good = load_params(REPO / "params.yaml")["finetune_ner"]
    with pytest.raises(ConfigError, match=r"datasets lists a dataset twice"):
        from_dict(config.FinetuneNerConfig, {**good, "datasets": ["bc5cdr", "bc5cdr"]}, "finetune_ner")
    with pytest.raises(ConfigError, match=r"'finetune_ner': eval_delay must be >= 0"):
        from_dict(config.FinetuneNerConfig, {**good, "eval_delay": -1}, "finetune_ner")
    with pytest.raises(ConfigError, match=r"no dataset 'conll' in the 'datasets' catalogue"):
        config.catalog_entry("conll", path=REPO / "data/datasets.yaml")
    with pytest.raises(ConfigError, match=r"dataset 'scicite' is a classification dataset, not ner"):
        config.catalog_entry("scicite", task="ner", path=REPO / "data/datasets.yaml")


def test_catalogue_errors_name_the_file_and_the_entry(tmp_path):
    catalogue = load_params(REPO / "data/datasets.yaml")
    catalogue["datasets"]["mine"] = {"task": "ner", "dir": "d", "splits": {"train": "a"}, "format": "conll"}
    path = tmp_path / "datasets.yaml"
    path.write_text(yaml.safe_dump(catalogue))
    with pytest.raises(ConfigError, match=rf"^{path}: 'datasets\.mine': splits must name exactly"):
        config.load_catalog(path)
    catalogue["datasets"]["mine"] = {"task": "ner", "dir": "d", "splits": {}, "format": "conll", "colour": 1}
    path.write_text(yaml.safe_dump(catalogue))
    with pytest.raises(ConfigError, match=rf"^{path}: 'datasets\.mine': unknown keys \['colour'\]"):
        config.load_catalog(path)
    catalogue["datasets"]["mine"] = {"task": "ner", "dir": "d", "splits": {}, "format": "conll", "labels": "A"}
    path.write_text(yaml.safe_dump(catalogue))
    with pytest.raises(ConfigError, match=rf"^{path}: datasets\.mine\.labels: expected"):
        config.load_catalog(path)
    with pytest.raises(ConfigError, match=rf"^{tmp_path / 'none.yaml'}: the dataset catalogue file not found"):
        config.load_catalog(tmp_path / "none.yaml")
    path.write_text("datasets: {}\n")
    with pytest.raises(ConfigError, match=rf"^{path}: missing or empty 'datasets' mapping"):
        config.load_catalog(path)


@pytest.mark.parametrize(
    ("task", "extra", "named"),
    [
        ("classification", {"scheme": "IOB1"}, "scheme is a field"),
        ("classification", {"tag_column": 3, "scheme": "IOB2"}, "tag_column, scheme are fields"),
        ("ner", {"text_field": "sentence"}, "text_field is a field"),
        ("ner", {"label_field": "tag"}, "label_field is a field"),
    ],
)
def test_a_field_of_the_other_format_is_refused_not_ignored(tmp_path, task, extra, named):
    catalogue = load_params(REPO / "data/datasets.yaml")
    fmt = {"ner": "conll", "classification": "jsonl"}[task]
    splits = {s: f"{s}.x" for s in ("train", "dev", "test")}
    catalogue["datasets"]["mine"] = {"task": task, "dir": "d", "splits": splits, "format": fmt, **extra}
    path = tmp_path / "datasets.yaml"
    path.write_text(yaml.safe_dump(catalogue))
    with pytest.raises(ConfigError, match=rf"^{path}: 'datasets\.mine': {named} of another file format; a {fmt}"):
        config.load_catalog(path)
    del catalogue["datasets"]["mine"]
    path.write_text(yaml.safe_dump(catalogue))
    assert "mine" not in config.load_catalog(path)  # the shipped entries carry no foreign field


def test_a_catalogue_left_in_params_yaml_is_refused(tmp_path):
    """No stage reads a catalogue in params.yaml: the first stage says where it belongs."""
    params = load_params(REPO / "params.yaml")
    for key, file in (("datasets", "data/datasets.yaml"), ("corpora", "data/corpora.yaml")):
        path = tmp_path / "params.yaml"
        path.write_text(yaml.safe_dump({**params, key: load_params(REPO / file)[key]}))
        with pytest.raises(ConfigError, match=rf"^{path}: '{key}' is a catalogue, not a params section: move it to"):
            config.check_finetune_datasets(path, REPO / "data/datasets.yaml")
    config.check_finetune_datasets(REPO / "params.yaml", REPO / "data/datasets.yaml")


def test_finetune_params_are_whole_section_dvc_deps():
    """These stages depend on their whole params section, so a new knob cannot be missed (the
    NER and classification stages list theirs key by key, all but the matrix's datasets list:
    tests/pipeline/test_dvc_deps.py checks that no key is missing)."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    for name in ("finetune_embeddings", "sample_corpus", "make_pairs"):
        assert name in stages[name]["params"], name


def _param_keys(dvc_yaml):
    for stage in dvc_yaml["stages"].values():
        for entry in stage.get("do", stage).get("params", []):
            entry = entry.replace("${key}", "bc5cdr")  # a foreach stage's own catalogue entry
            yield from (entry if isinstance(entry, dict) else [entry])


def test_every_dvc_yaml_param_key_exists_in_params_yaml():
    dvc_yaml = yaml.safe_load((REPO / "dvc.yaml").read_text())
    params = load_params(REPO / "params.yaml")
    for key in _param_keys(dvc_yaml):
        node = params
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, f"dvc.yaml param {key!r} not in params.yaml"
            node = node[part]


def test_every_params_key_has_a_comment():
    lines = (REPO / "params.yaml").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.startswith("  ") and not line.strip().startswith("#") and ":" in line and not line.startswith("    "):
            assert lines[i - 1].strip().startswith("#"), f"params.yaml:{i + 1} {line.strip()!r} has no comment above it"


@pytest.mark.parametrize("name", ["quick", "paper"])
def test_profiles_name_real_keys_and_validate(name):
    from minisci import config as c
    from minisci.profiles import load_profile, set_param_args

    args = set_param_args(name, REPO / "params.yaml")
    assert args[0] == "-S" and len(args) == 2 * len(load_profile(name))
    params = load_params(REPO / "params.yaml")
    for key, value in load_profile(name).items():
        section, field = key.split(".")
        params[section][field] = value
    classes = {
        "sample_corpus": c.SampleCorpusConfig,
        "make_pairs": c.MakePairsConfig,
        "pretrain": c.PretrainConfig,
        "finetune_ner": c.FinetuneNerConfig,
        "finetune_classification": c.FinetuneClassificationConfig,
        "finetune_embeddings": c.FinetuneEmbeddingsConfig,
        "export_metrics": c.ExportMetricsConfig,
    }
    for section, cls in classes.items():
        from_dict(cls, run_section(params[section]) if section == "pretrain" else params[section], section)
    design = pretrain_seeds(params["pretrain"])  # the profile's fine-tuning seeds fit its pretraining seeds
    for section in ("finetune_ner", "finetune_classification"):
        design.runs(params[section]["seeds"])


def test_unknown_profile():
    from minisci.profiles import load_profile

    with pytest.raises(ConfigError, match="unknown profile 'huge'"):
        load_profile("huge")


def test_the_profile_command_it_runs_is_shown_as_a_shell_would_read_it(monkeypatch, capsys):
    # the stderr line is for pasting into a shell: quoted where the shell would expand ([13], quotes)
    import subprocess

    from minisci import profiles

    calls = []
    monkeypatch.setattr(subprocess, "call", lambda cmd: calls.append(cmd) or 0)
    monkeypatch.chdir(REPO)
    assert profiles.main(["quick", "--run", "-n", "first look"]) == 0
    shown = capsys.readouterr().err.strip().removeprefix("minisci.profiles: ")
    assert shlex.split(shown) == ["dvc", *calls[0][3:]] and "'pretrain.seeds=[13]'" in shown


def test_a_grid_on_top_of_a_profile_is_queued_through_it(tmp_path, monkeypatch, capsys):
    # docs/experiments.md "A grid on top of a profile": the arguments after --run follow the profile's,
    # and DVC applies -S overrides in order, so the user's value of a profile key wins
    import subprocess

    from dvc.utils.hydra import apply_overrides

    from minisci import profiles

    calls = []
    monkeypatch.setattr(subprocess, "call", lambda cmd: calls.append(cmd) or 0)
    monkeypatch.chdir(REPO)
    assert profiles.main(["quick", "--run", "--queue", "-S", "finetune_ner.learning_rate=1e-4"]) == 0
    overrides = [a for flag, a in zip(calls[0], calls[0][1:]) if flag == "-S"]
    assert overrides[-1] == "finetune_ner.learning_rate=1e-4" and "finetune_ner.learning_rate=0.0003" in overrides
    assert "--queue" in calls[0]
    params = tmp_path / "params.yaml"
    params.write_text((REPO / "params.yaml").read_text())
    apply_overrides(params, overrides)
    assert load_params(params)["finetune_ner"]["learning_rate"] == 1e-4
    doc = (REPO / "docs" / "experiments.md").read_text()
    assert "python -m minisci.profiles quick --run --queue -S finetune_ner.learning_rate=1e-4" in doc


def test_an_integer_where_a_name_belongs_is_told_to_be_quoted(tmp_path):
    from minisci.config import load_catalog

    entry = {
        "task": "classification",
        "dir": "data/mine",
        "format": "jsonl",
        "splits": {"train": "train.jsonl", "dev": "dev.jsonl", "test": "test.jsonl"},
        "labels": [0, 1, 2],
    }
    path = tmp_path / "datasets.yaml"
    path.write_text(yaml.safe_dump({"datasets": {"mine": entry}}))
    with pytest.raises(ConfigError) as e:
        load_catalog(path)
    assert str(e.value) == f"{path}: datasets.mine.labels: expected str, got 0 (quote it in YAML: '0')"
