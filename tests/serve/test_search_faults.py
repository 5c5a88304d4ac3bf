"""Faults a newcomer found in search and reviewers, one test per fault: a damaged ``bm25/`` file is one
line naming it (command line and Python API alike); no queries, plain dicts and blank ids or authors in
``Index.build``; no reviewer ranked when a bm25 index matches no paper; the ``--out`` refusal names the
user's own files; the documented ONNX cache path and the demo's score captions."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO

from minisci import Index
from minisci.errors import MinisciError
from minisci.io import OUTPUT_MARKER
from minisci.serve import cli
from minisci.serve.search import (
    build_index,
    read_collection,
    recommend_reviewers,
    search,
    why_no_reviewers,
)

DOCS = [
    {"id": "p1", "title": "Aspirin and heparin", "text": "patients received aspirin after surgery", "authors": ["Ada"]},
    {"id": "p2", "title": "Lung cancer", "text": "lung cancer treatment with cisplatin", "authors": ["Cy", "Ada"]},
    {"id": "p3", "title": "Graph algorithms", "text": "shortest paths in sparse graphs", "authors": ["Dee", "Bob"]},
]


def write_docs(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def indexes(tmp_path_factory, tiny_model_dir) -> dict:
    """A hybrid and a bm25 index of DOCS, built once; tests change copies only."""
    root = tmp_path_factory.mktemp("search-faults")
    docs = read_collection(write_docs(root / "docs.jsonl", DOCS))
    out = {"root": root, "docs": root / "docs.jsonl"}
    for retriever in ("hybrid", "bm25"):
        out[retriever] = root / retriever
        build_index(tiny_model_dir, docs, out[retriever], max_length=32, retriever=retriever)
    return out


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = cli.main(argv)
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


# 1. a damaged bm25/ file: one line naming it, from search, the API and the command line


def truncate(name: str):
    def damage(bm25: Path) -> None:
        data = (bm25 / name).read_bytes()
        (bm25 / name).write_bytes(data[: len(data) // 2])

    return damage


def rewrite(name: str, text: str):
    return lambda bm25: (bm25 / name).write_text(text)


def edit_params(**changes):
    def damage(bm25: Path) -> None:
        params = json.loads((bm25 / "params.index.json").read_text())
        (bm25 / "params.index.json").write_text(json.dumps({**params, **changes}))

    return damage


def save_array(name: str, array: np.ndarray, allow_pickle: bool = False):
    return lambda bm25: np.save(bm25 / name, array, allow_pickle=allow_pickle)


def shuffled_indices(bm25: Path) -> None:  # right length and dtype, document numbers past the index's 3
    indices = np.load(bm25 / "indices.csc.index.npy")
    np.save(bm25 / "indices.csc.index.npy", np.full_like(indices, 99))


def word_id_out_of_range(bm25: Path) -> None:
    vocab = json.loads((bm25 / "vocab.index.json").read_text())
    (bm25 / "vocab.index.json").write_text(json.dumps({**vocab, "aspirin": 10**6}))


BM25_CASES = [
    ("params truncated", truncate("params.index.json"), r"bm25/params.index.json: not valid JSON \("),
    ("params missing", lambda b: (b / "params.index.json").unlink(), r"bm25/params.index.json: missing; rebuild"),
    ("params a list", rewrite("params.index.json", "[1, 2]"), r"bm25/params.index.json: expected a JSON object, got list"),
    ("params of another collection", edit_params(num_docs=7), r"bm25/params.index.json: 'num_docs' is 7, index.json says 3"),
    ("params a setting bm25s does not take", edit_params(bogus=1), r"bm25/params.index.json: bm25s cannot use it \(.*'bogus'"),
    ("vocab truncated", truncate("vocab.index.json"), r"bm25/vocab.index.json: not valid JSON \("),
    ("vocab missing", lambda b: (b / "vocab.index.json").unlink(), r"bm25/vocab.index.json: missing"),
    ("vocab a list", rewrite("vocab.index.json", "[]"), r"bm25/vocab.index.json: expected a JSON object, got list"),
    ("vocab word id out of range", word_id_out_of_range, r"bm25/vocab.index.json: expected word ids from 0 to \d+"),
    ("data truncated", truncate("data.csc.index.npy"), r"bm25/data.csc.index.npy: not a readable NumPy array \("),
    ("data missing", lambda b: (b / "data.csc.index.npy").unlink(), r"bm25/data.csc.index.npy: missing"),
    ("data a matrix", save_array("data.csc.index.npy", np.zeros((2, 2), np.float32)), r"bm25/data.csc.index.npy: expected a vector of finite floats, got float32 of shape \(2, 2\)"),
    ("data pickled", save_array("data.csc.index.npy", np.array([{}], dtype=object), True), r"bm25/data.csc.index.npy: not a readable NumPy array"),
    ("indices empty file", rewrite("indices.csc.index.npy", ""), r"bm25/indices.csc.index.npy: not a readable NumPy array"),
    ("indices floats", save_array("indices.csc.index.npy", np.zeros(3, np.float32)), r"bm25/indices.csc.index.npy: expected a vector of integers"),
    ("indices past the documents", shuffled_indices, r"bm25/indices.csc.index.npy: document numbers outside 0-2"),
    ("indptr truncated", truncate("indptr.csc.index.npy"), r"bm25/indptr.csc.index.npy: not a readable NumPy array"),
    ("indptr too short", save_array("indptr.csc.index.npy", np.zeros(2, np.int32)), r"bm25/indptr.csc.index.npy: expected offsets rising from 0 to \d+"),
]  # fmt: skip


@pytest.mark.parametrize("damage, message", [c[1:] for c in BM25_CASES], ids=[c[0] for c in BM25_CASES])
def test_a_damaged_bm25_file_is_one_line_naming_it(damage, message, indexes, tmp_path, capsys):
    idx = shutil.copytree(indexes["hybrid"], tmp_path / "idx")
    damage(idx / "bm25")
    for call in (lambda: search(idx, "aspirin", k=2), lambda: Index(idx).search("aspirin", k=2)):
        with pytest.raises(MinisciError) as e:
            call()
        assert "\n" not in str(e.value) and re.search(message, str(e.value)), str(e.value)
    code, out, err = run_cli(["search", "--index", str(idx), "aspirin"], capsys)
    assert code == 1 and out == "" and err.startswith("error: ") and err.count("\n") == 1, err
    assert re.search(message, err), err


def test_an_intact_bm25_index_still_answers(indexes):
    assert search(indexes["hybrid"], "aspirin", k=1)[0]["id"] == "p1"
    assert Index(indexes["bm25"]).search("cisplatin", k=3)[0]["id"] == "p2"


# 2. the Python API: no queries, plain dicts


def test_no_queries_give_no_results(indexes):
    assert Index(indexes["hybrid"]).search([]) == []
    assert Index(indexes["hybrid"]).search((), k=3) == []


def test_index_build_takes_plain_dicts(indexes, tiny_model_dir, tmp_path):
    from_dicts = Index.build(tiny_model_dir, [dict(d) for d in DOCS], tmp_path / "dicts", max_length=32)
    from_file = Index.build(tiny_model_dir, indexes["docs"], tmp_path / "file", max_length=32)
    assert from_dicts.documents == from_file.documents
    assert np.array_equal(from_dicts.vectors, from_file.vectors)
    assert from_dicts.search("lung cancer", k=1) == from_file.search("lung cancer", k=1)


BUILD_CASES = [
    ("a dict without an id", [DOCS[0], {"title": "t"}], r"^docs\[1\]: expected an 'id' and a non-empty 'title' or 'text'$"),
    ("a dict without a text", [{"id": "a", "authors": ["Ada"]}], r"^docs\[0\]: expected an 'id' and a non-empty"),
    ("a string, not a dict", ["aspirin"], r"^docs\[0\]: expected a JSON object, got str$"),
    ("a title of the wrong type", [{"id": "a", "title": 3}], r"^docs\[0\]: 'title' and 'text' must be strings$"),
    ("a null id", [{"id": None, "title": "t"}], r"^docs\[0\]: 'id' must be a non-empty string or an integer, got None$"),
    ("a blank author", [{"id": "a", "title": "t", "authors": ["Ada", " "]}], r"^docs\[0\]: 'authors' has a blank name \(name 2 of 2\)$"),
    ("no documents", [], r"^docs: no documents$"),
    ("not a list", 42, r"^docs: expected a JSONL file or a list of documents, got int$"),
]  # fmt: skip


@pytest.mark.parametrize("docs, message", [c[1:] for c in BUILD_CASES], ids=[c[0] for c in BUILD_CASES])
def test_index_build_names_the_bad_document(docs, message, tiny_model_dir, tmp_path):
    with pytest.raises(MinisciError, match=message):
        Index.build(tiny_model_dir, docs, tmp_path / "idx", max_length=32)
    assert not (tmp_path / "idx").exists()


# 3. reviewers when a bm25 index matches no paper


def test_no_reviewer_is_ranked_when_no_paper_matches(indexes, tmp_path, capsys):
    idx = indexes["bm25"]
    assert recommend_reviewers(idx, "xylophone melodies", k=3) == []
    assert Index(idx).reviewers("xylophone melodies", k=3) == []
    assert why_no_reviewers(Index(idx).documents, ["bob"]) == (
        "abstract",
        "no paper by an author not excluded shares a word with the abstract (the index's retriever is bm25)",
    )
    abstract = tmp_path / "abstract.txt"
    abstract.write_text("xylophone melodies\n")
    code, out, err = run_cli(["reviewers", "--index", str(idx), str(abstract)], capsys)
    assert (code, out) == (0, "")
    assert (
        err
        == "minisci reviewers: no paper in the index shares a word with the abstract (the index's retriever is bm25)\n"
    )
    code, _, err = run_cli(["reviewers", "--index", str(idx), str(abstract), "--exclude", "ADA", "--exclude", "cy"]
                           + ["--exclude", "Dee", "--exclude", "bob"], capsys)  # fmt: skip
    assert code == 1 and err == "error: --exclude: every author in the index is excluded\n"


def test_only_authors_of_matching_papers_are_ranked(indexes):
    for aggregation in ("max", "mean_top3"):
        ranked = recommend_reviewers(indexes["bm25"], "cisplatin for lung cancer", k=10, aggregation=aggregation)
        assert {r["author"] for r in ranked} == {"Ada", "Cy"} and all(r["score"] > 0 for r in ranked)
        assert all(r["papers"] == ["p2"] for r in ranked)  # Ada's aspirin paper matched nothing
        assert Index(indexes["bm25"]).reviewers("cisplatin for lung cancer", aggregation=aggregation) == ranked
    # a dense or hybrid index has a cosine for every paper: every author is ranked
    assert {r["author"] for r in recommend_reviewers(indexes["hybrid"], "xylophone melodies")} == {
        "Ada",
        "Bob",
        "Cy",
        "Dee",
    }


# 4. blank or null ids and blank author names


ROW_CASES = [
    ("an empty id", {"id": "", "title": "t"}, r"'id' must be a non-empty string or an integer, got ''$"),
    ("a null id", {"id": None, "title": "t"}, r"'id' must be a non-empty string or an integer, got None$"),
    ("a blank id", {"id": " ", "title": "t"}, r"'id' must be a non-empty string or an integer, got ' '$"),
    ("a list id", {"id": [1], "title": "t"}, r"'id' must be a non-empty string or an integer, got \[1\]$"),
    ("a boolean id", {"id": True, "title": "t"}, r"'id' must be a non-empty string or an integer, got True$"),
    ("an empty author", {"id": "x", "title": "t", "authors": [""]}, r"'authors' has a blank name \(name 1 of 1\)$"),
    ("a blank author", {"id": "x", "title": "t", "authors": ["Ada", "\t"]}, r"'authors' has a blank name \(name 2 of 2\)$"),
]  # fmt: skip


@pytest.mark.parametrize("row, message", [c[1:] for c in ROW_CASES], ids=[c[0] for c in ROW_CASES])
def test_blank_ids_and_author_names_are_refused_naming_the_line(row, message, tiny_model_dir, tmp_path, capsys):
    docs = write_docs(tmp_path / "d.jsonl", [DOCS[0], row])
    with pytest.raises(MinisciError, match=re.escape(f"{docs}:2: ") + message):
        read_collection(docs)
    argv = ["index", "--model", str(tiny_model_dir), "--docs", str(docs), "--out", str(tmp_path / "idx")]
    code, out, err = run_cli(argv, capsys)
    assert code == 1 and out == "" and err.count("\n") == 1 and re.search(re.escape(f"{docs}:2: ") + message, err)
    assert not (tmp_path / "idx").exists()


def test_an_integer_id_is_still_an_id(tmp_path):
    docs = write_docs(tmp_path / "d.jsonl", [{"id": 7, "title": "Lung cancer", "authors": ["Cy"]}])
    assert read_collection(docs)[0]["id"] == "7"


# 5. the --out refusal names what is there, the user's files first, and deletes nothing


def index_argv(indexes, tiny_model_dir, out: Path) -> list[str]:
    return ["index", "--model", str(tiny_model_dir), "--docs", str(indexes["docs"]), "--out", str(out)]


def test_out_refusal_names_the_users_files_among_an_index(indexes, tiny_model_dir, tmp_path, capsys):
    legacy = shutil.copytree(indexes["hybrid"], tmp_path / "legacy")  # an index from before markers, plus notes
    (legacy / OUTPUT_MARKER).unlink()
    (legacy / "notes.txt").write_text("mine")
    code, _, err = run_cli(index_argv(indexes, tiny_model_dir, legacy), capsys)
    assert code == 1 and "refusing to replace it and delete notes.txt, bm25/" in err, err
    marked = shutil.copytree(indexes["hybrid"], tmp_path / "marked")  # an index of ours, with notes put in since
    (marked / "notes.txt").write_text("mine")
    code, _, err = run_cli(index_argv(indexes, tiny_model_dir, marked), capsys)
    assert code == 1 and err == (
        f"error: --out {marked}: an earlier index, but it also holds files minisci did not write (notes.txt); "
        "refusing to replace it and delete them: move them out, or choose a new or empty directory\n"
    )
    (marked / "notes.txt").unlink()
    (marked / "bm25" / "mine.txt").write_text("mine")  # inside the index's own folder
    code, _, err = run_cli(index_argv(indexes, tiny_model_dir, marked), capsys)
    assert code == 1 and "also holds files minisci did not write (bm25/mine.txt)" in err, err
    assert (legacy / "notes.txt").read_text() == (marked / "bm25" / "mine.txt").read_text() == "mine"


def test_an_out_that_cannot_be_written_is_one_line_before_anything_is_embedded(
    indexes, tiny_model_dir, tmp_path, capsys, monkeypatch
):
    import errno
    import tempfile

    from minisci.serve import search

    embedded = []
    monkeypatch.setattr(search, "embed", lambda *a, **k: embedded.append(a) or np.zeros((0, 8)))
    (tmp_path / "notes.txt").write_text("mine")
    code, out, err = run_cli(index_argv(indexes, tiny_model_dir, tmp_path / "notes.txt" / "a" / "idx"), capsys)
    assert (code, out) == (
        1,
        "",
    ) and err == f"error: --out {tmp_path}/notes.txt/a/idx: {tmp_path}/notes.txt is not a directory\n"

    def read_only(*a, **k):  # a read-only file system (chmod would not stop root)
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkdtemp", read_only)
    code, out, err = run_cli(index_argv(indexes, tiny_model_dir, tmp_path / "ro" / "idx"), capsys)
    assert (code, out) == (
        1,
        "",
    ) and err == f"error: --out {tmp_path}/ro/idx: cannot write in {tmp_path} (Read-only file system)\n"
    assert embedded == [] and not (tmp_path / "ro").exists()


def test_out_refusal_of_another_output_leaves_out_the_marker(indexes, tiny_model_dir, tmp_path, capsys):
    model = shutil.copytree(tiny_model_dir, tmp_path / "model")
    (model / OUTPUT_MARKER).write_text("minisci")
    code, _, err = run_cli(index_argv(indexes, tiny_model_dir, model), capsys)
    assert code == 1 and "not an earlier index but another output (config.json, " in err, err
    assert OUTPUT_MARKER not in err


# 6. documentation: the ONNX cache path, and what the demo's scores are


def test_the_documented_onnx_cache_is_where_the_export_goes(monkeypatch, tmp_path):
    from minisci.serve.onnx_backend import cache_dir

    doc = (REPO / "docs" / "serving.md").read_text()
    monkeypatch.setenv("MINISCI_CACHE", str(tmp_path / "c"))
    assert cache_dir() / "onnx" == tmp_path / "c" / "onnx" and "`$MINISCI_CACHE/onnx/`" in doc
    monkeypatch.delenv("MINISCI_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_dir() / "onnx" == tmp_path / "x" / "minisci" / "onnx" and "`$XDG_CACHE_HOME/minisci/onnx/`" in doc
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() / "onnx" == Path.home() / ".cache/minisci/onnx" and "`~/.cache/minisci/onnx/`" in doc
    assert "with cosine scores" not in doc  # the demo's scores are the retriever's


def app(monkeypatch, **paths):
    """The demo page in Streamlit's headless test harness, with ``paths`` as its options."""
    from streamlit.testing.v1 import AppTest

    from minisci.serve import demo

    argv = [str(demo.PAGE)] + [x for k, v in paths.items() for x in (f"--{k}", str(v))]
    monkeypatch.setattr(sys, "argv", argv)
    return AppTest.from_file(str(demo.PAGE), default_timeout=60).run()


def test_the_demo_says_what_its_scores_are(monkeypatch, tiny_model_dir, indexes):
    at = app(monkeypatch, embeddings=tiny_model_dir, index=indexes["hybrid"])
    at.text_input[0].input("lung cancer")
    at = at.button[2].click().run()
    assert not at.exception and not at.error
    assert any("reciprocal rank fusion" in c.value and "not cosines" in c.value for c in at.caption)
    at = app(monkeypatch, embeddings=tiny_model_dir, index=indexes["bm25"])
    at.text_input[0].input("xylophone melodies")
    at = at.button[2].click().run()
    assert [i.value for i in at.info] == ["No document shares a word with the query (the index's retriever is bm25)."]
    at.text_area[2].input("xylophone melodies")
    at = at.button[3].click().run()
    assert not at.exception and not at.table
    assert [w.value for w in at.warning] == [
        "No paper in the index shares a word with the abstract (the index's retriever is bm25)."
    ]
