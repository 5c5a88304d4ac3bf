import json
import warnings

import numpy as np
import pytest
import torch

from minisci.data.readers import load_prepared
from minisci.errors import MinisciError
from minisci.serve import cli
from minisci.serve import precision as serve_precision
from minisci.serve.inference import classify, tag, text_classifier, token_classifier
from minisci.serve.precision import Bf16Linear, apply_precision
from minisci.serve.search import embed, load_encoder, search


def linears(module):
    return [m for m in module.modules() if isinstance(m, torch.nn.Linear)]


def entity_keys(rows):
    return [[(e["entity_group"], e["start"], e["end"]) for e in r] for r in rows]


def test_unknown_precision(tiny_model_dir):
    model, _ = load_encoder(tiny_model_dir)
    with pytest.raises(MinisciError, match="unknown precision 'fp16'"):
        apply_precision(model, "fp16")


def test_bf16_converts_encoder_only_and_stays_close(tiny_finetuned):
    fp32 = token_classifier(tiny_finetuned["ner"])
    bf16 = token_classifier(tiny_finetuned["ner"], precision="bf16")
    assert linears(bf16.model.base_model) == [] and any(isinstance(m, Bf16Linear) for m in bf16.model.modules())
    assert bf16.model.classifier.weight.dtype == torch.float32  # the task head keeps float32
    enc = fp32.tokenizer(["patients received aspirin after treatment"], return_tensors="pt")
    with torch.inference_mode():
        a, b = fp32.model(**enc).logits, bf16.model(**enc).logits
    assert b.dtype == torch.float32
    assert not torch.equal(a, b)  # really computed differently ...
    assert (a - b).abs().max() < 0.05 * a.abs().max()  # ... and close
    texts = [" ".join(s.tokens) for s in load_prepared(tiny_finetuned["ner_data"]).splits["test"][:40]]
    ref, ours = entity_keys(tag(fp32, texts)), entity_keys(tag(bf16, texts))
    assert sum(x == y for x, y in zip(ref, ours)) >= 0.9 * len(texts)


def test_int8_quantises_encoder_and_agrees(tiny_finetuned):
    fp32 = text_classifier(tiny_finetuned["cite"])
    int8 = text_classifier(tiny_finetuned["cite"], precision="int8")
    assert linears(int8.model.base_model) == []  # every encoder Linear became a quantised one
    assert type(int8.model.classifier) is torch.nn.Linear
    texts = [e.text for e in load_prepared(tiny_finetuned["cite_data"]).splits["test"]]
    ref, ours = classify(fp32, texts), classify(int8, texts)
    assert sum(r["label"] == o["label"] for r, o in zip(ref, ours)) >= 0.9 * len(texts)
    assert max(abs(r["score"] - o["score"]) for r, o in zip(ref, ours)) < 0.1


def test_cli_precision_option(tiny_finetuned, capsys):
    model = str(tiny_finetuned["ner"])
    for precision in ("bf16", "int8"):
        assert (
            cli.main(["ner", "--model", model, "--precision", precision, "--jsonl", "patients received aspirin"]) == 0
        )
        row = json.loads(capsys.readouterr().out)
        assert [e["word"] for e in row["entities"]] == ["aspirin"]
    with pytest.raises(SystemExit):
        cli.main(["cite", "--model", model, "--precision", "fp16", "x"])
    assert "invalid choice: 'fp16'" in capsys.readouterr().err


def test_index_records_precision_and_queries_use_it(tiny_model_dir, tmp_path):
    docs = tmp_path / "docs.jsonl"
    rows = [
        {"id": f"d{i}", "text": t}
        for i, t in enumerate(
            ["aspirin and heparin after surgery", "lung cancer treatment with cisplatin", "shortest paths in graphs"]
        )
    ]
    docs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert (
        cli.main(
            [
                "index",
                "--model",
                str(tiny_model_dir),
                "--docs",
                str(docs),
                "--out",
                str(tmp_path / "idx"),
                "--precision",
                "bf16",
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "idx/index.json").read_text())["precision"] == "bf16"
    hit = search(tmp_path / "idx", "lung cancer treatment with cisplatin", k=1)[0]
    assert hit["id"] == "d1" and hit["score"] == pytest.approx(1.0, abs=1e-5)  # same precision both sides
    model, tok = load_encoder(tiny_model_dir)
    fp32 = embed(model, tok, [r["text"] for r in rows])
    bf16 = np.load(tmp_path / "idx/embeddings.npy")
    assert np.min(np.sum(fp32 * bf16, axis=1)) > 0.99


def test_bf16_probe_times_both_precisions_on_this_cpu():
    ratio = serve_precision.bf16_speed_ratio(64, 128, rows=32, repeats=2)
    assert 0 < ratio < 1e6


@pytest.mark.parametrize("ratio, warns", [(0.53, True), (1.8, False)])
def test_bf16_warns_with_the_measured_ratio_only_where_it_is_slower(tiny_model_dir, monkeypatch, ratio, warns):
    shapes = []
    monkeypatch.setattr(serve_precision, "bf16_speed_ratio", lambda i, o: shapes.append((i, o)) or ratio)
    model, _ = load_encoder(tiny_model_dir)
    widest = max((m for m in linears(model)), key=lambda m: m.in_features * m.out_features)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        apply_precision(model, "bf16")
    assert shapes == [(widest.in_features, widest.out_features)]  # the model's own widest layer is probed
    messages = [str(w.message) for w in seen]
    if warns:
        assert len(messages) == 1 and "ran at 0.53x fp32's speed" in messages[0]
    else:
        assert messages == []
    assert linears(model) == []  # converted either way: the warning informs, it does not refuse


def test_cli_prints_the_bf16_warning_as_one_line(tiny_finetuned, monkeypatch, capsys):
    monkeypatch.setattr(serve_precision, "bf16_speed_ratio", lambda i, o: 0.5)
    model = str(tiny_finetuned["ner"])
    assert cli.main(["ner", "--model", model, "--precision", "bf16", "--jsonl", "patients received aspirin"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: --precision bf16 will be slower than fp32 on this CPU: ")
