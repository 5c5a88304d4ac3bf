"""Domain vocabulary extension and MLM-only pretraining on a tiny random BERT."""

import json

import pytest
import torch
from conftest import TINY_MODEL
from helpers import configs, pretraining_data, run_ok, stage_cmd, write_pairs, write_params

from minisci.config import ModelConfig, PretrainConfig, from_dict
from minisci.errors import ConfigError
from minisci.pretrain.model import load_pretraining_model, load_tokenizer
from minisci.pretrain.trainer import run_pretraining
from minisci.pretrain.vocab import add_tokens, init_new_embeddings, plan_extension

TEXTS = [
    "Nephrotoxicity and hepatotoxicity after cisplatin.",
    "Cisplatin nephrotoxicity was dose limiting; nephrotoxicity resolved.",
    "The patients received cisplatin.",
    "No nephrotoxicity.",
]


@pytest.fixture
def tokenizer():
    return load_tokenizer(ModelConfig(**TINY_MODEL))


def test_plan_picks_frequent_multi_piece_words(tokenizer):
    plan = plan_extension(TEXTS, tokenizer, n_words=2, min_pieces=3)
    assert plan.words == ("nephrotoxicity", "cisplatin")  # lower-cased like the model, most frequent first
    assert plan.counts == (4, 3)
    assert plan.pieces[0] == tuple(tokenizer.convert_tokens_to_ids(tokenizer.tokenize("nephrotoxicity")))
    assert "patients" not in plan_extension(TEXTS, tokenizer, 100, 3).words  # one piece: already a token
    assert plan_extension(TEXTS, tokenizer, 0, 3).words == ()


def test_new_words_are_single_whole_word_tokens(tokenizer, tmp_path):
    from transformers import AutoTokenizer

    plan = plan_extension(TEXTS, tokenizer, n_words=3, min_pieces=3)
    add_tokens(tokenizer, plan)
    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    for tok in (tokenizer, reloaded):
        assert tok.tokenize("Cisplatin-induced NEPHROTOXICITY.") == ["cisplatin", "-", "induced", "nephrotoxicity", "."]
        assert len(tok.tokenize("nephrotoxicityx")) > 2  # not a whole word: WordPiece as before
        assert tok(["nephrotoxicity", "x"], is_split_into_words=True).tokens()[1] == "nephrotoxicity"


def test_new_embeddings_are_the_mean_of_their_pieces(tokenizer):
    model, _ = load_pretraining_model(ModelConfig(**TINY_MODEL), len(tokenizer), seed=0)
    before = model.get_input_embeddings().weight.detach().clone()
    with torch.no_grad():
        model.cls.predictions.bias.uniform_()  # MiniLM's fresh head has zero bias; test the averaging
    bias = model.cls.predictions.bias.detach().clone()
    plan = plan_extension(TEXTS, tokenizer, n_words=3, min_pieces=3)
    new_ids = add_tokens(tokenizer, plan)
    init_new_embeddings(model, new_ids, plan, len(tokenizer))
    weight = model.get_input_embeddings().weight
    assert weight.shape[0] == len(tokenizer) == before.shape[0] + 3 and model.config.vocab_size == len(tokenizer)
    assert torch.equal(weight[: before.shape[0]], before)
    for new_id, pieces in zip(new_ids, plan.pieces):
        assert torch.allclose(weight[new_id], before[list(pieces)].mean(0))
        assert torch.allclose(model.cls.predictions.bias[new_id], bias[list(pieces)].mean())
    assert model.cls.predictions.decoder.weight is weight  # the MLM decoder stays tied


def test_stage_saves_extended_vocabulary_with_the_model(tmp_path):
    from transformers import AutoModel, AutoTokenizer

    write_pairs(tmp_path / "pairs")
    rows = [json.loads(line) for line in (tmp_path / "pairs/train.jsonl").read_text().splitlines()]
    for r in rows:
        r["a"] += " Nephrotoxicity followed hepatotoxicity."
    (tmp_path / "pairs/train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    params = write_params(tmp_path, max_steps=2, head_warmup_steps=0, vocab_extension=2)
    run_ok(stage_cmd(tmp_path, params))
    tok = AutoTokenizer.from_pretrained(tmp_path / "adapted", local_files_only=True)
    assert len(tok) == 30522 + 2 and tok.tokenize("nephrotoxicity hepatotoxicity") == [
        "nephrotoxicity",
        "hepatotoxicity",
    ]
    assert AutoModel.from_pretrained(tmp_path / "adapted", use_safetensors=True).config.vocab_size == len(tok)
    assert json.loads((tmp_path / "adapted.json").read_text())["vocab"]["added_tokens"] == 2


def test_default_leaves_vocabulary_and_metrics_as_they_were(tmp_path):
    model_cfg, cfg = configs(max_steps=1, head_warmup_steps=0, save_steps=100)
    assert (cfg.nsp, cfg.vocab_extension) == (True, 0)
    result = run_pretraining(
        pretraining_data(write_pairs(tmp_path / "pairs"), model_cfg, cfg), model_cfg, cfg, tmp_path / "ckpt"
    )
    assert len(result.tokenizer) == 30522 and result.model.config.vocab_size == 30522
    assert "vocab" not in result.metrics


def test_mlm_only_leaves_nsp_head_and_pooler_untouched(tmp_path):
    model_cfg, cfg = configs(max_steps=3, head_warmup_steps=0, save_steps=100, logging_steps=1, nsp=False)
    result = run_pretraining(
        pretraining_data(write_pairs(tmp_path / "pairs"), model_cfg, cfg), model_cfg, cfg, tmp_path / "ckpt"
    )
    initial, _ = load_pretraining_model(model_cfg, 30522, cfg.seed)  # same seed -> same init
    trained = dict(result.model.named_parameters())
    for name, p in initial.named_parameters():
        frozen = name.startswith(("cls.seq_relationship.", "bert.pooler."))
        assert torch.equal(p, trained[name].detach().cpu()) == frozen, name
    logs = [e for e in result.log_history if "loss" in e and "mlm_loss" in e]
    assert logs and all(e["loss"] == pytest.approx(e["mlm_loss"], abs=1e-3) for e in logs)  # no NSP term


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [("vocab_extension", -1, "vocab_extension must be >= 0"), ("vocab_min_pieces", 1, "vocab_min_pieces must be >= 2")],
)
def test_bad_vocabulary_params_raise(key, value, match):
    _, cfg = configs()
    with pytest.raises(ConfigError, match=match):
        from_dict(PretrainConfig, {**cfg.__dict__, key: value}, "pretrain")
