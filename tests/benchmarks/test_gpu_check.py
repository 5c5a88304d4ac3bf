"""benchmarks/gpu_check.py: the parts (arguments, size accounting, the node's package closure, the
bf16 carry, the params it runs, the tolerance, the estimate) fast, and the whole CPU dry run
(``--prepare --tiny`` then ``--device cpu --tiny``) as a slow test, so the GPU check cannot rot."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import pytest
import torch
import yaml
from conftest import REPO


@pytest.fixture
def gc(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import gpu_check

    return gpu_check


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "give either --prepare DIR or a prepared folder"),
        (["folder", "--prepare", "x"], "give either --prepare DIR or a prepared folder"),
        (["--prepare", "x", "--log", "l.json"], "belong to the run, not to --prepare"),
        (["folder", "--device", "tpu"], "invalid choice: 'tpu'"),
        (["--prepare", "x", "--mirror", "/no/such/mirror"], "--mirror /no/such/mirror: not a folder"),
        (["folder", "--data", "/no/such/data"], "--data /no/such/data: not a folder"),
        (["folder", "--log", "/no/such/dir/log.json"], "--log /no/such/dir/log.json: its folder does not exist"),
    ],
)
def test_bad_arguments_are_one_usage_line(gc, capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        gc.main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_a_folder_without_manifest_is_one_line(gc, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gc.main([str(tmp_path), "--device", "cpu", "--tiny"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no manifest.json; build the folder with --prepare first" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_missing_default_mirror_is_one_line_before_any_work(gc, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(gc, "REPO", tmp_path / "repo")  # its ../shared/data does not exist
    monkeypatch.setattr(gc, "prepare", lambda *a, **k: pytest.fail("prepared without a mirror"))
    assert gc.main(["--prepare", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err == f"error: {tmp_path / 'shared/data'}: no data mirror there; pass --mirror DIR\n"
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_cuda_without_a_gpu_is_one_line(gc, tmp_path, capsys):
    assert gc.main([str(tmp_path)]) == 1
    assert "--device cuda: no CUDA device is visible; use --device cpu --tiny" in capsys.readouterr().err


def test_folder_size_counts_every_file_and_refuses_over_the_limit(gc, tmp_path):
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "a.whl").write_bytes(b"x" * 2**20)
    (tmp_path / "manifest.json").write_bytes(b"y" * 2**19)
    mib, parts = gc.folder_size(tmp_path)
    assert mib == 1.5 and parts == {"manifest.json": 0.5, "wheels": 1.0}
    with open(tmp_path / "model.safetensors", "wb") as f:  # sparse: counted at its apparent size
        f.truncate(gc.LIMIT_MIB * 2**20)
    with pytest.raises(gc.CheckError, match=rf"MiB, over the {gc.LIMIT_MIB} MiB limit"):
        gc.check_size(tmp_path)


def test_node_closure_counts_dependencies_of_the_preinstalled_packages(gc):
    closure = gc.installed_closure(gc.NODE_PREINSTALLED)
    assert {"torch", "transformers", "huggingface-hub", "tokenizers", "numpy", "scipy"} <= closure
    assert "dvc" not in closure and "seqeval" not in closure
    assert gc.missing_on_node({"torch", "numpy", "seqeval", "datasets", "minisci"}) == ["datasets", "seqeval"]


def test_bf16_carry_halves_the_weights_and_upcasts_exactly(gc, tmp_path):
    from safetensors.torch import load_file, save_file

    src = tmp_path / "src"
    src.mkdir()
    w = {"w": torch.randn(64, 64), "ids": torch.arange(4)}
    save_file(w, src / "model.safetensors")
    (src / "config.json").write_text("{}")
    gc.to_bf16(src, tmp_path / "bf16")
    gc.to_fp32(tmp_path / "bf16", tmp_path / "fp32")
    back = load_file(tmp_path / "fp32" / "model.safetensors")
    assert back["w"].dtype == torch.float32 and torch.equal(back["w"], w["w"].bfloat16().float())
    assert torch.equal(back["ids"], w["ids"]) and (tmp_path / "fp32" / "config.json").is_file()
    size = {d: (tmp_path / d / "model.safetensors").stat().st_size for d in ("bf16", "fp32")}
    assert size["bf16"] < 0.6 * size["fp32"]


def test_check_params_are_the_paper_profile_with_the_checks_own(gc, tmp_path):
    from minisci.config import FinetuneClassificationConfig, FinetuneNerConfig, load_section
    from minisci.pretrain.seeds import load_pretrain

    path = gc.check_params(REPO, tmp_path / "model", gc.FULL, tmp_path)
    profile = gc.paper_profile()
    pre, design = load_pretrain(path)  # strict: every key known and valid
    assert design.seeds == (13, 14, 15)  # the profile's seeds, each its own process (the check starts them together)
    ner = load_section(FinetuneNerConfig, "finetune_ner", path)
    cls = load_section(FinetuneClassificationConfig, "finetune_classification", path)
    assert pre.batch_size == profile["pretrain.batch_size"] and pre.max_steps == gc.FULL.pretrain_steps
    assert ner.batch_size == profile["finetune_ner.batch_size"] and ner.epochs == profile["finetune_ner.epochs"]
    assert ner.datasets == ("bc5cdr",) and ner.seeds == (13,) and cls.datasets == ("scicite",)
    assert yaml.safe_load(path.read_text())["model"]["base"] == str(tmp_path / "model")


def test_scores_out_of_tolerance_fail_in_one_line(gc):
    ref = {"finetune_ner": {"test": 0.80}, "finetune_classification": {"test": 0.70}}
    ok = gc.compare({"finetune_ner": {"test": 0.79}, "finetune_classification": {"test": 0.72}}, ref)
    assert ok["finetune_ner"]["ok"] and ok["finetune_classification"]["difference"] == 0.02
    with pytest.raises(gc.CheckError, match=r"out of tolerance: finetune_ner test f1 0\.7000 vs CPU 0\.8000"):
        gc.compare({"finetune_ner": {"test": 0.70}, "finetune_classification": {"test": 0.70}}, ref)


def test_estimate_divides_the_profiles_workload_by_the_measured_rates(gc):
    load = {
        "pretrain_pieces_per_pair": 200.0,
        "datasets": {"bc5cdr": {"section": "finetune_ner", "train": 1000, "dev": 10, "test": 10}},
    }
    out = gc.estimate(REPO, load, {"tokens_per_second": 1e6}, {"finetune_ner": {"tokens_per_second": 100.0}})
    profile = gc.paper_profile()
    pairs, epochs = profile["make_pairs.n_pairs"], profile["pretrain.epochs"]
    runs = len(yaml.safe_load((REPO / "params.yaml").read_text())["pretrain"]["seeds"])  # one per seed
    assert out["seconds_by_stage"]["pretrain"] == round(runs * pairs * epochs * 200 / 1e6, 1)
    # with a warm pretraining run: each seed's stage pays the start-up once, then runs at the warm rate
    warm = {"tokens_per_second": 1e6, "first_seed_overhead_seconds": 7.0, "warm_seed": {"tokens_per_second": 2e6}}
    out2 = gc.estimate(REPO, load, warm, {"finetune_ner": {"tokens_per_second": 100.0}})
    assert out2["seconds_by_stage"]["pretrain"] == round(runs * (7.0 + pairs * epochs * 200 / 2e6), 1)
    # seeds side by side (the check's own measurement): each group pays its start-up, its side processes'
    # interpreter start, and its seeds' tokens at the slowest seed's rate; the later seeds' stages publish
    side = {"processes": 2, "per_process_tokens_per_second": 5e5, "startup_seconds": 6.0, "publish_seconds": 3.0}
    out4 = gc.estimate(REPO, load, side, {"finetune_ner": {"tokens_per_second": 100.0}}, {"seconds": 12.0})
    groups = math.ceil(runs / 2)
    expected = groups * (12.0 + 6.0 + pairs * epochs * 200 / 5e5) + (runs - groups) * 3.0
    assert out4["seconds_by_stage"]["pretrain"] == round(expected, 1)
    # with the rate once started (the logged intervals after the first): the start is counted apart
    side.update(per_process_steady_tokens_per_second=8e5, training_start_seconds=4.0)
    out5 = gc.estimate(REPO, load, side, {"finetune_ner": {"tokens_per_second": 100.0}}, {"seconds": 12.0})
    expected = groups * (12.0 + 6.0 + 4.0 + pairs * epochs * 200 / 8e5) + (runs - groups) * 3.0
    assert out5["seconds_by_stage"]["pretrain"] == round(expected, 1)
    # each stage process's interpreter start: every pretraining seed, every dataset x arm
    out3 = gc.estimate(REPO, load, warm, {"finetune_ner": {"tokens_per_second": 100.0}}, {"seconds": 12.0})
    base = yaml.safe_load((REPO / "params.yaml").read_text())
    cls = profile.get("finetune_classification.datasets", base["finetune_classification"]["datasets"])
    stages = 2 * (len(profile["finetune_ner.datasets"]) + len(cls))
    assert out3["seconds_by_stage"]["stage processes starting"] == (runs + stages) * 12.0
    # seed_processes seeds at once, each at one seed's rate; a log without a warm seed: at the first's rate
    rounds = math.ceil(len(profile["finetune_ner.seeds"]) / profile["finetune_ner.seed_processes"])
    assert profile["finetune_ner.seed_processes"] > 1 and rounds == 1  # the profile runs its seeds at once
    assert out["seconds_by_stage"]["finetune_ner/bc5cdr"] == 2 * rounds * 1000 * profile["finetune_ner.epochs"] / 100
    parts = out["seconds_by_stage"].values()  # each rounded to 0.1 s, the total from the unrounded parts
    assert out["total_seconds"] == pytest.approx(sum(parts), abs=0.05 * len(parts) + 1e-9)
    # with a warm seed: each arm's stage pays the first seed's start-up once, then every seed runs warm
    tuned = {"finetune_ner": {"tokens_per_second": 100.0, "warm_seed": {"tokens_per_second": 400.0}}}
    tuned["finetune_ner"]["first_seed_overhead_seconds"] = 7.0
    out = gc.estimate(REPO, load, {"tokens_per_second": 1e6}, tuned)
    expected = 2 * (7.0 + rounds * 1000 * profile["finetune_ner.epochs"] / 400)
    assert out["seconds_by_stage"]["finetune_ner/bc5cdr"] == round(expected, 1)


def test_estimate_takes_dev_scoring_apart_by_each_datasets_dev_and_test(gc):
    """With the check's dev scoring measured: each dataset's dev every epoch and its test once at the
    scoring rate, the warm seed's other seconds by training pieces; an older log keeps the old rule."""
    load = {
        "pretrain_pieces_per_pair": 200.0,
        "datasets": {
            "bc5cdr": {"section": "finetune_ner", "train": 1000, "dev": 1000, "test": 500},
            "jnlpba": {"section": "finetune_ner", "train": 1000, "dev": 100, "test": 500},
        },
    }
    warm = {"wall_seconds": 10.0, "tokens_per_second": 40.0, "tokens_trained": 400}
    tuned = {"finetune_ner": {"tokens_per_second": 20.0, "tokens_trained": 400, "warm_seed": warm}}
    scoring = {"finetune_ner": {"pieces_per_second": 100.0, "dev_pieces": 100, "test_pieces": 50}}
    out = gc.estimate(REPO, load, {"tokens_per_second": 1e6}, tuned, None, scoring, {"finetune_ner": 2.0})
    profile = gc.paper_profile()
    epochs = profile["finetune_ner.epochs"]
    rounds = math.ceil(len(profile["finetune_ner.seeds"]) / profile["finetune_ner.seed_processes"])
    rest = 10.0 - (2.0 * 100 + 50) / 100.0  # the check's warm seed less its 2 dev scorings and its test
    for name, dev in (("bc5cdr", 1000), ("jnlpba", 100)):
        per_seed = 1000 * epochs * rest / 400 + (epochs * dev + 500) / 100.0
        assert out["seconds_by_stage"][f"finetune_ner/{name}"] == round(2 * rounds * per_seed, 1)
    assert out["seconds_by_stage"]["finetune_ner/bc5cdr"] > out["seconds_by_stage"]["finetune_ner/jnlpba"]
    # an older log (no scoring step): the warm seed's whole time by training pieces, the same for both
    old = gc.estimate(REPO, load, {"tokens_per_second": 1e6}, tuned)
    assert old["seconds_by_stage"]["finetune_ner/bc5cdr"] == old["seconds_by_stage"]["finetune_ner/jnlpba"]
    assert old["seconds_by_stage"]["finetune_ner/jnlpba"] == round(2 * rounds * 1000 * epochs / 40.0, 1)


def test_estimate_takes_the_paper_cpu_stages_from_their_newest_log(gc, tmp_path):
    """With benchmarks/paper_cpu_stages.py logs in the tree, the CPU-side stages are the newest log's
    times (pretrain_data included), not the committed default run's scaled; of several logs of the
    newest day, the slowest machine's."""
    for rel in ("params.yaml", "src/minisci/profiles/paper.yaml"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, tmp_path / rel)
    runs = tmp_path / "benchmarks/runs"
    runs.mkdir(parents=True)
    load = {"pretrain_pieces_per_pair": 200.0, "datasets": {}}
    scaled = gc.estimate(tmp_path, load, {"tokens_per_second": 1e6}, {})["seconds_by_stage"]
    assert set(scaled) == {"pretrain"}  # no committed metrics in this tree, no log: nothing to scale
    for date, s in (("2026-01-01", 1.0), ("2026-02-01", 2.0)):
        times = {"sample_corpus": 90 * s, "make_pairs": 10 * s, "pretrain_data": 80 * s}
        (runs / f"{date}-cpu-paper_cpu_stages.json").write_text(json.dumps({"seconds": times}))
    parts = gc.estimate(tmp_path, load, {"tokens_per_second": 1e6}, {})["seconds_by_stage"]
    name = "2026-02-01-cpu-paper_cpu_stages.json"
    assert {k: v for k, v in parts.items() if k != "pretrain"} == {
        f"sample_corpus (CPU, paper params, {name})": 180.0,
        f"make_pairs (CPU, paper params, {name})": 20.0,
        f"pretrain_data (CPU, paper params, {name})": 160.0,
    }
    # two machines timed on the newest day: the slower one's times, whatever their names' order
    for cpu, s in (("a-fast", 0.5), ("z-faster", 0.25)):
        times = {"sample_corpus": 90 * s, "make_pairs": 10 * s, "pretrain_data": 80 * s}
        (runs / f"2026-02-01-{cpu}-paper_cpu_stages.json").write_text(json.dumps({"seconds": times}))
    assert gc.paper_cpu_log(tmp_path).name == name
    (runs / name).unlink()
    assert gc.paper_cpu_log(tmp_path).name == "2026-02-01-a-fast-paper_cpu_stages.json"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--pretrain-concurrent", "x"],
            "argument --pretrain-concurrent: expected comma-separated counts >= 1, got 'x'",
        ),
        (["--concurrent", "0"], "argument --concurrent: expected comma-separated counts >= 1, got '0'"),
        ([], "no model/ there; unpack the folder's data.tar.gz and model.tar.gz into it"),
    ],
)
def test_profile_bad_arguments_are_one_line_usage_errors(tmp_path, extra, message):
    cmd = [sys.executable, str(REPO / "benchmarks/gpu_profile.py"), "--data-root", str(tmp_path)]
    cmd += ["--work", str(tmp_path / "w"), "--out", str(tmp_path / "o"), *extra]
    run = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1].endswith(message)


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    """The folder built offline (``--prepare --tiny``, no wheels), once for the dry runs."""
    out = tmp_path_factory.mktemp("gpu-check")
    with pytest.MonkeyPatch.context() as m:
        m.syspath_prepend(str(REPO / "benchmarks"))
        m.setenv("HF_HUB_OFFLINE", "1")
        m.setenv("HF_DATASETS_OFFLINE", "1")
        m.chdir(out)
        import gpu_check

        assert gpu_check.main(["--prepare", str(out / "folder"), "--tiny"]) == 0
    return out / "folder"


@pytest.mark.slow
def test_cpu_dry_run_of_the_whole_check(gc, tiny_folder, tmp_path, monkeypatch):
    """The folder built offline (no wheels) and the run step on it: every step passes, the scores match
    the folder's CPU reference, and every imported distribution is preinstalled on the node or a wheel."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    folder = tiny_folder
    manifest = json.loads((folder / "manifest.json").read_text())
    wheels = set(manifest["wheel_distributions"])
    assert manifest["mib"] < gc.LIMIT_MIB and {"dvclive", "datasets", "seqeval"} <= wheels
    assert "evaluate" not in wheels  # the stages score through minisci.metrics.scores
    assert (folder / "run.sh").is_file() and os.path.getsize(folder / "minisci.tar.gz") > 0
    # the run in a fresh interpreter, as on the node: its imports are the run's alone (not pytest's, not --prepare's)
    cmd = [sys.executable, str(REPO / "benchmarks/gpu_check.py"), str(folder), "--device", "cpu", "--tiny"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    run = subprocess.run([*cmd, "--work", "w", "--log", "log.json"], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "gpu_check: ok" in run.stdout and "Traceback" not in run.stderr
    log = json.loads((tmp_path / "log.json").read_text())
    assert log["failed"] == [] and all(s["ok"] for s in log["steps"].values())
    # the CPU reference starts after the timed steps (it would take their CPU), and runs the first seed only
    assert set(log["steps"]) == {
        "ceiling",
        "base_model",
        "pretrain",
        "finetune",
        "dev_scoring",
        "serve",
        "stage_start",
        "estimate",
        "scores",
        "imports",
    }
    assert {"pretrain", "finetune", "serve", "stage_start"} <= set(log["cpu_reference_started_after"])
    assert log["cpu_reference_prepared_from"] == ["ceiling"]  # it prepares beside the GPU steps, then waits
    assert log["steps"]["stage_start"]["seconds"] > 0
    ner = log["steps"]["finetune"]["finetune_ner"]
    assert ner["warm_seed"]["wall_seconds"] > 0 and ner["first_seed_overhead_seconds"] >= 0
    assert "warm_seed" not in log["cpu_reference"]["finetune_ner"]
    # dev scored apart, through the stage's own scoring, with the warm seed's model
    for section, scored in log["steps"]["dev_scoring"].items():
        if section == "ok" or section == "seconds":
            continue
        assert scored["seconds"] > 0 and scored["dev_pieces"] > 0 and scored["test_pieces"] > 0
        tuned = log["steps"]["finetune"][section]
        assert tuned["warm_seed"]["tokens_trained"] > 0
    # the reference: one process per task side by side, each on its share of the cores
    assert log["cpu_reference"]["environment"]["processes"] == 2
    assert log["cpu_reference"]["environment"]["cpu_threads"] == max(1, (os.cpu_count() or 1) // 2)
    assert all(v["ok"] for v in log["steps"]["scores"].values() if isinstance(v, dict))
    assert log["steps"]["pretrain"]["precision"] == "fp32" and log["steps"]["estimate"]["total_seconds"] > 0
    # the profile's pretraining seeds, seed_processes of them at once, each a stage process of its own
    pre, profile = log["steps"]["pretrain"], gc.paper_profile()
    assert pre["processes"] == profile["pretrain.seed_processes"] == len(pre["seeds"]) > 1
    assert 0 < pre["per_process_tokens_per_second"] == min(r["tokens_per_second"] for r in pre["seeds"].values())
    assert pre["tokens_per_second"] == pytest.approx(sum(r["tokens_per_second"] for r in pre["seeds"].values()))
    assert pre["group_wall_seconds"] > max(r["train_seconds"] for r in pre["seeds"].values())
    assert pre["startup_seconds"] > 0 and pre["publish_seconds"] > 0
    steady = {s: r["steady_tokens_per_second"] for s, r in pre["seeds"].items()}
    assert all(v > 0 for v in steady.values()) and pre["per_process_steady_tokens_per_second"] == min(steady.values())
    assert 0 <= pre["training_start_seconds"] <= max(r["train_seconds"] for r in pre["seeds"].values())


@pytest.mark.slow
def test_cpu_dry_run_of_the_profile_beside_the_check(tiny_folder, tmp_path, monkeypatch):
    """benchmarks/gpu_profile.py on the tiny folder's data: every what-if and profile runs and is logged."""
    import tarfile

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    folder, root = tiny_folder, tmp_path / "root"
    for name in ("data.tar.gz", "model.tar.gz"):
        with tarfile.open(folder / name) as tar:
            tar.extractall(root, filter="data")
    cmd = [sys.executable, str(REPO / "benchmarks/gpu_profile.py"), "--data-root", str(root), "--work", "w"]
    cmd += ["--out", "out", "--device", "cpu", "--tiny", "--concurrent", "2", "--pretrain-concurrent", "2"]
    run = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert run.returncode == 0, run.stderr[-2000:]
    steps = json.loads((tmp_path / "out/profile.json").read_text())["steps"]
    assert not [name for name, step in steps.items() if "error" in step]
    assert {"ner_concurrent_2", "pretrain_workers0", "pretrain_workers4", "pretrain_concurrent_2"} <= set(steps)
    a, b = steps["pretrain_concurrent_2"]["runs"]  # two pretraining seeds at once, the same steps
    assert a["tokens"] > 0 and b["tokens"] > 0 and steps["pretrain_concurrent_2"]["tokens"] == a["tokens"] + b["tokens"]
    first, second = steps["ner_concurrent_2"]["runs"]  # two seeds at once, the same data
    assert first["tokens"] == second["tokens"] > 0 and steps["ner_concurrent_2"]["tokens"] == 2 * first["tokens"]
    for name in ("ner_cprofile.txt", "ner_torch_profile.txt", "pretrain_cprofile.txt"):
        assert (tmp_path / "out" / name).stat().st_size > 0


def test_the_reference_waits_for_its_go_and_gives_up_when_never_released(gc, tmp_path):
    import threading

    go = tmp_path / "go"
    threading.Timer(0.3, go.touch).start()
    gc.wait_for(go, timeout=10)  # returns once the file exists
    with pytest.raises(gc.CheckError, match="ended before releasing it"):
        gc.wait_for(tmp_path / "never", timeout=0.5)
