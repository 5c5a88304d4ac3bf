"""Bad input to the Python API and to the profiles command, one row per case: the API answers as
the command line does (the same check functions), and a profile that cannot run is one line with
exit code 2 before anything starts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from minisci import CitationClassifier, Index, NerTagger
from minisci.errors import MinisciError
from minisci.io import OUTPUT_MARKER
from minisci.serve import cli

DOCS = [
    {"id": "p1", "title": "Aspirin and heparin", "text": "patients received aspirin", "authors": ["Ada", "Bob"]},
    {"id": "p2", "title": "Lung cancer", "text": "lung cancer treatment with cisplatin", "authors": ["Cy"]},
    {"id": "p3", "title": "Graph algorithms", "text": "shortest paths in sparse graphs", "authors": ["Dee"]},
]


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, tiny_model_dir) -> Path:
    docs = tmp_path_factory.mktemp("api-bad") / "docs.jsonl"
    docs.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    return Index.build(tiny_model_dir, docs, docs.parent / "index", max_length=32).index_dir


@pytest.fixture(scope="module")
def loaded(index_dir, tiny_finetuned) -> dict:
    return {
        "index": Index(index_dir),
        "ner": NerTagger(tiny_finetuned["ner"]),
        "cite": CitationClassifier(tiny_finetuned["cite"]),
    }


# (name, call on (loaded objects, tiny_finetuned), regex of the MinisciError's message)
CASES = [
    ("search k=-3", lambda o, f: o["index"].search("aspirin", k=-3), r"^k: must be >= 1, got -3$"),
    ("search k=0", lambda o, f: o["index"].search("aspirin", k=0), r"^k: must be >= 1, got 0$"),
    ("search k=2.5", lambda o, f: o["index"].search("aspirin", k=2.5), r"^k: expected a whole number, got 2.5$"),
    ("search k=True", lambda o, f: o["index"].search("aspirin", k=True), r"^k: expected a whole number, got True$"),
    ("search None", lambda o, f: o["index"].search(None), r"^queries: expected a text \(str\) or a list of texts, got NoneType$"),
    ("search ''", lambda o, f: o["index"].search("  "), r"^query: empty text$"),
    ("search [None]", lambda o, f: o["index"].search([None]), r"^query: expected a text \(str\), got NoneType$"),
    ("reviewers k=-1", lambda o, f: o["index"].reviewers("graphs", k=-1), r"^k: must be >= 1, got -1$"),
    ("reviewers None", lambda o, f: o["index"].reviewers(None), r"^abstract: expected a text \(str\), got NoneType$"),
    ("reviewers exclude empty", lambda o, f: o["index"].reviewers("graphs", exclude=["Ada", ""]), r"^exclude: an empty name matches no author$"),
    ("reviewers exclude not names", lambda o, f: o["index"].reviewers("graphs", exclude=[3]), r"^exclude: expected authors' names \(str\), got int$"),
    ("Index(None)", lambda o, f: Index(None), r"^index_dir: expected a directory \(str or Path\), got None$"),
    ("NerTagger(None)", lambda o, f: NerTagger(None), r"^model_dir: expected a directory \(str or Path\), got None$"),
    ("CitationClassifier(None)", lambda o, f: CitationClassifier(None), r"^model_dir: expected a directory"),
    ("NerTagger(m)(None)", lambda o, f: o["ner"](None), r"^texts: expected a text \(str\) or a list of texts, got NoneType$"),
    ("NerTagger(m)(42)", lambda o, f: o["ner"](42), r"^texts: expected a text \(str\) or a list of texts, got int$"),
    ("NerTagger(m)(b'aspirin')", lambda o, f: o["ner"](b"aspirin"), r"^texts: expected a text \(str\) or a list of texts, got bytes \(decode it first\)$"),
    ("CitationClassifier(m)(b'x')", lambda o, f: o["cite"](b"we used"), r"^texts: expected a text \(str\) or a list of texts, got bytes"),
    ("search b'aspirin'", lambda o, f: o["index"].search(b"aspirin"), r"^queries: expected a text \(str\) or a list of texts, got bytes"),
    ("NerTagger(m)(['a', None])", lambda o, f: o["ner"](["aspirin", None]), r"^input 2: expected a text \(str\), got NoneType$"),
    ("NerTagger(m)('')", lambda o, f: o["ner"](""), r"^input 1: empty text$"),
    ("CitationClassifier(m)(None)", lambda o, f: o["cite"](None), r"^texts: expected a text"),
    ("NerTagger stride too long", lambda o, f: NerTagger(f["ner"], stride=500), r"stride 500: must be between 0 and \d+"),
    ("NerTagger stride a string", lambda o, f: NerTagger(f["ner"], stride="8"), r"^stride: "),
    ("NerTagger batch_size 0", lambda o, f: NerTagger(f["ner"], batch_size=0), r"^batch_size: must be >= 1, got 0$"),
    ("CitationClassifier batch_size 0", lambda o, f: CitationClassifier(f["cite"], batch_size=0), r"^batch_size: must be >= 1, got 0$"),
]  # fmt: skip


@pytest.mark.parametrize("call, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_api_bad_input_is_a_minisci_error(call, message, loaded, tiny_finetuned):
    with pytest.raises(MinisciError, match=message):
        call(loaded, tiny_finetuned)


def test_an_empty_list_of_texts_gives_an_empty_result(tiny_model_dir, index_dir, tmp_path):
    """No text in, no result out (not an error), for every head: the softmax tagger, the CRF tagger
    (which decodes on its own path), the classifier and the index; a tuple as a list."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification, BertForTokenClassification

    from minisci.finetune.crf import BertCrfForTokenClassification

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    base = BertConfig.from_pretrained(tiny_model_dir).to_dict()
    labels = {"ner": ["O", "B-Chemical", "I-Chemical"], "cite": ["background", "method", "result"]}
    for name, cls in (("ner", BertForTokenClassification), ("cite", BertForSequenceClassification)):
        config = {
            **base,
            "id2label": dict(enumerate(labels[name])),
            "label2id": {x: i for i, x in enumerate(labels[name])},
        }
        cls(BertConfig(**config)).save_pretrained(tmp_path / name)
        tok.save_pretrained(tmp_path / name)
    BertCrfForTokenClassification.from_pretrained(tmp_path / "ner").save_pretrained(tmp_path / "crf")
    tok.save_pretrained(tmp_path / "crf")
    for call in (
        NerTagger(tmp_path / "ner"),
        NerTagger(tmp_path / "crf"),
        CitationClassifier(tmp_path / "cite"),
        Index(index_dir).search,
    ):
        assert call([]) == [] and call(()) == []


def test_api_and_cli_give_the_same_reason_for_a_bad_k(index_dir, loaded, capsys):
    with pytest.raises(MinisciError) as api_error:
        loaded["index"].search("aspirin", k=-3)
    with pytest.raises(SystemExit):
        cli.main(["search", "--index", str(index_dir), "-k", "-3", "aspirin"])
    reason = str(api_error.value).removeprefix("k: ")
    assert capsys.readouterr().err.startswith(f"error: minisci search: argument -k: {reason} ")


def test_index_build_refuses_a_folder_that_merely_holds_an_index_json(tiny_model_dir, index_dir, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    for name in ("index.json", "index.html", "app.js"):
        (site / name).write_text("mine")
    with pytest.raises(MinisciError, match=r"site: not an earlier index .*delete app.js, index.html, index.json"):
        Index.build(tiny_model_dir, [{"id": "a", "title": "t", "authors": [], "_text": "t"}], site)
    assert sorted(p.name for p in site.iterdir()) == ["app.js", "index.html", "index.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]


def test_index_build_refuses_another_minisci_output_such_as_its_own_encoder(tiny_model_dir, index_dir, tmp_path):
    """A model or a prepared dataset carries the marker too: only an index is replaced by an index."""
    model = shutil.copytree(tiny_model_dir, tmp_path / "model")
    (model / OUTPUT_MARKER).write_text("minisci")
    before = sorted(p.name for p in model.iterdir())
    docs = [{"id": "a", "title": "t", "authors": [], "_text": "t"}]
    with pytest.raises(MinisciError, match=r"model: not an earlier index but another output \(.*config.json"):
        Index.build(model, docs, model)
    assert sorted(p.name for p in model.iterdir()) == before
    assert (
        cli.main(
            [
                "index",
                "--model",
                str(tiny_model_dir),
                "--docs",
                str(REPO / "tests/fixtures/papers.jsonl"),
                "--out",
                str(model),
            ]
        )
        == 1
    )
    assert sorted(p.name for p in model.iterdir()) == before


def test_an_index_is_replaced_with_or_without_its_marker(tiny_model_dir, index_dir, tmp_path):
    docs = [{"id": "a", "title": "t", "authors": [], "_text": "t"}]
    marked = shutil.copytree(index_dir, tmp_path / "marked")
    assert len(Index.build(tiny_model_dir, docs, marked)) == 1
    legacy = shutil.copytree(index_dir, tmp_path / "legacy")  # written before output markers: only index files
    (legacy / OUTPUT_MARKER).unlink()
    assert len(Index.build(tiny_model_dir, docs, legacy)) == 1
    (legacy / OUTPUT_MARKER).unlink()
    (legacy / "notes.txt").write_text("mine")
    with pytest.raises(MinisciError, match=r"legacy: not an earlier index .*delete .*notes.txt"):
        Index.build(tiny_model_dir, docs, legacy)


def test_duplicate_ids_warn(tiny_model_dir, tmp_path, capsys):
    docs = tmp_path / "d.jsonl"
    docs.write_text("".join(json.dumps({**d, "id": "same"}) + "\n" for d in DOCS[:2]) + json.dumps(DOCS[2]) + "\n")
    with pytest.warns(UserWarning, match=r"1 document id used more than once \(same\)"):
        Index.build(tiny_model_dir, docs, tmp_path / "i1")
    assert cli.main(["index", "--model", str(tiny_model_dir), "--docs", str(docs), "--out", str(tmp_path / "i2")]) == 0
    assert f"warning: {docs}: 1 document id used more than once (same); results cannot" in capsys.readouterr().err


def run_cli(argv: list[str], cwd: Path, monkeypatch, capsys) -> tuple[int, str, str]:
    monkeypatch.chdir(cwd)
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_an_index_works_from_another_directory_and_after_its_folder_moves(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    """Built with relative paths in one folder; searched from another working directory, then after
    the folder (index and encoder together) moved, then with --model for an index moved alone."""
    project = tmp_path / "project"
    shutil.copytree(tiny_model_dir, project / "models" / "embeddings")
    (project / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    build = ["index", "--model", "models/embeddings", "--docs", "docs.jsonl", "--out", "papers-index"]
    assert run_cli(build, project, monkeypatch, capsys)[0] == 0
    query = ["--jsonl", "aspirin"]
    expected = run_cli(["search", "--index", "papers-index", *query], project, monkeypatch, capsys)
    assert expected[0] == 0 and expected[1], expected
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    got = run_cli(["search", "--index", str(project / "papers-index"), *query], elsewhere, monkeypatch, capsys)
    assert got == expected
    moved = project.rename(tmp_path / "moved")  # the absolute path recorded in the index is gone now
    got = run_cli(["search", "--index", str(moved / "papers-index"), *query], elsewhere, monkeypatch, capsys)
    assert got == expected
    alone = (moved / "papers-index").rename(tmp_path / "alone")  # the index without its encoder
    code, _, err = run_cli(["search", "--index", str(alone), "aspirin"], elsewhere, monkeypatch, capsys)
    assert code == 1 and "alone: the encoder it was built with is not found" in err and "--model" in err
    encoder = str(moved / "models" / "embeddings")
    got = run_cli(["search", "--index", str(alone), "--model", encoder, *query], elsewhere, monkeypatch, capsys)
    assert got == expected
    assert Index(alone, encoder_dir=encoder).search("aspirin") == [json.loads(x) for x in expected[1].splitlines()]


def profiles(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run(
        [sys.executable, "-m", "minisci.profiles", *args], cwd=cwd, env=env, capture_output=True, text=True
    )


PROFILE_CASES = [
    ("unknown name", ["nosuch"], True, r"^error: unknown profile 'nosuch'; known: quick, paper$"),
    ("unknown name with --run", ["nosuch", "--run"], True, r"^error: unknown profile 'nosuch'"),
    ("no params.yaml", ["quick", "--run"], False, r"^error: params.yaml: not found in .*; run from the project root"),
    ("no name", [], True, r"^error: usage: python -m minisci.profiles \{quick\|paper\} \[--run"),
    ("an option for a name", ["--quick"], True, r"^error: usage: "),
    ("a second word that is not --run", ["quick", "extra"], True, r"^error: usage: "),
]


@pytest.mark.parametrize("args, in_project, message", [c[1:] for c in PROFILE_CASES], ids=[c[0] for c in PROFILE_CASES])
def test_profile_errors_are_one_line_exit_2(args, in_project, message, tmp_path):
    if in_project:
        shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    proc = profiles(args, tmp_path)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert __import__("re").search(message, proc.stderr.strip()), proc.stderr


def test_profile_help_and_print_mode(tmp_path):
    proc = profiles(["--help"], tmp_path)
    assert proc.returncode == 0 and "--run" in proc.stdout and "Traceback" not in proc.stderr
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    proc = profiles(["quick"], tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("-S ")


def test_profile_run_calls_dvc_exp_run_with_the_extra_args(tmp_path, monkeypatch):
    from minisci import profiles as prof

    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    monkeypatch.chdir(tmp_path)
    calls = []
    monkeypatch.setattr(prof.subprocess, "call", lambda cmd: calls.append(cmd) or 7)
    assert prof.main(["quick", "--run", "--temp", "-n", "first-look"]) == 7
    (cmd,) = calls
    assert cmd[1:5] == ["-m", "dvc", "exp", "run"] and cmd[-3:] == ["--temp", "-n", "first-look"]
    assert cmd[5:-3] == prof.set_param_args("quick")


@pytest.mark.parametrize("cuda", [False, True])
def test_the_paper_profile_without_a_gpu_warns_before_it_runs(tmp_path, monkeypatch, capsys, cuda):
    import torch

    from minisci import profiles as prof

    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(prof.subprocess, "call", lambda cmd: 0)
    assert prof.main(["paper", "--run", "--temp"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: ")]
    assert warnings == ([] if cuda else [warnings[0]])
    assert cuda or "no CUDA GPU is visible, and the paper profile is sized for one" in warnings[0]
    assert prof.main(["quick", "--run"]) == 0
    assert "warning" not in capsys.readouterr().err
