"""``seed_processes``: a stage's seeds fine-tuned by worker processes give the same bytes as one after
another (which is why it is a speed key, not a DVC param), and a failing worker fails the stage."""

import json
import subprocess
import sys

import pytest
import yaml
from conftest import REPO, learnable_ner_files, prepare, tiny_params, write_params

FAST = {"epochs": 2.0, "eval_delay": 0, "batch_size": 8, "learning_rate": 5.0e-3, "max_length": 32}


def stage(tmp_path, data, model, processes: int, name: str, **extra):
    params = tiny_params({"finetune_ner": {**FAST, "crf": False, "seeds": [13, 14, 15], "seed_processes": processes}})
    root = tmp_path / name
    root.mkdir()
    write_params(root, {k: v for k, v in params.items() if k not in ("datasets", "corpora")})
    cmd = [sys.executable, str(REPO / "stages/finetune_ner.py"), "--data", str(data), "--model", str(model)]
    for flag in ("out", "metrics", "plots", "checkpoints"):
        cmd += [f"--{flag}", str(root / flag)]
    cmd += ["--params", str(root / "params.yaml")]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=root, **extra), root


@pytest.mark.slow
def test_seed_processes_give_the_same_bytes(tmp_path, tiny_model_dir):
    data = prepare(learnable_ner_files(tmp_path / "raw", n=40), "bc5cdr", tmp_path / "prepared")
    runs = {}
    for processes in (1, 3):
        run, root = stage(tmp_path, data, tiny_model_dir, processes, f"p{processes}")
        assert run.returncode == 0, run.stderr[-3000:]
        metrics = json.loads((root / "metrics").read_text())
        metrics.pop("wall_seconds"), metrics.pop("environment")
        runs[processes] = (metrics, (root / "out/test_predictions.jsonl").read_bytes(), root)
    (m1, p1, r1), (m3, p3, r3) = runs[1], runs[3]
    assert sorted(m1["per_seed"]) == ["13", "14", "15"] and m1 == m3 and p1 == p3
    assert (r1 / "out/model.safetensors").read_bytes() == (r3 / "out/model.safetensors").read_bytes()
    assert (r3 / "checkpoints/seed14/worker-result.json").is_file()  # seeds 14 and 15 ran in workers
    card = yaml.safe_load((r3 / "out/README.md").read_text().split("---")[1])
    assert "seed_processes" not in json.dumps(card)


@pytest.mark.slow
def test_a_failing_seed_worker_fails_the_stage(tmp_path, tiny_model_dir):
    from helpers import ner_cfg

    from minisci.errors import MinisciError
    from minisci.finetune.common import SeedWorkers
    from minisci.finetune.ner import run_finetune_ner

    data = prepare(learnable_ner_files(tmp_path / "raw", n=40), "bc5cdr", tmp_path / "prepared")
    cfg = ner_cfg(epochs=1.0, seeds=[13, 14], seed_processes=2)
    workers = SeedWorkers(command=(sys.executable, "-c", "import sys; sys.exit(3)"))
    with pytest.raises(MinisciError, match=r"finetune_ner: the process of seed 14 failed \(exit 3"):
        run_finetune_ner(data, tiny_model_dir, cfg, tmp_path / "work", workers=workers)


def test_a_seed_worker_takes_an_integer_seed():
    import argparse

    from minisci.errors import MinisciError
    from minisci.finetune.common import SeedWorkers

    with pytest.raises(MinisciError, match="--seed-worker: seed 'x' is not an integer"):
        SeedWorkers.of_stage(argparse.Namespace(seed_worker=["x", "r.json"]), "stage.py", [])
    worker = SeedWorkers.of_stage(argparse.Namespace(seed_worker=["14", "r.json"]), "stage.py", [])
    assert worker.only == 14 and worker.command is None
    parent = SeedWorkers.of_stage(argparse.Namespace(seed_worker=None), "stage.py", ["--data", "d"])
    assert parent.command[0] == sys.executable and parent.command[-2:] == ("--data", "d") and parent.only is None
