"""The `paper` profile's CPU-side stages, timed: ``sample_corpus``, ``make_pairs`` and ``pretrain_data``
with the profile's params, each as its own process as DVC runs it, on the shipped pool. The GPU
check's estimate of the profile (``gpu_check.py``) adds the newest of these logs for the stages that
run before pretraining: the node's folder has no room for the pool, so the check cannot time them there.

Usage: python benchmarks/paper_cpu_stages.py --out benchmarks/runs/<date>-<cpu>-paper_cpu_stages.json
(run from the repository root after ``dvc repro prepare_data``; needs data/raw/corpus and data/prepared)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from machine import HelpFormatter, machine_lines  # noqa: E402

from minisci.profiles import apply_profile  # noqa: E402

LOG_GLOB = "*-paper_cpu_stages.json"


def paper_params(out: Path) -> Path:
    """params.yaml with the paper profile applied (every key must exist)."""
    params = apply_profile("paper", yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8")))
    path = out / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    return path


def stages(work: Path, params: Path) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "sample_corpus": [py, "stages/sample_corpus.py", "--corpus-dirs", "data/raw/corpus", "data/corpora",
                          "--datasets", "data/prepared", "--out", str(work / "corpus")],
        "make_pairs": [py, "stages/make_pairs.py", "--docs", str(work / "corpus/documents.jsonl"),
                       "--out", str(work / "pairs")],
        "pretrain_data": [py, "stages/pretrain_data.py", "--pairs", str(work / "pairs"), "--out", str(work / "data")],
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("--out", required=True, help="the JSON log to write")
    p.add_argument("--work", help="working directory, kept; without it a temporary one, removed after")
    args = p.parse_args(argv)
    if not Path(args.out).resolve().parent.is_dir():
        print(f"error: --out {args.out}: its folder does not exist", file=sys.stderr)
        return 2
    for need in ("data/raw/corpus", "data/prepared"):
        if not (REPO / need).is_dir():
            print(f"error: {REPO / need}: missing; run dvc repro prepare_data first", file=sys.stderr)
            return 2
    lines = machine_lines()
    print("\n".join(lines), flush=True)
    with tempfile.TemporaryDirectory(prefix="paper_cpu_stages.") as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        params = paper_params(work)
        seconds = {}
        for name, cmd in stages(work, params).items():
            start = time.perf_counter()
            run = subprocess.run([*cmd, "--metrics", str(work / f"{name}.json"), "--params", str(params)], cwd=REPO,
                                 capture_output=True, text=True)  # fmt: skip
            seconds[name] = round(time.perf_counter() - start, 1)
            if run.returncode != 0:
                print(f"error: {name} failed: {(run.stderr.strip().splitlines() or ['?'])[-1]}", file=sys.stderr)
                return 1
            print(f"{name}: {seconds[name]} s (process wall time, the paper profile's params)", flush=True)
    log = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": lines,
        "seconds": seconds,
        "total": round(sum(seconds.values()), 1),
    }
    Path(args.out).write_text(json.dumps(log, indent=1) + "\n", encoding="utf-8")
    print(f"total {log['total']} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
