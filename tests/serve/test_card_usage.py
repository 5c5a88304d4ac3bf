"""An NER model card's usage gives ``minisci ner``'s entities, for both heads the stage trains: the
softmax head through the transformers pipeline (with the CLI's window overlap), the CRF head through
:class:`minisci.NerTagger`, because a stock pipeline silently drops the CRF's transitions."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import ENTITY_WORDS, OTHER_WORDS

from minisci.cards import ner_usage
from minisci.serve import cli


def softmax_model(tiny_finetuned, out):
    """The tiny tagger, its tokenizer saved with the model's 64 positions as its maximum length (the
    package tokenizer says 512, which only minisci's loader corrects)."""
    from transformers import AutoTokenizer

    shutil.copytree(tiny_finetuned["ner"], out)
    AutoTokenizer.from_pretrained(out, model_max_length=64).save_pretrained(out)
    return out


def crf_model(tiny_finetuned, out):
    """The tiny tagger with a CRF head whose transitions overrule its emissions (as a trained one can)."""
    import torch
    from transformers import AutoTokenizer

    from minisci.finetune.crf import BertCrfForTokenClassification

    model = BertCrfForTokenClassification.from_pretrained(tiny_finetuned["ner"]).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.crf.parameters():
            p.copy_(3 * torch.randn(p.shape, generator=g))
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_finetuned["ner"], model_max_length=64).save_pretrained(out)
    return out


def texts() -> list[str]:
    """Short sentences of the learnable fixture's words, and one longer than the model's 64 positions."""
    short = [
        f"{OTHER_WORDS[i % 10]} {OTHER_WORDS[(i + 3) % 10]} {ENTITY_WORDS[i % 5]} {OTHER_WORDS[(i + 5) % 10]} "
        f"{ENTITY_WORDS[(i + 2) % 5]}"
        for i in range(12)
    ]
    return [*short, " ".join(short)]


def run_card(usage: str, batch: list[str]) -> list[list[tuple]]:
    """Follow the card: run its code, then call its tagger on each text."""
    namespace: dict = {}
    exec(usage, namespace)  # noqa: S102 - the card's own example, on a model built here
    tagger = namespace["tagger"]
    return [
        [(e["entity_group"], int(e["start"]), int(e["end"]), round(float(e["score"]), 4)) for e in tagger(t)]
        for t in batch
    ]


def run_cli(model_dir, batch, tmp_path, capsys) -> list[list[tuple]]:
    (tmp_path / "in.txt").write_text("\n".join(batch) + "\n")
    assert cli.main(["ner", "--model", str(model_dir), "--file", str(tmp_path / "in.txt"), "--jsonl"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    return [[(e["entity_group"], e["start"], e["end"], round(e["score"], 4)) for e in r["entities"]] for r in rows]


@pytest.mark.parametrize("head", ["softmax", "crf"])
def test_following_the_cards_usage_gives_minisci_ners_entities(head, tiny_finetuned, tmp_path, capsys):
    from transformers import AutoTokenizer

    if head == "crf":
        model_dir = crf_model(tiny_finetuned, tmp_path / "crf")
    else:
        model_dir = softmax_model(tiny_finetuned, tmp_path / "softmax")
    usage = ner_usage(str(model_dir), head == "crf", AutoTokenizer.from_pretrained(model_dir))
    assert ("NerTagger" in usage) == (head == "crf") and f"minisci ner --model {model_dir}" in usage
    batch = texts()
    expected = run_cli(model_dir, batch, tmp_path, capsys)
    assert sum(map(len, expected)) > 0
    assert run_card(usage, batch) == expected


def test_a_stock_pipeline_on_a_crf_model_finds_other_entities(tiny_finetuned, tmp_path, capsys):
    """Why a CRF model's card does not show pipeline(): the same call that is right for a softmax
    model gives other entities (the transitions are dropped)."""
    from transformers import AutoTokenizer

    model_dir = crf_model(tiny_finetuned, tmp_path / "crf")
    stock = ner_usage(str(model_dir), False, AutoTokenizer.from_pretrained(model_dir))
    batch = texts()
    assert run_card(stock, batch) != run_cli(model_dir, batch, tmp_path, capsys)


def test_a_byte_level_bpe_models_card_shows_minisci_s_tagger_not_the_pipeline(tmp_path, capsys):
    """A RoBERTa softmax tagger's card: the pipeline would guess its words from spaces and tag "effect,"
    whole, so the card gives :class:`minisci.NerTagger`, and following it finds ``minisci ner``'s
    entities, punctuation apart."""
    import torch
    from encoders_tiny import build_encoder
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    folder = build_encoder("roberta", tmp_path / "roberta")
    labels = {0: "O", 1: "B-Chemical", 2: "I-Chemical"}
    torch.manual_seed(0)
    model = AutoModelForTokenClassification.from_pretrained(
        folder, id2label=labels, label2id={v: k for k, v in labels.items()}
    )
    model.save_pretrained(folder)
    usage = ner_usage(str(folder), False, AutoTokenizer.from_pretrained(folder))
    assert "NerTagger" in usage and "pipeline(" not in usage.replace('pipeline("token-classification") would', "")
    batch = ["the effect, of aspirin.", "clonidine; naloxone (a drug)."]
    expected = run_cli(folder, batch, tmp_path, capsys)
    assert run_card(usage, batch) == expected
    assert sum(map(len, expected)) > 0
