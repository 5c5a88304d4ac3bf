"""The input checks that the ``minisci`` command line and the Python API share, so a bad ``k``, a
missing text or a bad port gets the same answer from both (the command line adds argparse's
"argument -k:" in front, the API the parameter's name). No torch, transformers or NumPy here:
``minisci --help`` imports this module.
"""

from __future__ import annotations

import argparse

from minisci.errors import MinisciError

PORTS = (1, 65535)


def whole_number_problem(value, low: int, high: int | None = None) -> str | None:
    """Why ``value`` is not a whole number in ``[low, high]``, or None if it is."""
    if isinstance(value, bool) or not isinstance(value, int):
        return f"expected a whole number, got {value!r}"
    if value < low:
        return f"must be >= {low}, got {value}"
    if high is not None and value > high:
        return f"must be <= {high}, got {value}"
    return None


def check_whole_number(name: str, value, low: int, high: int | None = None) -> int:
    problem = whole_number_problem(value, low, high)
    if problem:
        raise MinisciError(f"{name}: {problem}")
    return value


def check_k(k) -> int:
    """``k`` results: a whole number >= 1 (a negative ``k`` would slice off the last results)."""
    return check_whole_number("k", k, 1)


def check_text(text, what: str = "text") -> str:
    """A query, abstract or text to tag: a non-empty string."""
    if not isinstance(text, str):
        raise MinisciError(f"{what}: expected a text (str), got {type(text).__name__}")
    if not text.strip():
        raise MinisciError(f"{what}: empty text")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:  # a command-line argument's undecodable bytes, kept as lone surrogates
        raise MinisciError(
            f"{what}: not UTF-8 text (byte 0x{ord(e.object[e.start]) & 0xFF:02x} at character {e.start})"
        ) from None
    return text


def check_texts(texts: list) -> list[str]:
    """Every text of a batch, named by its position (1-based, as lines of a file)."""
    for i, t in enumerate(texts, start=1):
        check_text(t, f"input {i}")
    return texts


def at_least(low: int, high: int | None = None):
    """An argparse type: a whole number in ``[low, high]`` (``-k -3`` is an error, not Python
    slicing), checked by the same function as the Python API's arguments."""

    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
        problem = whole_number_problem(n, low, high)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return n

    parse.__name__ = f"integer >= {low}"
    return parse


EMPTY_AUTHOR = "an empty name matches no author"  # an unset shell variable in --exclude "$ME" would exclude no one


def author_name(name: str) -> str:
    """An argparse type: an author's name for ``--exclude``, not blank."""
    if not name.strip():
        raise argparse.ArgumentTypeError(EMPTY_AUTHOR)
    return name


def check_exclude(exclude) -> tuple[str, ...]:
    """The API's ``exclude``: one name or a sequence of names, none blank."""
    names = [exclude] if isinstance(exclude, str) else list(exclude)  # one name, not its letters
    for name in names:
        if not isinstance(name, str):
            raise MinisciError(f"exclude: expected authors' names (str), got {type(name).__name__}")
        if not name.strip():
            raise MinisciError(f"exclude: {EMPTY_AUTHOR}")
    return tuple(names)


def input_name(path) -> str:
    """How errors and warnings name an input: ``-`` and None (no path given) are standard input."""
    return "standard input" if path is None or str(path) == "-" else str(path)
