"""Model cards: a README.md in every model directory, generated from the run that made it."""

from __future__ import annotations

import json
from pathlib import Path


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        elif isinstance(v, (int, float, str, bool)) or v is None:
            out[f"{prefix}{k}"] = v
    return out


def model_card(title: str, summary: str, base: str, data: str, params: dict, metrics: dict, usage: str) -> str:
    """Markdown with the model's origin, the exact params of its run, and that run's metrics."""
    metric_rows = "\n".join(f"| `{k}` | {v} |" for k, v in sorted(_flat(metrics).items()))
    return (
        f"# {title}\n\n{summary}\n\n"
        f"- **Base model:** `{base}`\n- **Data:** {data}\n- **Produced by:** the minisci DVC pipeline "
        f"(`dvc.lock` pins the code, data and params of this run)\n\n"
        f"## Usage\n\n```python\n{usage}\n```\n\n"
        f"## Parameters of this run\n\n```json\n{json.dumps(params, indent=2, sort_keys=True, default=str)}\n```\n\n"
        f"## Metrics of this run\n\n| metric | value |\n|---|---|\n{metric_rows}\n"
    )


def write_model_card(model_dir: str | Path, **kwargs) -> None:
    (Path(model_dir) / "README.md").write_text(model_card(**kwargs), encoding="utf-8")
