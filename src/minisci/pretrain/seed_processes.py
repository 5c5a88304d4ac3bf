"""Pretraining seeds side by side (``pretrain.seed_processes`` > 1).

DVC runs the ``pretrain@<seed>`` stages one after another. With ``seed_processes`` = n, the stage of
the first seed of each group of n (in ``pretrain.seeds`` order) also starts one process per next seed
of its group, each training that seed into its own checkpoint folder
(``models/pretrain_checkpoints/<seed>``) exactly as the seed's own stage would, and waits for them.
When DVC then runs those seeds' stages, each finds a finished run in its folder and publishes it
without another step, as a forced rerun does (:func:`minisci.training.train_or_restore`,
:func:`minisci.training.keep_run_metrics`): the same bytes as one seed after another, timings
included. So the key is a speed key (``PretrainConfig.SPEED_KEYS``), in no run's identity and no
stage's DVC params.

On one GPU, a MiniLM-sized pretraining step leaves it mostly idle: three seeds at once ran at 2.5x
the tokens/s of one (benchmarks/runs/2026-11-27-h100-gpu_profile). On a CPU the processes would
share its cores, so there it stays 1.

A side process that fails does not fail the stage: the stage's own seed is published, a line names
the failed seed and its log, and that seed's own stage trains it (resuming from its newest checkpoint).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from minisci.errors import MinisciError


def log_file(checkpoints: str | Path, own_seed: int, seed: int) -> Path:
    """A side process's output, beside its seed's checkpoint folder (which the run's bookkeeping may clear)."""
    return checkpoint_folder(checkpoints, own_seed, seed).with_name(f"side-process-{seed}.log")


def side_seeds(seed: int, seeds: tuple[int, ...], processes: int) -> list[int]:
    """The seeds that ``seed``'s stage trains beside its own: the rest of its group of ``processes``
    seeds when it is the group's first, else none (an earlier stage trained it)."""
    i = seeds.index(seed)
    return list(seeds[i + 1 : i + processes]) if processes > 1 and i % processes == 0 else []


def checkpoint_folder(checkpoints: str | Path, own_seed: int, seed: int) -> Path:
    """Another seed's checkpoint folder beside this stage's own (``.../<seed>``, as dvc.yaml names them)."""
    folder = Path(checkpoints)
    if folder.name != str(own_seed):
        raise MinisciError(
            f"pretrain.seed_processes > 1: --checkpoints must be a folder named after the seed "
            f"(models/pretrain_checkpoints/{own_seed}), so that each seed's stage finds its run; got {folder}"
        )
    return folder.parent / str(seed)


def start(script: str | Path, seeds: list[int], args, own_seed: int, processes: int) -> dict[int, subprocess.Popen]:
    """One process per seed of ``seeds``: the stage's own script with ``--seed <seed> --seed-worker`` and
    that seed's checkpoint folder (``args``: the stage's parsed arguments), its output in
    ``side-process-<seed>.log`` beside that folder. On a GPU each process gets its share of the node's
    cores; on a CPU they keep their threads (and so their bytes)."""
    if not seeds:
        return {}
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise MinisciError(
            "pretrain.seed_processes > 1 trains seeds side by side on one device; under torchrun set it to 1"
        )
    import torch

    env = dict(os.environ)
    if torch.cuda.is_available():
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or processes) // processes)))
    procs = {}
    try:
        for seed in seeds:
            folder = checkpoint_folder(args.checkpoints, own_seed, seed)
            folder.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, str(Path(script).resolve()), "--seed", str(seed), "--seed-worker"]
            for flag in ("data", "out", "metrics", "plots", "params"):  # out, metrics, plots: unused by a worker
                cmd += [f"--{flag}", str(getattr(args, flag))]
            cmd += ["--checkpoints", str(folder)]
            log = log_file(args.checkpoints, own_seed, seed)
            with log.open("w", encoding="utf-8") as out:
                procs[seed] = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
            print(f"pretrain: seed {seed} is training beside seed {own_seed} (log: {log})", flush=True)
    except BaseException:
        stop(procs)
        raise
    return procs


def finish(procs: dict[int, subprocess.Popen], args, own_seed: int) -> list[int]:
    """Waits for the side processes; one line per seed that failed (its stage will train it). Returns
    the seeds that finished."""
    done = []
    for seed, proc in procs.items():
        code = proc.wait()
        log = log_file(args.checkpoints, own_seed, seed)
        if code == 0:
            done.append(seed)
            print(f"pretrain: seed {seed} trained beside seed {own_seed}; pretrain@{seed} publishes it", flush=True)
        else:
            last = [line for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
            print(
                f"warning: pretrain: the process training seed {seed} failed (exit {code}: "
                f"{last[-1] if last else 'no output'}; log {log}); pretrain@{seed} will train it itself",
                file=sys.stderr,
                flush=True,
            )
    return done


def stop(procs: dict[int, subprocess.Popen]) -> None:
    """Ends the side processes still running (the stage failed or was interrupted): none is left behind."""
    for proc in procs.values():
        if proc.poll() is None:
            proc.kill()
        proc.wait()
