"""Bad input to the `minisci` command (issue 18), one row per case: every failure is one line on
stderr, with exit code 2 (a bad option) or 1 (a bad file, model or index), no traceback, and nothing
deleted or half-written. Tiny untrained models and one index are built once for the module."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest

from minisci.serve import cli

DOCS = [
    {"id": "p1", "title": "Aspirin and heparin", "text": "patients received aspirin", "authors": ["Ada", "Bob"]},
    {"id": "p2", "title": "Lung cancer", "text": "lung cancer treatment with cisplatin", "authors": ["Cy"]},
    {"id": "p3", "title": "Graph algorithms", "text": "shortest paths in sparse graphs", "authors": ["Dee"]},
]


def save(model, tok, out: Path) -> Path:
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def assets(tiny_model_dir, tmp_path_factory) -> dict:
    """Task models with random heads (the checks look at architecture, labels and files, not skill),
    a bare encoder, and an index built by the CLI."""
    from transformers import (
        AutoTokenizer,
        BertConfig,
        BertForSequenceClassification,
        BertForTokenClassification,
        BertModel,
    )

    root = tmp_path_factory.mktemp("bad-input")
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    base = BertConfig.from_pretrained(tiny_model_dir).to_dict()
    ner_labels = dict(enumerate(["O", "B-Chemical", "I-Chemical"]))
    cite_labels = dict(enumerate(["background", "method", "result"]))
    out = {"root": root, "encoder": tiny_model_dir}
    out["ner"] = save(BertForTokenClassification(BertConfig(**{**base, "id2label": ner_labels})), tok, root / "ner")
    out["cite"] = save(
        BertForSequenceClassification(BertConfig(**{**base, "id2label": cite_labels})), tok, root / "cite"
    )
    out["bare"] = save(BertModel(BertConfig(**base)), tok, root / "bare")
    (root / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    argv = ["index", "--model", str(tiny_model_dir), "--docs", str(root / "docs.jsonl"), "--out", str(root / "index")]
    assert cli.main(argv) == 0
    (root / "abstract.txt").write_text("shortest paths in sparse graphs\n")
    return out


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


# Each case: (name, build argv from (assets, tmp_path), exit code, regex the one-line message matches).


def headless_cite(a, t):  # a bare encoder whose config claims a citation head: the head would be random
    d = copy(a["bare"], t / "m")
    edit_json(d / "config.json", architectures=["BertForSequenceClassification"], id2label={"0": "x", "1": "y"})
    return ["cite", "--model", str(d), "some text"]


def default_labels(a, t):  # transformers' LABEL_n defaults: a head never trained for a task
    d = copy(a["ner"], t / "m")
    edit_json(d / "config.json", id2label={"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"})
    return ["ner", "--model", str(d), "x"]


def no_weights(a, t):
    d = copy(a["ner"], t / "m")
    (d / "model.safetensors").unlink()
    return ["ner", "--model", str(d), "x"]


def truncated_weights(a, t):
    d = copy(a["ner"], t / "m")
    (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:1000])
    return ["ner", "--model", str(d), "x"]


def truncated_encoder(a, t):
    d = copy(a["encoder"], t / "e")
    (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:1000])
    return index_argv({**a, "encoder": d})


def pickle_only(a, t):
    d = copy(a["ner"], t / "m")
    (d / "model.safetensors").rename(d / "pytorch_model.bin")
    return ["ner", "--model", str(d), "x"]


def truncated_config(a, t):
    d = copy(a["cite"], t / "m")
    (d / "config.json").write_text((d / "config.json").read_text()[:40])
    return ["cite", "--model", str(d), "x"]


def broken_tokenizer(a, t):
    d = copy(a["cite"], t / "m")
    (d / "tokenizer.json").write_text('{"version": ')
    (d / "vocab.txt").unlink(missing_ok=True)
    return ["cite", "--model", str(d), "x"]


def relabelled(a, t, task: str, labels: list[str]):  # config.json's label map replaced after training
    d = copy(a[task], t / "m")
    edit_json(d / "config.json", id2label=dict(enumerate(labels)), label2id={x: i for i, x in enumerate(labels)})
    return [task, "--model", str(d), "aspirin"]


def crf_relabelled(a, t):  # the CRF's transitions are labels x labels: another count does not fit either
    from minisci.finetune.crf import BertCrfForTokenClassification

    d = save(BertCrfForTokenClassification.from_pretrained(a["ner"]), crf_tokenizer(a), t / "crf")
    labels = ["O", "B-Chemical", "I-Chemical", "B-Disease", "I-Disease"]
    edit_json(d / "config.json", id2label=dict(enumerate(labels)), label2id={x: i for i, x in enumerate(labels)})
    return ["ner", "--model", str(d), "aspirin"]


def crf_tokenizer(a):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(a["ner"])


def bad_utf8_file(a, t):
    (t / "in.txt").write_bytes(b"aspirin\nhepa\xffrin\n")
    return ["ner", "--model", str(a["ner"]), "--file", str(t / "in.txt")]


def index_copy(a, t) -> Path:
    return copy(a["root"] / "index", t / "idx")


def search_argv(idx: Path, *extra) -> list[str]:
    return ["search", "--index", str(idx), *extra, "aspirin"]


def more_docs_than_rows(a, t):
    idx = index_copy(a, t)
    with (idx / "documents.jsonl").open("a") as f:
        f.write(json.dumps({"id": "p4", "title": "extra", "authors": []}) + "\n")
    return search_argv(idx)


def fewer_docs_than_rows(a, t):
    idx = index_copy(a, t)
    lines = (idx / "documents.jsonl").read_text().splitlines(keepends=True)
    (idx / "documents.jsonl").write_text("".join(lines[:2]))
    return search_argv(idx)


def wrong_dimension(a, t):
    idx = index_copy(a, t)
    np.save(idx / "embeddings.npy", np.ones((3, 16), dtype=np.float32))
    edit_json(idx / "index.json", dimension=16)
    return search_argv(idx)


def missing_embeddings(a, t):
    idx = index_copy(a, t)
    (idx / "embeddings.npy").unlink()
    return search_argv(idx)


def corrupt_embeddings(a, t):
    idx = index_copy(a, t)
    (idx / "embeddings.npy").write_bytes(b"\x93NUMPY garbage")
    return search_argv(idx)


def pickled_embeddings(a, t):
    idx = index_copy(a, t)
    np.save(idx / "embeddings.npy", np.array([{"a": 1}] * 3, dtype=object), allow_pickle=True)
    return search_argv(idx)


def corrupt_index_json(a, t):
    idx = index_copy(a, t)
    (idx / "index.json").write_text('{"model": ')
    return search_argv(idx)


def index_json_missing_key(a, t):
    idx = index_copy(a, t)
    info = json.loads((idx / "index.json").read_text())
    del info["max_length"]
    (idx / "index.json").write_text(json.dumps(info))
    return search_argv(idx)


def row_without_title(a, t):
    idx = index_copy(a, t)
    rows = (idx / "documents.jsonl").read_text().splitlines()
    rows[1] = json.dumps({"id": "p2", "authors": ["Cy"]})
    (idx / "documents.jsonl").write_text("\n".join(rows) + "\n")
    return ["reviewers", "--index", str(idx), str(a["root"] / "abstract.txt")]


def non_index_out(a, t):
    (t / "mine").mkdir()
    (t / "mine" / "thesis.tex").write_text("years of work")
    return ["index", "--model", str(a["encoder"]), "--docs", str(a["root"] / "docs.jsonl"), "--out", str(t / "mine")]


def web_project_out(a, t):  # a folder that happens to hold an index.json: not an index of ours
    site = t / "site"
    (site / "css").mkdir(parents=True)
    for name in ("index.json", "index.html", "css/site.css"):
        (site / name).write_text("mine")
    return ["index", "--model", str(a["encoder"]), "--docs", str(a["root"] / "docs.jsonl"), "--out", str(site)]


def other_dimension_model(a, t):
    from transformers import AutoTokenizer, BertConfig, BertModel

    config = BertConfig.from_pretrained(a["encoder"])
    config.hidden_size, config.num_attention_heads, config.intermediate_size = 48, 2, 64
    save(BertModel(config), AutoTokenizer.from_pretrained(a["encoder"]), t / "wide")
    return search_argv(a["root"] / "index", "--model", str(t / "wide"))


def same_size_model(a, t, name: str = "other") -> Path:
    """Another random encoder of the index's size and dimension (its scores would be meaningless)."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    return save(
        BertModel(BertConfig.from_pretrained(a["encoder"])), AutoTokenizer.from_pretrained(a["encoder"]), t / name
    )


def other_same_size_model(a, t):
    return search_argv(a["root"] / "index", "--model", str(same_size_model(a, t)))


def copied_index_finds_another_encoder(a, t):  # the relative path leads to another project's model
    idx = index_copy(a, t)
    same_size_model(a, t)
    edit_json(idx / "index.json", encoder="../other", model=str(t / "gone"))
    return search_argv(idx)


def hybrid_index_without_bm25(a, t):
    idx = index_copy(a, t)
    edit_json(idx / "index.json", retriever="hybrid")
    return search_argv(idx)


def unknown_retriever(a, t):
    idx = index_copy(a, t)
    edit_json(idx / "index.json", retriever="magic")
    return search_argv(idx)


def encoder_gone(a, t):  # an index whose encoder was deleted or never copied along
    idx = index_copy(a, t)
    edit_json(idx / "index.json", encoder="../nowhere", model=str(t / "nowhere"))
    return search_argv(idx)


def index_argv(a, *extra) -> list[str]:
    return ["index", "--model", str(a["encoder"]), "--docs", str(a["root"] / "docs.jsonl"), "--out", "unused", *extra]


def bad_utf8_docs(a, t):
    (t / "d.jsonl").write_bytes(json.dumps(DOCS[0]).encode() + b"\n" + b'{"id": "x", "title": "caf\xe9"}\n')
    return ["index", "--model", str(a["encoder"]), "--docs", str(t / "d.jsonl"), "--out", str(t / "i")]


def bad_utf8_abstract(a, t):
    (t / "abs.txt").write_bytes(b"\xfe\xff")
    return ["reviewers", "--index", str(a["root"] / "index"), str(t / "abs.txt")]


def index_without_authors(a, t):
    docs = [{k: v for k, v in d.items() if k != "authors"} for d in DOCS]
    (t / "d.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    assert cli.main(["index", "--model", str(a["encoder"]), "--docs", str(t / "d.jsonl"), "--out", str(t / "i")]) == 0
    return ["reviewers", "--index", str(t / "i"), str(a["root"] / "abstract.txt")]


def every_author_excluded(a, t):
    names = [x for d in DOCS for n in d["authors"] for x in ("--exclude", n.upper())]
    return ["reviewers", "--index", str(a["root"] / "index"), str(a["root"] / "abstract.txt"), *names]


CASES = [
    # wrong-task and head-less models
    ("ner on a citation model", lambda a, t: ["ner", "--model", str(a["cite"]), "x"], 1,
     r"not a token-classification \(NER\) model.*found architecture BertForSequenceClassification with labels \{0: 'background'"),
    ("cite on an NER model", lambda a, t: ["cite", "--model", str(a["ner"]), "x"], 1,
     r"not a sequence-classification .*found architecture BertForTokenClassification with labels \{0: 'O', 1: 'B-Chemical'"),
    ("ner on a bare encoder", lambda a, t: ["ner", "--model", str(a["bare"]), "x"], 1,
     r"not a token-classification .*found architecture BertModel and no label map"),
    ("cite on a bare encoder", lambda a, t: ["cite", "--model", str(a["encoder"]), "x"], 1,
     r"not a sequence-classification .*found architecture BertForPreTraining and no label map"),
    ("default LABEL_n labels", default_labels, 1, r"found architecture BertForTokenClassification with labels \{0: 'LABEL_0'"),
    ("a head that would be random", headless_cite, 1, r"weights missing from model.safetensors \(classifier.bias, classifier.weight\)"),
    # broken model directories
    ("model dir missing", lambda a, t: ["ner", "--model", str(t / "nope"), "x"], 1, r"nope: not a model directory"),
    ("model dir without weights", no_weights, 1, r"m: no model weights \(model.safetensors\)"),
    ("only pickle weights", pickle_only, 1, r"only pytorch_model.bin \(pickle\) weights; minisci loads safetensors only"),
    ("truncated config.json", truncated_config, 1, r"config.json:\d+: invalid JSON, truncated\?"),
    ("broken tokenizer", broken_tokenizer, 1, r"m: cannot load the model: "),
    # texts
    ("--file not UTF-8", bad_utf8_file, 1, r"in.txt:2: not UTF-8 \(byte offset 12: b'\\xff'\)"),
    ("--file missing", lambda a, t: ["ner", "--model", str(a["ner"]), "--file", str(t / "no.txt")], 1, r"no.txt: no such file"),
    ("--file a directory", lambda a, t: ["cite", "--model", str(a["cite"]), "--file", str(t)], 1, r": is a directory, expected a text file"),
    ("abstract not UTF-8", bad_utf8_abstract, 1, r"abs.txt:1: not UTF-8 \(byte offset 0"),
    ("documents not UTF-8", bad_utf8_docs, 1, r"d.jsonl:2: not UTF-8: byte 0xe9 at byte offset \d+"),
    ("truncated model.safetensors", truncated_weights, 1, r"m: cannot load the model: "),
    ("ner: more labels in config.json than the head has", lambda a, t: relabelled(a, t, "ner", ["O", "B-Chemical", "I-Chemical", "B-Disease", "I-Disease"]), 1,
     r"m: config.json has 5 labels \(id2label/num_labels\) but the head in model.safetensors has 3 \(classifier.bias: shape \[3\]\)"),
    ("cite: fewer labels in config.json than the head has", lambda a, t: relabelled(a, t, "cite", ["background", "method"]), 1,
     r"m: config.json has 2 labels \(id2label/num_labels\) but the head in model.safetensors has 3"),
    ("ner: a CRF model with more labels in config.json", crf_relabelled, 1, r"crf: config.json has 5 labels \(id2label/num_labels\) but the head in model.safetensors has 3"),
    ("index: truncated model.safetensors", truncated_encoder, 1, r"e: cannot load the model: "),
    ("a text that is not UTF-8", lambda a, t: ["ner", "--model", str(a["ner"]), "caf\udce9"], 1, r"input 1: not UTF-8 text \(byte 0xe9 at character 3\)"),
    # options
    ("search -k -3", lambda a, t: search_argv(a["root"] / "index", "-k", "-3"), 2, r"argument -k: must be >= 1, got -3"),
    ("search -k 0", lambda a, t: search_argv(a["root"] / "index", "-k", "0"), 2, r"argument -k: must be >= 1, got 0"),
    ("reviewers -k -2", lambda a, t: ["reviewers", "--index", "i", "abs.txt", "-k", "-2"], 2, r"argument -k: must be >= 1, got -2"),
    ("--batch-size 0", lambda a, t: ["ner", "--model", "m", "--batch-size", "0", "x"], 2, r"argument --batch-size: must be >= 1"),
    ("--max-length 1", lambda a, t: index_argv(a, "--max-length", "1"), 1, r"--max-length 1: must be between 8 and 64"),
    ("--max-length 2", lambda a, t: index_argv(a, "--max-length", "2"), 1, r"--max-length 2: must be between 8 and 64"),
    ("--max-length 1024", lambda a, t: index_argv(a, "--max-length", "1024"), 1, r"--max-length 1024: must be between 8 and 64 \(the maximum positions of"),
    ("--max-length 100000", lambda a, t: index_argv(a, "--max-length", "100000"), 1, r"must be between 8 and 64"),
    ("--precision fp16", lambda a, t: ["cite", "--model", "m", "--precision", "fp16", "x"], 2, r"invalid choice: 'fp16'"),
    ("unknown command", lambda a, t: ["bogus"], 2, r"invalid choice: 'bogus'"),
    # indexes
    ("--out a directory that is not an index", non_index_out, 1, r"--out .*mine: not an earlier index \(no .minisci-output file\); refusing to replace it and delete thesis.tex: choose"),
    ("--out holds an index.json of its own", web_project_out, 1, r"--out .*site: not an earlier index .*delete css/site.css, index.html, index.json: choose"),
    ("--stride as long as a window", lambda a, t: ["ner", "--model", str(a["ner"]), "--stride", "62", "x"], 1, r"stride 62: must be between 0 and 61 \(a window of .*ner holds 62 word pieces"),
    ("--stride -1", lambda a, t: ["ner", "--model", "m", "--stride", "-1", "x"], 2, r"argument --stride: must be >= 0, got -1"),
    ("search --model of another dimension", other_dimension_model, 1, r"embeddings have dimension 32, the model .*wide gives 48"),
    ("search --model of the same size, another model", other_same_size_model, 1, r"index: built with another encoder than .*other \(content sha256 [0-9a-f]{12} recorded, [0-9a-f]{12} found\); pass the index's own encoder with --model, or rebuild"),
    ("a copied index finds another encoder", copied_index_finds_another_encoder, 1, r"idx: built with another encoder than .*idx/../other \(content sha256"),
    ("hybrid index without its BM25", hybrid_index_without_bm25, 1, r"idx/bm25: missing; the index's retriever is hybrid; rebuild the index"),
    ("index.json with an unknown retriever", unknown_retriever, 1, r"index.json: unknown retriever 'magic'; expected one of \['dense', 'bm25', 'hybrid'\]"),
    ("search, the encoder gone", encoder_gone, 1, r"idx: the encoder it was built with is not found \(.*\); pass the same encoder with --model"),
    ("demo --port -1", lambda a, t: ["demo", "--port", "-1"], 2, r"argument --port: must be >= 1, got -1"),
    ("demo --port 70000", lambda a, t: ["demo", "--port", "70000"], 2, r"argument --port: must be <= 65535, got 70000"),
    # the address is bound before the models are read or a server started
    ("demo --host not an address", lambda a, t: ["demo", "--host", "999.1.1.1"], 1, r"^error: minisci demo --host 999.1.1.1: not an address of this machine \("),
    ("demo --host another machine's", lambda a, t: ["demo", "--host", "192.0.2.1"], 1, r"^error: minisci demo --host 192.0.2.1: not an address of this machine \(.*\); use 127.0.0.1"),
    ("demo --host a bad IPv6 address", lambda a, t: ["demo", "--host", "fe80::zz"], 1, r"^error: minisci demo --host fe80::zz: not an address of this machine"),
    # a fine-tuned task model where an encoder is expected
    ("index --model an NER model", lambda a, t: index_argv({**a, "encoder": a["ner"]}), 1,
     r"minisci index --model: .*ner: a fine-tuned NER model \(architecture BertForTokenClassification, for `minisci ner`\), not an encoder"),
    ("index --model a citation model", lambda a, t: index_argv({**a, "encoder": a["cite"]}), 1,
     r"minisci index --model: .*cite: a fine-tuned classification model \(architecture BertForSequenceClassification, for `minisci cite`\)"),
    ("search --model an NER model", lambda a, t: search_argv(a["root"] / "index", "--model", str(a["ner"])), 1,
     r"minisci search --model: .*ner: a fine-tuned NER model"),
    ("not an index", lambda a, t: search_argv(t), 1, r"a folder, not an index \(no index.json\)"),
    ("no such index", lambda a, t: search_argv(t / "nowhere"), 1,
     r"nowhere: no such folder; build an index there with `minisci index --out .*nowhere`"),
    ("a file as the index", lambda a, t: search_argv(a["ner"] / "config.json"), 1,
     r"config.json: a file, not an index \(no index.json\)"),
    ("more documents than rows", more_docs_than_rows, 1, r"inconsistent index: 3 embeddings, 4 documents, index.json says 3"),
    ("fewer documents than rows", fewer_docs_than_rows, 1, r"inconsistent index: 3 embeddings, 2 documents"),
    ("dimension differs from the model", wrong_dimension, 1, r"embeddings have dimension 16, the model .* gives 32"),
    ("embeddings.npy missing", missing_embeddings, 1, r"embeddings.npy: missing; rebuild the index"),
    ("embeddings.npy corrupt", corrupt_embeddings, 1, r"embeddings.npy: not a readable NumPy array"),
    ("embeddings.npy pickled", pickled_embeddings, 1, r"embeddings.npy: not a readable NumPy array \(Object arrays cannot be loaded"),
    ("index.json corrupt", corrupt_index_json, 1, r"index.json: not valid JSON"),
    ("index.json without a key", index_json_missing_key, 1, r"index.json: expected 'max_length' \(int\), got None"),
    ("document row without title", row_without_title, 1, r"documents.jsonl:2: expected string fields 'id' and 'title'"),
    ("reviewers from an index without authors", index_without_authors, 1, r"i: no document in the index has authors; build it from documents with an 'authors' list$"),
    ("reviewers with every author excluded", every_author_excluded, 1, r"--exclude: every author in the index is excluded$"),
    ("reviewers --exclude empty", lambda a, t: ["reviewers", "--index", "i", "abs.txt", "--exclude", " "], 2, r"argument --exclude: an empty name matches no author \(see"),
]  # fmt: skip


@pytest.mark.parametrize("build, code, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line(build, code, message, assets, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = build(assets, tmp_path)
    capsys.readouterr()  # what building the case printed (an index it needs) is not under test
    try:
        got = cli.main(argv)
    except SystemExit as e:
        got = e.code
    err = capsys.readouterr().err
    assert got == code, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert re.search(message, err), err


def test_out_dir_that_is_not_an_index_is_left_alone(assets, tmp_path, capsys):
    argv = non_index_out(assets, tmp_path)
    assert cli.main(argv) == 1
    assert (tmp_path / "mine" / "thesis.tex").read_text() == "years of work"
    idx = index_copy(assets, tmp_path)  # an earlier index is replaced
    assert cli.main([*argv[:-1], str(idx), "--jsonl"]) == 0
    assert json.loads(capsys.readouterr().out)["documents"] == 3


def fifo(path: Path, data: bytes) -> Path:
    """A named pipe that gives ``data`` to its first reader, as a shell's ``<(...)`` does."""
    os.mkfifo(path)

    def write():
        with open(path, "wb") as f:
            f.write(data)

    threading.Thread(target=write, daemon=True).start()
    return path


def test_texts_and_abstracts_from_a_pipe(assets, tmp_path, capsys):
    """``--file <(...)`` and ``reviewers ... <(...)``: a pipe is not a regular file, but it is a file."""
    texts = fifo(tmp_path / "texts", b"aspirin works\n\nwarfarin too\n")
    assert cli.main(["ner", "--model", str(assets["ner"]), "--jsonl", "--file", str(texts)]) == 0
    assert [json.loads(line)["text"] for line in capsys.readouterr().out.splitlines()] == [
        "aspirin works",
        "warfarin too",
    ]
    abstract = fifo(tmp_path / "abstract", b"shortest paths in sparse graphs\n")
    assert cli.main(["reviewers", "--index", str(assets["root"] / "index"), str(abstract), "--jsonl"]) == 0
    assert capsys.readouterr().out.strip()
    assert cli.main(["reviewers", "--index", str(assets["root"] / "index"), os.devnull]) == 1
    assert capsys.readouterr().err == f"error: {os.devnull}: empty abstract\n"


def test_documents_from_a_pipe_or_standard_input(assets, tmp_path, monkeypatch, capsys):
    """``index --docs <(zcat papers.jsonl.gz)`` and ``--docs -``: the same index as from the file; an error
    names the pipe or standard input and its line; nothing is left of the temporary copy."""
    docs = (assets["root"] / "docs.jsonl").read_bytes()
    argv = ["index", "--model", str(assets["encoder"]), "--docs"]
    assert cli.main([*argv, str(fifo(tmp_path / "docs", docs)), "--out", str(tmp_path / "from-pipe")]) == 0
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(docs)))
    assert cli.main([*argv, "-", "--out", str(tmp_path / "from-stdin")]) == 0
    capsys.readouterr()
    for index in ("from-pipe", "from-stdin"):
        for name in ("documents.jsonl", "embeddings.npy"):
            assert (tmp_path / index / name).read_bytes() == (assets["root"] / "index" / name).read_bytes()
    bad = fifo(tmp_path / "bad", docs + b'{"id": "x"}\n')
    assert cli.main([*argv, str(bad), "--out", str(tmp_path / "bad-index")]) == 1
    line = docs.count(b"\n") + 1
    assert capsys.readouterr().err == f"error: {bad}:{line}: expected an 'id' and a non-empty 'title' or 'text'\n"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"\xff\n")))
    assert cli.main([*argv, "-", "--out", str(tmp_path / "bad-index")]) == 1
    assert capsys.readouterr().err == "error: standard input:1: not UTF-8: byte 0xff at byte offset 0\n"
    assert not (tmp_path / "bad-index").exists()
    assert not list(Path(tempfile.gettempdir()).glob("minisci-docs-*"))


def test_a_dash_is_standard_input(assets, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"shortest paths in sparse graphs\n")))
    assert cli.main(["reviewers", "--index", str(assets["root"] / "index"), "-", "--jsonl"]) == 0
    assert capsys.readouterr().out.strip()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"\n")))
    assert cli.main(["ner", "--model", str(assets["ner"]), "--file", "-"]) == 1
    assert capsys.readouterr().err == "error: standard input: no text given\n"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"")))
    assert cli.main(["reviewers", "--index", str(assets["root"] / "index"), "-"]) == 1
    assert capsys.readouterr().err == "error: standard input: empty abstract\n"


def test_a_search_query_of_a_lone_dash_is_standard_input(assets, monkeypatch, capsys):
    argv = ["search", "--index", str(assets["root"] / "index"), "--jsonl", "-k", "2"]
    assert cli.main([*argv, "shortest paths in sparse graphs"]) == 0
    expected = capsys.readouterr().out
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"shortest paths in sparse graphs\n")))
    assert cli.main([*argv, "-"]) == 0
    assert capsys.readouterr().out == expected


def test_a_lone_dash_text_is_standard_input(assets, monkeypatch, capsys):
    """``minisci ner -`` reads the texts from standard input, one per line, as ``--file -`` does; the text
    "-" among others is a text."""
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"patients received aspirin\n\nheparin too\n")))
    assert cli.main(["ner", "--model", str(assets["ner"]), "-", "--jsonl"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["text"] for r in rows] == ["patients received aspirin", "heparin too"]
    assert cli.main(["ner", "--model", str(assets["ner"]), "aspirin", "-", "--jsonl"]) == 0
    assert [json.loads(line)["text"] for line in capsys.readouterr().out.splitlines()] == ["aspirin", "-"]


@pytest.mark.parametrize("texts", [["aspirin"], ["-"]])
@pytest.mark.parametrize("command", ["ner", "cite"])
def test_texts_and_a_file_together_are_a_usage_error(assets, tmp_path, capsys, texts, command):
    f = tmp_path / "in.txt"
    f.write_text("heparin\n")
    with pytest.raises(SystemExit) as e:
        cli.main([command, "--model", str(assets[command]), *texts, "--file", str(f)])
    assert e.value.code == 2
    assert capsys.readouterr().err == (
        f"error: minisci {command}: give texts or --file, not both (see `minisci {command} --help`)\n"
    )


@pytest.mark.parametrize(
    "argv, unknown",
    [
        (["ner", "--model", "m", "--max-length", "8", "aspirin"], "--max-length"),
        (["cite", "--model", "m", "--stride", "4", "aspirin"], "--stride"),
        (["index", "--docs", "d.jsonl", "--out", "o", "--exclude", "Ada"], "--exclude Ada"),
        (["search", "--index", "i", "--stride", "4", "aspirin"], "--stride"),
        (["reviewers", "--index", "i", "a.txt", "--max-length", "8"], "--max-length 8"),
        (["demo", "--nope"], "--nope"),
    ],
)
def test_an_option_the_command_does_not_take_names_the_command(capsys, argv, unknown):
    """An option the command does not take is blamed on the command, whose --help lists its options,
    not on `minisci`, whose help lists none of them."""
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    assert capsys.readouterr().err == (
        f"error: minisci {argv[0]}: unrecognized arguments: {unknown} (see `minisci {argv[0]} --help`)\n"
    )


def test_file_dash_is_standard_input_and_help_says_so(assets, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"patients received aspirin\n\nheparin too\n")))
    assert cli.main(["cite", "--model", str(assets["cite"]), "--file", "-", "--jsonl"]) == 0
    assert [json.loads(line)["text"] for line in capsys.readouterr().out.splitlines()] == [
        "patients received aspirin",
        "heparin too",
    ]
    with pytest.raises(SystemExit):
        cli.main(["cite", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "(--file -: standard input); not together with texts" in help_text
    assert "none, or a lone -, reads them from standard input" in help_text


class ClosedPipe(io.StringIO):
    """Standard output whose reader has gone, as after `| head -1` exits."""

    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")


def test_a_closed_pipe_stops_quietly(assets, monkeypatch, capsys):
    """`minisci cite ... | head -1`: no "error: Broken pipe", exit code 141 (128 + SIGPIPE) as a shell
    reports for cat or grep."""
    monkeypatch.setattr("sys.stdout", ClosedPipe())
    assert cli.main(["cite", "--model", str(assets["cite"]), "aspirin", "heparin"]) == cli.EXIT_BROKEN_PIPE == 141
    assert capsys.readouterr().err == ""


def test_a_closed_pipe_stops_quietly_in_a_real_pipe(assets, tmp_path):
    """The same through a real pipe, which the interpreter flushes again at exit: no traceback then either."""
    texts = tmp_path / "many.txt"
    texts.write_text("".join(f"aspirin number {i}\n" for i in range(4000)))  # more output than a pipe holds
    proc = subprocess.Popen(
        [sys.executable, "-m", "minisci.serve.cli", "cite", "--model", str(assets["cite"]), "--file", str(texts)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout.readline().startswith((b"background", b"method", b"result"))
    proc.stdout.close()  # `head -1` exits
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 141, err
    assert err == b""


def test_a_crf_model_whose_config_has_no_label2id_tags(assets, tmp_path, capsys):
    """config.json's id2label alone names a CRF's labels: a config without label2id tags as one with it."""
    import torch

    from minisci.finetune.crf import BertCrfForTokenClassification

    model = BertCrfForTokenClassification.from_pretrained(assets["ner"])
    with torch.no_grad():
        model.classifier.bias.copy_(torch.tensor([0.0, 20.0, 0.0]))  # every word B-Chemical: entities to score
    crf = save(model, crf_tokenizer(assets), tmp_path / "crf")
    argv = ["ner", "--model", str(crf), "--jsonl", "patients received aspirin and heparin"]
    edit_json(crf / "config.json", label2id={"O": 0, "B-Chemical": 1, "I-Chemical": 2})
    assert cli.main(argv) == 0
    expected = capsys.readouterr().out
    assert json.loads(expected)["entities"]
    config = json.loads((crf / "config.json").read_text())
    del config["label2id"]
    (crf / "config.json").write_text(json.dumps(config))
    assert cli.main(argv) == 0
    assert capsys.readouterr().out == expected


def test_stdin_not_utf8(assets, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"aspirin works\nbad \xc3\x28 byte\n")))
    assert cli.main(["ner", "--model", str(assets["ner"])]) == 1
    assert capsys.readouterr().err == "error: standard input:2: not UTF-8 (byte offset 18: b'\\xc3')\n"


def test_terminal_escapes_are_stripped_from_human_output(assets, tmp_path, capsys):
    docs = tmp_path / "d.jsonl"
    evil = {
        "id": "e\x1b]0;pwned\x07",
        "title": "Aspirin \x1b[2J\x1b[31mred\x1b[0m\x9b1m",
        "authors": ["M\x1b[1mallory"],
    }
    docs.write_text(json.dumps(evil) + "\n" + json.dumps(DOCS[1]) + "\n")
    assert (
        cli.main(["index", "--model", str(assets["encoder"]), "--docs", str(docs), "--out", str(tmp_path / "i")]) == 0
    )
    capsys.readouterr()
    assert cli.main(["search", "--index", str(tmp_path / "i"), "aspirin"]) == 0
    out = capsys.readouterr().out
    assert "Aspirin" in out and "red" in out and not any(c in out for c in "\x1b\x07\x9b")
    (tmp_path / "a.txt").write_text("aspirin")
    assert cli.main(["reviewers", "--index", str(tmp_path / "i"), str(tmp_path / "a.txt")]) == 0
    out = capsys.readouterr().out
    assert "allory" in out and "\x1b" not in out
    assert cli.main(["search", "--index", str(tmp_path / "i"), "--jsonl", "aspirin"]) == 0  # JSON keeps the data
    assert any(json.loads(line)["title"] == evil["title"] for line in capsys.readouterr().out.splitlines())


def test_cuda_without_a_gpu(assets, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert cli.main(["search", "--index", str(assets["root"] / "index"), "--device", "cuda", "q"]) == 1
    assert "--device cuda: no CUDA device is available" in capsys.readouterr().err


def test_import_cli_does_not_import_torch():
    """`minisci --help` stays fast: torch, transformers and numpy are imported by the commands only."""
    code = "import sys, minisci.serve.cli; print(sorted(m for m in ('torch', 'transformers', 'numpy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_help_has_examples_defaults_and_version(capsys):
    for command in ("ner", "cite", "index", "search", "reviewers"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        out = capsys.readouterr().out
        assert f"minisci {command} " in out.split("example")[-1] and "(default: auto)" in out
    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert capsys.readouterr().out.startswith("minisci ")
    parser = cli.build_parser()
    for sub in parser._subparsers._group_actions[0].choices.values():
        assert all(a.help for a in sub._actions), sub.prog  # every option has help text


def test_a_file_is_one_text_per_newline_and_a_byte_order_mark_is_not_text(assets, tmp_path, capsys):
    """Lines end at a newline only (not at U+2028 or a form feed inside a text), blank lines are
    skipped, and a BOM does not shift the first text's offsets."""
    path = tmp_path / "in.txt"
    path.write_bytes("\ufeffaspirin fever\u2028heparin\r\n\nsecond\x0ctext\n".encode())
    assert cli.main(["ner", "--model", str(assets["ner"]), "--file", str(path), "--jsonl"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.split("\n") if line]
    assert [r["text"] for r in rows] == ["aspirin fever\u2028heparin", "second\x0ctext"]
