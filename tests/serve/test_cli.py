import json
import logging
import re

import numpy as np
import pytest
from helpers import ner_texts, strip

from minisci.data.readers import load_prepared
from minisci.encoding import embed
from minisci.errors import DataFormatError, MinisciError
from minisci.serve import cli
from minisci.serve.inference import classify, tag, text_classifier, token_classifier
from minisci.serve.search import load_encoder, read_collection, recommend_reviewers, search


def test_ner_batched_equals_pipeline(tiny_finetuned):
    pipe = token_classifier(tiny_finetuned["ner"])
    texts = ner_texts(tiny_finetuned["ner_data"])
    ours = tag(pipe, texts, batch_size=7)
    ref = [pipe(t) for t in texts]
    assert [strip(e) for e in ours] == [strip(e) for e in ref]
    assert sum(map(len, ours)) > 0
    for a, b in zip(ours, ref):
        assert [e["score"] for e in a] == pytest.approx([float(e["score"]) for e in b], abs=1e-4)


def test_fast_postprocess_is_the_pipelines_exactly(tiny_finetuned):
    """Same logits in, the same entities out: labels, spans, words and float32 scores, bit for bit,
    including [UNK] pieces and a text split into overlapping windows."""
    from minisci.serve import pipeline_compat as compat
    from minisci.serve.inference import _sorted_forward

    pipe = token_classifier(tiny_finetuned["ner"], stride=16)
    pipe.tokenizer.model_max_length = 64
    texts = ner_texts(tiny_finetuned["ner_data"]) + [
        "Aspirin ☃ and 🙂 naloxone ⁂ treatment ✓ patients .",
        " ".join(["patients received aspirin after treatment ."] * 40),
    ]
    per_text = []
    for text in texts:
        chunks = list(compat.preprocess(pipe, text))
        per_text.append([{**c, "logits": lg} for c, lg in zip(chunks, _sorted_forward(pipe, chunks, 8, None))])
    assert compat.first_applies(pipe) and len(per_text[-1]) > 1
    assert any(pipe.tokenizer.unk_token_id in out["input_ids"][0].tolist() for out in per_text[-2])
    ours = [compat.first_postprocess(pipe, outs) for outs in per_text]
    assert ours == [pipe.postprocess(outs, **pipe._postprocess_params) for outs in per_text]
    assert sum(map(len, ours)) > 0


def test_long_text_is_windowed_not_cut(tiny_finetuned):
    pipe = token_classifier(tiny_finetuned["ner"], stride=16)
    text = " ".join(["patients received aspirin after treatment ."] * 120)  # ~720 word pieces > 64 max
    pipe.tokenizer.model_max_length = 64  # the tiny model's position limit
    ours = tag(pipe, [text])[0]
    assert strip(ours) == strip(pipe(text))
    assert max(e["end"] for e in ours) > len(text) * 0.9  # entities found at the very end of the text


def test_cite_batched_equals_pipeline(tiny_finetuned):
    pipe = text_classifier(tiny_finetuned["cite"])
    texts = [e.text for e in load_prepared(tiny_finetuned["cite_data"]).splits["test"]]
    ours = classify(pipe, texts, batch_size=8)
    ref = pipe(texts)
    assert [o["label"] for o in ours] == [r[0]["label"] for r in ref]
    assert set(ours[0]["scores"]) == {"background", "method", "result"}


def test_cli_cite_says_which_texts_it_cut(tiny_finetuned, capsys, tmp_path):
    f = tmp_path / "in.txt"
    f.write_text("we used the method of smith\n" + "patients received aspirin after treatment . " * 60 + "\n")
    assert cli.main(["cite", "--model", str(tiny_finetuned["cite"]), "--file", str(f)]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 2
    assert re.fullmatch(
        r"warning: 1 text \(2\) longer than the model takes: classified on its first \d+ word pieces only .*\n", err
    ), err
    f.write_text("we used the method of smith\n")
    assert cli.main(["cite", "--model", str(tiny_finetuned["cite"]), "--file", str(f)]) == 0
    assert capsys.readouterr().err == ""


def test_cli_ner_argument_stdin_and_jsonl(tiny_finetuned, capsys, monkeypatch, tmp_path):
    model = str(tiny_finetuned["ner"])
    assert cli.main(["ner", "--model", model, "--jsonl", "patients received aspirin after treatment"]) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    assert row["entities"][0]["entity_group"] == "Entity" and row["entities"][0]["word"] == "aspirin"
    f = tmp_path / "in.txt"
    f.write_text("the study showed heparin\n\nlung cancer after insulin\n")
    assert cli.main(["ner", "--model", model, "--file", str(f), "--jsonl"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("patients received morphine\n"))
    assert cli.main(["cite", "--model", str(tiny_finetuned["cite"])]) == 0
    assert capsys.readouterr().out.split("\t")[0] in {"background", "method", "result"}


def test_cli_errors(tmp_path, capsys, tiny_finetuned):
    assert cli.main(["ner", "--model", str(tmp_path / "nope"), "x"]) == 1
    assert "not a model directory" in capsys.readouterr().err
    assert cli.main(["cite", "--model", str(tiny_finetuned["cite"]), "  "]) == 1
    assert "input 1: empty text" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["ner", "--help"])
    assert "--jsonl" in capsys.readouterr().out


COLLECTION = [
    {
        "id": "p1",
        "title": "Aspirin and heparin",
        "text": "patients received aspirin and heparin after surgery",
        "authors": ["Ada", "Bob"],
    },
    {"id": "p2", "title": "Lung cancer", "text": "lung cancer treatment with cisplatin in patients", "authors": ["Cy"]},
    {
        "id": "p3",
        "title": "Graph algorithms",
        "text": "shortest paths in sparse graphs and trees",
        "authors": ["Dee", "Bob"],
    },
]


def test_index_search_and_reviewers(tiny_model_dir, tmp_path, capsys):
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps(d) + "\n" for d in COLLECTION))
    assert cli.main(["index", "--model", str(tiny_model_dir), "--docs", str(docs), "--out", str(tmp_path / "idx")]) == 0
    assert "indexed 3 documents" in capsys.readouterr().out
    vecs = np.load(tmp_path / "idx/embeddings.npy", allow_pickle=False)
    assert vecs.shape[0] == 3 and np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    hits = search(tmp_path / "idx", "Lung cancer lung cancer treatment with cisplatin in patients", k=2)
    assert hits[0]["id"] == "p2" and hits[0]["score"] == pytest.approx(1.0, abs=1e-4)
    abstract = tmp_path / "abstract.txt"
    abstract.write_text("Graph algorithms shortest paths in sparse graphs and trees")
    assert cli.main(["reviewers", "--index", str(tmp_path / "idx"), str(abstract), "--jsonl"]) == 0
    ranked = [json.loads(l) for l in capsys.readouterr().out.splitlines()]
    assert ranked[0]["author"] in {"Dee", "Bob"} and ranked[0]["papers"][0] == "p3"
    no_dee = recommend_reviewers(tmp_path / "idx", abstract.read_text(), exclude=("dee", "BOB"))
    assert {r["author"] for r in no_dee} == {"Ada", "Cy"}
    mean3 = recommend_reviewers(tmp_path / "idx", abstract.read_text(), aggregation="mean_top3")
    bob = next(r for r in mean3 if r["author"] == "Bob")
    assert set(bob["papers"]) == {"p1", "p3"}
    with pytest.raises(MinisciError, match="unknown aggregation"):
        recommend_reviewers(tmp_path / "idx", "x", aggregation="median")


def test_long_documents_are_windowed(tiny_model_dir):
    model, tok = load_encoder(tiny_model_dir)
    long_text = "kinase " * 300  # 300 pieces > 60 per window
    one = embed(model, tok, ["kinase " * 50], max_length=64)
    many = embed(model, tok, [long_text], max_length=64)
    assert np.linalg.norm(many) == pytest.approx(1.0, abs=1e-5)
    assert float(one[0] @ many[0]) > 0.95  # the same content, windowed, points the same way


def test_length_batches_cap_items_and_padded_pieces():
    from minisci.batching import length_batches

    lengths = [300, 20, 30, 290, 25, 600, 10, 280]
    batches = length_batches(lengths, batch_size=3, max_tokens=600)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(lengths)  # length-sorted
    assert all(len(b) <= 3 and len(b) * max(lengths[i] for i in b) <= 600 for b in batches)
    assert [lengths[i] for i in batches[-1]] == [600]  # as long as the budget: alone
    assert [[lengths[i] for i in b] for b in batches] == [[10, 20, 25], [30, 280], [290, 300], [600]]


def test_embeddings_do_not_depend_on_batching(tiny_model_dir):
    model, tok = load_encoder(tiny_model_dir)
    texts = ["kinase " * n for n in (3, 40, 7, 25, 60, 1)]
    one_by_one = embed(model, tok, texts, batch_size=1, max_length=64)
    assert np.allclose(embed(model, tok, texts, batch_size=4, max_length=64, max_tokens=100), one_by_one, atol=1e-5)


def test_malformed_collection(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text('{"id": "a", "title": "t"}\n{"title": ""}\n')
    with pytest.raises(DataFormatError, match=r"d.jsonl:2: expected an 'id' and a non-empty 'title' or 'text'"):
        read_collection(p)
    p.write_text('{"id": "a", "title": "t", "authors": "Ada"}\n')
    with pytest.raises(DataFormatError, match="'authors' must be a list"):
        read_collection(p)


def test_missing_index(tmp_path):
    with pytest.raises(MinisciError, match="not an index"):
        search(tmp_path, "q")


class Recorder(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_cli_decodes_crf_models_with_the_evaluations_viterbi(tiny_finetuned, tmp_path, capsys):
    """On a CRF model, `minisci ner` gives exactly the entities of the evaluation's constrained Viterbi
    (`finetune.ner.predict`), which here differ from each word's best emission."""
    import torch
    from transformers import AutoTokenizer

    from minisci.data.readers import spans
    from minisci.finetune.crf import BertCrfForTokenClassification
    from minisci.tasks.ner import predict

    model = BertCrfForTokenClassification.from_pretrained(tiny_finetuned["ner"]).eval()
    tok = AutoTokenizer.from_pretrained(tiny_finetuned["ner"])
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.crf.parameters():
            p.copy_(3 * torch.randn(p.shape, generator=g))  # transitions strong enough to overrule emissions
    model.save_pretrained(tmp_path / "crf")
    tok.save_pretrained(tmp_path / "crf")
    sentences = load_prepared(tiny_finetuned["ner_data"]).splits["test"][:30]
    texts = [" ".join(s.tokens) for s in sentences]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n")
    seen = Recorder()  # the pipeline's "model ... is not supported" error line is not shown for ours
    logging.getLogger("transformers.pipelines.base").addHandler(seen)
    try:
        assert cli.main(["ner", "--model", str(tmp_path / "crf"), "--file", str(tmp_path / "in.txt"), "--jsonl"]) == 0
    finally:
        logging.getLogger("transformers.pipelines.base").removeHandler(seen)
    assert not [m for m in seen.messages if "is not supported" in m]
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    viterbi = predict(model, tok, sentences, model.config.id2label, max_length=64, batch_size=16)
    crf, model.crf = model.crf, None
    argmax = predict(model, tok, sentences, model.config.id2label, max_length=64, batch_size=16)
    model.crf = crf

    def char_spans(sentence, tags):
        starts = [sum(len(w) + 1 for w in sentence.tokens[:i]) for i in range(len(sentence.tokens))]
        return [(t, starts[a], starts[b - 1] + len(sentence.tokens[b - 1])) for t, a, b in spans(tags)]

    expected = [char_spans(s, tags) for s, tags in zip(sentences, viterbi)]
    assert [[(e["entity_group"], e["start"], e["end"]) for e in r["entities"]] for r in rows] == expected
    assert sum(map(len, expected)) > 0 and viterbi != argmax
    assert all(0 < e["score"] <= 1 for r in rows for e in r["entities"])


def test_overlapping_windows_cover_every_word_fit_the_budget_and_overlap_by_the_stride():
    from minisci.serve.inference import overlapping_windows
    from minisci.tasks.ner import windows

    pieces = [[1] * n for n in [1, 3, 2, 1, 1, 4, 2, 1, 1, 1, 9, 2, 1, 3, 1, 1, 2]]
    for max_length in (6, 10, 16):
        budget = max_length - 2
        assert overlapping_windows(pieces, max_length, 0) == windows(pieces, max_length)  # the evaluation's
        for stride in (1, 2, 3, budget - 1):
            ws = overlapping_windows(pieces, max_length, stride)
            assert ws[0][0] == 0 and ws[-1][1] == len(pieces) and all(a < b for a, b in ws)
            for (a, b), (c, d) in zip(ws, ws[1:]):
                overlap = sum(min(len(p), budget) for p in pieces[c:b])
                assert a < c <= b < d and overlap <= stride  # progress, no gap, the overlap within the stride
            for a, b in ws:
                assert b - a == 1 or sum(len(p) for p in pieces[a:b]) <= budget


def test_a_long_text_on_a_crf_model_is_decoded_whole_over_overlapping_windows(tiny_finetuned, tmp_path):
    """--stride reaches the CRF path: overlapping windows, one Viterbi over the text; stride 0 gives the
    evaluation's windows, each decoded alone, so the two can differ, and a short text is the same."""
    from minisci.serve.inference import tag, token_classifier

    sentences = load_prepared(tiny_finetuned["ner_data"]).splits["test"]
    long_text = " ".join(" ".join(s.tokens) for s in sentences[:40])
    short = " ".join(sentences[0].tokens)
    runs = {
        stride: tag(token_classifier(tiny_finetuned["ner"], stride=stride), [long_text, short]) for stride in (0, 20)
    }
    for entities in runs.values():
        assert all(long_text[e["start"] : e["end"]].strip() for e in entities[0])
    assert runs[0][1] == runs[20][1]


@pytest.mark.parametrize("arch", ["roberta", "modernbert", "deberta-v2"])
def test_a_ner_model_without_subword_marks_tags_words_not_words_with_their_punctuation(tmp_path, recwarn, arch):
    """A RoBERTa or ModernBERT (byte-level BPE) or a DeBERTa-v2 (SentencePiece), tokenizers without a
    continuing-subword prefix, tags words as the NER datasets split them: "effect," is the entity
    "effect" (the pipeline's heuristic gave "effect," and warned "Tokenizer does not support real
    words"; SentencePiece's pre-tokeniser splits only at spaces), a run of punctuation is one word per
    character (byte-level BPE keeps ")." together), and a lone space piece (Ġ, ▁) is the first piece of
    the word after it, not an empty entity."""
    import torch
    from encoders_tiny import build_encoder
    from transformers import AutoModelForTokenClassification

    from minisci.serve import pipeline_compat as compat
    from minisci.serve.inference import _sorted_forward

    folder = build_encoder(arch, tmp_path / arch)
    labels = {0: "O", 1: "B-Chemical", 2: "I-Chemical"}
    model = AutoModelForTokenClassification.from_pretrained(
        folder, id2label=labels, label2id={v: k for k, v in labels.items()}
    )
    model.save_pretrained(folder)
    pipe = token_classifier(folder)
    text = "the effect, of (aspirin)."
    chunks = list(compat.preprocess(pipe, text))
    outs = [{**c, "logits": lg} for c, lg in zip(chunks, _sorted_forward(pipe, chunks, 8, None))]
    ids = outs[0]["input_ids"][0].tolist()
    logits = torch.full((1, len(ids), 3), -5.0)
    logits[0, :, 1] = 5.0  # every piece B-Chemical: each word is an entity of its own
    outs[0]["logits"] = logits
    postprocess = compat.first_postprocess if compat.first_applies(pipe) else compat.postprocess  # as tag() picks
    found = [(e["word"].strip(), e["start"], e["end"]) for e in postprocess(pipe, outs)]
    words = [("the", 0, 3), ("effect", 4, 10), (",", 10, 11), ("of", 12, 14), ("(", 15, 16)]
    words += [("aspirin", 16, 23), (")", 23, 24), (".", 24, 25)]
    assert found == words
    assert not [w for w in recwarn if "real words" in str(w.message)]
