"""Reading ``dvc exp show --json``: the experiments of every baseline commit, with their params and
metrics as flat dotted keys. The experiment log (:mod:`minisci.report.experiments`) and the studies
(:mod:`minisci.report.studies`) both read it here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from minisci.errors import MinisciError

DEFAULT_PARAMS_FILE = "params.yaml"  # dvc exp run -S names keys of other params files as FILE:key


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys; lists and scalars are leaves."""
    if not isinstance(obj, dict) or (prefix and not obj):
        return {prefix: obj}
    out = {}
    for key, value in obj.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def params_of(data: dict) -> dict[str, Any]:
    out = {}
    for file, content in (data.get("params") or {}).items():
        prefix = "" if file == DEFAULT_PARAMS_FILE else f"{file}:"
        out.update({prefix + k: v for k, v in flatten((content or {}).get("data") or {}).items()})
    return out


def format_value(value: Any) -> str:
    """A value as ``dvc exp run -S`` (Hydra override grammar) reads it back."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    if isinstance(value, str):
        plain = value and value == value.strip() and not any(c in value for c in "[]{}(),'\"=:\\")
        return value if plain and yaml.safe_load(value) == value else "'" + value.replace("'", "\\'") + "'"
    return repr(value) if isinstance(value, float) else str(value)


def dvc_exp_show() -> list[dict]:
    # without a word here, the first run in a clone looked hung for 8 min on 2 cores (~660 commits; DVC then
    # caches each commit's result under .dvc/tmp/exps/cache, and later runs take seconds): say so first
    print(
        "reading dvc exp show --json --all-commits (every commit's params and metrics: the first time "
        "in a clone, minutes on a long history; then cached by DVC)",
        file=sys.stderr,
        flush=True,
    )
    try:
        proc = subprocess.run(
            ["dvc", "exp", "show", "--json", "--all-commits"], capture_output=True, text=True, check=False
        )
    except FileNotFoundError:
        raise MinisciError("dvc exp show: the dvc command is not installed") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise MinisciError(f"dvc exp show --json --all-commits failed ({proc.returncode}): {last}")
    return json.loads(proc.stdout)


def read_show(path: str | None) -> list[dict]:
    if path is None:
        return dvc_exp_show()
    try:
        show = json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:  # before ValueError, which it is: say which file, and where
        raise MinisciError(
            f"{path}: not UTF-8 (byte 0x{e.object[e.start]:02x} at byte offset {e.start}); "
            "dvc exp show --json writes UTF-8"
        ) from None
    except (OSError, json.JSONDecodeError) as e:
        raise MinisciError(f"{path}: cannot read dvc exp show JSON: {e}") from None
    if not isinstance(show, list):
        raise MinisciError(f"{path}: expected the list that dvc exp show --json prints")
    if not show:  # checked before anything is written: the log needs at least the workspace's row
        raise MinisciError(f"{path}: no commits or experiments (dvc exp show --json lists the workspace at least)")
    for i, commit in enumerate(show):  # the shapes the readers rely on, checked once with a place
        _expect(path, f"[{i}]", commit, dict)
        _expect(path, f"[{i}].data", commit.get("data"), dict)
        _expect(path, f"[{i}].experiments", commit.get("experiments"), list)
        for j, exp in enumerate(commit.get("experiments") or []):
            _expect(path, f"[{i}].experiments[{j}]", exp, dict)
            _expect(path, f"[{i}].experiments[{j}].revs", exp.get("revs"), list)
            for r, rev in enumerate(exp.get("revs") or []):
                _expect(path, f"[{i}].experiments[{j}].revs[{r}]", rev, dict)
                _expect(path, f"[{i}].experiments[{j}].revs[{r}].data", rev.get("data"), dict)
    return show


def _expect(path, where: str, value, kind: type) -> None:
    if value is not None and not isinstance(value, kind):
        raise MinisciError(
            f"{path}: {where}: expected a {kind.__name__} as dvc exp show --json prints, got {type(value).__name__}"
        )
