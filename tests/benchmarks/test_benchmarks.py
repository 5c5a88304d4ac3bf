"""The benchmark scripts run end to end on tiny models (so they do not rot), and the exact-fp32
ceiling they print counts the right FLOPs."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import REPO, TINY_MODEL


@pytest.fixture
def benchmarks(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import roofline

    measure = roofline.peak_matmul_flops
    monkeypatch.setattr(
        roofline, "peak_matmul_flops", lambda config, dtype: measure(config, dtype, windows=1, seconds=0.01)
    )


def test_encoder_flops_counts_linear_and_attention_products(benchmarks):
    from roofline import encoder_flops

    cfg = SimpleNamespace(hidden_size=4, intermediate_size=8, num_hidden_layers=2)
    # per layer and token: Q, K, V, output 4·4² = 64, feed-forward 2·4·8 = 64, attention 2·L·4 multiply-adds
    assert encoder_flops(cfg, [3]) == 2 * 2 * 3 * (64 + 64 + 2 * 3 * 4)
    assert encoder_flops(cfg, [3, 5]) == encoder_flops(cfg, [3]) + encoder_flops(cfg, [5])


def test_ceiling_line_divides_reference_time_by_the_bound(benchmarks, monkeypatch):
    import roofline

    peaks = {torch.float32: 1e9, torch.bfloat16: 2e9}
    monkeypatch.setattr(roofline, "peak_matmul_flops", lambda config, dtype: peaks[dtype])
    cfg = SimpleNamespace(hidden_size=4, intermediate_size=8, num_hidden_layers=2)
    flops = roofline.encoder_flops(cfg, [200])  # 2 layers · 2 · 200 · (64 + 64 + 1600) = 1,382,400
    line = roofline.ceiling_line(cfg, [200], t_reference=0.013824)  # 10x the fp32 bound
    assert "exact fp32 1 GFLOP/s: at most 10.00x" in line and "bf16 2 GFLOP/s: at most 20.00x" in line
    assert flops == 1_382_400


def ratios(out: str) -> list[float]:
    return [float(r) for r in re.findall(r"ratio\s+([\d.]+)x", out)]


def test_inference_benchmark_on_tiny_models(benchmarks, tiny_finetuned, capsys):
    import inference_speed

    inference_speed.main(
        [
            "--ner-data",
            str(tiny_finetuned["ner_data"]),
            "--cite-data",
            str(tiny_finetuned["cite_data"]),
            "--ner-model",
            str(tiny_finetuned["ner"]),
            "--cite-model",
            str(tiny_finetuned["cite"]),
            "--n",
            "6",
            "--rounds",
            "1",
            "--precisions",
            "fp32",
            "int8",
        ]
    )
    out = capsys.readouterr().out
    assert out.startswith("machine: ") and "avx512_bf16=" in out and "threads" in out
    # per task: 3 peers (the pipeline batched on PyTorch, on ORT fp32, on ORT int8) and 4 of ours
    # (PyTorch fp32 and int8, --backend onnx fp32 and int8)
    assert out.count("exact fp32") == 2 and len(ratios(out)) == 14
    for label in ("peer pipeline batch_size=32:", "on ORT fp32:", "on ORT int8:", "ours int8 --backend onnx:"):
        assert out.count(label) == 2, label
    # the batched peers pad, which can flip a near-tie of a tiny random model: only ours is held to 100%
    fp32 = [line for line in out.splitlines() if "ours fp32:" in line]
    assert len(fp32) == 2 and all("identical to pipeline 100.00%" in line for line in fp32)
    assert out.count("identical to pipeline") == 14
    assert out.count("vs fastest peer") == 8 and out.count("best of ours at >= 99.9% identical: ") == 2


def test_embedding_benchmark_on_a_tiny_model(benchmarks, tmp_path, capsys):
    import embedding_throughput

    from minisci.config import ModelConfig
    from minisci.pretrain.model import load_pretraining_model, load_tokenizer

    cfg = ModelConfig(
        **{**TINY_MODEL, "scratch_config": {**TINY_MODEL["scratch_config"], "max_position_embeddings": 512}}
    )
    tok = load_tokenizer(cfg)
    model, _ = load_pretraining_model(cfg, len(tok), seed=0)
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    docs = tmp_path / "documents.jsonl"
    docs.write_text(
        "".join(
            json.dumps({"sentences": [f"Aspirin reduced pain in trial {i} .", "Patients recovered ."]}) + "\n"
            for i in range(4)
        )
    )
    embedding_throughput.main(["--model", str(tmp_path / "m"), "--docs", str(docs), "--n", "4", "--precisions", "fp32"])
    out = capsys.readouterr().out
    # per workload: the SentenceTransformer peer, ours fp32, ours fp32 uncapped
    assert out.startswith("machine: ") and out.count("exact fp32") == 2 and len(ratios(out)) == 6
    assert out.count("peer SentenceTransformer.encode(batch_size=32)") == 2 and out.count("vs peer") == 4
    assert "cosine to naive: min 1.00000" in out and "to peer: min 1.00000" in out


def finetune_args(tiny_model_dir, tiny_finetuned, *extra: str) -> list[str]:
    data = ["--data", str(tiny_finetuned["ner_data"]), "--model", str(tiny_model_dir)]
    sizes = ["--params", str(REPO / "params.yaml"), "--steps", "3", "--batch-size", "8", "--max-length", "32"]
    return [*data, *sizes, *extra]


def test_finetune_benchmark_on_a_tiny_model(benchmarks, tiny_model_dir, tiny_finetuned, capsys):
    import finetune_throughput

    finetune_throughput.main(finetune_args(tiny_model_dir, tiny_finetuned, "--seeds", "0", "1"))
    out = capsys.readouterr().out
    assert out.startswith("machine: ") and "training windows" in out
    rows = [line for line in out.splitlines() if "real tokens/s" in line]
    assert [r.split(":")[0].strip() for r in rows] == ["stock Trainer fp32", "ours fp32"]
    assert ratios(out)[0] == 1.0 and all("3 steps in" in r and "dev F1" in r for r in rows)


def test_finetune_benchmark_refuses_bf16_without_native_support(
    benchmarks, tiny_model_dir, tiny_finetuned, monkeypatch, capsys
):
    import finetune_throughput

    from minisci import training
    from minisci.stage import run_stage

    monkeypatch.setattr(training, "cpu_info", lambda: ("Test CPU", {"avx2", "avx512f"}))
    monkeypatch.setattr(training.torch.cuda, "is_available", lambda: False)
    assert (
        run_stage(finetune_throughput.main, finetune_args(tiny_model_dir, tiny_finetuned, "--precision", "bf16")) == 1
    )
    assert re.fullmatch(r"error: precision: bf16 needs native bf16 .*Test CPU lacks.*\n", capsys.readouterr().err)


def test_finetune_benchmark_bf16_rows_where_the_cpu_has_it(
    benchmarks, tiny_model_dir, tiny_finetuned, monkeypatch, capsys
):
    import finetune_throughput

    from minisci import training

    monkeypatch.setattr(training, "cpu_info", lambda: ("Test CPU", {"avx512_bf16"}))  # emulated here: slow, tiny
    finetune_throughput.main(finetune_args(tiny_model_dir, tiny_finetuned, "--precision", "bf16", "--seeds", "0"))
    rows = [line for line in capsys.readouterr().out.splitlines() if "real tokens/s" in line]
    assert [r.split(":")[0].strip() for r in rows] == ["ours fp32", "ours bf16"]


def test_finetune_benchmark_emulated_bf16_gives_the_drift_and_labels_the_speed(
    benchmarks, tiny_model_dir, tiny_finetuned, monkeypatch, capsys
):
    import finetune_throughput

    from minisci import training

    monkeypatch.setattr(training, "cpu_info", lambda: ("Test CPU", {"avx2"}))
    monkeypatch.setattr(training.torch.cuda, "is_available", lambda: False)
    built, build = [], finetune_throughput.minisci_trainer

    def spy(*args, **kwargs):
        trainer = build(*args, **kwargs)
        built.append((trainer.args.bf16, trainer.accelerator.mixed_precision))
        return trainer

    monkeypatch.setattr(finetune_throughput, "minisci_trainer", spy)
    argv = finetune_args(tiny_model_dir, tiny_finetuned, "--precision", "bf16", "--emulated-bf16", "--seeds", "0", "1")
    finetune_throughput.main(argv)
    out = capsys.readouterr().out
    rows = [line.split(":")[0].strip() for line in out.splitlines() if "real tokens/s" in line]
    assert rows == ["ours fp32", "ours bf16 emulated (no native bf16, so drift only, not a speed)"]
    check = re.search(r"bf16 autocast (\d+\.\d+)%, emulated bf16 (\d+\.\d+)%; the two against each other", out)
    assert check and 0 < float(check.group(1)) < 5 and 0 < float(check.group(2)) < 5  # bf16 moves them, slightly
    assert sorted(built) == [(False, "no"), (False, "no"), (True, "bf16"), (True, "bf16")]  # autocast really ran
    drift = re.search(r"drift of the dev F1 \(bf16 - fp32, paired by seed\): .*fp32 seeds' sd \d\.\d{4}: (\w+)", out)
    assert drift and drift.group(1) in ("within", "outside")


def test_emulated_bf16_products_round_exact_fp32_sums_of_bf16_inputs(benchmarks, monkeypatch):
    import finetune_variants
    from finetune_variants import EmulatedBf16Gemms

    upcast, upcasts = finetune_variants._upcast, []
    monkeypatch.setattr(
        finetune_variants, "_upcast", lambda v: upcasts.append(finetune_variants._is_bf16(v)) or upcast(v)
    )
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 5, 16, requires_grad=True), torch.randn(8, 16), torch.randn(8)
    q, k = torch.randn(3, 5, 16), torch.randn(3, 16, 5)
    with torch.autocast("cpu", dtype=torch.bfloat16), EmulatedBf16Gemms():
        y = torch.nn.functional.linear(x, w, b)
        s = torch.bmm(q, k)
        y.float().sum().backward()
    r = [t.bfloat16().float() for t in (x.detach(), w, b, q, k)]
    assert y.dtype == s.dtype == torch.bfloat16
    assert torch.equal(y, torch.nn.functional.linear(r[0], r[1], r[2]).bfloat16())
    assert torch.equal(s, torch.bmm(r[3], r[4]).bfloat16())
    # the backward pass's product too: grad_x = ones @ w, in bf16 (autocast's dtype), from bf16-rounded w
    assert torch.equal(x.grad, torch.ones(4, 5, 8).matmul(r[1]).bfloat16().float())
    assert upcasts.count(True) == 3 + 2 + 2  # the mode computed them: addmm (bias, x, w), bmm, backward mm
    fp32 = torch.bmm(q, k)
    with EmulatedBf16Gemms():  # outside autocast, fp32 products pass through untouched
        assert torch.equal(torch.bmm(q, k), fp32)


def test_drift_line_compares_the_paired_drift_with_the_fp32_seeds_spread(benchmarks):
    from finetune_throughput import drift_line

    fp32 = [{"dev": v} for v in (0.80, 0.81, 0.79)]  # sd 0.0100
    close = drift_line(fp32, [{"dev": v} for v in (0.805, 0.81, 0.79)], "dev F1")
    assert "(bf16 - fp32, paired by seed): mean +0.0017 (sd 0.0029, min +0.0000, max +0.0050)" in close
    assert close.endswith(" | fp32 seeds' sd 0.0100: within seed noise")
    far = drift_line(fp32, [{"dev": v - 0.02} for v in (0.80, 0.81, 0.79)], "dev F1")
    assert "mean -0.0200" in far and far.endswith("outside seed noise")
    assert drift_line(fp32[:1], fp32[:1], "dev F1").endswith("one seed: no seed noise to compare with")


def test_finetune_benchmark_emulated_bf16_needs_precision_bf16(benchmarks, tiny_model_dir, tiny_finetuned, capsys):
    import finetune_throughput

    with pytest.raises(SystemExit) as exit_info:
        finetune_throughput.main(finetune_args(tiny_model_dir, tiny_finetuned, "--emulated-bf16"))
    assert exit_info.value.code == 2 and "--emulated-bf16 goes with --precision bf16" in capsys.readouterr().err


def test_finetune_benchmark_on_citations(benchmarks, tiny_model_dir, tiny_finetuned, capsys):
    import finetune_throughput

    argv = finetune_args(tiny_model_dir, tiny_finetuned, "--task", "cite", "--seeds", "0")
    argv[argv.index("--data") + 1] = str(tiny_finetuned["cite_data"])
    finetune_throughput.main(argv)
    out = capsys.readouterr().out
    assert "data: scicite, " in out and "training texts" in out
    rows = [line for line in out.splitlines() if "real tokens/s" in line]
    assert [r.split(":")[0].strip() for r in rows] == ["stock Trainer fp32", "ours fp32"]
    assert all("dev macro-F1" in r for r in rows)
    # a NER dataset given to the citation task: one line naming the file
    argv[argv.index("--data") + 1] = str(tiny_finetuned["ner_data"])
    from minisci.stage import run_stage

    assert run_stage(finetune_throughput.main, argv) == 1
    assert re.fullmatch(r"error: .*dataset.json.*is a ner dataset, not classification\n", capsys.readouterr().err)


def test_finetune_benchmark_attention_dropout_off_rows(benchmarks, tiny_model_dir, tiny_finetuned, monkeypatch, capsys):
    import finetune_throughput

    loaded, load = [], finetune_throughput.load_model

    def spy(*args, **config):
        model = load(*args, **config)
        loaded.append(model.config)
        return model

    monkeypatch.setattr(finetune_throughput, "load_model", spy)
    finetune_throughput.main(finetune_args(tiny_model_dir, tiny_finetuned, "--attention-dropout-off", "--seeds", "0"))
    rows = [line for line in capsys.readouterr().out.splitlines() if "real tokens/s" in line]
    assert [r.split(":")[0].strip() for r in rows] == ["ours fp32", "ours fp32, attention dropout off"]
    rates = sorted((c.attention_probs_dropout_prob, c.hidden_dropout_prob) for c in loaded)
    assert rates[0][0] == 0.0 and rates[1][0] > 0 and rates[0][1] == rates[1][1] > 0  # only attention's changes
    with pytest.raises(SystemExit) as exit_info:
        finetune_throughput.main(
            finetune_args(tiny_model_dir, tiny_finetuned, "--attention-dropout-off", "--precision", "bf16")
        )
    assert exit_info.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_finetune_benchmark_random_batches_rows(benchmarks, tiny_model_dir, tiny_finetuned, monkeypatch, capsys):
    import finetune_throughput

    built, build = [], finetune_throughput.minisci_trainer

    def spy(*args, **kwargs):
        trainer = build(*args, **kwargs)
        built.append(trainer.args.train_sampling_strategy)
        return trainer

    monkeypatch.setattr(finetune_throughput, "minisci_trainer", spy)
    finetune_throughput.main(finetune_args(tiny_model_dir, tiny_finetuned, "--random-batches", "--seeds", "0", "1"))
    out = capsys.readouterr().out
    rows = [line.split(":")[0].strip() for line in out.splitlines() if "real tokens/s" in line]
    assert rows == ["ours fp32", "ours fp32, random batches"]
    assert sorted(built) == ["group_by_length", "group_by_length", "random", "random"]
    assert re.search(
        r"drift of the dev F1 \(random - length-grouped, paired by seed\): .* length-grouped seeds' sd", out
    )


def test_shuffled_batches_keep_the_cut_batches_and_the_partial_one_last(benchmarks):
    from finetune_variants import ShuffledBatches

    inner = list(range(23))  # batches of 5: four full, one of 3
    torch.manual_seed(0)
    order = list(ShuffledBatches(inner, 5))
    batches = [order[i : i + 5] for i in range(0, 23, 5)]
    assert sorted(batches[:4]) == [inner[i : i + 5] for i in range(0, 20, 5)] and batches[4] == [20, 21, 22]
    torch.manual_seed(0)
    assert list(ShuffledBatches(inner, 5)) == order and len(ShuffledBatches(inner, 5)) == 23  # seeded
    assert any(list(ShuffledBatches(inner, 5))[:20] != inner[:20] for _ in range(5))  # really shuffled


def test_finetune_benchmark_shuffled_groups_rows(benchmarks, tiny_model_dir, tiny_finetuned, monkeypatch, capsys):
    import finetune_throughput

    built, build = [], finetune_throughput.minisci_trainer

    def spy(*args, **kwargs):
        trainer = build(*args, **kwargs)
        built.append(type(trainer._get_train_sampler()).__name__)
        return trainer

    monkeypatch.setattr(finetune_throughput, "minisci_trainer", spy)
    finetune_throughput.main(finetune_args(tiny_model_dir, tiny_finetuned, "--shuffled-groups", "--seeds", "0"))
    out = capsys.readouterr().out
    rows = [line.split(":")[0].strip() for line in out.splitlines() if "real tokens/s" in line]
    assert rows == ["ours fp32", "ours fp32, shuffled groups"]
    assert sorted(built) == ["LengthGroupedSampler", "ShuffledBatches"]
    assert "drift of the dev F1 (shuffled - length-grouped, paired by seed)" in out


def test_finetune_benchmark_dev_curve_does_not_change_training(
    benchmarks, tiny_model_dir, tiny_finetuned, monkeypatch, capsys
):
    import finetune_throughput

    trained, load = [], finetune_throughput.load_model

    def spy(*args, **config):
        model = load(*args, **config)
        trained.append(model)
        return model

    monkeypatch.setattr(finetune_throughput, "load_model", spy)
    argv = finetune_args(tiny_model_dir, tiny_finetuned, "--seeds", "0", "--epochs", "1")
    del argv[argv.index("--steps") : argv.index("--steps") + 2]
    finetune_throughput.main(argv)
    finetune_throughput.main([*argv, "--eval-every", "2"])
    out = capsys.readouterr().out
    assert "batch 8, 15 steps (1 epochs)" in out  # one epoch: the fixture's 120 training windows
    assert "time to dev F1 >= " in out and "(the lowest final score among stock Trainer fp32's seeds)" in out
    assert re.search(
        r"ours fp32: dev curve \(step, mean score\) 2 [\d.]+, 4 [\d.]+, .*, 14 [\d.]+, 15 [\d.]+$", out, re.M
    )
    assert re.search(r"stock Trainer fp32: time to the score [\d.]+ s .*reached by 1/1 seeds \| 1.00x faster", out)
    # scoring dev in the middle of training changes nothing in it: the same weights at the end
    assert len(trained) == 4  # per run: the two sides, in the same order
    for a, b in zip(trained[:2], trained[2:]):
        assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_time_to_score_lines_time_each_seed_to_the_target(benchmarks):
    from finetune_throughput import time_to_score_lines

    def run(*points):  # (step, training seconds, dev score)
        return {"curve": list(points)}

    results = {
        "stock": [run((10, 20.0, 0.5), (20, 40.0, 0.7)), run((10, 22.0, 0.6), (20, 44.0, 0.8))],
        "ours": [run((10, 5.0, 0.7), (20, 10.0, 0.9)), run((10, 6.0, 0.4), (20, 12.0, 0.75))],
        "never": [run((10, 1.0, 0.1), (20, 2.0, 0.2)), run((10, 1.0, 0.1), (20, 2.0, 0.2))],
    }
    lines = time_to_score_lines(results, 0.7)
    assert lines[0] == "  stock: dev curve (step, mean score) 10 0.5500, 20 0.7500"
    assert (
        lines[3]
        == "  stock: time to the score 42.0 ± 2.8 s (min 40.0, max 44.0), reached by 2/2 seeds | 1.00x faster than stock"
    )
    assert lines[4].startswith("  ours: time to the score 8.5 ± 4.9 s (min 5.0, max 12.0), reached by 2/2 seeds")
    assert lines[4].endswith("| 4.94x faster than stock")
    assert lines[5] == "  never: time to the score: reached by 0/2 seeds"
    partly = time_to_score_lines({"stock": results["stock"], "ours": [results["ours"][0], results["never"][0]]}, 0.7)
    assert partly[-1] == "  ours: time to the score 5.0 s (min 5.0, max 5.0), reached by 1/2 seeds"  # no ratio


def test_finetune_benchmark_target_needs_eval_every(benchmarks, tiny_model_dir, tiny_finetuned, capsys):
    import finetune_throughput

    with pytest.raises(SystemExit) as exit_info:
        finetune_throughput.main(finetune_args(tiny_model_dir, tiny_finetuned, "--target", "0.5"))
    assert exit_info.value.code == 2 and "--target goes with --eval-every" in capsys.readouterr().err
    for bad in ("0", "-1", "x", "inf"):
        with pytest.raises(SystemExit) as exit_info:
            finetune_throughput.main(["--epochs", bad])
        assert exit_info.value.code == 2 and "argument --epochs: expected a number > 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "gpu", "precision", "expected"),
    [
        ({"avx2"}, False, "auto", "fp32"),
        ({"avx2"}, False, "fp32", "fp32"),
        ({"avx512f", "avx512_bf16"}, False, "bf16", "bf16"),
        ({"amx_bf16", "amx_tile"}, False, "bf16", "bf16"),
        ({"avx2"}, True, "bf16", "bf16"),
    ],
)
def test_resolve_precision(monkeypatch, flags, gpu, precision, expected):
    from minisci import training

    monkeypatch.setattr(training, "cpu_info", lambda: ("Test CPU", flags))
    monkeypatch.setattr(training.torch.cuda, "is_available", lambda: gpu)
    monkeypatch.setattr(training.torch.cuda, "is_bf16_supported", lambda: True)
    assert training.resolve_precision(precision) == expected
    assert training.precision_flags(precision) == {"bf16": expected == "bf16", "fp16": False}


@pytest.mark.parametrize(
    ("precision", "message"),
    [
        ("bf16", r"^precision: bf16 needs native bf16 on CPU \(avx512_bf16 or amx_bf16\), which Test CPU lacks"),
        ("fp16", r"^precision: fp16 needs a GPU"),
    ],
)
def test_training_refuses_precisions_the_cpu_cannot_run(monkeypatch, tmp_path, precision, message):
    from minisci import training
    from minisci.errors import ConfigError

    monkeypatch.setattr(training, "cpu_info", lambda: ("Test CPU", {"avx2", "avx512f"}))
    monkeypatch.setattr(training.torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=message):
        training.training_arguments(
            tmp_path, seed=0, batch_size=2, learning_rate=1e-3, weight_decay=0.0, precision=precision
        )


def test_run_environment_names_cpu_flags_and_precision(monkeypatch):
    from minisci import training

    monkeypatch.setattr(training, "cpu_info", lambda: ("Test CPU", {"avx2", "avx512f", "avx512_bf16", "sse4_2"}))
    monkeypatch.setattr(training.torch.cuda, "is_available", lambda: False)
    env = training.run_environment("auto")
    assert env["precision"] == "fp32" and env["cpu"] == "Test CPU" and env["gpu"] == ""
    assert env["cpu_flags"] == "avx2 avx512f avx512_bf16" and env["torch"] == torch.__version__


def tiny_pairs(path, n: int = 8):
    """``n`` short NSP pairs in the pairs format (a JSON object per line)."""
    rows = [
        {"a": f"Aspirin reduced pain in trial {i} .", "b": "Patients recovered .", "label": i % 2} for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_pretrain_benchmark_on_a_tiny_model(benchmarks, tiny_model_dir, tmp_path, capsys):
    import pretrain_throughput

    from minisci.stage import run_stage

    pairs = tiny_pairs(tmp_path / "pairs.jsonl")
    argv = ["--pairs", str(pairs), "--model", str(tiny_model_dir), "--batch-size", "4", "--steps", "2", "--rounds", "1"]
    pretrain_throughput.main([*argv, "--max-length", "32"])
    out = capsys.readouterr().out
    assert out.startswith("machine: ") and "ratio ours/naive: " in out
    assert re.search(
        r"fp32 ceiling: \d+ GFLOP/s peak \(measured now\) \| ours .* = \d+% of ceiling \| fused .* = \d+% of ceiling",
        out,
    )
    assert re.search(r"ours \+ fused AdamW .* \d+\.\d+ real tokens/s \| \d+\.\d\dx ours", out)
    for row in ("attention dropout off (recipe change; fused attention):", "all dropout off (recipe change):"):
        assert re.search(rf"ours, {re.escape(row)} +\d+\.\d real tokens/s \| \d+\.\d\dx ours", out)
    assert re.search(r"\| no attention dropout .* = \d+% of ceiling \| no dropout .* = \d+% of ceiling\n", out)
    padding = re.search(r"padding: ours (\d+\.\d)% of positions, naive (\d+\.\d)%; sequence packing could save", out)
    assert padding and 0 <= float(padding[1]) < float(padding[2])  # 8 short pairs padded to 32 on the naive side
    shares = re.search(
        r"where ours spends a step \(profiled, self CPU time\): matrix products (\d+)%, dropout masks (\d+)%, "
        r"optimizer step (\d+)%, the rest (\d+)%; the matrix products run at \d+ GFLOP/s = \d+% of peak",
        out,
    )
    assert shares and 98 <= sum(map(int, shares.groups())) <= 102  # rounded shares of one total
    assert int(shares[1]) > 0 and int(shares[3]) > 0
    without = re.search(
        r"where ours without dropout spends a step \(profiled, self CPU time\): .*dropout masks (\d+)%", out
    )
    assert without and int(without[1]) == 0  # no masks drawn at rate 0
    assert (
        run_stage(pretrain_throughput.main, [*argv, "--steps", "3", "--padding-only"]) == 1
    )  # 3 x 4 pairs, 8 in the file
    assert re.fullmatch(r"error: .*pairs\.jsonl: 8 pairs, fewer than the 12 that .*\n", capsys.readouterr().err)
    pretrain_throughput.main([*argv, "--max-length", "32", "--padding-only"])  # the same line, no training
    out = capsys.readouterr().out
    assert "real tokens/s" not in out and "where ours spends" not in out
    assert f"padding: ours {padding[1]}% of positions, naive {padding[2]}%;" in out
    assert (
        run_stage(
            pretrain_throughput.main, ["--pairs", str(tmp_path / "missing.jsonl"), "--model", str(tiny_model_dir)]
        )
        == 1
    )
    assert re.fullmatch(r"error: .*missing\.jsonl.*\n", capsys.readouterr().err)


@pytest.mark.slow
def test_pretrain_benchmark_compiled_rows_on_a_tiny_model(benchmarks, tiny_model_dir, tmp_path, capsys):
    import pretrain_throughput

    pairs = tiny_pairs(tmp_path / "pairs.jsonl")
    argv = ["--pairs", str(pairs), "--model", str(tiny_model_dir), "--batch-size", "4", "--steps", "2"]
    pretrain_throughput.main([*argv, "--rounds", "1", "--max-length", "32", "--compile"])
    out = capsys.readouterr().out
    for row in ("torch.compile (inductor):", "torch.compile, all dropout off (recipe change):"):
        assert re.search(rf"ours, {re.escape(row)} +\d+\.\d real tokens/s \| \d+\.\d\dx ours", out)
    assert re.search(r"\| compiled .* = \d+% of ceiling \| compiled, no dropout .* = \d+% of ceiling\n", out)


def test_pretrain_benchmark_compile_failure_is_one_line(benchmarks, tiny_model_dir, tmp_path, capsys, monkeypatch):
    import pretrain_throughput

    from minisci.stage import run_stage

    def broken_compile(model):
        def forward(**batch):
            raise RuntimeError("\nInductorError: CppCompileError: C++ compile error\n\nCommand:\ng++ ...")

        return forward

    monkeypatch.setattr(torch, "compile", broken_compile)
    pairs = tiny_pairs(tmp_path / "pairs.jsonl")
    argv = ["--pairs", str(pairs), "--model", str(tiny_model_dir), "--batch-size", "4", "--steps", "2", "--compile"]
    assert run_stage(pretrain_throughput.main, argv) == 1  # the tiny model's 64 positions, --max-length 128
    assert capsys.readouterr().err == f"error: --max-length 128: {tiny_model_dir} has 64 positions\n"
    argv += ["--max-length", "32"]
    assert run_stage(pretrain_throughput.main, argv) == 1
    captured = capsys.readouterr()
    assert captured.err.endswith(  # after the tokenising progress bar
        "\nerror: --compile: torch.compile failed: RuntimeError: InductorError: CppCompileError: C++ compile error\n"
    )
    assert "real tokens/s" not in captured.out  # it fails in the warm-up, before any timing
    assert pretrain_throughput.first_line(ValueError("")) == ""


def test_pretrain_dropout_off_switches_the_chosen_layers_and_restores_them(benchmarks, tiny_model_dir):
    import pretrain_throughput
    from transformers import AutoTokenizer

    from minisci.config import ModelConfig
    from minisci.pretrain.model import load_pretraining_model

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model, _ = load_pretraining_model(ModelConfig(base=str(tiny_model_dir)), len(tok), seed=0)
    every = pretrain_throughput.dropouts(model, "all")
    attention = pretrain_throughput.dropouts(model, "attention")
    layers = model.config.num_hidden_layers
    assert len(attention) == layers and len(every) > len(attention)  # one per self-attention; embeddings, outputs too
    before = [m.p for m in every]
    assert all(p > 0 for p in before)
    with pretrain_throughput.dropout_off(model, "attention"):
        assert [m.p for m in attention] == [0.0] * layers
        assert sum(m.p > 0 for m in every) == len(every) - layers
    assert [m.p for m in every] == before
    with pytest.raises(RuntimeError), pretrain_throughput.dropout_off(model, "all"):
        assert all(m.p == 0.0 for m in every)
        raise RuntimeError  # restored on the way out of an error too
    assert [m.p for m in every] == before


@pytest.mark.parametrize(
    ("script", "argv", "message"),
    [
        ("embedding_throughput", ["--model", "{missing}"], "{missing}: not a model directory (no such directory)"),
        ("inference_speed", ["--ner-data", "{missing}"], "{missing}/dataset.json: not found"),
        (
            "finetune_throughput",
            ["--params", "{params}", "--model", "{missing}"],
            "{missing}: not a model directory (no such directory)",
        ),
        ("finetune_throughput", ["--params", "{missing}"], "{missing}: params file not found"),
        (
            "finetune_cpu_side",
            ["--prepared", "{missing}", "--datasets", "bc5cdr", "--model", "{model}"],
            "{missing}/bc5cdr: not a prepared dataset (run: dvc repro prepare_data)",
        ),
        (
            "finetune_throughput",
            ["--params", "{params}", "--model", "{model}", "--data", "{missing}"],
            "{missing}/dataset.json: not found",
        ),
    ],
)
def test_benchmarks_name_a_missing_input_in_one_line(
    benchmarks, tiny_model_dir, tmp_path, capsys, script, argv, message
):
    from minisci.stage import run_stage

    missing = str(tmp_path / "missing")
    module = __import__(script)
    assert (
        run_stage(
            module.main, [a.format(missing=missing, model=tiny_model_dir, params=REPO / "params.yaml") for a in argv]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message.format(missing=missing)}") and err.count("\n") == 1


def test_a_benchmark_script_exits_with_one_line_not_a_traceback(tmp_path):
    import subprocess
    import sys

    missing = tmp_path / "missing"
    script = REPO / "benchmarks" / "finetune_throughput.py"
    argv = [sys.executable, str(script), "--params", str(REPO / "params.yaml"), "--model", str(missing)]
    proc = subprocess.run(argv, capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: {missing}: not a model directory (no such directory); check the path, or run `dvc repro` to train it"
    ]


def test_paper_cpu_stages_refuses_an_out_in_a_missing_folder_before_any_work(benchmarks, tmp_path, capsys):
    import paper_cpu_stages

    out = tmp_path / "no" / "log.json"
    assert paper_cpu_stages.main(["--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"error: --out {out}: its folder does not exist"]


def test_pretrain_benchmark_refuses_compile_with_padding_only(benchmarks, capsys):
    import pretrain_throughput

    with pytest.raises(SystemExit) as exit_info:
        pretrain_throughput.main(["--padding-only", "--compile"])
    assert exit_info.value.code == 2
    assert "argument --compile: not allowed with argument --padding-only" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("script", "argv"),
    [
        ("pretrain_throughput", ["--steps", "0"]),
        ("pretrain_throughput", ["--batch-size", "x"]),
        ("embedding_throughput", ["--n", "-3"]),
        ("finetune_throughput", ["--steps", "0"]),
        ("inference_speed", ["--rounds", "0"]),
        ("inference_speed", ["--batch-size", "0"]),
        ("inference_speed", ["--peer-batch-size", "-2"]),
        ("long_documents", ["--files", "0", "--before", "."]),
        ("long_documents", ["--sizes-kb", "100", "0", "--before", "."]),
        ("long_documents", ["--n-docs", "0", "--before", "."]),
        ("corpus_scale", ["--sizes", "0", "--before", "."]),
    ],
)
def test_benchmarks_refuse_counts_below_one_with_a_usage_error(benchmarks, capsys, script, argv):
    module = __import__(script)
    with pytest.raises(SystemExit) as exit_info:
        module.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {argv[0]}: expected an integer >= 1, got" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("before", "message"),
    [
        ("missing", "--before {before}: not a checkout of this repository (no stages/sample_corpus.py)"),
        (
            "now",
            "--before {before}: not the code before the corpus catalogue (its sample_corpus takes no --raw); "
            "check out commit 31be0c5 there",
        ),
    ],
)
def test_corpus_scale_refuses_a_wrong_before_checkout_before_any_work(benchmarks, tmp_path, capsys, before, message):
    import corpus_scale

    path = tmp_path / "missing" if before == "missing" else REPO  # this checkout: the catalogue's code
    with pytest.raises(SystemExit) as exit_info:
        corpus_scale.main(["--before", str(path), "--sizes", "1", "--work", str(tmp_path / "w")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].endswith(message.format(before=path))
    assert "Traceback" not in err and not (tmp_path / "w").exists()


def test_scale_benchmarks_remove_their_temporary_scratch_when_a_stage_fails(benchmarks):
    import corpus_scale

    with pytest.raises(SystemExit), corpus_scale.scratch(None, "corpus_scale.") as work:
        (Path(work) / "1x").mkdir()
        raise SystemExit("failed (1): a stage")
    assert not Path(work).exists()


def test_compare_runs_defaults_to_this_checkout_from_another_folder(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import compare_runs

    seen = []
    monkeypatch.setattr(compare_runs, "report", lambda root, other: seen.append((root, other)) or "")
    monkeypatch.chdir(tmp_path)
    compare_runs.main(["elsewhere"])
    assert seen == [(REPO, tmp_path / "elsewhere")]


def test_pretrain_padding_line_bounds_packing_by_ours_padded_share(benchmarks):
    import pretrain_throughput

    ours = {"tokens": 90, "positions": 100}  # 10 padded positions of 100
    naive = {"tokens": 90, "positions": 128}
    line = pretrain_throughput.padding_line(ours, naive)
    assert line.startswith(
        "padding: ours 10.0% of positions, naive 29.7%; sequence packing could save at most ours' 10.0%"
    )
    assert pretrain_throughput.padded_share({"tokens": 0, "positions": 0}) == 0.0


def test_pretrain_breakdown_sorts_profiled_time_by_kind(benchmarks):
    import pretrain_throughput

    def event(name, micros, parent=None):
        return SimpleNamespace(name=name, self_cpu_time_total=micros, cpu_parent=parent)

    step = event("Optimizer.step#AdamW.step", 1.0)
    inner = event("aten::mul_", 1.0, parent=step)  # element-wise, but the optimizer's
    events = [
        event("aten::mm", 6.0),
        event("aten::addmm", 2.0),
        event("aten::bernoulli_", 1.5),
        event("aten::gelu", 0.5),
        step,
        inner,
        event("aten::add_", 2.0, parent=inner),  # two levels under the step
        event("aten::mm", 3.0, parent=step),
    ]
    seconds = pretrain_throughput.time_by_kind(events)
    assert seconds == pytest.approx(
        {"matrix products": 8e-6, "dropout masks": 1.5e-6, "optimizer step": 7e-6, "the rest": 0.5e-6}
    )
    line = pretrain_throughput.breakdown_line(seconds, flops=8e3, peak=2e9)
    assert "matrix products 47%, dropout masks 9%, optimizer step 41%, the rest 3%" in line
    assert line.endswith("the matrix products run at 1 GFLOP/s = 50% of peak")


def test_inference_benchmark_compares_a_crf_model_as_the_pipeline_decodes_it(
    benchmarks, tiny_finetuned, tmp_path, capsys
):
    """The default NER model has a CRF head: the peers and our rows decode its emissions by argmax (so
    ours stays identical to the pipeline), and one more row is the Viterbi decoding `minisci ner` prints."""
    import inference_speed
    from transformers import AutoTokenizer

    from minisci.finetune.crf import BertCrfForTokenClassification

    model = BertCrfForTokenClassification.from_pretrained(tiny_finetuned["ner"]).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.crf.parameters():
            p.copy_(3 * torch.randn(p.shape, generator=g))  # transitions strong enough to overrule emissions
    model.save_pretrained(tmp_path / "crf")
    AutoTokenizer.from_pretrained(tiny_finetuned["ner"]).save_pretrained(tmp_path / "crf")
    inference_speed.main(
        ["--ner-data", str(tiny_finetuned["ner_data"]), "--cite-data", str(tiny_finetuned["cite_data"])]
        + ["--ner-model", str(tmp_path / "crf"), "--cite-model", str(tiny_finetuned["cite"])]
        + ["--n", "6", "--rounds", "1", "--precisions", "fp32", "--onnx", "fp32"]
    )
    ner = capsys.readouterr().out.split("\ncite: ")[0]
    assert "on ORT fp32:" in ner  # the exported emissions are a peer too
    ours = [line for line in ner.splitlines() if line.startswith("  ours fp32")]  # torch, --backend onnx, Viterbi
    assert len(ours) == 3 and "CRF Viterbi" in ours[2]
    assert all("identical to pipeline 100.00%" in line for line in ours[:2])
    assert "identical to pipeline 100.00%" not in ours[2]  # the transitions overrule some emissions


def test_finetune_cpu_side_benchmark_times_both_sides_and_finds_them_identical(
    benchmarks, tiny_model_dir, tmp_path, capsys
):
    """On a dataset prepared from the fixture mirror: identical reports and batches, the ratios printed."""
    import finetune_cpu_side
    from conftest import FIXTURE_MIRROR, prepare

    prepared = prepare(FIXTURE_MIRROR, "bc5cdr", tmp_path / "prepared" / "bc5cdr")
    argv = ["--prepared", str(prepared.parent), "--datasets", "bc5cdr", "--repeats", "1", "--batch-size", "8"]
    assert finetune_cpu_side.main([*argv, "--model", str(tiny_model_dir)]) == 0
    out = capsys.readouterr().out
    assert "bc5cdr dev (" in out and "identical report: yes" in out and "identical tensors: yes" in out
    assert re.search(r"identical reports: [\d.]+x \(smallest\)", out)
    assert re.search(r"identical tensors: [\d.]+x \(smallest\)", out)
