"""Named parameter profiles, applied with DVC's own experiment mechanism:

    python -m minisci.profiles quick --run             # a first look in minutes: runs `dvc exp run -S ...`
    python -m minisci.profiles paper --run --temp      # the original recipe, on a GPU; extra dvc args follow

A profile is a YAML mapping of ``section.key: value`` overrides, turned into ``-S section.key=value``
arguments (``dvc exp run --set-param``) after checking every key exists in params.yaml, so the
profile's run is an ordinary, comparable DVC experiment. ``--run`` runs ``dvc exp run`` itself: a
typo in the name is then an error, where ``dvc exp run $(python -m minisci.profiles NAME)`` (which
still works: without ``--run`` the arguments are printed) would start the default experiment (hours on
a CPU) with nothing substituted. ``paper --run`` where no CUDA GPU is visible warns first that the
profile is sized for one (its pretraining alone would take about two days on 2 CPU cores).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from importlib import resources
from pathlib import Path

import yaml

from minisci.errors import ConfigError

NAMES = ("quick", "paper")


USAGE = f"usage: python -m minisci.profiles {{{'|'.join(NAMES)}}} [--run [DVC_EXP_RUN_ARGS...]]"
HELP = f"""{USAGE}

Apply a named parameter profile as a DVC experiment.

  NAME         print the profile's `-S section.key=value` arguments for `dvc exp run`
  NAME --run   run `dvc exp run` with them; the arguments after --run go to dvc (e.g. --temp, -n NAME)

Profiles: quick (a first look in minutes, on small sizes), paper (the original recipe, on a GPU).
Run from the project root (where params.yaml is)."""


def load_profile(name: str) -> dict:
    if name not in NAMES:
        raise ConfigError(f"unknown profile {name!r}; known: {', '.join(NAMES)}")
    return yaml.safe_load(resources.files(__package__).joinpath(f"{name}.yaml").read_text())


def apply_profile(name: str, params: dict, where: str | Path = "params.yaml") -> dict:
    """``params`` (the sections of a params.yaml, read from ``where``) with profile ``name``'s values
    set, as a new mapping; a profile key that ``params`` lacks is a ConfigError naming it."""
    out = {section: dict(v) if isinstance(v, dict) else v for section, v in params.items()}
    for key, value in load_profile(name).items():
        section, _, field = key.partition(".")
        if not isinstance(out.get(section), dict) or field not in out[section]:
            raise ConfigError(f"profile {name}: {key} is not a key of {where}")
        out[section][field] = value
    return out


def set_param_args(name: str, params_path: str | Path = "params.yaml") -> list[str]:
    params_path = Path(params_path)
    if not params_path.is_file():
        raise ConfigError(f"{params_path}: not found in {Path.cwd()}; run from the project root (where params.yaml is)")
    params = yaml.safe_load(params_path.read_text(encoding="utf-8"))
    if not isinstance(params, dict):
        raise ConfigError(f"{params_path}: expected a mapping of params sections")
    apply_profile(name, params, params_path)  # every key is checked before dvc runs
    return [arg for key, value in load_profile(name).items() for arg in ("-S", f"{key}={_yaml_value(value)}")]


def _yaml_value(value) -> str:
    """One shell word that DVC's YAML parser reads back as the same value (3e-05 would be a
    string in YAML 1.1; lists must not contain spaces)."""
    if isinstance(value, list):
        return json.dumps(value, separators=(",", ":"))
    return yaml.safe_dump(value).removesuffix("\n...\n").strip()


def main(argv: list[str] | None = None) -> int:
    """Print a profile's arguments, or with ``--run`` run ``dvc exp run`` with them. Every failure
    is one line on stderr and exit code 2, so nothing runs on a typo."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["-h"], ["--help"]):
        print(HELP)
        return 0
    if not argv or argv[0].startswith("-") or (len(argv) > 1 and argv[1] != "--run"):
        print(f"error: {USAGE} (see --help)", file=sys.stderr)
        return 2
    try:
        args = set_param_args(argv[0])
    except (ConfigError, OSError, yaml.YAMLError) as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    if len(argv) == 1:
        print(" ".join(args))
        return 0
    if argv[0] == "paper" and not _cuda():
        print(
            "warning: no CUDA GPU is visible, and the paper profile is sized for one: on 2 CPU cores its pretraining "
            "alone would take about two days (3 seeds x 74M word pieces, at the ~1,500 pieces/s a 2-core Xeon trains); "
            "the quick profile is the CPU's first look",
            file=sys.stderr,
        )
    cmd = [sys.executable, "-m", "dvc", "exp", "run", *args, *argv[2:]]
    # quoted, so the line can be pasted into a shell ([13] is a glob pattern; zsh stops on no match)
    print(f"minisci.profiles: {shlex.join(['dvc', 'exp', 'run', *args, *argv[2:]])}", file=sys.stderr)
    try:
        return subprocess.call(cmd)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


def _cuda() -> bool:
    import torch  # only here: printing a profile's arguments stays light

    return torch.cuda.is_available()
