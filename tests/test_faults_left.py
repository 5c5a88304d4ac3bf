"""The faults left after the bad-input tables: each row builds one broken input, runs the stage or
command that meets it first through the one error mechanism (:func:`minisci.stage.run_stage`), and
expects one line on stderr, exit 1 and no output written."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import REPO, TINY_MODEL

from minisci.data.fetch import read_manifest
from minisci.pretrain.model import resolve_model_path
from minisci.stage import run_stage
from minisci.training import checkpoint_to_resume

PARAMS = yaml.safe_load((REPO / "params.yaml").read_text())
DATASETS = yaml.safe_load((REPO / "data/datasets.yaml").read_text())["datasets"]
NER_ENTRY = {
    "task": "ner",
    "dir": "data/d",
    "splits": {"train": "train.txt", "dev": "dev.txt", "test": "test.txt"},
    "format": "conll",
}


def stage(name: str):
    spec = importlib.util.spec_from_file_location(f"_stage_{name}", REPO / "stages" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def params_with(tmp: Path, datasets: dict | None = None, **sections) -> str:
    """params.yaml with ``sections`` replaced, and the dataset catalogue data/datasets.yaml."""
    (tmp / "params.yaml").write_text(yaml.safe_dump({**PARAMS, **sections}, sort_keys=False, allow_unicode=True))
    (tmp / "data").mkdir(exist_ok=True)
    catalogue = {"datasets": DATASETS if datasets is None else datasets}
    (tmp / "data/datasets.yaml").write_text(yaml.safe_dump(catalogue, sort_keys=False, allow_unicode=True))
    return "params.yaml"


def ner_files(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev", "test"):
        (folder / f"{split}.txt").write_text("Aspirin B-Chemical\nhelps O\n\n")


def prepare(tmp: Path, datasets: dict, name: str = "d"):
    """prepare_data for catalogue entry ``name`` as dvc.yaml runs it."""
    argv = ["--dataset", name, "--data", str(datasets[name]["dir"]) if name in datasets else "data/d"]
    params_with(tmp, datasets)
    argv += ["--out", "data/prepared/d", "--catalogue", "data/datasets.yaml"]
    return lambda: run_stage(stage("prepare_data"), argv)


# 3, 4. the catalogue ----------------------------------------------------------------------------------------


def labels_empty(tmp):
    ner_files(tmp / "data/d")
    return prepare(tmp, {"d": {**NER_ENTRY, "labels": []}})


def name_with_a_space(tmp):
    params_with(tmp, {"bc5 cdr": NER_ENTRY})
    return lambda: run_stage(stage("code_fingerprint"), ["--stages", str(REPO / "stages"), "--out", "fp"])


def dir_outside(tmp):
    ner_files(tmp.parent / "elsewhere")
    return prepare(tmp, {"d": {**NER_ENTRY, "dir": str(tmp.parent / "elsewhere")}})


def dir_above(tmp):
    ner_files(tmp.parent / "elsewhere")
    return prepare(tmp, {"d": {**NER_ENTRY, "dir": "../elsewhere"}})


def file_linked_outside(tmp):
    ner_files(tmp / "data/d")
    ner_files(tmp.parent / "elsewhere")
    (tmp / "data/d/train.txt").unlink()
    (tmp / "data/d/train.txt").symlink_to(tmp.parent / "elsewhere/train.txt")
    return prepare(tmp, {"d": NER_ENTRY})


# 4. --json files of the report commands ------------------------------------------------------------------


def latin1_json(module: str, *argv: str):
    def build(tmp):
        (tmp / "show.json").write_bytes('[{"name": "caf\xe9"}]'.encode("latin-1"))
        main = importlib.import_module(f"minisci.report.{module}").main
        return lambda: run_stage(main, [*argv, "--json", "show.json"])

    return build


# 5. code_fingerprint: stage code and the base model ---------------------------------------------------------


def fingerprint_stages(tmp, script: bytes, base: str | None = None):
    (tmp / "stages").mkdir()
    (tmp / "src" / "minisci").mkdir(parents=True)
    (tmp / "stages" / "broken.py").write_bytes(script)
    model = {**PARAMS["model"], "base": base} if base else PARAMS["model"]
    params_with(tmp, model=model)
    return lambda: run_stage(stage("code_fingerprint"), ["--stages", "stages", "--out", "fp"])


def base_model_folder(config: dict, weights: bool, tokenizer: bool = True):
    def build(tmp):
        (tmp / "base").mkdir()
        (tmp / "base" / "config.json").write_text(json.dumps(config))
        if tokenizer:
            (tmp / "base" / "vocab.txt").write_text("[PAD]\n[UNK]\n")
        if weights:
            (tmp / "base" / "model.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
        return fingerprint_stages(tmp, b"x = 1\n", base="base")

    return build


def scratch_config_typo(tmp):
    (tmp / "stages").mkdir()
    (tmp / "src" / "minisci").mkdir(parents=True)
    params_with(tmp, model={**TINY_MODEL, "scratch_config": {**TINY_MODEL["scratch_config"], "hiden_size": 32}})
    return lambda: run_stage(stage("code_fingerprint"), ["--stages", "stages", "--out", "fp"])


def section_value(section: str, key: str, value):
    def build(tmp):
        (tmp / "stages").mkdir()
        (tmp / "src" / "minisci").mkdir(parents=True)
        params_with(tmp, **{section: {**PARAMS[section], key: value}})
        return lambda: run_stage(stage("code_fingerprint"), ["--stages", "stages", "--out", "fp"])

    return build


def no_finetune_datasets(tmp):
    (tmp / "stages").mkdir()
    (tmp / "src" / "minisci").mkdir(parents=True)
    params_with(tmp, **{s: {**PARAMS[s], "datasets": []} for s in ("finetune_ner", "finetune_classification")})
    return lambda: run_stage(stage("code_fingerprint"), ["--stages", "stages", "--out", "fp"])


def ner_section_not_a_mapping(tmp):
    (tmp / "stages").mkdir()
    (tmp / "src" / "minisci").mkdir(parents=True)
    params_with(tmp, finetune_ner=5)
    return lambda: run_stage(stage("code_fingerprint"), ["--stages", "stages", "--out", "fp"])


def finetune_seeds(seeds):
    def build(tmp):
        (tmp / "stages").mkdir()
        (tmp / "src" / "minisci").mkdir(parents=True)
        params_with(tmp, finetune_ner={**PARAMS["finetune_ner"], "seeds": seeds})  # pretraining: three, paired
        return lambda: run_stage(stage("code_fingerprint"), ["--stages", "stages", "--out", "fp"])

    return build


def extra_section(tmp):
    (tmp / "stages").mkdir()
    (tmp / "src" / "minisci").mkdir(parents=True)
    params_with(tmp, finetune_nre={"epochs": 3})  # what dvc exp run -S +finetune_nre.epochs=3 writes
    return lambda: run_stage(stage("code_fingerprint"), ["--stages", "stages", "--out", "fp"])


def pretrain_seeds(seeds):
    def build(tmp):
        (tmp / "stages").mkdir()
        (tmp / "src" / "minisci").mkdir(parents=True)
        params_with(tmp, pretrain={**PARAMS["pretrain"], "seeds": seeds})
        return lambda: run_stage(stage("code_fingerprint"), ["--stages", "stages", "--out", "fp"])

    return build


def catalogue_entry(name: str, entry: dict, corpora: str | None = None, datasets_text: str | None = None):
    """code_fingerprint with the real catalogue plus ``entry``, the real manifest, and ``corpora`` as
    data/corpora.yaml (or ``datasets_text`` as data/datasets.yaml) where given."""

    def build(tmp):
        (tmp / "stages").mkdir()
        (tmp / "src" / "minisci").mkdir(parents=True)
        params_with(tmp, {**DATASETS, name: entry})
        shutil.copy(REPO / "data/manifest.tsv", tmp / "data/manifest.tsv")
        if corpora is not None:
            (tmp / "data/corpora.yaml").write_text(corpora)
        if datasets_text is not None:
            (tmp / "data/datasets.yaml").write_text(datasets_text)
        return lambda: run_stage(stage("code_fingerprint"), ["--stages", "stages", "--out", "fp"])

    return build


MY_NER = {**NER_ENTRY, "dir": "data/my_ner", "labels": ["Galaxy", "Star"]}
CATALOGUE_TEXT = yaml.safe_dump({"datasets": DATASETS}, sort_keys=False)
GENERAL = "  general: {path: data/raw/corpus/general.jsonl, format: jsonl, text_field: text, weight: 1}\n"

CUSTOM = {"model_type": "mystery", "auto_map": {"AutoConfig": "configuration_mystery.MysteryConfig"}}
BERT = {"model_type": "bert", "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 1}

CASES = [
    (
        "labels: []",
        labels_empty,
        "data/datasets.yaml: 'datasets.d': labels is empty; list them, or null to read them from train",
    ),
    (
        "catalogue name with a space",
        name_with_a_space,
        "data/datasets.yaml: dataset name 'bc5 cdr' in 'datasets' must start with a letter or digit and hold only "
        "letters, digits, '_' and '-' (it names stages, folders and params keys)",
    ),
    (
        "dataset dir outside the repository",
        dir_outside,
        "data/datasets.yaml: 'datasets.d': dir '{tmp.parent}/elsewhere' is outside the repository, where DVC does "
        "not version it: bring the data in with 'dvc add' or 'dvc import-url' and give its repository path",
    ),
    (
        "dataset dir above the repository",
        dir_above,
        "data/datasets.yaml: 'datasets.d': dir '../elsewhere' is outside the repository, where DVC does "
        "not version it: bring the data in with 'dvc add' or 'dvc import-url' and give its repository path",
    ),
    (
        "dataset file linked outside the repository",
        file_linked_outside,
        "data/d/train.txt: is a link to {tmp.parent}/elsewhere/train.txt, outside the repository, where DVC "
        "does not version it: bring the data in with 'dvc add' or 'dvc import-url'",
    ),
    (
        "Latin-1 --json to experiments",
        latin1_json("experiments", "--out", "log.md"),
        "show.json: not UTF-8 (byte 0xe9 at byte offset 14); dvc exp show --json writes UTF-8",
    ),
    (
        "Latin-1 --json to python -m minisci.report",
        latin1_json("__main__"),
        "show.json: not UTF-8 (byte 0xe9 at byte offset 14); dvc exp show --json writes UTF-8",
    ),
    (
        "syntax error in stage code",
        lambda tmp: fingerprint_stages(tmp, b"import sys\nx = (\n"),
        "stages/broken.py:2: syntax error: '(' was never closed",
    ),
    (
        "stage code that is not UTF-8",
        lambda tmp: fingerprint_stages(tmp, b"# caf\xe9\nx = 1\n"),
        "stages/broken.py:1: not UTF-8 (byte 0xe9 at byte offset 5)",
    ),
    (
        "base model of an unknown type with an auto_map",
        base_model_folder(CUSTOM, weights=True),
        "model 'base': model_type 'mystery' is not an architecture transformers knows and its auto_map asks to "
        "run the folder's own code, which minisci never does; use a masked-LM encoder (BERT, RoBERTa, "
        "DistilBERT, ELECTRA, DeBERTa-v2, ModernBERT)",
    ),
    (
        "base model of a type without a masked-LM class (GPT-2): refused by the first stage, not by "
        "base_model after the corpus stages",
        base_model_folder({"model_type": "gpt2"}, weights=True),
        "model 'base': transformers has no masked-LM class for 'gpt2', so it cannot be pretrained with MLM; "
        "use a masked-LM encoder (BERT, RoBERTa, DistilBERT, ELECTRA, DeBERTa-v2, ModernBERT)",
    ),
    (
        "a RoBERTa with pretrain.nsp: true: refused by the first stage, not by pretrain after the corpus stages",
        base_model_folder({"model_type": "roberta"}, weights=True),
        "model 'base': pretrain.nsp: true needs a BERT model with an NSP head; set pretrain.nsp: false for roberta",
    ),
    (
        "scratch model config with a typo",
        scratch_config_typo,
        "params section 'model': scratch_config has unknown or reserved keys ['hiden_size']; see transformers.BertConfig",
    ),
    (
        "three pretraining seeds, two fine-tuning seeds (paired)",
        finetune_seeds([13, 14]),
        "params.yaml: finetune_ner.seeds: params section 'pretrain': seed_design paired needs a multiple of 3 "
        "fine-tuning seeds (one run or more on each of the 3 pretraining seeds), got 2",
    ),
    ("fine-tuning seeds not a list", finetune_seeds(13), "params finetune_ner.seeds: expected a list, got 13"),
    (
        "a fine-tuning section that is not a mapping: its own check, before the dataset lists are read",
        ner_section_not_a_mapping,
        "params section 'finetune_ner' must be a mapping, got int",
    ),
    (
        "no dataset for either task: refused before any stage runs, not by export_metrics at the end",
        no_finetune_datasets,
        "params.yaml: no dataset to fine-tune on: list at least one catalogue entry in finetune_ner.datasets "
        "or finetune_classification.datasets",
    ),
    (
        "a seed design the fine-tuning stages do not run",
        section_value("pretrain", "seed_design", "cross"),
        "params.yaml: pretrain.seed_design: the fine-tuning stages run paired, not cross "
        "(cross is for studies: minisci.report.bootstrap.pretrain_components)",
    ),
    (
        "a pretraining value out of range, met before any stage runs",
        section_value("pretrain", "mlm_probability", 1.5),
        "params section 'pretrain': mlm_probability must be in (0, 1)",
    ),
    (
        "a negative weight decay (AdamW checks only its default, not a parameter group's)",
        section_value("finetune_ner", "weight_decay", -1.0),
        "params section 'finetune_ner': weight_decay must be >= 0 (0 = off), got -1.0",
    ),
    (
        "a negative pretraining weight decay",
        section_value("pretrain", "weight_decay", -0.01),
        "params section 'pretrain': weight_decay must be >= 0 (0 = off), got -0.01",
    ),
    (
        "a negative fine-tuning seed: refused here, not by transformers' set_seed in the stage",
        finetune_seeds([13, -14, 15]),
        "params section 'finetune_ner': seeds must be in [0, 2**32 - 1] (numpy's and torch's seed range), got -14",
    ),
    (
        "a pretraining seed out of numpy's range",
        pretrain_seeds([13, 14, 2**32]),
        "params section 'pretrain': seeds must be in [0, 2**32 - 1] (numpy's and torch's seed range), got 4294967296",
    ),
    (
        "a negative report seed: refused here, not blamed on a metrics file by export_metrics",
        section_value("export_metrics", "seed", -1),
        "params section 'export_metrics': seed must be in [0, 2**32 - 1] (numpy's and torch's seed range), got -1",
    ),
    (
        "a corpus seed out of range",
        section_value("sample_corpus", "seed", -3),
        "params section 'sample_corpus': seed must be in [0, 2**32 - 1] (numpy's and torch's seed range), got -3",
    ),
    (
        "a section no stage reads (a typo DVC's +key syntax lets in)",
        extra_section,
        "params.yaml: unknown params section 'finetune_nre': no stage reads it; the sections: ['fetch_data', "
        "'sample_corpus', 'make_pairs', 'finetune_embeddings', 'export_metrics', 'model', 'pretrain', "
        "'finetune_ner', 'finetune_classification']",
    ),
    (
        "a task-adaptive dataset not in the catalogue: refused before prepare_data, not by sample_corpus",
        section_value("sample_corpus", "tapt_datasets", ["nope"]),
        "params sample_corpus.tapt_datasets: ['nope'] are not in the datasets catalogue data/datasets.yaml; "
        f"declared: {sorted(DATASETS)}",
    ),
    (
        "a tokenizer that cannot be found is named as model.tokenizer, not model.base",
        section_value("model", "tokenizer", "no-such-tokenizer-dir"),
        "cannot resolve model 'no-such-tokenizer-dir' offline: it is not an installed package (package:NAME), not a "
        "local directory, and not in the local Hugging Face cache. Put a copy in a directory and set model.tokenizer "
        "to its path.",
    ),
    (
        "a dataset put in fetch_data's folder, which DVC's next checkout would delete",
        catalogue_entry("mine", {**NER_ENTRY, "dir": "data/raw/ner/mine"}),
        "data/datasets.yaml: datasets.mine: data/raw/ner/mine/train.txt is not a file fetch_data copies "
        "(data/manifest.tsv): data/raw is fetch_data's output, which DVC replaces whole, deleting what else is "
        "there; put your dataset in a folder of its own (e.g. data/mine) and 'dvc add' it",
    ),
    (
        "a split file outside the dataset's dir, where DVC would not see it change",
        catalogue_entry("mine", {**MY_NER, "splits": {**MY_NER["splits"], "train": "../extra/train.txt"}}),
        "data/datasets.yaml: datasets.mine.splits.train: '../extra/train.txt' is not inside dir 'data/my_ner', the "
        "folder DVC watches for this dataset; give a file name inside it",
    ),
    (
        "a split file given as an absolute path",
        catalogue_entry("mine", {**MY_NER, "splits": {**MY_NER["splits"], "test": "/tmp/test.txt"}}),
        "data/datasets.yaml: datasets.mine.splits.test: '/tmp/test.txt' is not inside dir 'data/my_ner', the "
        "folder DVC watches for this dataset; give a file name inside it",
    ),
    (
        "a published score under a name the report never shows",
        catalogue_entry("mine", {**MY_NER, "published": {"acc": {"BERT": 0.9}}}),
        "data/datasets.yaml: datasets.mine.published: 'acc' names no score of this dataset: a ner dataset's report "
        "shows 'f1' and 'f1.<label>' with a label of ['Galaxy', 'Star']",
    ),
    (
        "a published per-type score of a type the dataset does not have",
        catalogue_entry("mine", {**MY_NER, "published": {"f1.Planet": {"BERT": 0.9}}}),
        "data/datasets.yaml: datasets.mine.published: 'f1.Planet' names no score of this dataset: a ner dataset's "
        "report shows 'f1' and 'f1.<label>' with a label of ['Galaxy', 'Star']",
    ),
    (
        "a dataset entry written at the top level of the catalogue, outside 'datasets:'",
        catalogue_entry("x", MY_NER, datasets_text=CATALOGUE_TEXT + "my_ner: {task: ner}\n"),
        "data/datasets.yaml: top-level key 'my_ner' is not read: entries go under 'datasets:' (indent it there)",
    ),
    (
        "a corpus entry written at the top level of the corpus catalogue",
        catalogue_entry("x", MY_NER, corpora="corpora:\n" + GENERAL + "logs: {dir: data/corpora/logs}\n"),
        "data/corpora.yaml: top-level key 'logs' is not read: entries go under 'corpora:' (indent it there)",
    ),
    (
        "a key misspelt in the corpus catalogue: refused before DVC removes sample_corpus's outputs",
        catalogue_entry("x", MY_NER, corpora="corpora:\n" + GENERAL.replace("weight", "weigth")),
        "data/corpora.yaml: 'corpora.general': unknown keys ['weigth']; allowed: ['dir', 'filter', 'flag_field', "
        "'format', 'id_field', 'kind_field', 'path', 'source_field', 'text_field', 'title_field', 'weight']",
    ),
    (
        "a corpus of the user's own in fetch_data's folder",
        catalogue_entry("x", MY_NER, corpora="corpora:\n" + GENERAL.replace("general", "mine")),
        "data/corpora.yaml: corpora.mine: data/raw/corpus/mine.jsonl is not a file fetch_data copies "
        "(data/manifest.tsv): that folder is fetch_data's output, which DVC replaces whole; put your own corpus "
        "under data/corpora (e.g. data/corpora/mine)",
    ),
    (
        "a key misspelt in the embeddings section",
        section_value("finetune_embeddings", "n_trian", 100),
        "params section 'finetune_embeddings': unknown keys ['n_trian']; allowed: ['batch_size', "
        "'bootstrap_resamples', 'encoder', 'epochs', 'equivalence_margin', 'eval_batch_size', 'eval_max_length', "
        "'hard_negatives', 'learning_rate', 'logging_steps', 'max_length', 'n_candidates', 'n_dev_candidates', "
        "'n_dev_queries', 'n_test_queries', 'n_train', 'precision', 'scale', 'seed', 'warmup_ratio']",
    ),
    (
        "a tokenizer with more ids than the model has embeddings",
        base_model_folder({**BERT, "vocab_size": 1}, weights=True),
        "model.base 'base': base/vocab.txt has token ids up to 1, but model 'base' has 1 token "
        "embeddings (vocab_size in its config.json); use the tokenizer saved with the model",
    ),
    (
        "base model folder without tokenizer files",
        base_model_folder(BERT, weights=True, tokenizer=False),
        "model.base 'base': base: no tokenizer files (one of tokenizer.json, vocab.txt, vocab.json, spiece.model, "
        "sentencepiece.bpe.model, tokenizer.model); save the model's tokenizer beside it (tokenizer.save_pretrained(DIR))",
    ),
    (
        "base model folder without weights",
        base_model_folder(BERT, weights=False),
        "model 'base': base holds no *.safetensors weights (minisci loads only safetensors, never pickled "
        ".bin files); copy the model's model.safetensors there",
    ),
]


@pytest.mark.parametrize(("build", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_fault_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys, build, message):
    tmp = tmp_path / "repo"
    tmp.mkdir()
    monkeypatch.chdir(tmp)
    run = build(tmp)
    before = sorted(p.relative_to(tmp).as_posix() for p in tmp.rglob("*"))
    assert run() == 1
    assert capsys.readouterr().err == f"error: {message.format(tmp=tmp)}\n"
    assert sorted(p.relative_to(tmp).as_posix() for p in tmp.rglob("*")) == before


# 4. a manifest digest in upper case ---------------------------------------------------------------------


def test_manifest_digest_is_read_in_either_case(tmp_path):
    digest = "AB" * 32
    (tmp_path / "m.tsv").write_text(f"path\tbytes\tsha256\turl\nner/x.txt\t1\t{digest}\t\n")
    assert read_manifest(tmp_path / "m.tsv")[0].sha256 == digest.lower()


# 6. a checkpoint folder whose fingerprint.json was cut short ----------------------------------------------


def test_unreadable_checkpoint_fingerprint_is_no_resumable_checkpoint(tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    checkpoint_to_resume(ckpt, "run-a")
    (ckpt / "checkpoint-4").mkdir()
    (ckpt / "checkpoint-4" / "trainer_state.json").write_text('{"global_step": 4}')
    (ckpt / "fingerprint.json").write_text('{"fingerprint": "ru')  # a kill or a full disk mid-write
    capsys.readouterr()
    assert checkpoint_to_resume(ckpt, "run-a") is None
    assert capsys.readouterr().out == (
        f"{ckpt}/fingerprint.json: unreadable (cut short by a kill or a full disk?); "
        "its checkpoints are not resumable: deleted\n"
    )
    assert not (ckpt / "checkpoint-4").exists()
    assert json.loads((ckpt / "fingerprint.json").read_text()) == {"fingerprint": "run-a"}


# 5. export_metrics on fine-tuning outputs it cannot compare ----------------------------------------------


def _edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _nan_f1(m: dict) -> None:
    m["test"]["f1"] = float("nan")


def _other_seeds(m: dict) -> None:
    m["seeds"] = [13, 14]


EXPORT_CASES = [
    (
        "empty test predictions",
        lambda root: (root / "models/finetune_ner/toyner/adapted/test_predictions.jsonl").write_text(""),
        "models/finetune_ner/toyner/adapted/test_predictions.jsonl: no test predictions; "
        "rerun dvc repro -f finetune_ner@toyner-adapted",
    ),
    (
        "arms that ran different seeds",
        lambda root: _edit_json(root / "metrics/finetune_ner/toyner/baseline.json", _other_seeds),
        "finetune_ner toyner: the arms ran different seeds (baseline [13, 14], adapted [13, 14, 15]); rerun both "
        "with finetune_ner.seeds: dvc repro -f finetune_ner@toyner-baseline finetune_ner@toyner-adapted",
    ),
    (
        "NaN F1 in a metrics file",
        lambda root: _edit_json(root / "metrics/finetune_classification/toycls/adapted.json", _nan_f1),
        "metrics/finetune_classification/toycls/adapted.json: test.f1 is nan, not a number; "
        "rerun dvc repro -f finetune_classification@toycls-adapted",
    ),
]


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    from helpers import synthetic_run

    root = tmp_path_factory.mktemp("export")
    synthetic_run(root)
    return root


@pytest.mark.parametrize(("change", "message"), [c[1:] for c in EXPORT_CASES], ids=[c[0] for c in EXPORT_CASES])
def test_export_metrics_says_what_to_rerun(synthetic, tmp_path, monkeypatch, capsys, change, message):
    import shutil

    from helpers import CFG

    from minisci.report import export

    root = shutil.copytree(synthetic, tmp_path / "run")
    monkeypatch.chdir(root)
    change(root)
    runs = {"ner": ["toyner"], "classification": ["toycls"]}
    collect = lambda argv: export.collect(Path("metrics"), Path("models"), CFG, runs, {}, Path("data/prepared"))  # noqa: E731
    assert run_stage(collect, []) == 1
    assert capsys.readouterr().err == f"error: {message}\n"


# 7. log noise: transformers' tied-weights warning for a base without its masked-LM head -------------------


def test_a_base_without_its_mlm_head_is_said_once_in_our_words(tmp_path, capfd):
    from transformers import BertConfig, BertModel

    from minisci.config import ModelConfig
    from minisci.pretrain.model import load_pretraining_model

    config = BertConfig(vocab_size=64, hidden_size=8, num_hidden_layers=1, num_attention_heads=1, intermediate_size=8)
    BertModel(config, add_pooling_layer=False).save_pretrained(tmp_path / "encoder")  # an encoder, as MiniLM ships
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_warning()  # as a stage process starts (a serving test may have silenced transformers)
    capfd.readouterr()
    try:
        load_pretraining_model(ModelConfig(base=str(tmp_path / "encoder")), 64, seed=0)
    finally:
        hf_logging.set_verbosity(level)
    out, err = capfd.readouterr()
    assert "seem corrupted" not in out + err
    assert out.count("has no masked-LM output bias (cls.predictions.bias, tied to cls.predictions.decoder.bias)") == 1


# 6. precision: bf16 on a machine without a GPU, checked before any stage trains -------------------------------


def bf16_sections(tmp: Path, model: dict | None = None) -> None:
    (tmp / "stages").mkdir()
    (tmp / "src" / "minisci").mkdir(parents=True)
    params_with(
        tmp,
        finetune_ner={**PARAMS["finetune_ner"], "precision": "bf16"},
        pretrain={**PARAMS["pretrain"], "precision": "bf16"},
        model=model or PARAMS["model"],
    )


def test_bf16_on_a_cpu_without_it_fails_before_any_stage_trains(tmp_path, monkeypatch, capsys):
    from minisci import training

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(training, "cpu_info", lambda: ("Test CPU", {"avx2", "avx512f"}))
    bf16_sections(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    assert run_stage(stage("code_fingerprint"), ["--stages", "stages", "--out", "fp"]) == 1
    assert capsys.readouterr().err == (
        "error: params.yaml: pretrain.precision, finetune_ner.precision: bf16 needs native bf16 on CPU "
        "(avx512_bf16 or amx_bf16), which Test CPU lacks; use fp32 or auto\n"
    )
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("ratio", [0.53, 1.4])
def test_bf16_slower_than_fp32_on_this_cpu_is_one_warning_line(tmp_path, monkeypatch, capsys, ratio):
    """Where the CPU has native bf16, the probe of the base model's feed-forward shape decides: a
    warning with the ratio when bf16 is the slower, silence when it is the faster; the stage goes on."""
    from minisci import bf16, training

    probed = []
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(training, "cpu_info", lambda: ("Test CPU", {"avx512_bf16"}))
    monkeypatch.setattr(bf16, "bf16_speed_ratio", lambda i, o, rows: probed.append((i, o, rows)) or ratio)
    monkeypatch.setattr(bf16, "native_bf16", lambda: True)
    bf16_sections(tmp_path)
    assert run_stage(stage("code_fingerprint"), ["--stages", "stages", "--out", "fp"]) == 0
    assert probed == [(384, 1536, 1024)]  # all-MiniLM-L6-v2's hidden x intermediate, a training batch's rows
    shutil.rmtree(tmp_path / "stages")
    shutil.rmtree(tmp_path / "src")
    bf16_sections(tmp_path, model=TINY_MODEL)  # a model from scratch: its scratch_config's shape
    assert run_stage(stage("code_fingerprint"), ["--stages", "stages", "--out", "fp"]) == 0
    assert probed[1:] == [(32, 64, 1024)]
    warning = (
        "warning: params.yaml: pretrain.precision, finetune_ner.precision: bf16 will train slower than fp32 on this "
        "CPU: its bf16 matrix products ran at 0.53x fp32's speed in a probe of a 384x1536 layer (native bf16, "
        "slower than fp32 here); auto trains in fp32 here\n"
    )
    assert capsys.readouterr().err == (warning + warning.replace("384x1536", "32x64") if ratio < 1 else "")
    assert (tmp_path / "fp" / "model_base.json").is_file()


def test_the_precision_check_costs_nothing_without_bf16():
    """The default params (auto everywhere): the always-run stage imports no torch for it."""
    from test_import_footprint import imported

    code = (
        "import importlib.util, json\n"
        f"spec = importlib.util.spec_from_file_location('cf', {str(REPO / 'stages/code_fingerprint.py')!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        f"m.check_precision({str(REPO / 'params.yaml')!r}, {{}})\n"
    )
    assert "torch" not in imported(code)


@pytest.mark.parametrize(
    ("config", "shape"),
    [
        ({"hidden_size": 384, "intermediate_size": 1536}, (384, 1536)),
        ({"dim": 768}, (768, 3072)),
        ({"hidden_size": "x"}, (768, 3072)),
    ],
)
def test_the_probe_takes_the_models_feed_forward_shape(config, shape):
    spec = importlib.util.spec_from_file_location("_cf", REPO / "stages" / "code_fingerprint.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.widest_layer(config) == shape


@pytest.mark.parametrize("files", ["tokenizer.json", "vocab.txt"])
def test_the_tokenizer_check_reads_the_top_id_transformers_loads(tiny_model_dir, tmp_path, files):
    # code_fingerprint reads the largest id from the files (no transformers); it is len(tokenizer) - 1
    from transformers import AutoTokenizer

    if files == "tokenizer.json":  # what transformers saves
        tok = AutoTokenizer.from_pretrained(tiny_model_dir)
        tok.add_tokens(["nephrotoxicity", "cisplatin-induced"])
        tok.save_pretrained(tmp_path)
    else:  # an older save: vocab.txt, one id a line, and added_tokens.json
        for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
            shutil.copy(resolve_model_path(TINY_MODEL["tokenizer"]) / name, tmp_path)
        (tmp_path / "added_tokens.json").write_text(json.dumps({"nephrotoxicity": 30522, "cisplatin-induced": 30523}))
    spec = importlib.util.spec_from_file_location("_stage_cf", REPO / "stages" / "code_fingerprint.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    top, where = module.tokenizer_top_id(tmp_path)
    assert top == len(AutoTokenizer.from_pretrained(tmp_path)) - 1 == 30523
    assert where.name == files.replace("vocab.txt", "added_tokens.json")


def test_fingerprints_of_stage_scripts_that_are_gone_are_removed_and_nothing_else(tmp_path, monkeypatch):
    # the folder persists across runs (dvc.yaml), so the stage removes what it wrote for a deleted script
    monkeypatch.chdir(tmp_path)
    run = fingerprint_stages(tmp_path, b"x = 1\n")
    (tmp_path / "fp").mkdir()
    (tmp_path / "fp" / "gone.json").write_text(json.dumps({"stage": "gone", "code": "0"}))
    (tmp_path / "fp" / "notes.json").write_text(json.dumps({"stage": "mine"}))  # not a fingerprint we wrote
    assert run() == 0
    assert sorted(p.name for p in (tmp_path / "fp").iterdir()) == ["broken.json", "model_base.json", "notes.json"]


def test_a_stage_running_another_copy_of_minisci_is_refused_before_anything(tmp_path, monkeypatch, capsys):
    # an editable install of another clone: the fingerprints would describe code the stages do not run.
    # Only the code a stage imports counts: a queued DVC experiment runs a copy of the workspace but imports
    # the install, so an edit of serving code there while the queue runs must not stop the experiment
    monkeypatch.chdir(tmp_path)
    shutil.copytree(REPO / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (tmp_path / "stages").mkdir()
    (tmp_path / "stages" / "writer.py").write_text("from minisci.io import write_json\n")
    params_with(tmp_path)
    argv = ["--stages", "stages", "--out", "fp"]
    assert run_stage(stage("code_fingerprint"), argv) == 0  # a copy of the same bytes runs
    shutil.rmtree(tmp_path / "fp")
    with (tmp_path / "src/minisci/serve/cli.py").open("a") as f:
        f.write("\n# an edit of code no stage imports\n")
    assert run_stage(stage("code_fingerprint"), argv) == 0
    shutil.rmtree(tmp_path / "fp")
    with (tmp_path / "src/minisci/io.py").open("a") as f:
        f.write("\n# an edit this checkout has and the running package has not\n")
    capsys.readouterr()
    assert run_stage(stage("code_fingerprint"), argv) == 1
    import minisci

    assert capsys.readouterr().err == (
        f"error: the minisci package that runs is {Path(minisci.__file__).resolve().parent}, not this checkout's "
        "src/minisci, and 1 of the files the stages import differ (first: io.py); install this checkout "
        "(pip install -e .) or run with PYTHONPATH=src\n"
    )
    assert not (tmp_path / "fp").exists()
