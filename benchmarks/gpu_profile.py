"""Where the GPU path spends its time: profiles and two what-ifs beside benchmarks/gpu_check.py.

Runs on the node from the gpu_check folder's unpacked data and model, with this checkout's code
(``PYTHONPATH=src:<wheels>``), at the check's settings (the paper profile on the subset):

1. several seeds at once: N ``finetune_ner`` processes (BC5CDR) on the one GPU at the same time, each
   with its own seed: the summed tokens/s over the wall time from the first start to the last end,
   against one process measured the same way (interpreter start and imports included on both sides);
2. ``pretrain`` for 200 steps with DataLoader workers 0 and 4 (the stage builds its arguments with 0;
   workers are patched in here, the masking stays the collator's); and several pretraining seeds at
   once: N ``pretrain`` processes (200 steps each, the profile's workers, one seed each) on the one
   GPU, summed tokens/s over the wall time from the first start to the last end, against one process
   measured the same way (DVC runs ``pretrain@<seed>`` one after another; this says what running
   them side by side would pay);
3. ``finetune_ner`` under torch.profiler (operators by CPU and by GPU time, launches counted), then
   under cProfile (Python functions by own and cumulative time; the process's first fine-tuning run,
   the torch profile's, has imported the task's modules); ``pretrain`` for 100 steps under cProfile.

Each result goes to ``--out`` as it comes (``profile.json`` and one text file per profile), so a run
cut short keeps what it measured.

    python benchmarks/gpu_profile.py --data-root DIR --work DIR --out DIR [--device cpu --tiny]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gpu_check  # noqa: E402
from machine import HelpFormatter  # noqa: E402

ROOT = HERE.parent


def save(out: Path, log: dict) -> None:
    (out / "profile.json").write_text(json.dumps(log, indent=2) + "\n", encoding="utf-8")


def python_profile(prof: cProfile.Profile, path: Path, top: int = 35) -> None:
    s = io.StringIO()
    stats = pstats.Stats(prof, stream=s)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    path.write_text(s.getvalue(), encoding="utf-8")


def torch_profile(fn, path: Path, device: str):
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=acts) as prof:
        result = fn()
    events = prof.key_averages()
    text = events.table(sort_by="self_cpu_time_total", row_limit=30)
    if device == "cuda":
        text += "\n" + events.table(sort_by="self_device_time_total", row_limit=30)
        launches = sum(
            e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC")
        )
        text += f"\nkernel launches: {launches}\n"
    path.write_text(text, encoding="utf-8")
    return result


def ner_once(params: Path, data_root: Path, model: Path, work: Path, seed: int | None = None) -> dict:
    """finetune_ner on BC5CDR through the stage's main(argv): wall seconds, tokens and tokens/s."""
    import yaml

    if seed is not None:
        p = yaml.safe_load(params.read_text())
        p["finetune_ner"]["seeds"] = [seed]
        params = work / f"params-{seed}.yaml"
        work.mkdir(parents=True, exist_ok=True)
        params.write_text(yaml.safe_dump(p, sort_keys=False))
    start = time.perf_counter()
    r = gpu_check.finetune_once(ROOT, data_root, model, params, work / "ner", "finetune_ner", "bc5cdr")
    return {
        "wall_seconds": round(time.perf_counter() - start, 2),
        "stage_wall_seconds": r["wall_seconds"],
        "tokens": r["tokens_trained"],
        "tokens_per_second": r["tokens_per_second"],
        "test_f1": r["test"],
    }


def pretrain_run(params: Path, data_root: Path, work: Path, workers: int, steps: int) -> dict:
    import yaml
    from transformers import TrainingArguments

    p = yaml.safe_load(params.read_text())
    p["pretrain"].update(max_steps=steps, logging_steps=max(1, steps // 2))
    q = work / f"params-pretrain-{workers}-{steps}.yaml"
    q.write_text(yaml.safe_dump(p, sort_keys=False))
    original = TrainingArguments.__post_init__

    def post_init(self):
        self.dataloader_num_workers = workers
        self.dataloader_persistent_workers = workers > 0
        original(self)

    TrainingArguments.__post_init__ = post_init
    try:
        r = gpu_check.pretrain(ROOT, data_root, q, work / f"pretrain-w{workers}-{steps}", float("nan"))
    finally:
        TrainingArguments.__post_init__ = original
    return {k: r[k] for k in ("steps", "tokens_per_second", "train_seconds", "wall_seconds")}


def pretrain_seed(params: Path, data: Path, work: Path, seed: int) -> dict:
    """One pretraining seed through the stage's main(argv) on prepared data: wall seconds and tokens."""
    import yaml

    p = yaml.safe_load(params.read_text())
    p["pretrain"]["seeds"] = [seed]
    q = work / f"params-{seed}.yaml"
    q.write_text(yaml.safe_dump(p, sort_keys=False))
    start = time.perf_counter()
    m = gpu_check.pretrain_once(ROOT, data, q, work, seed, work / "pretrain")
    return {
        "wall_seconds": round(time.perf_counter() - start, 2),
        "stage_wall_seconds": m["wall_seconds"],
        "tokens": m["train"]["tokens_seen"],
        "tokens_per_second": m["train"]["tokens_per_second"],
    }


def concurrent_pretrain(args, params: Path, data_root: Path, n: int) -> dict:
    """n pretraining processes at once, seeds 13.., on pretraining data built once."""
    data = Path(args.work) / "pretrain-shared/data"
    if not data.is_dir():
        gpu_check.load_stage("pretrain_data", ROOT).main(
            ["--pairs", str(data_root / "data/pairs"), "--out", str(data), "--params", str(params),
             "--metrics", str(data.parent / "data.json")]
        )  # fmt: skip
    return concurrent(args, n, "pretrain", ["--pretrain-seed", "--params", str(params), "--pretrain-data", str(data)])


def concurrent_ner(args, params: Path, model: Path, n: int) -> dict:
    """n fine-tuning processes at once, seeds 13.., each limited to its share of the cores."""
    return concurrent(args, n, "ner", ["--ner-seed", "--params", str(params), "--model", str(model)])


def concurrent(args, n: int, what: str, child: list[str]) -> dict:
    """n child processes of this script at once (``child``: the seed flag, then the rest), seeds 13..,
    each limited to its share of the cores: the summed tokens/s from the first start to the last end."""
    env = dict(os.environ, OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 2) // n)))
    procs, start = [], time.perf_counter()
    for i in range(n):
        w = Path(args.work) / f"concurrent-{what}-{n}-{i}"
        w.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, __file__, "--data-root", args.data_root, "--work", str(w), "--out", str(w)]
        cmd += [child[0], str(13 + i), *child[1:], "--device", args.device]
        procs.append((w, subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=open(w / "stderr", "w"))))
    runs = []
    for w, proc in procs:
        if proc.wait() != 0:
            raise RuntimeError(f"concurrent run {w} failed: {(w / 'stderr').read_text()[-2000:]}")
        runs.append(json.loads((w / f"{what}.json").read_text()))
    wall = time.perf_counter() - start
    tokens = sum(r["tokens"] for r in runs)
    return {"processes": n, "wall_seconds": round(wall, 2), "tokens": tokens,
            "tokens_per_second_total": round(tokens / wall, 1), "runs": runs}  # fmt: skip


def counts(text: str) -> list[int]:
    """An argparse type: comma-separated process counts, each >= 1 (else a one-line usage error)."""
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated counts >= 1, got {text!r}")
    return values


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("--data-root", required=True, help="where the folder's data.tar.gz and model.tar.gz are unpacked")
    p.add_argument("--work", required=True, help="work directory for the runs' models and checkpoints")
    p.add_argument("--out", required=True, help="where profile.json and the profiles' text files go")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cuda on the node; cpu for the dry run")
    p.add_argument("--tiny", action="store_true", help="the check's tiny sizes (with gpu_check.py --tiny's folder)")
    p.add_argument(
        "--concurrent",
        type=counts,
        default="1,3",
        help="process counts for the several-seeds-at-once what-if (comma-separated)",
    )
    p.add_argument(
        "--pretrain-concurrent",
        type=counts,
        default="1,3",
        help="process counts for the pretraining-seeds-at-once what-if",
    )
    p.add_argument("--ner-seed", type=int, help=argparse.SUPPRESS)  # one concurrent process
    p.add_argument("--pretrain-seed", type=int, help=argparse.SUPPRESS)  # one concurrent process
    p.add_argument("--pretrain-data", help=argparse.SUPPRESS)
    p.add_argument("--params", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    data_root, work, out = Path(args.data_root), Path(args.work), Path(args.out)
    if args.ner_seed is None and args.pretrain_seed is None and not (data_root / "model/config.json").is_file():
        p.error(f"--data-root {data_root}: no model/ there; unpack the folder's data.tar.gz and model.tar.gz into it")
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    if args.ner_seed is not None:
        r = ner_once(Path(args.params), data_root, Path(args.model), work, args.ner_seed)
        (out / "ner.json").write_text(json.dumps(r))
        return 0
    if args.pretrain_seed is not None:
        r = pretrain_seed(Path(args.params), Path(args.pretrain_data), work, args.pretrain_seed)
        (out / "pretrain.json").write_text(json.dumps(r))
        return 0
    sizes = gpu_check.TINY if args.tiny else gpu_check.FULL
    model_fp32 = work / "model-fp32"
    if not model_fp32.is_dir():
        gpu_check.to_fp32(data_root / "model", model_fp32)
    params = gpu_check.check_params(ROOT, model_fp32, sizes, work)
    baseline = work / "models/baseline"
    gpu_check.load_stage("base_model", ROOT).main(["--out", str(baseline), "--params", str(params)])
    log = {"device": args.device, "tiny": args.tiny, "environment": gpu_check.environment(args.device), "steps": {}}

    def step(name, fn):
        start = time.perf_counter()
        try:
            log["steps"][name] = fn()
        except Exception as e:  # a failed what-if must not cost the others
            log["steps"][name] = {"error": f"{type(e).__name__}: {e}"}
        log["steps"][name]["step_seconds"] = round(time.perf_counter() - start, 1)
        save(out, log)
        print(f"gpu_profile: {name}: {json.dumps(log['steps'][name])[:400]}", flush=True)

    # the what-ifs first, the profiles after: a run cut short keeps the answers the profile changes rest on
    for n in args.concurrent:  # 1 too: the same start-up cost on both sides
        step(f"ner_concurrent_{n}", lambda n=n: concurrent_ner(args, params, baseline, n))
    steps = sizes.pretrain_steps  # the check's: 200 on a GPU
    step("pretrain_workers0", lambda: pretrain_run(params, data_root, work, 0, steps))
    step("pretrain_workers4", lambda: pretrain_run(params, data_root, work, 4, steps))
    for n in args.pretrain_concurrent:
        step(f"pretrain_concurrent_{n}", lambda n=n: concurrent_pretrain(args, params, data_root, n))
    # the torch profile first: this process's first fine-tuning run imports the task's modules, which
    # would otherwise take the Python profile's time (and, under cProfile, twice their own)
    step(
        "ner_torch_profile",
        lambda: torch_profile(
            lambda: ner_once(params, data_root, baseline, work / "tprofile"), out / "ner_torch_profile.txt", args.device
        ),
    )
    prof = cProfile.Profile()
    step("ner_cprofile", lambda: prof.runcall(ner_once, params, data_root, baseline, work / "cprofile"))
    python_profile(prof, out / "ner_cprofile.txt")
    prof = cProfile.Profile()
    step("pretrain_cprofile", lambda: prof.runcall(pretrain_run, params, data_root, work, 0, steps // 2))
    python_profile(prof, out / "pretrain_cprofile.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
