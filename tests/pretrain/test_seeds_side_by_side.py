"""``pretrain.seed_processes``: the stage of a group's first seed trains the group's next seeds beside
its own, and their stages publish those runs: the same bytes as one seed after another (a speed key)."""

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
import yaml
from helpers import STAGE, pretraining_data, run_ok, write_pairs, write_params

from minisci.cards import result_metrics
from minisci.config import ModelConfig, from_dict
from minisci.errors import MinisciError
from minisci.pretrain import seed_processes
from minisci.pretrain.seed_processes import checkpoint_folder, side_seeds
from minisci.pretrain.seeds import load_pretrain


def test_the_first_seed_of_each_group_trains_the_rest_of_it():
    seeds = (13, 14, 15, 16, 17)
    assert [side_seeds(s, seeds, 3) for s in seeds] == [[14, 15], [], [], [17], []]
    assert [side_seeds(s, seeds, 1) for s in seeds] == [[]] * 5
    assert side_seeds(13, (13,), 3) == []


def test_the_checkpoint_folders_must_be_named_after_their_seed(tmp_path):
    assert checkpoint_folder(tmp_path / "13", 13, 14) == tmp_path / "14"
    with pytest.raises(MinisciError, match=r"--checkpoints must be a folder named after the seed"):
        checkpoint_folder(tmp_path / "ckpt", 13, 14)


def test_a_failed_side_process_is_a_warning_naming_it_not_a_failure(tmp_path, capsys):
    args = SimpleNamespace(checkpoints=tmp_path / "13")
    procs = {}
    for seed, code in ((14, 0), (15, 3)):
        with seed_processes.log_file(args.checkpoints, 13, seed).open("w") as log:
            script = f"print('step 1'); print('error: out of memory'); raise SystemExit({code})"
            procs[seed] = subprocess.Popen([sys.executable, "-c", script], stdout=log, stderr=subprocess.STDOUT)
    assert seed_processes.finish(procs, args, 13) == [14]
    err = capsys.readouterr().err
    assert "the process training seed 15 failed (exit 3: error: out of memory" in err
    assert "pretrain@15 will train it itself" in err and "seed 14" not in err


def test_under_torchrun_side_processes_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    args = SimpleNamespace(checkpoints=tmp_path / "13")
    with pytest.raises(MinisciError, match="under torchrun set it to 1"):
        seed_processes.start(STAGE, [14], args, 13, 2)


def _run(tmp_path, processes: int) -> dict:
    """The pretrain@<seed> stages of seeds 13 and 14, one after another, in dvc.yaml's layout of folders."""
    root = tmp_path / f"p{processes}"
    root.mkdir()
    params = write_params(root, max_steps=6, save_steps=3, seeds=[13, 14], seed_processes=processes)
    data = tmp_path / "data"
    if not data.is_dir():
        cfg, _ = load_pretrain(params)
        model_cfg = from_dict(ModelConfig, yaml.safe_load(params.read_text())["model"], "model")
        pretraining_data(tmp_path / "pairs", model_cfg, cfg, data)
    out = {}
    for seed in (13, 14):
        cmd = [sys.executable, STAGE, "--seed", str(seed), "--data", str(data), "--params", str(params)]
        for flag, path in (
            ("out", f"adapted/{seed}"),
            ("checkpoints", f"ckpt/{seed}"),
            ("metrics", f"metrics/{seed}.json"),
            ("plots", f"plots/{seed}"),
        ):
            cmd += [f"--{flag}", str(root / path)]
        out[seed] = (
            run_ok(cmd).stdout,
            (root / f"adapted/{seed}/model.safetensors").read_bytes(),
            json.loads((root / f"metrics/{seed}.json").read_text()),
        )
    return out


@pytest.mark.slow
def test_seeds_trained_side_by_side_give_the_same_bytes(tmp_path):
    write_pairs(tmp_path / "pairs")
    one, two = _run(tmp_path, 1), _run(tmp_path, 2)
    for seed in (13, 14):
        assert one[seed][1] == two[seed][1], f"seed {seed}: the weights differ"
        assert result_metrics(one[seed][2]) == result_metrics(two[seed][2])
        assert two[seed][2]["train"]["steps"] == 6
    assert "seed 14 trained beside seed 13" in two[13][0]
    assert "is the run's final step" in two[14][0]  # seed 14's stage published the run, it did not train
    assert "is the run's final step" not in one[14][0]
    assert "step" in (tmp_path / "p2/ckpt/side-process-14.log").read_text()  # its progress, out of the stage's log
    assert not (tmp_path / "p1/ckpt/side-process-14.log").exists()
