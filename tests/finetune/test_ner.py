import json
from types import SimpleNamespace

import pytest
import torch
from conftest import learnable_ner_files, prepare
from helpers import ner_cfg

from minisci.data.readers import NerSentence, load_prepared, read_conll, to_iob2
from minisci.finetune.common import frequency_weights, welt_weights
from minisci.finetune.ner import run_finetune_ner
from minisci.tasks.ner import encode_sentences, label_list, merge_predictions, ner_metrics, windows


def test_windows_split_at_word_boundaries_and_cover_every_word():
    pieces = [[1] * k for k in (3, 4, 2, 5, 1, 1, 9, 2)]
    w = windows(pieces, max_length=10)  # budget 8 pieces
    assert w == [(0, 2), (2, 5), (5, 6), (6, 7), (7, 8)]  # 7 | 8 | 1 (+9 > 8) | 9 capped at 8 | 2
    assert [i for a, b in w for i in range(a, b)] == list(range(len(pieces)))


def test_long_sentence_round_trip_every_word_one_prediction(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    words = ("hepatocellular carcinoma after thrombocytopenia " * 30).split()  # ~240 words, > 600 pieces
    tags = tuple(("B-Entity" if i % 4 == 0 else "I-Entity" if i % 4 == 1 else "O") for i in range(len(words)))
    sents = [NerSentence(tuple(words), tags, "d", 1), NerSentence(("short", "one"), ("O", "B-Entity"), "d", 2)]
    labels = ["O", "B-Entity", "I-Entity"]
    feats = encode_sentences(sents, tok, {l: i for i, l in enumerate(labels)}, max_length=32)
    assert len(feats) > 10 and all(len(f["input_ids"]) <= 32 for f in feats)
    # Labels on first pieces only; "perfect" logits from the gold labels must give back the gold tags.
    logits = []
    for f in feats:
        lg = torch.zeros(len(f["input_ids"]), 3)
        for pos in f["first_positions"]:
            lg[pos, f["labels"][pos]] = 1.0
        assert sum(lab != -100 for lab in f["labels"]) == len(f["first_positions"])
        logits.append(lg)
    merged = merge_predictions(feats, logits, [len(s.tokens) for s in sents], dict(enumerate(labels)))
    assert merged == [list(s.tags) for s in sents]


def test_merge_rejects_missing_words():
    feats = [{"sentence": 0, "word_start": 0, "first_positions": [1]}]
    with pytest.raises(AssertionError, match="1 words without a prediction"):
        merge_predictions(feats, [torch.zeros(3, 3)], [2], {0: "O", 1: "B-X", 2: "I-X"})


@pytest.mark.parametrize(
    "starts, n_words, message",
    [
        ((0, 1), 3, "word 1 predicted twice"),  # windows of two words each, the second starting at word 1
        ((0, 3), 5, "word 2 predicted never"),
        ((0, 2), 3, "4 predictions for 3 words"),
    ],
)
def test_merge_rejects_windows_that_do_not_tile_the_sentence(starts, n_words, message):
    feats = [{"sentence": 0, "word_start": w, "first_positions": [1, 2]} for w in starts]
    with pytest.raises(AssertionError, match=message):
        merge_predictions(feats, [torch.zeros(4, 3)] * 2, [n_words], {0: "O", 1: "B-X", 2: "I-X"})


def test_iob1_single_token_entity_is_scored_as_an_entity(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text(
        "-DOCSTART- (1)\n\nNaloxone\tX\tO\tI-Entity\nreverses\tX\tO\tO\nclonidine\tX\tO\tI-Entity\n"
        "lung\tX\tO\tB-Entity\ncancer\tX\tO\tI-Entity\n"
    )
    gold = [list(to_iob2(s.tags)) for s in read_conll(p)]
    assert gold == [["B-Entity", "O", "B-Entity", "B-Entity", "I-Entity"]]
    perfect = ner_metrics(gold, gold)
    assert perfect["entities_gold"] == 3 and perfect["f1"] == 1.0
    # A prediction that misses the single-token mention loses exactly one entity.
    m = ner_metrics(gold, [["O", "O", "B-Entity", "B-Entity", "I-Entity"]])
    assert (m["precision"], m["recall"]) == (1.0, pytest.approx(2 / 3, abs=1e-4))


def test_per_type_and_macro_metrics():
    gold = [["B-Chemical", "O", "B-Disease", "I-Disease"]]
    pred = [["B-Chemical", "O", "B-Disease", "O"]]
    m = ner_metrics(gold, pred)
    assert m["per_type"]["Chemical"]["f1"] == 1.0 and m["per_type"]["Disease"]["f1"] == 0.0
    assert m["f1"] == 0.5 and m["macro_f1"] == 0.5 and m["token_accuracy"] == 0.75


def test_welt_weights_hand_computed():
    tags = ["O"] * 6 + ["B-A", "I-A", "B-B", "I-B"]  # O 6/10, B 2/10, I 2/10
    # w = 1 - n/N = (0.4, 0.8, 0.8); softmax: e^0.4 / (e^0.4 + 2 e^0.8) = 1.49182 / 5.94290 = 0.25103,
    # e^0.8 / 5.94290 = 0.37449
    w = welt_weights(tags, ["O", "B-A", "I-A", "B-B", "I-B"])
    assert w[0] == pytest.approx(0.25103, abs=1e-4)
    assert w[1:] == pytest.approx([0.37449] * 4, abs=1e-4)
    assert w[0] + w[1] + w[2] == pytest.approx(1.0)  # the softmax over (O, B, I)


def test_frequency_weights_hand_computed():
    values = ["a"] * 8 + ["b"] * 2
    inv = frequency_weights(values, ["a", "b"], "inverse_frequency", 0.0)
    # N / (K n): a = 10/16 = 0.625, b = 10/4 = 2.5; normalised to mean 1: 0.4, 1.6
    assert inv == pytest.approx([0.4, 1.6])
    eff = frequency_weights(values, ["a", "b"], "effective_number", 0.9)
    raw = [(1 - 0.9) / (1 - 0.9**8), (1 - 0.9) / (1 - 0.9**2)]
    assert eff == pytest.approx([r / (sum(raw) / 2) for r in raw])


# the weighted loss trains the same way: its run is slow-only (its weights are tested above). The
# cross-entropy run is the session's tiny_finetuned NER model: this very configuration (helpers.ner_cfg's
# settings, the same learnable files and tiny BERT), trained once for every test that needs it.
@pytest.mark.parametrize("loss", ["ce", pytest.param("welt", marks=pytest.mark.slow)])
def test_tiny_model_learns_a_trivial_ner_set(tmp_path, tiny_model_dir, tiny_finetuned, loss):
    from transformers import pipeline

    if loss == "ce":
        data, model_dir = tiny_finetuned["ner_data"], tiny_finetuned["ner"]
        r = SimpleNamespace(
            **{
                k: json.loads((tiny_finetuned["ner_run"] / f"{k}.json").read_text())
                for k in ("metrics", "test_predictions")
            }
        )
    else:
        data = prepare(learnable_ner_files(tmp_path / "raw"), "bc5cdr", tmp_path / "prepared")
        r = run_finetune_ner(data, tiny_model_dir, ner_cfg(loss=loss), tmp_path / "work")
    assert r.metrics["test"]["f1"] > 0.9, r.metrics["dev_per_epoch"]
    assert r.metrics["test"]["entities_gold"] == r.metrics["test_entities_reader"]
    best = max(r.metrics["dev_per_epoch"], key=lambda e: e["f1"])
    assert r.metrics["best_epoch"] == best["epoch"] and r.metrics["dev"]["f1"] == best["f1"]
    gold = load_prepared(data).splits["test"]
    assert [row["gold"] for row in r.test_predictions] == [list(s.tags) for s in gold]
    if loss == "ce":  # the saved model directory works with transformers.pipeline
        tagger = pipeline("token-classification", model=str(model_dir), aggregation_strategy="first", device="cpu")
        ents = tagger("patients received aspirin after treatment")
        assert [(e["entity_group"], e["word"]) for e in ents] == [("Entity", "aspirin")]


def test_label_list_follows_the_dataset_label_order():
    assert label_list(["X", "Y"]) == ["O", "B-X", "I-X", "B-Y", "I-Y"]
