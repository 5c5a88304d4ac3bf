"""Corpus scale: wall time and peak memory of ``sample_corpus``, ``make_pairs`` and ``pretrain_data``
(the tokenised pretraining examples: NSP pairs, and packed MLM blocks) as the pool grows, side by side
with the code before the corpus catalogue (a checkout of commit 31be0c5, which tokenised inside each
pretraining run and had no ``pretrain_data``), in one run.

The shipped pool is replicated N times (new ids, each copy's text prefixed so nothing deduplicates;
the copies keep the builders' overlap flags, so the guard's work grows with N too). Each stage runs
as its own process on the default params, as DVC would run it; peak RSS is the largest sum of the
proportional set size (PSS: a page shared with forked workers counts once) of the stage's process
and its workers, sampled every 0.25 s (psutil), and the largest single process's RSS as the kernel
reports it (``wait4``).

Usage: python benchmarks/corpus_scale.py --before /work/wt-base --sizes 1 10 40 [--work /tmp/corpus_scale]
(run from the repository root after ``dvc repro prepare_data``; needs data/raw/corpus and data/prepared)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from machine import HelpFormatter, positive_int

REPO = Path(__file__).resolve().parents[1]
POOL = ("biomedical", "general")


def replicate(src: Path, dst: Path, n: int) -> int:
    """``n`` copies of each pool file; copy 0 is the original, copy k > 0 has ids ``<id>#k`` and text
    prefixed ``Copy k.``. Returns the bytes written."""
    dst.mkdir(parents=True, exist_ok=True)
    size = 0
    for name in POOL:
        lines = (src / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
        with (dst / f"{name}.jsonl").open("w", encoding="utf-8") as f:
            for k in range(n):
                for line in lines:
                    if k:
                        d = json.loads(line)
                        d["id"], d["text"] = f"{d['id']}#{k}", f"Copy {k}. {d['text']}"
                        line = json.dumps(d, ensure_ascii=False)
                    f.write(line + "\n")
        size += (dst / f"{name}.jsonl").stat().st_size
    return size


def measure(cmd: list[str], cwd: Path, env: dict) -> tuple[float, float, float, str]:
    """Wall seconds, peak RSS of the process tree and of the largest process (MB), and the output tail."""
    import psutil

    start = time.perf_counter()
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    peak_tree = 0
    parent = psutil.Process(proc.pid)
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)  # wait4: this child's own peak, not all children's
        if pid:
            break
        try:
            procs = [parent, *parent.children(recursive=True)]
            # PSS: a page shared by the stage and its forked workers counts once, not once per process
            peak_tree = max(peak_tree, sum(p.memory_full_info().pss for p in procs))
        except psutil.Error:
            pass
        time.sleep(0.25)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    peak_one = usage.ru_maxrss / 1024  # kB on Linux
    log.seek(0)
    tail = log.read().decode(errors="replace").strip().splitlines()
    if proc.returncode:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n" + "\n".join(tail[-20:]))
    return wall, peak_tree / 2**20, peak_one, tail[-1] if tail else ""


def params_for(code: Path, corpus_dir: Path, out: Path, new: bool) -> tuple[Path, list[str]]:
    """The params file for ``code``'s stages, and the catalogue options of its sample_corpus: the
    after code reads the corpus catalogue (pointed at the replicated pool) from a file of its own."""
    params = yaml.safe_load((code / "params.yaml").read_text())
    path = out / ("params_after.yaml" if new else "params_before.yaml")
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    if not new:
        return path, []
    corpora = yaml.safe_load((code / "data/corpora.yaml").read_text())
    for name, entry in corpora["corpora"].items():
        entry["path"] = str(corpus_dir / f"{name}.jsonl")
    (out / "corpora.yaml").write_text(yaml.safe_dump(corpora, sort_keys=False))
    return path, ["--catalogue", str(code / "data/datasets.yaml"), "--corpora-catalogue", str(out / "corpora.yaml")]


def run_size(n: int, args, work: Path) -> list[tuple]:
    raw = work / f"{n}x" / "raw"
    mb = replicate(REPO / "data/raw/corpus", raw / "corpus", n) / 1e6
    rows = []
    for label, code in (("before", Path(args.before)), ("after", REPO)):
        if label not in args.variants:
            continue
        out = work / f"{n}x" / label
        out.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": str(code / "src")}
        params, catalogues = params_for(code, raw / "corpus", out, new=label == "after")
        if label == "before":
            sample = ["--raw", str(raw)]
        else:
            sample = ["--corpus-dirs", str(raw / "corpus"), *catalogues]
        cmd = [sys.executable, str(code / "stages/sample_corpus.py"), *sample, "--datasets", str(REPO / "data/prepared"),
               "--out", str(out / "corpus"), "--metrics", str(out / "sample.json"), "--params", str(params)]  # fmt: skip
        t, tree, one, _ = measure(cmd, code, env)
        cmd = [sys.executable, str(code / "stages/make_pairs.py"), "--docs", str(out / "corpus/documents.jsonl"),
               "--out", str(out / "pairs"), "--metrics", str(out / "pairs.json"), "--params", str(params)]  # fmt: skip
        t2, tree2, one2, _ = measure(cmd, code, env)
        shards = []  # pretrain_data, both layouts (the after code only)
        for nsp in (True, False) if (code / "stages/pretrain_data.py").is_file() else ():
            layout_params = out / f"params_nsp_{nsp}.yaml"
            p = yaml.safe_load(params.read_text())
            p["pretrain"]["nsp"] = nsp
            layout_params.write_text(yaml.safe_dump(p, sort_keys=False))
            cmd = [sys.executable, str(code / "stages/pretrain_data.py"), "--pairs", str(out / "pairs"),
                   "--docs", str(out / "corpus/documents.jsonl"), "--out", str(out / f"pretrain_data_{nsp}"),
                   "--metrics", str(out / f"pretrain_data_{nsp}.json"), "--params", str(layout_params)]  # fmt: skip
            t3, tree3, _, _ = measure(cmd, code, env)
            shards.append(f"{'pairs' if nsp else 'blocks'} {t3:5.1f} s {tree3:6.0f} MB")
        same = ""
        if label == "after" and "before" in args.variants:
            before = (work / f"{n}x" / "before" / "corpus/documents.jsonl").read_bytes()
            same = "identical" if before == (out / "corpus/documents.jsonl").read_bytes() else "DIFFERENT"
        rows.append((n, mb, label, t, tree, one, t2, tree2, shards, same))
        print(
            f"{n:>3}x {mb:8.0f} MB  {label:<6}  sample_corpus {t:7.1f} s  peak PSS {tree:7.0f} MB (largest process RSS "
            f"{one:6.0f} MB) | make_pairs {t2:5.1f} s {tree2:6.0f} MB | pretrain_data "
            f"{', '.join(shards) or '(none: tokenised in each pretraining run)'} {same}",
            flush=True,
        )
    shutil.rmtree(work / f"{n}x")
    return rows


def print_machine() -> None:
    """The CPU, its cores and flags, and the load at the start (``machine.py``'s, without importing torch)."""
    sys.path.insert(0, str(REPO / "src"))
    from minisci.training import cpu_info

    model, flags = cpu_info()
    print(f"machine: {model}, {len(os.sched_getaffinity(0))} cores | avx2={'yes' if 'avx2' in flags else 'no'} "
          f"avx512f={'yes' if 'avx512f' in flags else 'no'} | load average {os.getloadavg()[0]:.1f} at start")  # fmt: skip


def scratch(work: str | None, prefix: str):
    """The scratch folder: ``work`` (made if missing, kept), or a temporary one removed afterwards, when
    the run fails or is interrupted too."""
    if work:
        Path(work).mkdir(parents=True, exist_ok=True)
        return contextlib.nullcontext(work)
    return tempfile.TemporaryDirectory(prefix=prefix)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("--before", required=True, help="a checkout of the code before the catalogue (commit 31be0c5)")
    p.add_argument("--sizes", type=positive_int, nargs="+", default=[1, 10, 40], help="replication factors of the pool")
    p.add_argument(
        "--variants", nargs="+", default=["before", "after"], choices=["before", "after"], help="which code to run"
    )
    p.add_argument(
        "--work", default=None, help="scratch folder for the replicated pools, kept; without it a temporary one"
    )
    args = p.parse_args(argv)
    if "before" in args.variants:
        stage = Path(args.before) / "stages/sample_corpus.py"
        if not stage.is_file() or not (Path(args.before) / "params.yaml").is_file():
            p.error(f"--before {args.before}: not a checkout of this repository (no stages/sample_corpus.py)")
        if "--raw" not in stage.read_text(encoding="utf-8"):
            p.error(
                f"--before {args.before}: not the code before the corpus catalogue (its sample_corpus takes no --raw); "
                "check out commit 31be0c5 there"
            )
    for need in ("data/raw/corpus", "data/prepared"):
        if not (REPO / need).is_dir():
            p.error(f"{REPO / need}: not found (run: dvc repro prepare_data)")
    print_machine()
    with scratch(args.work, "corpus_scale.") as work:
        for n in args.sizes:
            run_size(n, args, Path(work))


if __name__ == "__main__":
    main()
