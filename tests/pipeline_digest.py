"""Are two checkouts' pipelines the same? Run the tiny end-to-end pipeline (the real dvc.yaml and
stages on tests/conftest.py's tiny params and fixture mirror, as tests/pipeline/test_e2e.py does) of a
checkout and write a digest of every output; compare two digests. ``SECTION.KEY=VALUE`` changes a tiny
param (a YAML value), e.g. ``finetune_ner.crf=true`` for the CRF head's path.

Usage:
    python tests/pipeline_digest.py run CHECKOUT DIGEST.json WORKDIR [SECTION.KEY=VALUE ...]   # ~5 min on 2 cores
    python tests/pipeline_digest.py compare BEFORE.json AFTER.json

JSON outputs are kept whole (minus wall-clock keys), other files by SHA-256; the code fingerprints
(data/fingerprints/), checkpoints' run ids and timings, charts (PNG) and the report's seconds are
expected to differ between two checkouts of different code and are listed apart by ``compare``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

VOLATILE = ("second", "runtime", "environment", "timestamp")  # substrings of wall-clock keys
EXPECTED = ("data/fingerprints/", "/fingerprint.json", "trainer_state.json", "tokens_per_second", "metrics/report.md")


def clean(x):
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items() if not any(s in k for s in VOLATILE)}
    if isinstance(x, list):
        return [clean(v) for v in x]
    return x


def overrides(settings: list[str]) -> dict:
    """``["finetune_ner.crf=true", ...]`` as make_project's nested overrides."""
    import yaml

    nested: dict = {}
    for setting in settings:
        key, sep, value = setting.partition("=")
        section, dot, name = key.partition(".")
        if not (sep and dot and name):
            sys.exit(f"error: {setting!r}: expected SECTION.KEY=VALUE")
        nested.setdefault(section, {})[name] = yaml.safe_load(value)
    return nested


def run(checkout: Path, out: Path, work: Path, settings: list[str] = ()) -> None:
    sys.path[:0] = [str(checkout / "tests"), str(checkout / "src")]
    import conftest

    proj = conftest.make_project(work / "proj", overrides(settings))
    os.environ["PYTHONPATH"] = str(proj / "src")  # the copy's code, whatever happens to the checkout meanwhile
    conftest.run(["dvc", "repro"], proj)
    digest = {}
    for top in ("metrics", "models", "plots", "data"):
        for p in sorted((proj / top).rglob("*")):
            if not p.is_file() or p.suffix == ".png" or "live" in p.parts:
                continue
            rel = p.relative_to(proj).as_posix()
            try:
                digest[rel] = clean(json.loads(p.read_text(encoding="utf-8"))) if p.suffix == ".json" else None
            except (UnicodeDecodeError, json.JSONDecodeError):
                digest[rel] = None
            if digest[rel] is None:
                digest[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    out.write_text(json.dumps(digest, indent=1, sort_keys=True), encoding="utf-8")
    print(f"{len(digest)} files -> {out}")


def compare(before: Path, after: Path) -> int:
    a, b = (json.loads(p.read_text(encoding="utf-8")) for p in (before, after))
    differ = sorted(k for k in set(a) & set(b) if a[k] != b[k])
    unexpected = [k for k in differ if not any(e in k for e in EXPECTED)]
    for name, keys in (
        ("only before", sorted(set(a) - set(b))),
        ("only after", sorted(set(b) - set(a))),
        ("differ (expected: code fingerprints, run ids, timings)", [k for k in differ if k not in unexpected]),
        ("DIFFER", unexpected),
    ):
        print(f"{name}: {len(keys)}", *(f"  {k}" for k in keys), sep="\n")
    same = len(set(a) & set(b)) - len(differ)
    print(f"identical: {same} of {len(set(a) | set(b))}")
    return 1 if unexpected or set(a) ^ set(b) else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"] and len(sys.argv) >= 5:
        run(Path(sys.argv[2]).resolve(), Path(sys.argv[3]), Path(sys.argv[4]), sys.argv[5:])
    elif sys.argv[1:2] == ["compare"] and len(sys.argv) == 4:
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__)
