"""The corpus catalogue: every format reads (and a malformed file of each is one line naming the
file, the line or row, and the field); the shipped pool as two entries gives the sample the old
code gave; a third corpus changes only what it must."""

import dataclasses
import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURE_DATASETS, FIXTURE_MIRROR, REPO, fixture_corpora, run_sample_corpus, tiny_params

from minisci.config import CorpusConfig, SampleCorpusConfig, from_dict, load_corpora
from minisci.data import corpora as corpora_module
from minisci.data.corpora import content_id, corpus_size, iter_chunks, iter_records
from minisci.data.corpus import check_tracked, duplicates, shares
from minisci.errors import ConfigError, DataFormatError

DOCS = [
    {"paper_id": 7, "abstract": "Dark matter halos shape galaxy rotation curves. We fit twelve of them.", "lang": "en"},
    {"paper_id": 8, "abstract": "Une phrase en français. Elle ne passe pas le filtre.", "lang": "fr"},
    {"paper_id": 9, "abstract": "Neutron stars merge. Gravitational waves carry the news.", "lang": "en"},
]


def cfg(**kw):
    return from_dict(SampleCorpusConfig, tiny_params({"sample_corpus": kw})["sample_corpus"], "sample_corpus")


def corpus(**kw) -> CorpusConfig:
    return from_dict(CorpusConfig, {"weight": 1.0, **kw}, "corpora.physics")


def read(c: CorpusConfig, tmp_path) -> list:
    return [r for _, _, r in iter_records("physics", c, tmp_path)]


def write_jsonl(path, rows, compress=False):
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    path.write_bytes(gzip.compress(data) if compress else data)


def write_parquet(path, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)


def write_hf(path, rows):
    import datasets

    datasets.Dataset.from_list(rows).save_to_disk(str(path))


# 1. each format reads, with the fields the entry names ----------------------------------------------------

FIELDS = {"text_field": "abstract", "id_field": "paper_id", "filter": {"lang": "en"}}


@pytest.mark.parametrize(
    "fmt,name,writer",
    [
        ("jsonl", "p.jsonl", write_jsonl),
        ("jsonl", "p.jsonl.gz", lambda p, r: write_jsonl(p, r, compress=True)),
        ("parquet", "p.parquet", write_parquet),
    ],
)
def test_file_formats_read_ids_and_filter(tmp_path, fmt, name, writer):
    writer(tmp_path / name, DOCS)
    records = read(corpus(format=fmt, path=name, **FIELDS), tmp_path)
    assert [(r.id, r.source, r.kind, r.title) for r in records] == [
        ("7", "physics", "text", ""),
        ("9", "physics", "text", ""),
    ]
    assert records[1].text == DOCS[2]["abstract"]


def test_a_folder_of_shards_reads_in_name_order(tmp_path):
    (tmp_path / "shards").mkdir()
    write_jsonl(tmp_path / "shards/b.jsonl.gz", DOCS[2:], compress=True)
    write_jsonl(tmp_path / "shards/a.jsonl", DOCS[:2])
    assert [r.id for r in read(corpus(format="jsonl", dir="shards", **FIELDS), tmp_path)] == ["7", "9"]


def test_saved_hf_dataset_reads(tmp_path):
    write_hf(tmp_path / "hf", DOCS)
    records = read(corpus(format="hf", dir="hf", text_field="abstract", title_field="lang"), tmp_path)
    assert [r.title for r in records] == ["en", "fr", "en"]
    assert records[0].id == content_id("physics", DOCS[0]["abstract"])  # no id_field: a hash of the text


def test_txt_folder_one_document_per_file(tmp_path):
    (tmp_path / "notes/sub").mkdir(parents=True)
    (tmp_path / "notes/b.txt").write_text("Second note. It has two sentences.")
    (tmp_path / "notes/sub/a.txt").write_text("A note in a subfolder.\n\nWith a paragraph.")
    (tmp_path / "notes/.hidden.txt").write_text("ignored")
    (tmp_path / "notes/.ipynb_checkpoints").mkdir()
    (tmp_path / "notes/.ipynb_checkpoints/b.txt").write_text("ignored: in a hidden folder")
    (tmp_path / "notes/readme.md").write_text("ignored: not .txt")
    (tmp_path / "notes/c.txt").write_bytes("\ufeffA note saved with a byte-order mark.".encode())
    records = read(corpus(format="txt", dir="notes"), tmp_path)
    # the corpus's name and the file's path: two corpora of files named alike keep distinct ids
    assert [r.id for r in records] == ["physics:b.txt", "physics:c.txt", "physics:sub/a.txt"]
    assert records[1].text == "A note saved with a byte-order mark."


def test_content_ids_ignore_whitespace_only():
    assert content_id("c", "a  b\nc") == content_id("c", "a b c") != content_id("c", "a b d")


# 2. a malformed file of each format: one line, file + line/row + field ------------------------------------


@pytest.mark.parametrize(
    "fmt,name,writer,rows,match",
    [
        ("jsonl", "p.jsonl", write_jsonl, [DOCS[0], {"paper_id": 3, "lang": "en"}], r"p.jsonl:2: field 'abstract' \(text_field\) must be a non-empty string, missing"),
        ("jsonl", "p.jsonl.gz", lambda p, r: write_jsonl(p, r, True), [DOCS[0], {**DOCS[0], "paper_id": [1]}], r"p.jsonl.gz:2: field 'paper_id' \(id_field\) must be a non-empty string or an integer, got list"),
        ("parquet", "p.parquet", write_parquet, [DOCS[0], {**DOCS[2], "abstract": None}], r"p.parquet: row 2: field 'abstract' \(text_field\) must be a non-empty string, got NoneType"),
    ],
)  # fmt: skip
def test_malformed_record_names_file_line_and_field(tmp_path, fmt, name, writer, rows, match):
    writer(tmp_path / name, rows)
    with pytest.raises(DataFormatError, match=match):
        read(corpus(format=fmt, path=name, **FIELDS), tmp_path)


def test_malformed_json_line_and_missing_filter_field(tmp_path):
    (tmp_path / "p.jsonl").write_text(json.dumps(DOCS[0]) + "\n{oops\n")
    with pytest.raises(DataFormatError, match=r"p.jsonl:2: invalid JSON"):
        read(corpus(format="jsonl", path="p.jsonl", **FIELDS), tmp_path)
    write_jsonl(tmp_path / "q.jsonl", [{"paper_id": 1, "abstract": "x y z"}])
    with pytest.raises(DataFormatError, match=r"q.jsonl:1: missing field 'lang' \(corpora filter\)"):
        read(corpus(format="jsonl", path="q.jsonl", **FIELDS), tmp_path)


def test_an_unpaired_surrogate_escape_is_a_data_error(tmp_path):
    (tmp_path / "p.jsonl").write_text(
        '{"abstract": "a pair \\ud83d\\ude00 is text"}\n{"abstract": "lone \\ud800 half"}\n'
    )
    with pytest.raises(DataFormatError, match=r"p.jsonl:2: an unpaired UTF-16 surrogate escape \(\\ud800\)"):
        read(corpus(format="jsonl", path="p.jsonl", text_field="abstract"), tmp_path)


@pytest.mark.parametrize("fmt", ["parquet", "hf"])
def test_a_damaged_or_foreign_arrow_file_is_a_data_error(tmp_path, fmt):
    from minisci.data.corpora import corpus_size

    if fmt == "parquet":
        (tmp_path / "p").mkdir()
        (tmp_path / "p/a.parquet").write_text("not parquet")
        c, match = corpus(format="parquet", dir="p", text_field="abstract"), r"p/a.parquet: not a Parquet file"
    else:
        write_hf(tmp_path / "p", DOCS * 100)
        arrow = next((tmp_path / "p").glob("*.arrow"))
        arrow.write_bytes(arrow.read_bytes()[:1000])
        c, match = corpus(format="hf", dir="p", text_field="abstract"), r"p: cannot be read \("
    with pytest.raises(DataFormatError, match=match):
        corpus_size(c, tmp_path)  # what the scan asks first, for its progress
    with pytest.raises(DataFormatError, match=match):
        read(c, tmp_path)


def test_damaged_gzip_is_a_data_error(tmp_path):
    (tmp_path / "p.jsonl.gz").write_bytes(gzip.compress(b'{"abstract": "a b c"}\n' * 50)[:-30])
    with pytest.raises(DataFormatError, match=r"p.jsonl.gz:\d+: cannot be read"):
        read(corpus(format="jsonl", path="p.jsonl.gz", text_field="abstract"), tmp_path)


def test_hf_missing_column_and_bad_row(tmp_path):
    write_hf(tmp_path / "hf", DOCS)
    with pytest.raises(DataFormatError, match=r"hf: no column 'text' \(declared in corpora\)"):
        read(corpus(format="hf", dir="hf", text_field="text"), tmp_path)
    write_hf(tmp_path / "hf2", [DOCS[0], {**DOCS[1], "abstract": ""}])
    with pytest.raises(
        DataFormatError,
        match=r"hf2: row 2: field 'abstract' \(text_field\) must be a non-empty string, got an empty string",
    ):
        read(corpus(format="hf", dir="hf2", text_field="abstract"), tmp_path)  # fmt: skip


def test_txt_not_utf8_and_empty_file(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes/a.txt").write_bytes(b"caf\xe9 au lait")
    with pytest.raises(DataFormatError, match=r"notes/a.txt: not UTF-8: byte 0xe9 at byte offset 3"):
        read(corpus(format="txt", dir="notes"), tmp_path)
    (tmp_path / "notes/a.txt").write_text("  \n")
    with pytest.raises(DataFormatError, match=r"notes/a.txt: empty document"):
        read(corpus(format="txt", dir="notes"), tmp_path)


@pytest.mark.parametrize(
    "entry,match",
    [
        ({"format": "jsonl", "path": "a", "dir": "b", "text_field": "t"}, "exactly one of path"),
        ({"format": "txt", "dir": "b", "text_field": "t"}, r"a txt corpus has no fields .*\['text_field'\]"),
        ({"format": "jsonl", "path": "a"}, "text_field is required"),
        ({"format": "hf", "path": "a", "text_field": "t"}, "a hf corpus is a folder"),
        ({"format": "csv", "path": "a", "text_field": "t"}, "format must be one of"),
        ({"format": "jsonl", "path": "a", "text_field": "t", "weight": 0}, "weight must be > 0"),
        ({"format": "jsonl", "path": "a", "text_field": "t", "lang": "en"}, r"unknown keys \['lang'\]"),
        ({"format": "jsonl", "path": "a", "text_field": "t", "filter": {"x": {}}}, "filter.x must be"),
    ],
)
def test_bad_entries_are_config_errors_naming_the_corpus(tmp_path, entry, match):
    params = tmp_path / "params.yaml"
    params.write_text(json.dumps({"corpora": {"physics": {"weight": 1.0, **entry}}}))
    with pytest.raises(ConfigError, match=r"corpora\.physics.*" + match):
        load_corpora(params)


@pytest.mark.parametrize("name", ["tapt", "pool", "total", "guard_test", "a b"])
def test_a_reserved_or_malformed_corpus_name_is_refused(tmp_path, name):
    params = tmp_path / "params.yaml"
    params.write_text(
        json.dumps({"corpora": {name: {"weight": 1.0, "format": "jsonl", "path": "a", "text_field": "t"}}})
    )
    with pytest.raises(ConfigError, match=rf"corpus name '{name}' in 'corpora'"):
        load_corpora(params)


def test_no_corpus_name_can_write_over_sample_corpus_metrics():
    """Each corpus is reported as <name>_docs, _sentences and _words beside the stage's own keys: every
    other key of that form has its prefix reserved."""
    from minisci.config import RESERVED_CORPUS_NAMES

    metrics = json.loads((REPO / "metrics/sample_corpus.json").read_text())
    corpora = set(load_corpora(REPO / "data/corpora.yaml"))
    own = {k.rsplit("_", 1)[0] for k in metrics if k.rsplit("_", 1)[-1] in ("docs", "sentences", "words")}
    assert own - corpora == set(RESERVED_CORPUS_NAMES)


def test_a_corpus_outside_the_stage_dependencies_is_refused():
    corpora = {"physics": corpus(format="txt", dir="/elsewhere/notes")}
    with pytest.raises(ConfigError, match=r"corpora.physics: /elsewhere/notes is outside .*data/corpora/physics"):
        check_tracked(corpora, ["data/raw/corpus", "data/corpora"])
    check_tracked({"physics": corpus(format="txt", dir="data/corpora/notes")}, ["data/raw/corpus", "data/corpora"])


def test_a_corpus_in_fetch_datas_output_must_be_a_file_it_copies(tmp_path, monkeypatch):
    """DVC replaces data/raw whole on checkout: a user's file put there would be deleted."""
    monkeypatch.chdir(tmp_path)
    Path("data").mkdir()
    Path("data/manifest.tsv").write_text("path\tbytes\tsha256\turl\ncorpus/biomedical.jsonl\t1\t" + "0" * 64 + "\tu\n")
    dirs = ["data/raw/corpus", "data/corpora"]
    check_tracked({"biomedical": corpus(format="jsonl", path="data/raw/corpus/biomedical.jsonl", text_field="t")}, dirs)
    mine = {"mine": corpus(format="jsonl", path="data/raw/corpus/mine.jsonl", text_field="t")}
    with pytest.raises(
        ConfigError,
        match=r"corpora.mine: data/raw/corpus/mine.jsonl is not a file fetch_data copies .*data/corpora/mine",
    ):
        check_tracked(mine, dirs)


LONG = [
    {"paper_id": i, "abstract": f"Document {i}. " + "A sentence of some length. " * (1 + 7 * (i % 3))}
    for i in range(20)
]


@pytest.mark.parametrize(
    "fmt,name,writer",
    [
        ("jsonl", "p.jsonl", write_jsonl),
        ("jsonl", "p.jsonl.gz", lambda p, r: write_jsonl(p, r, compress=True)),
        ("parquet", "p.parquet", write_parquet),
        ("hf", "hf", write_hf),
        ("txt", "notes", None),
    ],
)
def test_chunks_are_bounded_in_bytes_and_say_how_far_the_reader_got(tmp_path, monkeypatch, fmt, name, writer):
    """However long the documents, a chunk holds at most CHUNK_BYTES of text (a longer document alone),
    every item once and in order, and ``done`` grows to the corpus's size in its progress unit."""
    monkeypatch.setattr(corpora_module, "CHUNK_BYTES", 600)
    if writer is None:
        (tmp_path / name).mkdir()
        for d in LONG:
            (tmp_path / name / f"d{d['paper_id']:02d}.txt").write_text(d["abstract"])
        c = corpus(format=fmt, dir=name)
    else:
        writer(tmp_path / name, LONG)
        c = corpus(format=fmt, **({"dir": name} if fmt == "hf" else {"path": name}), text_field="abstract")
    chunks = list(iter_chunks("physics", c, tmp_path))

    def size(item) -> int:
        return len(item[1]) if fmt == "txt" else len(item) if fmt == "jsonl" else len(item["abstract"])

    assert len(chunks) > 3, "the bound splits the corpus"
    for ch in chunks:
        assert len(ch.items) == 1 or sum(size(x) for x in ch.items) <= 600 + max(size(x) for x in ch.items)
    assert [ch.first for ch in chunks] == [
        1,
        *(1 + sum(len(x.items) for x in chunks[:k]) for k in range(1, len(chunks))),
    ]
    assert [r.text for r in read(c, tmp_path)] == [d["abstract"] for d in LONG]
    done = [ch.done for ch in chunks]
    assert done == sorted(done) and done[-1] == corpus_size(c, tmp_path)[0]


# 3. the sample ---------------------------------------------------------------------------------------------

# sha256 of documents.jsonl and punkt_params.json that the code before the catalogue (commit 31be0c5)
# wrote for the tiny params on the fixture mirror (biomedical_ratio 0.8 there, weights 0.8/0.2 here).
BEFORE = (
    "c1ce606d63cb0baa82b9356bc45733a10e2a276b3fe791b5461ebbde4e8e3703",
    "8edd0a9cbce3cba9af55290cfe4b7f8a725e4e910ed740e7b2ca5f00860420d6",
)


@pytest.mark.parametrize("num_proc", [1, 2])
def test_shipped_pool_as_two_entries_gives_the_old_bytes(tmp_path, fixture_prepared, num_proc):
    _, punkt, m = run_sample_corpus(tmp_path / "out", fixture_prepared, FIXTURE_DATASETS, cfg(), num_proc=num_proc)
    docs = (tmp_path / "out/documents.jsonl").read_bytes()
    punkt_bytes = (json.dumps(punkt, indent=1, sort_keys=True) + "\n").encode()
    assert (hashlib.sha256(docs).hexdigest(), hashlib.sha256(punkt_bytes).hexdigest()) == BEFORE
    per_corpus = [m["corpora"][c]["excluded_own_check_per_dataset"]["bc5cdr"] for c in ("biomedical", "general")]
    assert per_corpus == [3, 1] and m["excluded_own_check_per_dataset"]["bc5cdr"] == 4  # the planted one is general
    assert m["corpora"]["general"]["sampled_docs"] == m["general_docs"] == 6


def test_a_third_corpus_changes_only_what_it_must(tmp_path, fixture_prepared):
    (tmp_path / "notes").mkdir()
    for i in range(12):
        (tmp_path / f"notes/n{i:02d}.txt").write_text(
            f"Field note number {i} describes the river delta at dawn. The sediment load rose after rain {i}."
        )
    rows, _, m = run_sample_corpus(tmp_path / "a", fixture_prepared, FIXTURE_DATASETS, cfg())
    corpora = {**fixture_corpora(), "notes": corpus(format="txt", dir=str(tmp_path / "notes"))}
    corpora = {
        "biomedical": dataclasses.replace(corpora["biomedical"], weight=0.6),
        "general": dataclasses.replace(corpora["general"], weight=0.15),
        "notes": dataclasses.replace(corpora["notes"], weight=0.25),
    }
    rows2, _, m2 = run_sample_corpus(tmp_path / "b", fixture_prepared, FIXTURE_DATASETS, cfg(n_docs=40), corpora)
    # the same 24 + 6 documents of the two corpora, in the same relative order, and 10 notes
    assert [r["id"] for r in rows2 if r["domain"] != "notes"] == [r["id"] for r in rows]
    assert m2["notes_docs"] == m2["corpora"]["notes"]["sampled_docs"] == 10
    assert {k: m2[k] for k in ("excluded_total", "excluded_own_check_per_dataset")} == {
        k: m[k] for k in ("excluded_total", "excluded_own_check_per_dataset")
    }
    # with n_docs unchanged, each corpus keeps a prefix of its rank order: fewer, never other, documents
    rows3, _, _ = run_sample_corpus(tmp_path / "c", fixture_prepared, FIXTURE_DATASETS, cfg(), corpora)
    for dom in ("biomedical", "general"):
        assert {r["id"] for r in rows3 if r["domain"] == dom} < {r["id"] for r in rows if r["domain"] == dom}


def test_shares_follow_weights_and_sum_to_n():
    assert shares(5000, {"biomedical": 0.82, "general": 0.18}) == {"biomedical": 4100, "general": 900}
    assert shares(10, {"a": 1, "b": 1, "c": 1}) == {"a": 4, "b": 3, "c": 3}


def test_duplicates_keep_the_first_as_a_sequential_pass_would():
    import numpy as np

    # d0 (id x, text A); d1 (id y, text A) is a text duplicate; d2 (id y, text B) is kept, since the
    # dropped d1 never claimed id y; d3 (id x, text C) repeats d0's id; d4 is unique.
    ids, texts = np.array([1, 2, 2, 1, 5], dtype=np.uint64), np.array([10, 10, 20, 30, 50], dtype=np.uint64)
    assert duplicates(ids, texts).tolist() == [False, True, False, True, False]


def test_malformed_pool_file_in_a_worker_is_the_same_one_line_error(tmp_path, fixture_prepared):
    mirror = tmp_path / "mirror"
    shutil.copytree(FIXTURE_MIRROR, mirror)
    with (mirror / "corpus/general.jsonl").open("a") as f:
        f.write('{"id": "x", "text": "t", "source": "s", "kind": 3, "eval_overlap": false}\n')
    with pytest.raises(
        DataFormatError, match=r"general.jsonl:17: field 'kind' \(kind_field\) must be a string, got int"
    ):
        run_sample_corpus(
            tmp_path / "o", fixture_prepared, FIXTURE_DATASETS, cfg(), fixture_corpora(mirror), num_proc=2
        )


def two_corpora(tmp_path, a: list[dict], b: list[dict], **fields) -> dict:
    for name, rows in (("a", a), ("b", b)):
        write_jsonl(tmp_path / f"{name}.jsonl", rows)
    return {
        n: from_dict(CorpusConfig, {"path": str(tmp_path / f"{n}.jsonl"), "format": "jsonl", "text_field": "text",
                                    "weight": 0.5, **fields}, f"corpora.{n}")
        for n in "ab"
    }  # fmt: skip


def test_two_texts_under_one_id_are_a_data_error_naming_both(tmp_path, fixture_prepared):
    """Ids name documents: corpora whose ids overlap (two numbering schemes) are not duplicates to drop."""
    text = "Stars form in clouds of gas. The clouds collapse under gravity. Sentence {} ends here."
    a = [{"id": i, "text": text.format(f"a{i}")} for i in range(30)]
    b = [{"id": i + 25, "text": text.format(f"b{i}")} for i in range(30)]
    corpora = two_corpora(tmp_path, a, b, id_field="id")
    with pytest.raises(DataFormatError, match=r"b.jsonl:1: its id is also the id of another text, at .*a.jsonl:26"):
        run_sample_corpus(tmp_path / "o", fixture_prepared, FIXTURE_DATASETS, cfg(n_docs=10), corpora)
    assert not (tmp_path / "o/documents.jsonl").exists()
    # the same document in both corpora (same id, same text) is a duplicate, dropped once
    corpora = two_corpora(
        tmp_path, a, a[:5] + [{"id": i + 100, "text": text.format(f"c{i}")} for i in range(20)], id_field="id"
    )
    _, _, m = run_sample_corpus(tmp_path / "p", fixture_prepared, FIXTURE_DATASETS, cfg(n_docs=10), corpora)
    assert m["corpora"]["b"]["duplicates_dropped"] == 5


def test_a_title_field_no_document_has_is_an_error(tmp_path, fixture_prepared):
    rows = [{"text": f"Stars form in clouds. Clouds collapse {i}.", "title": f"On stars {i}"} for i in range(10)]
    corpora = two_corpora(tmp_path, rows, rows[::-1], title_field="titel")
    with pytest.raises(
        DataFormatError, match=r"a.jsonl: no document has a title in field 'titel' \(corpora.a.title_field\)"
    ):
        run_sample_corpus(tmp_path / "o", fixture_prepared, FIXTURE_DATASETS, cfg(n_docs=4), corpora)


def test_a_wrong_field_in_the_last_corpus_fails_before_the_first_is_read(tmp_path, fixture_prepared):
    """Both passes that read the whole catalogue (sample_corpus's scan, finetune_embeddings' pool) parse
    every corpus's first item first: corpus a's bad line 30 would be met only after a long read."""
    from minisci.finetune.retrieval_benchmark import _pool_records

    a = [{"text": f"Stars form in clouds. Clouds collapse {i}."} for i in range(29)] + [{"text": 3}]
    b = [{"body": f"Neutron stars merge {i}. Waves carry the news."} for i in range(5)]
    corpora = two_corpora(tmp_path, a, b)
    wrong = r"b.jsonl:1: field 'text' \(text_field\) must be a non-empty string, missing"
    with pytest.raises(DataFormatError, match=wrong):
        run_sample_corpus(tmp_path / "o", fixture_prepared, FIXTURE_DATASETS, cfg(n_docs=4), corpora)
    with pytest.raises(DataFormatError, match=wrong):
        next(_pool_records(corpora, tmp_path, "read"))


def test_a_corpus_with_no_documents_is_an_error_naming_its_file(tmp_path, fixture_prepared):
    """An empty file is named as such, not reported later as a pool too small for its share."""
    rows = [{"text": f"Stars form in clouds. Clouds collapse {i}."} for i in range(10)]
    corpora = two_corpora(tmp_path, rows, [])
    with pytest.raises(DataFormatError, match=r"b.jsonl: holds no documents \(corpora.b\)"):
        run_sample_corpus(tmp_path / "o", fixture_prepared, FIXTURE_DATASETS, cfg(n_docs=4), corpora)
    assert not (tmp_path / "o/documents.jsonl").exists()
    # a corpus whose filter drops every document still reads as a pool too small, saying so
    german = [{"text": f"Sterne entstehen in Wolken {i}. Die Wolken fallen zusammen.", "lang": "de"} for i in range(10)]
    corpora = two_corpora(tmp_path, rows, german, filter={"lang": "en"})
    corpora["a"] = dataclasses.replace(corpora["a"], filter={})
    with pytest.raises(
        ConfigError, match=r"need 2 b documents but the pool has only 0: of 10 read, its filter dropped 10"
    ):
        run_sample_corpus(tmp_path / "p", fixture_prepared, FIXTURE_DATASETS, cfg(n_docs=4), corpora)
