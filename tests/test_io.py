"""Strict reading: a BOM, a byte that is not UTF-8 or a malformed line is a DataFormatError naming
the file, line and byte offset; and, for any bytes at all, nothing but that error escapes."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minisci.errors import DataFormatError
from minisci.io import iter_jsonl, read_jsonl, read_text, read_text_lines


@pytest.mark.parametrize(
    "data, match",
    [
        (b'\xef\xbb\xbf{"a": 1}\n', r"x.jsonl:1: starts with a UTF-8 byte-order mark"),
        (b'{"a": 1}\n{"a": "caf\xe9"}\n', r"x.jsonl:2: not UTF-8: byte 0xe9 at byte offset 19"),
        (b'{"a": 1}\n{"a": \n', r"x.jsonl:2: invalid JSON \(Expecting value: column 7\)"),
        (b'{"a": "open\n', r"x.jsonl:1: invalid JSON \(Unterminated string starting at: column 7\)"),
        (b'{"a": 1}\n\n', r"x.jsonl:2: empty line"),
        (b"[1, 2]\n", r"x.jsonl:1: expected a JSON object, got list"),
        (b"1" * 5000 + b"\n", r"x.jsonl:1: invalid JSON \(Exceeds the limit"),
        (b"[" * 200_000 + b"\n", r"x.jsonl:1: invalid JSON"),
        (b"", r"x.jsonl: file is empty"),
    ],
)
def test_bad_jsonl_names_file_and_line(tmp_path, data, match):
    (tmp_path / "x.jsonl").write_bytes(data)
    with pytest.raises(DataFormatError, match=match):
        read_jsonl(tmp_path / "x.jsonl")


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(DataFormatError, match="nope.txt: file not found"):
        list(read_text_lines(tmp_path / "nope.txt"))
    with pytest.raises(DataFormatError, match="is a directory; expected a file"):
        list(iter_jsonl(tmp_path))


def test_text_lines_strip_lf_and_crlf_and_keep_numbers(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"one\r\ntwo\n\nthr\xc3\xa9e")
    assert list(read_text_lines(tmp_path / "a.txt")) == [(1, "one"), (2, "two"), (3, ""), (4, "thr\u00e9e")]
    assert read_text(tmp_path / "a.txt") == "one\ntwo\n\nthr\u00e9e\n"


def test_bad_byte_on_a_later_line_reports_its_offset(tmp_path):
    (tmp_path / "a.conll").write_bytes(b"Aspirin\tB-Chemical\n\nna\xefve\tO\n")
    lines = read_text_lines(tmp_path / "a.conll")
    assert next(lines) == (1, "Aspirin\tB-Chemical")
    with pytest.raises(DataFormatError, match=r"a.conll:3: not UTF-8: byte 0xef at byte offset 22"):
        list(lines)


# Valid lines with arbitrary bytes spliced in reach every branch, not only the first line's.
_lines = st.lists(
    st.one_of(
        st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), st.text(max_size=5))).map(
            lambda d: json.dumps(d, ensure_ascii=False).encode()
        ),
        st.binary(max_size=20),
    ),
    max_size=6,
).map(b"\n".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(st.binary(max_size=200), _lines))
def test_any_bytes_parse_or_raise_data_format_error(tmp_path, data):
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(data)
    try:
        rows = read_jsonl(path)
    except DataFormatError as e:
        assert str(e).startswith(str(path)) and "\n" not in str(e)
    else:
        assert all(isinstance(r, dict) for r in rows)
    try:
        lines = list(read_text_lines(path))
    except DataFormatError as e:
        assert str(e).startswith(f"{path}:")
    else:
        assert [n for n, _ in lines] == list(range(1, len(lines) + 1))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(st.binary(max_size=200), _lines))
def test_any_bytes_read_as_conll_or_classification_parse_or_raise_data_format_error(tmp_path, data):
    """The catalogue's readers: whatever the file holds, a parse or the project's one-line data error."""
    from minisci.data.readers import read_classification, read_conll

    path = tmp_path / "fuzz.txt"
    path.write_bytes(data)
    for read in (read_conll, read_classification):
        try:
            read(path)
        except DataFormatError as e:
            assert str(e).startswith(str(path)) and "\n" not in str(e)
