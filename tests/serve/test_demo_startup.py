"""``minisci demo`` checks its models before it starts a server, and its --help shows an example
and the default port. No model is loaded: the checks read config.json and the weights' header only."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import REPO

from minisci.serve import cli, demo


def fake_model(path: Path, arch: str, labels: list[str], head: int | None = None) -> Path:
    """A model directory as far as the start-up check reads it: config.json and a weights file whose
    head has ``head`` outputs (default: one per label)."""
    import numpy as np
    from safetensors.numpy import save_file

    path.mkdir(parents=True)
    config = {"architectures": [arch], "id2label": dict(enumerate(labels)), "model_type": "bert"}
    (path / "config.json").write_text(json.dumps(config))
    n = len(labels) if head is None else head
    save_file(
        {"classifier.bias": np.zeros(n, dtype=np.float32)} if n else {"x": np.zeros(1)}, path / "model.safetensors"
    )
    return path


@pytest.fixture
def models(tmp_path) -> dict:
    ner = fake_model(tmp_path / "ner", "BertForTokenClassification", ["O", "B-Disease", "I-Disease"])
    cite = fake_model(tmp_path / "cite", "BertForSequenceClassification", ["background", "method", "result"])
    enc = fake_model(tmp_path / "enc", "BertModel", [])
    return {"--ner": ner, "--cite": cite, "--embeddings": enc}


def free_port() -> int:
    """A port nothing listens on now: the start-up check refuses a taken one."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def argv(models: dict, **change) -> list[str]:
    paths = {**models, **change}
    return ["demo", "--port", str(free_port())] + [x for k, v in paths.items() for x in (k, str(v))]


@pytest.fixture
def launched(monkeypatch) -> list:
    calls = []
    monkeypatch.setattr(demo, "launch", lambda *a: calls.append(a) or 0)
    return calls


def test_good_models_start_the_server(models, launched):
    assert cli.main(argv(models)) == 0
    assert len(launched) == 1


@pytest.mark.parametrize(
    ("option", "bad", "message"),
    [
        ("--ner", "missing", r"minisci demo --ner: .*missing: not a model directory \(no such directory\)"),
        ("--ner", "cite", r"minisci demo --ner: .*cite: not a token-classification \(NER\) model"),
        ("--cite", "ner", r"minisci demo --cite: .*ner: not a sequence-classification"),
        ("--embeddings", "missing", r"minisci demo --embeddings: .*missing: not a model directory"),
        ("--embeddings", "ner", r"minisci demo --embeddings: .*ner: a fine-tuned NER model \(architecture Bert"),
        ("--index", "enc", r"minisci demo --index: .*enc: a folder, not an index \(no index.json\)"),
        (
            "--ner",
            "relabelled",
            r"minisci demo --ner: .*relabelled: config.json has 5 labels .* but the head in "
            r"model.safetensors has 3 \(classifier.bias: shape \[3\]\)",
        ),
        (
            "--cite",
            "unreadable",
            r"minisci demo --cite: .*unreadable/model.safetensors: not a readable safetensors file",
        ),
    ],
)
def test_a_bad_model_is_one_line_before_the_server_starts(models, launched, tmp_path, capsys, option, bad, message):
    labels = ["O", "B-Chemical", "I-Chemical", "B-Disease", "I-Disease"]
    fake_model(tmp_path / "relabelled", "BertForTokenClassification", labels, head=3)
    fake_model(tmp_path / "unreadable", "BertForSequenceClassification", ["a", "b"])
    (tmp_path / "unreadable/model.safetensors").write_bytes(b"\x00")
    path = {"cite": models["--cite"], "ner": models["--ner"], "enc": models["--embeddings"]}.get(bad, tmp_path / bad)
    assert cli.main(argv(models, **{option: path})) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert re.search(f"^error: {message}", err), err
    assert launched == []


@pytest.mark.parametrize("host", ["999.1.1.1", "192.0.2.1", "no.such.host.invalid"])
def test_a_host_this_machine_cannot_serve_on_is_one_line_before_the_server_starts(models, launched, capsys, host):
    assert cli.main([*argv(models), "--host", host]) == 1
    err = capsys.readouterr().err
    assert re.fullmatch(
        rf"error: minisci demo --host {re.escape(host)}: not an address of this machine \(.+\); .*\n", err
    )
    assert launched == []


def test_a_port_in_use_is_one_line_before_the_server_starts(models, launched, capsys):
    import socket

    with socket.socket() as other:  # another server listening on the port
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        assert cli.main([*argv(models), "--port", str(port)]) == 1
    err = capsys.readouterr().err
    assert re.fullmatch(
        rf"error: minisci demo --port {port}: in use \(.+\) on 127\.0\.0\.1; choose another --port\n", err
    )
    assert launched == []


def test_a_damaged_index_is_one_line_before_the_server_starts(models, launched, tiny_model_dir, tmp_path, capsys):
    from minisci.serve.search import build_index, read_collection

    build_index(tiny_model_dir, read_collection(REPO / "tests/fixtures/papers.jsonl"), tmp_path / "idx")
    vectors = tmp_path / "idx/embeddings.npy"
    vectors.write_bytes(vectors.read_bytes()[:200])  # a copy cut short
    assert cli.main(argv(models, **{"--index": tmp_path / "idx"})) == 1
    err = capsys.readouterr().err
    assert re.search(r"^error: minisci demo --index: .*embeddings.npy: not a readable NumPy array", err), err
    assert err.count("\n") == 1 and launched == []


def test_demo_help_has_an_example_and_the_default_port(capsys):
    with pytest.raises(SystemExit):
        cli.main(["demo", "--help"])
    out = capsys.readouterr().out
    assert "minisci demo --index /tmp/papers-index" in out
    assert "(default: 8501)" in out


def test_a_project_of_one_task_starts_without_the_other_model(models, monkeypatch, tmp_path, capsys):
    (tmp_path / "params.yaml").write_text("finetune_ner:\n  datasets: []\nfinetune_classification:\n  datasets: [x]\n")
    monkeypatch.chdir(tmp_path)
    started = []

    class Server:
        def wait(self) -> int:
            return 0

    monkeypatch.setattr(demo.subprocess, "Popen", lambda cmd, **kw: started.append(cmd) or Server())
    cite, enc = str(models["--cite"]), str(models["--embeddings"])
    assert cli.main(["demo", "--port", str(free_port()), "--cite", cite, "--embeddings", enc]) == 0
    assert started[0][started[0].index("--") + 1 :] == ["--cite", cite, "--embeddings", enc]  # the page's options
    with pytest.raises(SystemExit):
        cli.main(["demo", "--help"])
    assert "NER model directory (default: none: finetune_ner.datasets is empty in params.yaml)" in " ".join(
        capsys.readouterr().out.split()
    )
