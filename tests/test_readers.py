from collections import Counter

import pytest

from minisci.data.readers import (
    NER_DATASETS,
    load_ner_split,
    load_scicite_split,
    ner_stats,
    ner_to_dataset,
    read_conll,
    read_scicite,
    spans,
    to_iob2,
)
from minisci.errors import DataFormatError


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


# --- quirks ---------------------------------------------------------------------------------------


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


def test_jnlpba_form_docstart_two_columns(tmp_path):
    p = write(
        tmp_path, "b.txt", "-DOCSTART-\tO\n\nIL-2\tNN\tO\tB-DNA\ngene\tNN\tO\tI-DNA\n\n-DOCSTART-\tO\n\nx\tNN\tO\tO\n"
    )
    sents = read_conll(p)
    assert [s.doc_id for s in sents] == ["b-doc0", "b-doc1"]
    assert sents[0].tags == ("B-DNA", "I-DNA")


def test_conll2003_form_docstart_and_two_column_tsv_without_docs(tmp_path):
    p = write(tmp_path, "c.tsv", "-DOCSTART- -X- -X- O\n\nSelegiline\tB-Chemical\n-\tO\ninduced\tO\n")
    sents = read_conll(p)
    assert sents[0].tokens == ("Selegiline", "-", "induced") and sents[0].doc_id == "c-doc0"
    q = write(tmp_path, "d.tsv", "a\tO\n\nb\tB-Disease\n")
    assert [s.doc_id for s in read_conll(q)] == [None, None]


def test_iob1_to_iob2_single_token_i_entity_and_adjacent_types():
    assert to_iob2(["I-Entity", "O", "I-Entity", "I-Entity"]) == ("B-Entity", "O", "B-Entity", "I-Entity")
    assert to_iob2(["I-A", "I-B", "B-B", "I-B"]) == ("B-A", "B-B", "B-B", "I-B")
    assert to_iob2(["B-X", "I-X", "O"]) == ("B-X", "I-X", "O")  # IOB2 unchanged
    assert spans(to_iob2(["I-Entity"])) == [("Entity", 0, 1)]
    assert spans(("B-A", "I-A", "B-A", "O", "B-B")) == [("A", 0, 2), ("A", 2, 3), ("B", 4, 5)]


def test_scicite_embedded_newlines_and_labels(tmp_path):
    p = write(
        tmp_path,
        "s.jsonl",
        '{"text": "line one\\nline two", "label": "method", "metadata": {}}\n'
        '{"text": "caf\\u00e9 \\u2212 x", "label": "result", "metadata": {}}\n',
    )
    ex = read_scicite(p)
    assert ex[0].text == "line one\nline two" and ex[1].label == "result" and "\u2212" in ex[1].text


def test_datasets_conversion(tmp_path):
    p = write(tmp_path, "a.txt", "-DOCSTART- (1)\n\nx\tN\tO\tI-Entity\n")
    ds = ner_to_dataset(read_conll(p))
    assert ds.column_names == ["tokens", "tags", "doc_id"] and ds[0]["tokens"] == ["x"]


# --- malformed input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, match",
    [
        ("a\tO\nb\tN\tO\n", r"x\.txt:2: expected 2 tab-separated columns"),
        ("a\tN\tO\n", r"x\.txt:1: expected 2 or 4 tab-separated columns"),
        ("a\tN\tO\tX-Foo\n", r"x\.txt:1: invalid tag 'X-Foo'"),
        ("a b\tO\n", r"x\.txt:1: empty token or token with whitespace"),
        ("-DOCSTART- [12]\n", r"x\.txt:1: unrecognised -DOCSTART- line"),
        ("\n\n", r"x\.txt: no sentences found"),
    ],
)
def test_conll_errors_name_file_and_line(tmp_path, text, match):
    with pytest.raises(DataFormatError, match=match):
        read_conll(write(tmp_path, "x.txt", text))


@pytest.mark.parametrize(
    "text, match",
    [
        ('{"text": "a", "label": "method"}\n{"text": "b", "label": "other"}\n', r"s\.jsonl:2: unknown label 'other'"),
        ('{"text": "", "label": "method"}\n', r"s\.jsonl:1: expected a non-empty string field 'text'"),
        ('{"text": "a", "label": "method"\n', r"s\.jsonl:1: invalid JSON"),
        ('{"text": "a", "label": "method"}\n\n', r"s\.jsonl:2: empty line"),
        ("", r"s\.jsonl: file is empty"),
        ('["a"]\n', r"s\.jsonl:1: expected a JSON object"),
    ],
)
def test_scicite_errors_name_file_and_line(tmp_path, text, match):
    with pytest.raises(DataFormatError, match=match):
        read_scicite(write(tmp_path, "s.jsonl", text))


def test_missing_file(tmp_path):
    with pytest.raises(DataFormatError, match="file not found"):
        read_conll(tmp_path / "nope.txt")


# --- the real files match the counts documented in the data README ------------------------------

README_COUNTS = {  # (sentences, tokens, documents, entities per type)
    ("bc5cdr", "train"): (3942, 95370, 500, {"Entity": 9270}),
    ("bc5cdr", "dev"): (3949, 94437, 500, {"Entity": 9455}),
    ("bc5cdr", "test"): (4139, 98691, 500, {"Entity": 9662}),
    ("bc5cdr_typed", "train"): (4560, 118170, 0, {"Chemical": 5203, "Disease": 4182}),
    ("bc5cdr_typed", "test"): (4797, 124750, 0, {"Chemical": 5385, "Disease": 4424}),
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


@pytest.mark.parametrize("name, split", list(README_COUNTS))
def test_real_files_match_readme_counts(shared_data, name, split):
    n_sent, n_tok, n_docs, per_type = README_COUNTS[(name, split)]
    st = ner_stats(load_ner_split(name, split, shared_data))
    assert (st["sentences"], st["tokens"], st["documents"]) == (n_sent, n_tok, n_docs)
    assert st["entities_per_type"] == dict(sorted(per_type.items()))


def test_real_bc5cdr_raw_tag_counts_are_iob1(shared_data):
    tags = Counter(t for s in read_conll(NER_DATASETS["bc5cdr"].path(shared_data, "train")) for t in s.tags)
    assert (tags["B-Entity"], tags["I-Entity"], tags["O"]) == (2413, 10931, 82026)


def test_real_scicite_counts(shared_data):
    expected = {"train": (7320, 554), "dev": (916, 55), "test": (1861, 132)}
    for split, (n, n_newline) in expected.items():
        ex = load_scicite_split(split, shared_data)
        assert (len(ex), sum("\n" in e.text for e in ex)) == (n, n_newline)
