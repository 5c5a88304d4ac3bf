"""Helpers shared by the tests (the fixtures are in conftest.py): tiny configs, synthetic rows,
stage commands and the kill-after-every-operation harness's data. Tests import from here, never
from one another."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml
from conftest import REPO, tiny_params

from minisci.config import FinetuneNerConfig, ModelConfig, PretrainConfig, from_dict
from minisci.data.readers import load_prepared
from minisci.io import atomic_path
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
    """Trivially learnable text: each sentence walks the word list from a random start."""
    rng = random.Random(seed)

    def sentence():
        k = rng.randrange(len(WORDS))
        return " ".join(WORDS[(k + i) % len(WORDS)] for i in range(8)) + "."

    root.mkdir(parents=True, exist_ok=True)
    for name, n in (("train", n_train), ("heldout", n_held)):
        rows = [{"a": sentence(), "b": sentence(), "label": i % 2, "doc_a": "x", "doc_b": "y"} for i in range(n)]
        (root / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def configs(**pretrain):
    p = tiny_params({"pretrain": pretrain})
    return from_dict(ModelConfig, p["model"], "model"), from_dict(PretrainConfig, p["pretrain"], "pretrain")


def stage_cmd(tmp_path, params_path, ckpt="ckpt", out="adapted"):
    return [
        sys.executable,
        STAGE,
        "--pairs",
        str(tmp_path / "pairs"),
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
