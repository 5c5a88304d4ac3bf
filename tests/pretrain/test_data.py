"""The pretrain_data stage: the examples tokenised once (pairs or packed blocks), memory-mapped,
with their tokenizer and word pieces per corpus; bad input stops in one line with no output."""

import contextlib
import json
import subprocess

import datasets
import pytest
import yaml
from conftest import tiny_params
from helpers import configs, pretraining_data, write_pairs

from minisci.config import PretrainConfig, from_dict
from minisci.errors import DataFormatError, MinisciError
from minisci.pretrain.data import load_pretraining_data, read_pairs, tokenize_pairs
from minisci.pretrain.model import load_tokenizer
from minisci.stage import run_stage


def run_data_stage(tmp_path, pairs, params: dict, capsys) -> subprocess.CompletedProcess:
    """stages/pretrain_data.py on ``pairs`` (and the documents beside them) -> tmp_path/out, m.json,
    in this process (as the stage's own error wrapper runs it)."""
    import pretrain_data

    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    argv = ["--pairs", str(pairs), "--docs", str(pairs / "documents.jsonl"), "--out", str(tmp_path / "out")]
    argv += ["--metrics", str(tmp_path / "m.json"), "--params", str(tmp_path / "params.yaml")]
    capsys.readouterr()
    bars = datasets.utils.logging.is_progress_bar_enabled()
    try:
        with contextlib.chdir(tmp_path):  # not the repository: a stage sweeps the DVC project it runs in
            rc = run_stage(pretrain_data.main, argv)
    finally:  # the stage turns datasets' bars off for its process; this process goes on with other tests
        if bars:
            datasets.enable_progress_bars()
    out = capsys.readouterr()
    return subprocess.CompletedProcess(argv, rc, out.out, out.err)


def test_pairs_are_tokenised_as_the_trainer_did_and_counted_per_corpus(tmp_path):
    model_cfg, cfg = configs()
    pairs = write_pairs(tmp_path / "pairs")
    data = load_pretraining_data(pretraining_data(pairs, model_cfg, cfg), cfg)
    tokenizer = load_tokenizer(model_cfg)
    for name, ds in (("train", data.train), ("heldout", data.heldout)):
        # the same rows and features as tokenising the pairs in memory: a checkpoint of that run resumes
        direct = tokenize_pairs(read_pairs(pairs / f"{name}.jsonl"), tokenizer, cfg.max_seq_length)
        assert ds.features == direct.features and ds.to_dict() == direct.to_dict()
        assert data.manifest[name]["tokens"] == sum(direct["length"])
    assert data.train.cache_files  # memory-mapped from the folder, not held in memory
    m = data.manifest
    assert (m["layout"], m["train"]["examples"], m["heldout"]["examples"]) == ("pairs", 160, 32)
    assert m["built_with"]["nsp"] is True and m["base_vocab_size"] == len(tokenizer)
    docs = [json.loads(line) for line in (pairs / "documents.jsonl").read_text().splitlines()]
    for corpus, c in m["corpora"].items():
        mine = [d for d in docs if d["domain"] == corpus]
        assert c["train_documents"] + c["heldout_documents"] == len(mine)
        pieces = sum(len(tokenizer(" ".join(d["sentences"]), add_special_tokens=False)["input_ids"]) for d in mine)
        assert c["train_tokens"] + c["heldout_tokens"] == pieces
    assert set(m["corpora"]) == {"bio", "gen"}


def test_mlm_only_reads_full_packed_blocks(tmp_path):
    model_cfg, cfg = configs(nsp=False, max_seq_length=16)
    data = load_pretraining_data(pretraining_data(write_pairs(tmp_path / "pairs"), model_cfg, cfg), cfg)
    assert data.layout == "blocks" and len(data.train) > 10 and len(data.heldout) > 0
    assert all(len(ids) == 16 for ids in data.train["input_ids"])
    assert set(data.train["corpus"]) == {"bio", "gen"}
    assert not {d for docs in data.heldout["docs"] for d in docs} & {d for docs in data.train["docs"] for d in docs}


def test_data_built_for_other_params_is_refused_in_one_line(tmp_path):
    model_cfg, cfg = configs()
    folder = pretraining_data(write_pairs(tmp_path / "pairs"), model_cfg, cfg)
    _, mlm = configs(nsp=False)
    with pytest.raises(MinisciError, match=r"built with pretrain\.nsp: True.*rebuild it") as e:
        load_pretraining_data(folder, mlm)
    assert "\n" not in str(e.value)
    with pytest.raises(MinisciError, match="no manifest.json"):
        load_pretraining_data(tmp_path, cfg)


def test_a_malformed_pair_names_file_and_line_and_leaves_no_output(tmp_path, capsys):
    pairs = write_pairs(tmp_path / "pairs")
    lines = (pairs / "train.jsonl").read_text().splitlines()
    lines[6] = json.dumps({"a": "only one side", "label": 1})
    (pairs / "train.jsonl").write_text("\n".join(lines) + "\n")
    model_cfg, cfg = configs()
    with pytest.raises(DataFormatError, match=r"train.jsonl:7: expected \{'a': str"):
        pretraining_data(pairs, model_cfg, cfg, tmp_path / "direct")
    proc, out = run_data_stage(tmp_path, pairs, tiny_params(), capsys), tmp_path / "out"
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "train.jsonl:7" in proc.stderr
    assert not out.exists() and not (tmp_path / "m.json").exists()


def test_the_stage_writes_metrics_per_corpus_and_a_tokenizer_the_trainer_loads(tmp_path, capsys):
    pairs = write_pairs(tmp_path / "pairs")
    rows = [json.loads(line) for line in (pairs / "train.jsonl").read_text().splitlines()]
    (pairs / "train.jsonl").write_text(
        "".join(json.dumps({**r, "a": r["a"] + " Nephrotoxicity followed hepatotoxicity."}) + "\n" for r in rows)
    )
    p = tiny_params({"pretrain": {"vocab_extension": 2}})
    proc, out = run_data_stage(tmp_path, pairs, p, capsys), tmp_path / "out"
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "pretrain_data: 160 training pairs" in proc.stdout
    # the stage's log is its own lines: no datasets bars ("Generating train split", "Saving the dataset")
    assert "split" not in proc.stderr and "Saving" not in proc.stderr and "%|" not in proc.stderr, proc.stderr
    m = json.loads((tmp_path / "m.json").read_text())
    assert m["vocab"] == {"added_tokens": 2, "most_frequent": ["hepatotoxicity", "nephrotoxicity"]}
    assert set(m["corpora"]) == {"bio", "gen"}
    run = {k: v for k, v in p["pretrain"].items() if k not in ("seeds", "seed_design")} | {"seed": 13}
    data = load_pretraining_data(out, from_dict(PretrainConfig, run, "pretrain"))
    assert len(data.tokenizer) == m["base_vocab_size"] + 2 and len(data.new_ids) == 2
    assert isinstance(data.train, datasets.Dataset)


def test_a_tokenizer_that_reads_the_text_as_unk_only_is_one_line_and_no_output(tmp_path, capsys):
    # a tokenizer of special tokens only: every word is [UNK], so no example has a target to mask
    specials = tmp_path / "specials"
    specials.mkdir()
    (specials / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    (specials / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer"}))
    (specials / "config.json").write_text(json.dumps({"model_type": "bert"}))
    pairs = write_pairs(tmp_path / "pairs")
    p = tiny_params({"model": {"tokenizer": str(specials)}})
    proc, out = run_data_stage(tmp_path, pairs, p, capsys), tmp_path / "out"
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        f"error: {pairs}: every train example is special tokens only after tokenising with '{specials}' "
        "(words read as [UNK]): the tokenizer does not fit the text; use the model's own"
    )
    assert not out.exists() and not (tmp_path / "m.json").exists()


def test_one_sentence_documents_pretrain_with_nsp_off(tmp_path, capsys):
    """A corpus of one-sentence documents has no sentence pairs: with pretrain.nsp false make_pairs
    makes none (nothing reads them) and pretrain_data packs the documents; with nsp true the pairs
    are needed, and their absence is one line."""
    import make_pairs

    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()
    docs = tmp_path / "documents.jsonl"
    docs.write_text(
        "".join(
            json.dumps(
                {"id": f"d{i}", "domain": "bio", "sentences": [" ".join(words[(i + k) % 10] for k in range(12)) + "."]}
            )
            + "\n"
            for i in range(40)
        )
    )
    argv = ["--docs", str(docs), "--out", str(tmp_path / "pairs"), "--metrics", str(tmp_path / "pairs.json")]
    for nsp in (True, False):
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(tiny_params({"pretrain": {"nsp": nsp}})))
        capsys.readouterr()
        with contextlib.chdir(tmp_path):
            rc = run_stage(make_pairs.main, [*argv, "--params", "params.yaml"])
        out = capsys.readouterr()
        if nsp:
            assert (
                rc == 1
                and out.err.strip() == "error: make_pairs: no document has two sentences; cannot build sentence pairs"
            )
            assert not (tmp_path / "pairs").exists()
    assert rc == 0 and "none made: pretrain.nsp is false" in out.out
    assert [(tmp_path / "pairs" / f).read_text() for f in ("train.jsonl", "heldout.jsonl")] == ["", ""]
    m = json.loads((tmp_path / "pairs.json").read_text())
    m.pop("wall_seconds")
    assert m == {"pairs_made": False, "documents": 40, "train": {"pairs": 0}, "heldout": {"pairs": 0}}
    bad = tmp_path / "bad.jsonl"  # the documents are still checked with nsp off: pretrain_data reads them next
    bad.write_text('{"id": 1}\n')
    with contextlib.chdir(tmp_path):
        rc = run_stage(
            make_pairs.main, ["--docs", str(bad), "--out", "other", "--metrics", "o.json", "--params", "params.yaml"]
        )
    assert rc == 1 and capsys.readouterr().err.startswith(f"error: {bad}:1: expected {{'id': str")
    assert not (tmp_path / "other").exists()
    (tmp_path / "pairs" / "documents.jsonl").write_text(docs.read_text())  # where run_data_stage reads them
    p = tiny_params({"pretrain": {"nsp": False, "max_seq_length": 16}})
    proc = run_data_stage(tmp_path, tmp_path / "pairs", p, capsys)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((tmp_path / "m.json").read_text())["layout"] == "blocks"


def test_a_segment_longer_than_the_model_is_truncated_without_an_indexing_errors_warning():
    """A pair segment longer than the tokenizer's model_max_length (an encoder of 128 positions) is
    cut to max_seq_length by encode_pair; transformers' "will result in indexing errors" warning would
    say otherwise."""
    model_cfg, cfg = configs()
    tokenizer = load_tokenizer(model_cfg)
    tokenizer.model_max_length = 8
    rows = [{"a": "the cell line was treated " * 10, "b": "with aspirin", "label": 0}]
    ds = tokenize_pairs(rows, tokenizer, 16)
    assert ds["length"] == [16]
    assert "sequence-length-is-longer-than-the-specified-maximum" not in tokenizer.deprecation_warnings
