"""Helpers shared by the tests (the fixtures are in conftest.py): tiny configs, synthetic rows,
stage commands and the kill-after-every-operation harness's data. Tests import from here, never
from one another."""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml
from conftest import REPO, synthetic_embeddings_metrics, tiny_params

from minisci.config import (
    ExportMetricsConfig,
    FinetuneNerConfig,
    MakePairsConfig,
    ModelConfig,
    PretrainConfig,
    from_dict,
)
from minisci.data.readers import load_prepared
from minisci.io import atomic_path
from minisci.metrics.scores import classification_scores, ner_scores
from minisci.pretrain.data import build_pretraining_data
from minisci.pretrain.seeds import SEED_KEYS, load_pretrain
from minisci.report import export
from minisci.tasks.ner import NER

# 1. fine-tuning ----------------------------------------------------------------------------------------


def ner_cfg(**kw):
    params = yaml.safe_load((REPO / "params.yaml").read_text())["finetune_ner"]
    fast = {"epochs": 6.0, "batch_size": 8, "learning_rate": 5.0e-3, "max_length": 32, "logging_steps": 5, "crf": False}
    params.update({**fast, "seeds": [13], **kw})  # one seed, whatever the default's count
    return from_dict(FinetuneNerConfig, params, "finetune_ner")


# 2. counts of synthetic NER rows (the statistics tests) ----------------------------------------------------


def ner_counts(rows):
    """Per sentence [tp, predicted, gold] of the one entity type "E" (the NER kind's counts)."""
    return NER.counts(rows, ["E"])


def ner_rows(n, hit_rate, seed):
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        gold = ["B-E", "I-E", "O", "B-E", "O"]
        pred = [t if rng.random() < hit_rate else "O" for t in gold]
        rows.append({"gold": gold, "pred": pred})
    return rows


# 3. serving -------------------------------------------------------------------------------------------------


def ner_texts(data, n=40):
    return [" ".join(s.tokens) for s in load_prepared(data).splits["test"][:n]]


def strip(entities):
    return [(e["entity_group"], e["start"], e["end"], e["word"]) for e in entities]


# 4. pretraining stage runs ------------------------------------------------------------------------------------

STAGE = str(REPO / "stages" / "pretrain.py")
WORDS = "cells protein gene binding kinase receptor expression tumour patients dose".split()


def write_pairs(root, n_train=160, n_held=32, seed=0):
    """Trivially learnable text: each sentence walks the word list from a random start. Also writes
    ``documents.jsonl`` (20 documents of such sentences, two corpora) beside the pairs, for
    :func:`pretraining_data`."""
    rng = random.Random(seed)

    def sentence():
        k = rng.randrange(len(WORDS))
        return " ".join(WORDS[(k + i) % len(WORDS)] for i in range(8)) + "."

    root.mkdir(parents=True, exist_ok=True)
    for name, n in (("train", n_train), ("heldout", n_held)):
        rows = [{"a": sentence(), "b": sentence(), "label": i % 2, "doc_a": "x", "doc_b": "y"} for i in range(n)]
        (root / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    docs = [
        {"id": f"d{i}", "domain": ("bio", "gen")[i % 2], "sentences": [sentence() for _ in range(6)]} for i in range(20)
    ]
    (root / "documents.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    return root


def pretraining_data(pairs_dir, model_cfg, cfg, out=None):
    """What the pretrain_data stage makes of :func:`write_pairs`'s folder (tokenised once)."""
    split = from_dict(MakePairsConfig, tiny_params()["make_pairs"], "make_pairs")
    out = Path(out or Path(pairs_dir).parent / f"pretrain_data-{'pairs' if cfg.nsp else 'blocks'}")
    build_pretraining_data(pairs_dir, Path(pairs_dir) / "documents.jsonl", model_cfg, cfg, split, out)
    return out


def configs(**pretrain):
    p = tiny_params({"pretrain": pretrain})
    run = {k: v for k, v in p["pretrain"].items() if k not in SEED_KEYS} | {
        "seed": p["pretrain"].get("seed", p["pretrain"]["seeds"][0])
    }
    return from_dict(ModelConfig, p["model"], "model"), from_dict(PretrainConfig, run, "pretrain")


def stage_cmd(tmp_path, params_path, ckpt="ckpt", out="adapted"):
    """The pretrain stage's command on ``tmp_path/pairs``, whose data this builds first (in-process,
    once per params file content, as the pretrain_data stage would)."""
    text = Path(params_path).read_text()
    data = tmp_path / f"pretrain_data-{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    if not data.is_dir():
        p = yaml.safe_load(text)
        cfg, _ = load_pretrain(params_path)
        pretraining_data(tmp_path / "pairs", from_dict(ModelConfig, p["model"], "model"), cfg, data)
    return [
        sys.executable,
        STAGE,
        "--data",
        str(data),
        "--out",
        str(tmp_path / out),
        "--checkpoints",
        str(tmp_path / ckpt),
        "--metrics",
        str(tmp_path / f"{out}.json"),
        "--plots",
        str(tmp_path / f"plots-{out}"),
        "--params",
        str(params_path),
    ]


def run_ok(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def write_params(tmp_path, **pretrain):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(tiny_params({"pretrain": pretrain})))
    return path


# 5. atomic writes killed after every operation (tests/kill_child.py) ------------------------------------------

KILL_CHILD = REPO / "tests" / "kill_child.py"
OLD = {"a.txt": "old a", "sub/b.txt": "old b"}
NEW = {"a.txt": "new a", "c.txt": "new c", "sub/d.txt": "new d"}


def tree(path: Path) -> dict[str, str]:
    return {p.relative_to(path).as_posix(): p.read_text() for p in sorted(path.rglob("*")) if p.is_file()}


def write_old(out: Path) -> None:
    with atomic_path(out) as tmp:
        for name, text in OLD.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(text)


# 4. a synthetic run for export_metrics (no training) ------------------------------------------------

CFG = ExportMetricsConfig(
    bootstrap_resamples=300,
    seed=13,
    equivalence_margin_ner=0.5,
    equivalence_margin_classification=1.0,
    error_examples=5,
)
SEEDS = [13, 14, 15]
LABELS = ["background", "method", "result"]
NER_WORDS = ["aspirin", "causes", "mild", "liver", "damage", "in", "rats", "and", "heart", "failure"]


def _noisy_tags(gold: list[str], rng: random.Random, p: float) -> list[str]:
    """Gold tags with a fraction ``p`` of the entities dropped, shortened or invented."""
    tags = list(gold)
    for i, t in enumerate(tags):
        if rng.random() < p:
            tags[i] = "O" if t != "O" else ("B-Chemical" if i == 0 or tags[i - 1] == "O" else "O")
    return tags


def _ner_rows(n: int, rng: random.Random) -> list[dict]:
    rows = []
    for i in range(n):
        tokens = rng.choices(NER_WORDS, k=8)
        gold = []
        for k, w in enumerate(tokens):
            if w == "aspirin":
                gold.append("B-Chemical")
            elif w == "liver":
                gold.append("B-Disease")
            elif w == "damage" and k and tokens[k - 1] == "liver":
                gold.append("I-Disease")
            else:
                gold.append("O")
        rows.append({"sentence": i, "tokens": tokens, "gold": gold})
    return rows


def _metrics_file(task: str, scores: dict, seed_scores: dict, labels: list[str]) -> dict:
    key = "f1" if task == "ner" else "macro_f1"
    values = [s[key] for s in seed_scores.values()]
    mean = sum(values) / len(values)
    sd = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
    return {
        "labels": labels,
        "seeds": SEEDS,
        "test": scores,
        "dev": scores,
        "best_epoch": 1,
        "wall_seconds": 1.0,
        "test_over_seeds": {f"{key}_mean": round(mean, 4), f"{key}_sd": round(sd, 4)},
    }


def synthetic_run(root: Path, ner_name: str = "toyner", cls_name: str = "toycls", n: int = 300) -> dict:
    """metrics/, models/, plots/ and data/prepared/ as the fine-tuning and prepare stages write them."""
    rng = random.Random(0)
    metrics, models, plots, prepared = (root / d for d in ("metrics", "models", "plots", "data/prepared"))
    # 1. NER: both arms, three seeds, predictions with planted noise (the adapted arm a little less)
    base_rows = _ner_rows(n, rng)
    for arm, noise in (("baseline", 0.15), ("adapted", 0.10)):
        preds = {str(s): [_noisy_tags(r["gold"], rng, noise) for r in base_rows] for s in SEEDS}
        rows = [
            {**r, "pred": preds["13"][i], "preds": {s: p[i] for s, p in preds.items()}} for i, r in enumerate(base_rows)
        ]
        seed_scores = {s: ner_scores([r["gold"] for r in base_rows], p) for s, p in preds.items()}
        m = _metrics_file(
            "ner", seed_scores["13"], seed_scores, ["O", "B-Chemical", "I-Chemical", "B-Disease", "I-Disease"]
        )
        _write(metrics / "finetune_ner" / ner_name / f"{arm}.json", json.dumps(m))
        _write(models / "finetune_ner" / ner_name / arm / "test_predictions.jsonl", _jsonl(rows))
        for curve, field in (("dev_f1", "dev_f1"), ("loss", "loss")):
            _write(
                plots / "finetune_ner" / ner_name / arm / "curves" / f"{curve}.tsv",
                f"step\t{field}\n10\t{0.5 if arm == 'baseline' else 0.6}\n20\t0.7\n",
            )
    # 2. classification: texts in data/prepared, probabilities for the first seed
    gold = [rng.choice(LABELS) for _ in range(n)]
    texts = [f"citation text number {i} about {g}" for i, g in enumerate(gold)]
    for arm, acc in (("baseline", 0.80), ("adapted", 0.82)):
        preds = {str(s): [g if rng.random() < acc else rng.choice(LABELS) for g in gold] for s in SEEDS}
        rows = []
        for i, g in enumerate(gold):
            p = preds["13"][i]
            conf = round(rng.uniform(0.4, 0.99), 5)
            probs = [conf if lab == p else round((1 - conf) / 2, 5) for lab in LABELS]
            rows.append({"i": i, "gold": g, "pred": p, "probs": probs, "preds": {s: q[i] for s, q in preds.items()}})
        seed_scores = {s: classification_scores(gold, q, LABELS) for s, q in preds.items()}
        m = _metrics_file("classification", seed_scores["13"], seed_scores, LABELS)
        _write(metrics / "finetune_classification" / cls_name / f"{arm}.json", json.dumps(m))
        _write(models / "finetune_classification" / cls_name / arm / "test_predictions.jsonl", _jsonl(rows))
    meta = {
        "name": cls_name,
        "task": "classification",
        "labels": LABELS,
        "splits": ["train", "dev", "test"],
        "counts": {
            "train": {"examples": 500, "per_label": {"background": 300, "method": 150, "result": 50}},
            "dev": {"examples": 50, "per_label": {"background": 30, "method": 20}},
            "test": {"examples": n, "per_label": {lab: gold.count(lab) for lab in LABELS}},
        },
        "train_quality": {
            "train_duplicate_rows": 7,
            "train_conflicting_texts": 2,
            "dev_texts_in_train": 3,
            "test_texts_in_train": 11,
        },
    }
    _write(prepared / cls_name / "dataset.json", json.dumps(meta))
    _write(
        prepared / cls_name / "test.jsonl",
        _jsonl([{"text": t, "label": g, "line": i + 1} for i, (t, g) in enumerate(zip(texts, gold))]),
    )
    # 3. the other stages' metrics the report shows
    _write(
        metrics / "pretrain" / "13.json",
        json.dumps(
            {
                "seed": 13,
                "before": {"mlm_accuracy": 0.1, "perplexity": 100.0, "nsp_accuracy": 0.5},
                "after": {"mlm_accuracy": 0.2, "perplexity": 50.0, "nsp_accuracy": 0.6},
                "train": {"steps": 10, "tokens_seen": 1000, "tokens_per_second": 100.0},
                "wall_seconds": 1.0,
            }
        ),
    )
    for name in ("sample_corpus", "make_pairs"):
        _write(metrics / f"{name}.json", json.dumps({"wall_seconds": 1.0}))
    _write(metrics / "finetune_embeddings.json", json.dumps(synthetic_embeddings_metrics()))
    _write(plots / "pretrain/13/curves/loss.tsv", "step\tloss\n1\t9.0\n2\t8.0\n")
    runs = {"ner": [ner_name], "classification": [cls_name]}
    return export.collect(metrics, models, CFG, runs, {}, prepared, "my-org/my-encoder")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)
