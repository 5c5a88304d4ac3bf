"""Readers and prepare_data: every format variant the catalogue accepts, each from a tiny fixture
written here, the errors they give, and the real files against the data README's counts."""

import dataclasses
import json
from collections import Counter

import pytest
from conftest import FIXTURE_DATASETS, FIXTURE_MIRROR, REPO, prepare

from minisci.config import DatasetConfig, load_catalog
from minisci.data import prepare as prepare_module
from minisci.data.prepare import ner_counts, prepare_dataset
from minisci.data.readers import detect_scheme, read_classification, read_conll, spans, to_iob2
from minisci.errors import ConfigError, DataFormatError

SPLITS = {"train": "train.txt", "dev": "dev.txt", "test": "test.txt"}


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def ner_entry(tmp_path, **kw) -> DatasetConfig:
    return DatasetConfig(**{"task": "ner", "dir": str(tmp_path), "splits": SPLITS, "format": "conll", **kw})


def cls_entry(tmp_path, **kw) -> DatasetConfig:
    return DatasetConfig(**{"task": "classification", "dir": str(tmp_path), "splits": SPLITS, "format": "jsonl", **kw})


def write_splits(tmp_path, train, dev=None, test=None):
    for split, text in (("train", train), ("dev", dev or train), ("test", test or train)):
        write(tmp_path, f"{split}.txt", text)


# --- CoNLL quirks ---------------------------------------------------------------------------------------


def test_bc5cdr_form_docstart_with_pmid_and_double_blank_lines(tmp_path):
    p = write(
        tmp_path,
        "a.txt",
        "-DOCSTART- (111)\n\nNaloxone\tPROPN\tO\tI-Entity\nworks\tVERB\tO\tO\n\n"
        "Second\tADJ\tO\tO\n.\tPUNCT\tO\tO\n\n\n"
        "-DOCSTART- (222)\n\nlung\tNOUN\tO\tB-Entity\ncancer\tNOUN\tO\tI-Entity\n\n\n",
    )
    sents = read_conll(p)
    assert [s.tokens for s in sents] == [("Naloxone", "works"), ("Second", "."), ("lung", "cancer")]
    assert [s.doc_id for s in sents] == ["111", "111", "222"]
    assert sents[0].tags == ("I-Entity", "O")  # raw IOB1 kept by the reader
    assert sents[2].line == 12


def test_any_docstart_form_marks_a_document(tmp_path):
    p = write(tmp_path, "b.txt", "-DOCSTART-\tO\n\nIL-2\tB-DNA\ngene\tI-DNA\n\n-DOCSTART- [12] whatever\n\nx\tO\n")
    sents = read_conll(p)
    assert [s.doc_id for s in sents] == ["b-doc0", "b-doc1"] and sents[0].tags == ("B-DNA", "I-DNA")
    q = write(tmp_path, "c.txt", "-DOCSTART- -X- -X- O\n\nSelegiline -X- -X- B-Chemical\n- -X- -X- O\n")
    assert read_conll(q)[0].tokens == ("Selegiline", "-")


def test_two_column_tsv_without_docstart(tmp_path):
    sents = read_conll(write(tmp_path, "d.tsv", "a\tO\n\nb\tB-Disease\n"))
    assert [s.doc_id for s in sents] == [None, None]


def test_space_separated_four_columns_iob1_six_types_and_tag_column(tmp_path):
    """The second variant of issue 11: single spaces, IOB1, `-DOCSTART- NN O O` lines, six types."""
    types = ["protein", "DNA", "RNA", "cell_line", "cell_type", "virus"]
    lines = ["-DOCSTART- NN O O", ""]
    for t in types:
        lines += ["The DT O O", f"{t}x NN I-NP I-{t}", f"y NN I-NP I-{t}", ". . O O", ""]
    write_splits(tmp_path, "\n".join(lines) + "\n")
    rows, meta = prepare_dataset("six", ner_entry(tmp_path, scheme="auto"))
    assert meta["scheme"] == "IOB1" and meta["labels"] == sorted(types)
    assert rows["train"][0]["tags"] == ("O", "B-protein", "I-protein", "O")
    # the chunk column as the tag column reads that column instead
    rows, meta = prepare_dataset("chunks", ner_entry(tmp_path, tag_column=2))
    assert meta["labels"] == ["NP"]


def test_two_column_iob2_with_devel_split_name(tmp_path):
    """The first variant: 2-column IOB2 TSV, no -DOCSTART-, the dev split named `devel`."""
    text = "Aspirin\tB-Chemical\nworks\tO\n\nlung\tB-Disease\ncancer\tI-Disease\n"
    for name in ("train.tsv", "devel.tsv", "test.tsv"):
        write(tmp_path, name, text)
    splits = {"train": "train.tsv", "dev": "devel.tsv", "test": "test.tsv"}
    rows, meta = prepare_dataset("mine", ner_entry(tmp_path, splits=splits, scheme="IOB2"))
    assert meta["labels"] == ["Chemical", "Disease"] and meta["counts"]["dev"]["entities"] == 2


def test_keep_types_makes_single_type_sets(tmp_path):
    write_splits(tmp_path, "Aspirin\tB-Chemical\ncauses\tO\nlung\tB-Disease\ncancer\tI-Disease\n")
    rows, meta = prepare_dataset("chem", ner_entry(tmp_path, keep_types=("Chemical",)))
    assert rows["test"][0]["tags"] == ("B-Chemical", "O", "O", "O") and meta["labels"] == ["Chemical"]
    with pytest.raises(
        ConfigError, match=r"datasets\.chem\.keep_types \(the dataset catalogue\): \['Gene'\] never occur in train"
    ):
        prepare_dataset("chem", ner_entry(tmp_path, keep_types=("Gene",)))


def test_iob1_to_iob2_single_token_i_entity_and_adjacent_types():
    assert to_iob2(["I-Entity", "O", "I-Entity", "I-Entity"]) == ("B-Entity", "O", "B-Entity", "I-Entity")
    assert to_iob2(["I-A", "I-B", "B-B", "I-B"]) == ("B-A", "B-B", "B-B", "I-B")
    assert to_iob2(["B-X", "I-X", "O"]) == ("B-X", "I-X", "O")  # IOB2 unchanged
    assert spans(to_iob2(["I-Entity"])) == [("Entity", 0, 1)]
    assert spans(("B-A", "I-A", "B-A", "O", "B-B")) == [("A", 0, 2), ("A", 2, 3), ("B", 4, 5)]


def test_scheme_detection(tmp_path):
    assert detect_scheme(read_conll(write(tmp_path, "a", "x\tB-A\ny\tI-A\n"))) == "IOB2"
    assert detect_scheme(read_conll(write(tmp_path, "b", "x\tO\ny\tI-A\n"))) == "IOB1"


# --- JSON Lines classification ----------------------------------------------------------------------------


def jsonl(rows) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def test_jsonl_embedded_newlines_and_integer_labels(tmp_path):
    p = write(
        tmp_path, "s.jsonl", jsonl([{"text": "line one\nline two", "label": "method"}, {"text": "b", "label": 3}])
    )
    ex = read_classification(p)
    assert ex[0].text == "line one\nline two" and ex[1].label == "3"


def test_other_labels_and_fields_read_from_train(tmp_path):
    """Issue 11's classification variants: CamelCase/UPPER labels, other field names, a class absent
    from dev, duplicate and conflicting training rows, test texts that occur in train."""
    train = [
        {"sentence": t, "intent": lab}
        for t, lab in [
            ("a b", "UsesMethod"),
            ("c d", "BACKGROUND"),
            ("c d", "BACKGROUND"),
            ("e f", "Extends"),
            ("e f", "UsesMethod"),
        ]
    ]
    write(tmp_path, "train.txt", jsonl(train))
    write(tmp_path, "dev.txt", jsonl([{"sentence": "g", "intent": "UsesMethod"}]))
    write(tmp_path, "test.txt", jsonl([{"sentence": "a b", "intent": "Extends"}]))
    rows, meta = prepare_dataset("acl", cls_entry(tmp_path, text_field="sentence", label_field="intent"))
    assert meta["labels"] == ["BACKGROUND", "Extends", "UsesMethod"]
    assert meta["train_quality"] == {
        "train_duplicate_rows": 1,
        "train_conflicting_texts": 1,
        "dev_texts_in_train": 0,
        "test_texts_in_train": 1,
    }


# --- malformed input: one line naming the file and line ------------------------------------------------------


@pytest.mark.parametrize(
    "text, match",
    [
        ("a\tO\nb\tN\tO\n", r"x\.txt:2: expected 2 tab-separated columns"),
        ("a\tO\nb O\n", r"x\.txt:2: expected 2 tab-separated columns .* got 2 space-separated"),  # mixed separator
        ("a\tN\tO\tX-Foo\n", r"x\.txt:1: invalid tag 'X-Foo' in the last column \(tag_column\); expected O, B-<type>"),
        ("a\n", r"x\.txt:1: expected a token and a tag in the last column \(tag_column\), got 1 column\(s\)"),
        ("\n\n", r"x\.txt: no sentences found"),
        # a Unicode space inside a token would split it and drop its second half
        ("a\xa0b\tO\n", r"x\.txt:1: contains a no-break space \(U\+00A0\); columns are separated by tabs"),
        ("a\tO\nb\u2009c\tO\n", r"x\.txt:2: contains a thin space \(U\+2009\)"),
        # a JSON Lines file declared as CoNLL
        (
            '{"text": "a b", "label": "x"}\n',
            r"x\.txt:1: invalid tag .*it looks like JSON Lines \(declare format: jsonl",
        ),
        ('a\tO\n{"text": "a"}\n', r"x\.txt:2: expected 2 tab-separated .*it looks like JSON Lines"),
    ],
)
def test_conll_errors_name_file_and_line(tmp_path, text, match):
    with pytest.raises(DataFormatError, match=match):
        read_conll(write(tmp_path, "x.txt", text))


def test_a_tag_column_other_than_the_last_is_named_by_its_number(tmp_path):
    with pytest.raises(DataFormatError, match=r"x\.txt:1: invalid tag 'NN' in column 1 \(tag_column\); expected O"):
        read_conll(write(tmp_path, "x.txt", "a\tNN\tB-X\n"), 1)


def test_conll_decoding_errors(tmp_path):
    p = tmp_path / "x.txt"
    p.write_bytes(b"a\tO\nb\xff\tO\n")
    with pytest.raises(DataFormatError, match=r"x\.txt:2: not UTF-8: byte 0xff at byte offset 5"):
        read_conll(p)
    p.write_bytes(b"\xef\xbb\xbfa\tO\n")
    with pytest.raises(DataFormatError, match=r"x\.txt:1: starts with a UTF-8 byte-order mark"):
        read_conll(p)


def test_tag_outside_declared_iob2_scheme(tmp_path):
    write_splits(tmp_path, "x\tO\ny\tI-A\n")
    with pytest.raises(DataFormatError, match=r"train\.txt:2: tag 'I-A' after 'O' is outside the declared IOB2"):
        prepare_dataset("d", ner_entry(tmp_path, scheme="IOB2"))


def test_type_absent_from_train_or_declared_labels(tmp_path):
    write_splits(tmp_path, "x\tB-A\n", test="x\tO\n\ny\tB-B\n")
    with pytest.raises(DataFormatError, match=r"test\.txt:3: entity type 'B' never occurs in train"):
        prepare_dataset("d", ner_entry(tmp_path))
    with pytest.raises(DataFormatError, match=r"train\.txt:1: entity type 'A' not among the declared labels \['C'\]"):
        prepare_dataset("d", ner_entry(tmp_path, labels=("C",)))
    # declared, but train has none: the model could never learn it, as for a class
    with pytest.raises(DataFormatError, match=r"test\.txt:3: entity type 'B' never occurs in train"):
        prepare_dataset("d", ner_entry(tmp_path, labels=("A", "B")))


def test_empty_split(tmp_path):
    write_splits(tmp_path, "x\tO\n", dev="\n")
    with pytest.raises(DataFormatError, match=r"dev\.txt: no sentences found"):
        prepare_dataset("d", ner_entry(tmp_path))


@pytest.mark.parametrize(
    "text, match",
    [
        ('{"text": "a", "label": "method"}\n{"text": "b"}\n', r"s\.jsonl:2: missing label field 'label'"),
        ('{"text": "", "label": "method"}\n', r"s\.jsonl:1: expected a non-empty string field 'text'"),
        ('{"text": "a", "label": "method"\n', r"s\.jsonl:1: invalid JSON"),
        ('["a"]\n', r"s\.jsonl:1: expected a JSON object"),
        ('{"text": "a", "label": null}\n', r"s\.jsonl:1: label field 'label' must be a non-empty string"),
    ],
)
def test_jsonl_errors_name_file_and_line(tmp_path, text, match):
    with pytest.raises(DataFormatError, match=match):
        read_classification(write(tmp_path, "s.jsonl", text))


def test_label_unknown_or_never_in_train(tmp_path):
    write(tmp_path, "train.txt", jsonl([{"text": "a", "label": "x"}]))
    write(tmp_path, "dev.txt", jsonl([{"text": "b", "label": "x"}]))
    write(tmp_path, "test.txt", jsonl([{"text": "c", "label": "x"}, {"text": "d", "label": "y"}]))
    with pytest.raises(DataFormatError, match=r"test\.txt:2: label 'y' never occurs in train"):
        prepare_dataset("d", cls_entry(tmp_path))
    with pytest.raises(DataFormatError, match=r"test\.txt:2: unknown label 'y'; declared labels: \['x'\]"):
        prepare_dataset("d", cls_entry(tmp_path, labels=("x",)))


def test_missing_file(tmp_path):
    with pytest.raises(DataFormatError, match="file not found"):
        read_conll(tmp_path / "nope.txt")


@pytest.mark.parametrize(
    "entry, match",
    [
        ({"task": "pos"}, r"task must be one of"),
        ({"format": "jsonl"}, r"format of a ner dataset must be one of \('conll',\)"),
        ({"splits": {"train": "a", "devel": "b", "test": "c"}}, r"splits must name exactly"),
        ({"scheme": "BIOES"}, r"scheme must be one of"),
        ({"tag_column": 0}, r"tag_column 0 is the token column"),
    ],
)
def test_catalogue_entry_validation(tmp_path, entry, match):
    with pytest.raises(ConfigError, match=match):
        ner_entry(tmp_path, **entry)


def _code_strings(path) -> list[str]:
    """String constants of a module, docstrings and command-line examples in help texts left out
    (prose may name a dataset as an example)."""
    import ast

    tree = ast.parse(path.read_text())
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    strings = [
        n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]
    return [n.value for n in strings if "minisci " not in n.value]


def test_no_dataset_name_in_library_code():
    """Datasets are data: their names live in data/datasets.yaml, never in src/ code."""
    names = set(load_catalog(REPO / "data/datasets.yaml"))
    for path in (REPO / "src" / "minisci").rglob("*.py"):
        found = sorted(
            {n for v in _code_strings(path) for n in names if v == n or f"/{n}/" in v or v.startswith(f"{n}/")}
        )
        assert not found, f"{path.relative_to(REPO)} names datasets {found}"


# --- the real files, prepared as the catalogue declares them, match the data README -----------------------

README_COUNTS = {  # (sentences, tokens, documents, entities per type)
    ("bc5cdr", "train"): (3942, 95370, 500, {"Entity": 9270}),
    ("bc5cdr", "dev"): (3949, 94437, 500, {"Entity": 9455}),
    ("bc5cdr", "test"): (4139, 98691, 500, {"Entity": 9662}),
    ("bc5cdr_typed", "train"): (4560, 118170, 0, {"Chemical": 5203, "Disease": 4182}),
    ("bc5cdr_typed", "test"): (4797, 124750, 0, {"Chemical": 5385, "Disease": 4424}),
    ("bc5cdr_chemical", "test"): (4797, 124750, 0, {"Chemical": 5385}),
    ("bc5cdr_disease", "test"): (4797, 124750, 0, {"Disease": 4424}),
    ("ncbi_disease", "train"): (5424, 135701, 0, {"Disease": 5134}),
    ("ncbi_disease", "test"): (940, 24497, 0, {"Disease": 960}),
    ("jnlpba", "dev"): (
        1739,
        47461,
        200,
        {"protein": 2466, "DNA": 1052, "cell_type": 526, "cell_line": 400, "RNA": 107},
    ),
    ("jnlpba", "test"): (
        3856,
        101039,
        404,
        {"protein": 5067, "DNA": 1056, "cell_type": 1921, "cell_line": 500, "RNA": 118},
    ),
}


@pytest.fixture(scope="module")
def real_catalog(shared_data):
    catalog = load_catalog(REPO / "data/datasets.yaml")
    return {
        n: dataclasses.replace(c, dir=str(shared_data / c.dir.removeprefix("data/raw/"))) for n, c in catalog.items()
    }


@pytest.mark.parametrize("name", sorted({n for n, _ in README_COUNTS}))
def test_real_files_match_readme_counts(real_catalog, name):
    _, meta = prepare_dataset(name, real_catalog[name])
    for (n, split), (n_sent, n_tok, n_docs, per_type) in README_COUNTS.items():
        if n == name:
            c = meta["counts"][split]
            assert (c["sentences"], c["tokens"], c["documents"]) == (n_sent, n_tok, n_docs)
            assert c["entities_per_type"] == dict(sorted(per_type.items()))


def test_real_bc5cdr_is_iob1_and_detected_so(real_catalog):
    tags = Counter(t for s in read_conll(real_catalog["bc5cdr"].path("train")) for t in s.tags)
    assert (tags["B-Entity"], tags["I-Entity"], tags["O"]) == (2413, 10931, 82026)
    assert prepare_dataset("bc5cdr", dataclasses.replace(real_catalog["bc5cdr"], scheme="auto"))[1]["scheme"] == "IOB1"


def test_real_scicite_counts(real_catalog):
    rows, meta = prepare_dataset("scicite", real_catalog["scicite"])
    expected = {"train": (7320, 554), "dev": (916, 55), "test": (1861, 132)}
    for split, (n, n_newline) in expected.items():
        assert (len(rows[split]), sum("\n" in r["text"] for r in rows[split])) == (n, n_newline)
    assert ner_counts([]) == {"sentences": 0, "tokens": 0, "documents": 0, "entities": 0, "entities_per_type": {}}


# --- dataset health: errors for silent wrong results, warnings for likely mistakes ----------------------------


def test_conll_token_starting_with_a_brace_is_still_a_token(tmp_path):
    assert read_conll(write(tmp_path, "x.txt", "{\tO\nIL-2\tB-Gene\n"))[0].tokens == ("{", "IL-2")


def test_missing_split_file_names_the_files_that_are_there(tmp_path):
    write_splits(tmp_path, "x\tB-A\n")
    (tmp_path / "dev.txt").rename(tmp_path / "devel.txt")
    with pytest.raises(
        DataFormatError, match=r"dev\.txt: file not found; .* holds: devel\.txt, test\.txt, train\.txt$"
    ):
        prepare_dataset("d", ner_entry(tmp_path))
    with pytest.raises(DataFormatError, match=r"nowhere/train\.txt: file not found, and its folder .*nowhere does not"):
        prepare_dataset("d", ner_entry(tmp_path / "nowhere"))


def test_split_without_entities_is_an_error_naming_the_tag_column(tmp_path):
    write_splits(tmp_path, "x\tB-A\tO\ny\tI-A\tO\n")
    with pytest.raises(
        DataFormatError, match=r"train\.txt: no entity in this split: every tag in column -1 \(tag_column\)"
    ):
        prepare_dataset("d", ner_entry(tmp_path))
    write_splits(tmp_path, "x\tB-A\n", test="x\tO\n")
    with pytest.raises(DataFormatError, match=r"test\.txt: no entity in this split: every tag in column -1"):
        prepare_dataset("d", ner_entry(tmp_path))
    write_splits(tmp_path, "x\tB-A\n\ny\tB-B\n", test="x\tB-B\n")
    with pytest.raises(DataFormatError, match=r"test\.txt: no entity in this split: none of keep_types \['A'\]"):
        prepare_dataset("d", ner_entry(tmp_path, keep_types=("A",)))


def test_missing_types_and_singletons_are_warnings_recorded_in_dataset_json(tmp_path, capsys):
    write_splits(tmp_path, "x\tB-A\n\ny\tB-A\n\nz\tB-B\n", dev="x\tB-A\n", test="x\tB-A\n\nz\tB-B\n")
    rows, meta = prepare_dataset("d", ner_entry(tmp_path))
    assert meta["missing_labels"] == {"train": [], "dev": ["B"], "test": []}
    assert meta["singleton_types"] == {}  # B occurs twice in the dataset (train and test)
    assert meta["warnings"] == [f"entity type 'B' never occurs in dev ({tmp_path}/dev.txt); its dev F1 is undefined"]
    assert meta["warning_counts"] == {"missing_labels": 1, "duplicate_json_keys": 0, "singleton_types": 0}
    assert meta["train_quality"] == {
        "train_duplicate_rows": 0,
        "train_conflicting_texts": 0,
        "dev_texts_in_train": 1,
        "test_texts_in_train": 2,
    }
    write_splits(tmp_path, "x\tB-A\ny\tO\nq\tB-Typo\n", dev="x\tB-A\n", test="x\tB-A\n")
    rows, meta = prepare_dataset("d", ner_entry(tmp_path))
    assert meta["singleton_types"] == {"Typo": f"{tmp_path}/train.txt:3"}
    assert (
        meta["warnings"][-1]
        == f"{tmp_path}/train.txt:3: entity type 'Typo' occurs only once in the whole dataset (a typo?)"
    )
    assert meta["warning_counts"]["singleton_types"] == 1


def test_classification_warnings_missing_class_and_duplicate_json_key(tmp_path):
    write(tmp_path, "train.txt", jsonl([{"text": "a", "label": "x"}, {"text": "b", "label": "y"}]))
    write(tmp_path, "dev.txt", '{"text": "c", "label": "x", "label": "y"}\n')
    write(tmp_path, "test.txt", jsonl([{"text": "a", "label": "x"}]))
    rows, meta = prepare_dataset("d", cls_entry(tmp_path))
    assert rows["dev"][0]["label"] == "y"  # the last value, as JSON parsers read it
    assert meta["missing_labels"] == {"train": [], "dev": ["x"], "test": ["y"]}
    assert meta["duplicate_json_keys"] == [
        f"{tmp_path}/dev.txt:1: duplicate key 'label' in one JSON object; the last value is used"
    ]
    assert meta["warning_counts"] == {"missing_labels": 2, "duplicate_json_keys": 1, "singleton_types": 0}
    assert len(meta["warnings"]) == 3 and meta["train_quality"]["test_texts_in_train"] == 1


def test_stage_prints_one_warning_line_each(tmp_path, capsys, monkeypatch):

    import prepare_data as stage
    import yaml

    write_splits(tmp_path, "x\tB-A\n\nq\tB-Typo\n", dev="x\tB-A\n", test="x\tB-A\n")
    monkeypatch.chdir(tmp_path.parent)  # a catalogue dir is repository-relative
    entry = {"task": "ner", "dir": tmp_path.name, "splits": SPLITS, "format": "conll"}
    catalogue = tmp_path / "datasets.yaml"
    catalogue.write_text(yaml.safe_dump({"datasets": {"d": entry}}))
    stage.main(
        ["--dataset", "d", "--data", str(tmp_path), "--out", str(tmp_path / "out"), "--catalogue", str(catalogue)]
    )
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"warning: d: entity type 'Typo' never occurs in dev ({tmp_path}/dev.txt); its dev F1 is undefined",
        f"warning: d: entity type 'Typo' never occurs in test ({tmp_path}/test.txt); its test F1 is undefined",
        f"warning: d: {tmp_path}/train.txt:3: entity type 'Typo' occurs only once in the whole dataset (a typo?)",
        f"warning: d: dev texts also in train: 1, in {tmp_path}/dev.txt; dev scores may be inflated",
        f"warning: d: test texts also in train: 1, in {tmp_path}/test.txt; test scores may be inflated",
    ]
    meta = json.loads((tmp_path / "out/dataset.json").read_text())
    assert meta["warning_counts"] == {"missing_labels": 2, "duplicate_json_keys": 0, "singleton_types": 1}


def test_a_huge_bad_conll_line_is_quoted_short(tmp_path):
    """The error is one line a terminal can show: the offending line is quoted up to 200 characters."""
    p = write(tmp_path, "x.txt", "a\tO\n" + "tok " * 500_000 + "\n")
    with pytest.raises(DataFormatError) as e:
        read_conll(p)
    assert "x.txt:2: expected 2 tab-separated columns" in str(e.value) and str(e.value).endswith(" ...")
    assert len(str(e.value)) < len(str(p)) + 400


@pytest.mark.parametrize("name", FIXTURE_DATASETS)
def test_a_large_split_file_is_said_before_and_after_it_is_read(tmp_path, monkeypatch, capsys, name):
    monkeypatch.setattr(prepare_module, "LARGE_FILE", 1)  # every fixture file counts as large
    prepare(FIXTURE_MIRROR, name, tmp_path / name)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6 and all(line.startswith(f"prepare_data {name}: ") for line in lines)
    assert "reading" in lines[0] and "MiB" in lines[0] and " rows in " in lines[1]
    monkeypatch.setattr(prepare_module, "LARGE_FILE", 64 << 20)
    prepare(FIXTURE_MIRROR, name, tmp_path / f"{name}-quiet")
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    "text,match",
    [
        (
            "Aspirin\tB-Chemical\ncauses\tO\n",
            r"train\.txt:1: invalid JSON .*it looks like CoNLL \(declare format: conll",
        ),
        ("The DT O O\ncells NN I-NP I-cell_type\n", r"train\.txt:1: invalid JSON .*it looks like CoNLL"),
    ],
)
def test_a_conll_file_declared_as_json_lines_says_so(tmp_path, text, match):
    write_splits(tmp_path, text)
    with pytest.raises(DataFormatError, match=match):
        prepare_dataset("mine", cls_entry(tmp_path))


def test_a_broken_json_line_gets_no_conll_hint(tmp_path):
    write_splits(tmp_path, '{"text": "a b", "label": "x"\n')
    with pytest.raises(DataFormatError, match=r"train\.txt:1: invalid JSON") as caught:
        prepare_dataset("mine", cls_entry(tmp_path))
    assert "CoNLL" not in str(caught.value)
