"""`--backend onnx`: ONNX Runtime runs the forward, everything else stays minisci's; the output equals
the PyTorch backend's, the export is cached by the model's files, and bad combinations are one line."""

import json

import pytest

pytest.importorskip("onnxruntime")

from helpers import ner_texts, strip  # noqa: E402

from minisci.data.readers import load_prepared  # noqa: E402
from minisci.errors import MinisciError  # noqa: E402
from minisci.serve import cli, onnx_backend  # noqa: E402
from minisci.serve.inference import classify, tag, text_classifier, token_classifier  # noqa: E402


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MINISCI_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "onnx"


def test_ner_onnx_equals_torch_and_the_export_is_reused(tiny_finetuned, cache, monkeypatch):
    texts = ner_texts(tiny_finetuned["ner_data"])
    ref = tag(token_classifier(tiny_finetuned["ner"]), texts, batch_size=7)
    ours = tag(token_classifier(tiny_finetuned["ner"], backend="onnx"), texts, batch_size=7)
    assert [strip(e) for e in ours] == [strip(e) for e in ref] and sum(map(len, ref)) > 0
    for a, b in zip(ours, ref):
        assert [e["score"] for e in a] == pytest.approx([e["score"] for e in b], abs=1e-4)
    assert len(list(cache.glob("*.onnx"))) == 1 and not list(cache.glob(".export-*"))
    # a second load reads the cached file; exporting again would fail here
    monkeypatch.setattr(onnx_backend, "export", lambda *a: pytest.fail("exported twice"))
    token_classifier(tiny_finetuned["ner"], backend="onnx")


def test_cite_onnx_fp32_and_int8(tiny_finetuned, cache):
    texts = [e.text for e in load_prepared(tiny_finetuned["cite_data"]).splits["test"]]
    ref = classify(text_classifier(tiny_finetuned["cite"]), texts)
    ours = classify(text_classifier(tiny_finetuned["cite"], backend="onnx"), texts)
    assert [r["label"] for r in ours] == [r["label"] for r in ref]
    assert [r["score"] for r in ours] == pytest.approx([r["score"] for r in ref], abs=1e-4)
    int8 = classify(text_classifier(tiny_finetuned["cite"], backend="onnx", precision="int8"), texts)
    assert len(int8) == len(texts) and all(0 < r["score"] <= 1 for r in int8)
    assert len(list(cache.glob("*.onnx"))) == 2  # one file per precision


def test_a_changed_model_is_exported_anew(tiny_finetuned, cache, tmp_path):
    import shutil

    copy = tmp_path / "model"
    shutil.copytree(tiny_finetuned["cite"], copy)
    text_classifier(copy, backend="onnx")
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "minisci_note": "edited"}))
    text_classifier(copy, backend="onnx")
    assert len(list(cache.glob("*.onnx"))) == 2


def test_a_damaged_cached_export_is_exported_again(tiny_finetuned, cache):
    texts = [e.text for e in load_prepared(tiny_finetuned["cite_data"]).splits["test"]][:3]
    ref = classify(text_classifier(tiny_finetuned["cite"], backend="onnx"), texts)
    (cached,) = cache.glob("*.onnx")
    cached.write_bytes(cached.read_bytes()[:1000])  # a copy cut short
    assert classify(text_classifier(tiny_finetuned["cite"], backend="onnx"), texts) == ref
    assert [p.name for p in cache.glob("*.onnx")] == [cached.name] and cached.stat().st_size > 1000


def test_crf_model_on_onnx_decodes_with_viterbi_like_torch(tiny_finetuned, cache, tmp_path):
    import torch
    from transformers import AutoTokenizer

    from minisci.finetune.crf import BertCrfForTokenClassification

    model = BertCrfForTokenClassification.from_pretrained(tiny_finetuned["ner"]).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.crf.parameters():
            p.copy_(3 * torch.randn(p.shape, generator=g))
    model.save_pretrained(tmp_path / "crf")
    AutoTokenizer.from_pretrained(tiny_finetuned["ner"]).save_pretrained(tmp_path / "crf")
    texts = ner_texts(tiny_finetuned["ner_data"], n=20)
    ref = tag(token_classifier(tmp_path / "crf"), texts)
    ours = tag(token_classifier(tmp_path / "crf", backend="onnx"), texts)
    assert [strip(e) for e in ours] == [strip(e) for e in ref] and sum(map(len, ref)) > 0


def test_onnx_refuses_bf16_and_unknown_backends(tiny_finetuned, cache):
    with pytest.raises(MinisciError, match="--backend onnx runs --precision fp32 or int8, not bf16"):
        token_classifier(tiny_finetuned["ner"], backend="onnx", precision="bf16")
    with pytest.raises(MinisciError, match="unknown backend 'tf'"):
        text_classifier(tiny_finetuned["cite"], backend="tf")
    assert not cache.exists() or not list(cache.iterdir())


def test_onnx_precision_is_refused_before_the_model_is_loaded(tmp_path, cache):
    with pytest.raises(MinisciError, match="--backend onnx runs --precision fp32 or int8, not bf16"):
        token_classifier(tmp_path / "no-such-model", backend="onnx", precision="bf16")


def test_cli_backend_onnx(tiny_finetuned, cache, capsys):
    texts = ner_texts(tiny_finetuned["ner_data"], n=5)
    assert cli.main(["ner", "--model", str(tiny_finetuned["ner"]), "--backend", "onnx", "--jsonl", *texts]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["text"] for r in rows] == texts
    code = cli.main(["cite", "--model", str(tiny_finetuned["cite"]), "--backend", "onnx", "--precision", "bf16", "x"])
    err = capsys.readouterr().err.strip()
    assert code != 0 and err.count("\n") == 0 and "--backend onnx runs --precision fp32 or int8" in err


def test_export_leaves_the_torch_model_in_eval_mode(tiny_finetuned, tmp_path):
    """torch.onnx.export restores the exported module's training flag afterwards; a train-mode wrapper
    would switch dropout on in the caller's model."""
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(tiny_finetuned["cite"]).eval()
    onnx_backend.export(model, tmp_path / "m.onnx")
    assert not any(m.training for m in model.modules())
