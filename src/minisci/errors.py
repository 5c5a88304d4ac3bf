"""Exceptions that stage scripts turn into a one-line message and a non-zero exit."""


class MinisciError(Exception):
    """Base class: an error the user can fix (bad input, bad config, missing data)."""


class ConfigError(MinisciError):
    """A params section is missing, has unknown keys or an invalid value."""


class DataFormatError(MinisciError):
    """An input file is malformed; the message names the file and line."""

    def __init__(self, path, line: int | None, msg: str):
        where = f"{path}:{line}" if line is not None else f"{path}"
        super().__init__(f"{where}: {msg}")
        self.path = path
        self.line = line


class FetchError(MinisciError):
    """A data file is missing from the mirror or fails its checksum."""
