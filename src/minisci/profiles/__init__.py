"""Named parameter profiles, applied with DVC's own experiment mechanism:

    dvc exp run $(python -m minisci.profiles quick)     # ~6 min first look
    dvc exp run $(python -m minisci.profiles paper)     # the original recipe, on a GPU

A profile is a YAML mapping of ``section.key: value`` overrides; this module prints them as
``-S section.key=value`` arguments (``dvc exp run --set-param``), after checking every key exists
in params.yaml, so the profile's run is an ordinary, comparable DVC experiment.
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from pathlib import Path

import yaml

from minisci.errors import ConfigError

NAMES = ("quick", "paper")


def load_profile(name: str) -> dict:
    if name not in NAMES:
        raise ConfigError(f"unknown profile {name!r}; known: {list(NAMES)}")
    return yaml.safe_load(resources.files(__package__).joinpath(f"{name}.yaml").read_text())


def set_param_args(name: str, params_path: str | Path = "params.yaml") -> list[str]:
    params = yaml.safe_load(Path(params_path).read_text())
    args = []
    for key, value in load_profile(name).items():
        section, _, field = key.partition(".")
        if field not in params.get(section, {}):
            raise ConfigError(f"profile {name}: {key} is not a key of {params_path}")
        args += ["-S", f"{key}={_yaml_value(value)}"]
    return args


def _yaml_value(value) -> str:
    """One shell word that DVC's YAML parser reads back as the same value (3e-05 would be a
    string in YAML 1.1; lists must not contain spaces)."""
    if isinstance(value, list):
        return json.dumps(value, separators=(",", ":"))
    return yaml.safe_dump(value).removesuffix("\n...\n").strip()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(f"usage: python -m minisci.profiles {{{'|'.join(NAMES)}}}", file=sys.stderr)
        return 2
    print(" ".join(set_param_args(argv[0])))
    return 0
