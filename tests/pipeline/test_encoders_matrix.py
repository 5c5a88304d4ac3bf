"""Any Hugging Face masked-LM encoder through every path, or a one-line refusal naming the fix.

Tiny random BERT, RoBERTa, DistilBERT, ELECTRA, DeBERTa-v2 and ModernBERT models, each with a
tokenizer of its own family built offline (WordPiece, byte-level BPE, SentencePiece-style
Unigram), are built once per module (tests/encoders_tiny.py). The fast tests check the pieces
(sparse MLM logits, whole-word masking, the CRF on each encoder, NER alignment per tokenizer
family, the unchanged BERT path); the ``slow`` matrix runs every stage and CLI path on each model.
"""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
import yaml
from conftest import (
    FIXTURE_MIRROR,
    REPO,
    TINY_MODEL,
    learnable_ner_files,
    learnable_scicite_files,
    prepare,
    tiny_params,
)
from encoders_tiny import ARCHITECTURES, build_encoder, corpus

from minisci.config import FinetuneClassificationConfig, FinetuneNerConfig, ModelConfig, from_dict
from minisci.data.readers import NerSentence
from minisci.errors import MinisciError
from minisci.pretrain.collator import MlmNspCollator, encode_pair, word_continuations
from minisci.pretrain.model import ModelResolutionError, load_pretraining_model, load_tokenizer

ARCHS = list(ARCHITECTURES)
FAMILY_OF = {"wordpiece": "bert", "bpe": "roberta", "sentencepiece": "deberta-v2"}


@pytest.fixture(scope="module")
def encoders(tmp_path_factory) -> dict:
    """architecture -> a saved tiny masked-LM model directory with its own tokenizer."""
    root = tmp_path_factory.mktemp("encoders")
    return {arch: build_encoder(arch, root / arch) for arch in ARCHS}


def tokenizer_of(path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True)


# 1. the default BERT path is unchanged ------------------------------------------------------------------


def digest(*values) -> str:
    h = hashlib.sha256()
    for v in values:
        h.update(json.dumps(v.tolist() if hasattr(v, "tolist") else v).encode())
    return h.hexdigest()[:16]


def test_bert_pairs_masks_and_sparse_logits_are_unchanged():
    """Fingerprints of the MiniLM-tokenizer BERT path recorded before any non-BERT encoder was
    supported: the same pairs, the same masks (token and whole-word), the same sparse logits."""
    tok = load_tokenizer(ModelConfig(**TINY_MODEL))
    lines = (FIXTURE_MIRROR / "corpus/biomedical.jsonl").read_text().splitlines()[:40]
    texts = [json.loads(line)["text"][:300] for line in lines]
    a = tok(texts[:20], add_special_tokens=False)["input_ids"]
    b = tok(texts[20:40], add_special_tokens=False)["input_ids"]
    feats = [
        {**encode_pair(x, y, tok.cls_token_id, tok.sep_token_id, 64), "next_sentence_label": i % 2, "idx": i}
        for i, (x, y) in enumerate(zip(a, b))
    ]
    assert digest([f["input_ids"] for f in feats], [f["token_type_ids"] for f in feats]) == "0abb7e465cea772c"
    expected = {False: "96aec656c6f9f9cd", True: "fbef974093e6d720"}
    for whole_word, want in expected.items():
        batch = MlmNspCollator(tok, 0.15, whole_word, pad_to_multiple_of=8, seed=13)(feats)
        assert digest(*[batch[k] for k in sorted(batch)]) == want, f"whole_word={whole_word}"
    model, heads = load_pretraining_model(ModelConfig(**TINY_MODEL), len(tok), 13)
    assert type(model).__mro__[1].__name__ == "BertForPreTraining" and len(heads) == 46
    batch = MlmNspCollator(tok, 0.15, False, seed=13)(feats)
    batch.pop("next_sentence_label")
    with torch.no_grad():
        out = model.eval()(**batch)
    # The labels are integers, pinned exactly; the logits are floats whose last bits depend on the
    # CPU's kernels (AVX2 vs AVX-512 reductions), so they are pinned by value, to a tolerance far
    # below what any change of initialisation, head or masking would move them by.
    mlm, nsp = out["mlm_logits"].double(), out["nsp_logits"].double()
    got = torch.stack(
        [mlm.sum(), mlm.square().mean(), mlm.max(), mlm.min(), *mlm[0, :4], *mlm[-1, -4:], *nsp.sum(0), nsp.abs().sum()]
    )
    assert digest(out["mlm_labels"]) == "a7979942a13f2b4a"
    assert tuple(mlm.shape) == (198, 30522) and tuple(nsp.shape) == (20, 2)
    want = [
        -130.81814, 0.0128662, 0.5576509, -0.5916299,  # the logits' sum, mean square, max, min
        0.0, 0.0733397, 0.0065017, -0.1581300,  # the first masked position's first four logits
        0.0235818, 0.0194897, 0.0461181, 0.1767390,  # the last masked position's last four
        -0.0441278, -0.4199784, 0.4641062,  # the NSP logits' column sums and absolute sum
    ]  # fmt: skip
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-4, atol=1e-5)


# 2. pretraining pieces ------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", [*ARCHS, "roberta-unlisted"])
def test_sparse_mlm_logits_equal_the_models_own_forward(encoders, arch, monkeypatch):
    """Per architecture, the head applied to the labelled positions only; an architecture missing
    from the table ("roberta-unlisted") takes the plain fallback, the full forward."""
    from transformers import AutoModelForMaskedLM

    from minisci.pretrain import model as pretrain_model

    if arch == "roberta-unlisted":
        arch = "roberta"
        monkeypatch.delitem(pretrain_model.SPARSE_MLM_HEADS, "roberta")

    tok = tokenizer_of(encoders[arch])
    model, _ = load_pretraining_model(ModelConfig(base=str(encoders[arch])), len(tok), seed=0, nsp=arch == "bert")
    dense = AutoModelForMaskedLM.from_pretrained(encoders[arch]).eval()
    ids = tok(corpus()[:4], add_special_tokens=False)["input_ids"]
    feats = [{**encode_pair(x, x[::-1], tok.cls_token_id, tok.sep_token_id, 40), "idx": i} for i, x in enumerate(ids)]
    batch = MlmNspCollator(tok, 0.3, seed=1)(feats)
    with torch.no_grad():
        out = model.eval()(**batch)
        types = {"token_type_ids": batch["token_type_ids"]} if arch in ("bert", "electra") else {}
        ref = dense(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], **types).logits
    selected = batch["labels"] != -100
    if arch == "bert":  # BertForPreTraining's MLM head starts random; compare with its own full projection
        ref = model.cls.predictions(
            model.bert(**{k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")})[0]
        )
    torch.testing.assert_close(out["mlm_logits"], ref[selected], rtol=1e-4, atol=1e-5)
    assert torch.equal(out["mlm_labels"], batch["labels"][selected].to(batch["input_ids"].dtype))
    assert (out["nsp_logits"] is None) == (arch != "bert")


@pytest.mark.parametrize("arch", [a for a in ARCHS if a != "bert"])
def test_nsp_on_a_model_without_an_nsp_head_is_refused_in_one_line(encoders, arch):
    cfg = ModelConfig(base=str(encoders[arch]))
    with pytest.raises(
        ModelResolutionError, match=rf"pretrain.nsp: true needs a BERT .*set pretrain.nsp: false for {arch}$"
    ):
        load_pretraining_model(cfg, 0, seed=0, nsp=True)
    model, _ = load_pretraining_model(cfg, 0, seed=0, nsp=None)  # the baseline copy: no objective asked
    assert type(model).__mro__[1].__name__.endswith("ForMaskedLM")


@pytest.mark.parametrize("family", ["wordpiece", "bpe", "sentencepiece"])
def test_whole_word_masking_knows_each_familys_word_starts(encoders, family):
    tok = tokenizer_of(encoders[FAMILY_OF[family]])
    scheme, _ = word_continuations(tok)
    assert scheme == family
    text = " ".join(["hepatocellular treatment with cisplatin caused morphine study"] * 3)  # 21 words: one always drawn
    enc = tok(text, return_offsets_mapping=True)
    ids, offsets = torch.tensor(enc["input_ids"]), enc["offset_mapping"]
    words = [text[:b].count(" ") if b else -1 for a, b in offsets]  # word of each piece, -1 for specials
    coll = MlmNspCollator(tok, 0.5, whole_word=True)
    for seed in range(30):
        selected = coll.select(ids, torch.Generator().manual_seed(seed))
        for w in set(words) - {-1}:
            chosen = {bool(selected[i]) for i, x in enumerate(words) if x == w}
            assert len(chosen) == 1, f"word {w} partly selected: {tok.convert_ids_to_tokens(ids)}"
    first = [bool(coll.select(ids, torch.Generator().manual_seed(s))[1]) for s in range(60)]
    assert any(first), "the first word, which has no start marker, is never selected"


def test_whole_word_masking_without_word_boundaries_is_refused():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "a": 5}, "[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="[PAD]", unk_token="[UNK]", mask_token="[MASK]")
    with pytest.raises(ValueError, match="set pretrain.whole_word_masking: false"):
        MlmNspCollator(tok, whole_word=True)


@pytest.mark.parametrize("arch", ["roberta", "deberta-v2"])
def test_vocabulary_extension_of_a_non_wordpiece_tokenizer_is_refused(encoders, arch):
    from minisci.pretrain.vocab import plan_extension

    with pytest.raises(MinisciError, match="needs a WordPiece tokenizer.*set pretrain.vocab_extension: 0"):
        plan_extension(corpus(), tokenizer_of(encoders[arch]), 5, 3)


# 3. the CRF head on every encoder -------------------------------------------------------------------------


LABELS = ["O", "B-Entity", "I-Entity"]


def crf_kwargs():
    return {
        "num_labels": 3,
        "id2label": dict(enumerate(LABELS)),
        "label2id": {x: i for i, x in enumerate(LABELS)},
        "use_safetensors": True,
        "local_files_only": True,
    }


@pytest.mark.parametrize("arch", ARCHS)
def test_crf_head_wraps_the_checkpoints_own_encoder_and_reloads_through_the_server(encoders, arch, tmp_path):
    from safetensors.torch import load_file

    from minisci.finetune.crf import CRF, CrfForTokenClassification
    from minisci.serve.models import load_task_model
    from minisci.tasks.ner import NER

    model = CrfForTokenClassification.from_pretrained(encoders[arch], **crf_kwargs())
    assert model.config.model_type == arch and isinstance(model.crf, CRF)
    saved = load_file(encoders[arch] / "model.safetensors")
    own = dict(model.named_parameters())
    shared = [k for k in saved if k in own]
    assert shared and all(torch.equal(saved[k], own[k]) for k in shared)  # the encoder's own weights
    model.save_pretrained(tmp_path)
    tokenizer_of(encoders[arch]).save_pretrained(tmp_path)
    again, _ = load_task_model(tmp_path, NER)
    assert type(again).__name__ == type(model).__name__ and again.config.crf
    for k, v in model.state_dict().items():
        assert torch.equal(v, again.state_dict()[k]), k


def test_crf_head_refuses_a_checkpoint_whose_encoder_does_not_load(encoders, tmp_path):
    """A checkpoint whose config names one encoder and whose weights are another's is an error,
    never a randomly initialised encoder."""
    import shutil

    from minisci.finetune.crf import CrfForTokenClassification

    shutil.copytree(encoders["distilbert"], tmp_path / "m")
    cfg = json.loads((encoders["bert"] / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))  # a BERT config over DistilBERT weights
    with pytest.raises(MinisciError, match=r"encoder weights of the bert model did not load .*own encoder$"):
        CrfForTokenClassification.from_pretrained(tmp_path / "m", **crf_kwargs())


# 4. NER alignment: the training encoding is the CLI's ----------------------------------------------------


SENTENCES = [
    ("Aspirin", "caused", "lung", "cancer", "after", "cisplatin", "treatment", "."),
    ("Hepatocellular", "carcinoma", "(", "HCC", ")", "with", "morphine", ",", "insulin", "and", "heparin"),
    ("the", "patients", "received", "IL-2", "and", "5-FU", "in", "the", "study"),
]


@pytest.mark.parametrize("family", ["wordpiece", "bpe", "sentencepiece"])
def test_training_encoding_of_a_sentence_is_the_clis_encoding_of_its_text(encoders, family):
    from transformers import AutoModelForTokenClassification, pipeline

    from minisci.serve import pipeline_compat as compat
    from minisci.tasks.ner import encode_sentences

    path = encoders[FAMILY_OF[family]]
    tok = tokenizer_of(path)
    model = AutoModelForTokenClassification.from_pretrained(path, **{**crf_kwargs(), "use_safetensors": True})
    pipe = pipeline("token-classification", model=model, tokenizer=tok, aggregation_strategy="first", stride=16)
    sents = [NerSentence(s, ("O",) * len(s), "d", i) for i, s in enumerate(SENTENCES)]
    feats = encode_sentences(sents, tok, None, max_length=128)
    for s, f in zip(SENTENCES, feats):
        (chunk,) = list(compat.preprocess(pipe, " ".join(s)))
        assert f["input_ids"] == chunk["input_ids"][0].tolist(), tok.convert_ids_to_tokens(f["input_ids"])
        assert len(f["first_positions"]) == len(s)


# 5. the matrix: every path on every encoder (slow) -------------------------------------------------------


FAST = {"epochs": 1.0, "batch_size": 8, "learning_rate": 5.0e-3, "max_length": 32, "logging_steps": 5, "seeds": [13]}
LONG_TEXT = " ".join(["hepatocellular carcinoma after cisplatin treatment , the patients received morphine ."] * 60)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("encoders-data")
    pairs = root / "pairs"
    pairs.mkdir()
    texts = corpus()
    for name, n in (("train.jsonl", 48), ("heldout.jsonl", 8)):
        rows = [{"a": texts[i % len(texts)], "b": texts[(i * 7 + 3) % len(texts)], "label": i % 2} for i in range(n)]
        (pairs / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    # documents for the packed MLM blocks (nsp: false): two corpora of corpus sentences
    docs = [{"id": f"d{i}", "domain": ("a", "b")[i % 2], "sentences": texts[i::12]} for i in range(12)]
    (root / "documents.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    return {
        "pairs": pairs,
        "documents": root / "documents.jsonl",
        "ner": prepare(learnable_ner_files(root / "raw"), "bc5cdr", root / "prepared" / "bc5cdr"),
        "cite": prepare(learnable_scicite_files(root / "raw"), "scicite", root / "prepared" / "scicite"),
    }


def params_file(tmp_path, model_dir, **pretrain) -> str:
    params = tiny_params({"model": {"base": str(model_dir), "tokenizer": None, "scratch_config": None}})
    params["pretrain"].update({"max_steps": 4, "max_seq_length": 48, "nsp": False, **pretrain})
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return str(path)


def pretrain_argv(data, tmp_path, params: str, tag: str) -> list[str]:
    """The pretrain stage's arguments, after the pretrain_data stage has tokenised the examples."""
    import importlib

    out = tmp_path / f"pretrain_data{tag}"
    importlib.import_module("stages.pretrain_data").main(
        [
            *("--pairs", str(data["pairs"]), "--docs", str(data["documents"])),
            *("--out", str(out)),
            "--metrics",
            str(out) + ".json",
            "--params",
            params,
        ]
    )
    return [
        *("--data", str(out), "--out", str(tmp_path / f"adapted{tag}")),
        *("--checkpoints", str(tmp_path / f"ckpt{tag}"), "--metrics", str(tmp_path / f"m{tag}.json")),
        *("--plots", str(tmp_path / f"plots{tag}"), "--params", params),
    ]


def finetune(kind: str, model_dir, data_dir, work, **extra):
    from minisci.finetune.classification import run_finetune_classification
    from minisci.finetune.ner import run_finetune_ner

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    if kind == "cite":
        cfg = {**params["finetune_classification"], **FAST, **extra}
        return run_finetune_classification(
            data_dir, model_dir, from_dict(FinetuneClassificationConfig, cfg, "finetune_classification"), work
        )
    cfg = from_dict(FinetuneNerConfig, {**params["finetune_ner"], **FAST, **extra}, "finetune_ner")
    return run_finetune_ner(data_dir, model_dir, cfg, work)


def save(result, out):
    result.model.save_pretrained(out)
    result.tokenizer.save_pretrained(out)
    return out


def cli(capsys, *argv) -> list[dict]:
    from minisci.serve.cli import main

    capsys.readouterr()
    assert main([*argv, "--jsonl"]) in (0, None)
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
def test_matrix(encoders, data, arch, tmp_path, capsys):
    """Each path on each encoder: base_model, pretrain (MLM; MLM+NSP for BERT, a one-line refusal
    for the others), both NER heads, classification, embeddings, ``minisci ner`` (both heads) and
    ``minisci cite`` on a text longer than 512 pieces."""
    import importlib

    model_dir = encoders[arch]
    base_model = importlib.import_module("stages.base_model")
    pretrain = importlib.import_module("stages.pretrain")
    # base_model (the baseline arm) works for any encoder
    base_model.main(["--out", str(tmp_path / "baseline"), "--params", params_file(tmp_path, model_dir)])
    assert (tmp_path / "baseline" / "model.safetensors").is_file()
    # pretrain: MLM alone (+ NSP where the model has it)
    for nsp in (False, True):
        argv = pretrain_argv(data, tmp_path, params_file(tmp_path, model_dir, nsp=nsp), str(nsp))
        if nsp and arch != "bert":
            with pytest.raises(MinisciError, match=f"set pretrain.nsp: false for {arch}$"):
                pretrain.main(argv)
            continue
        pretrain.main(argv)
        metrics = json.loads((tmp_path / f"m{nsp}.json").read_text())
        assert metrics["after"]["masked_tokens"] > 0
        assert (metrics["after"]["nsp_accuracy"] is None) == (not nsp)  # packed blocks have no NSP to score
        assert ("blocks" if not nsp else "pairs") in metrics["train"]
    adapted = tmp_path / "adaptedFalse"
    # both NER heads and classification, from the adapted model; `minisci ner` / `cite` on long texts
    n_pieces = len(tokenizer_of(adapted)(LONG_TEXT)["input_ids"])
    assert n_pieces > 512
    for crf in (False, True):
        ner = save(finetune("ner", adapted, data["ner"], tmp_path / f"wn{crf}", crf=crf), tmp_path / f"ner{crf}")
        (row,) = cli(capsys, "ner", "--model", str(ner), LONG_TEXT)
        assert all(0 <= e["start"] < e["end"] <= len(LONG_TEXT) for e in row["entities"])
    cite = save(finetune("cite", adapted, data["cite"], tmp_path / "wc"), tmp_path / "cite")
    (row,) = cli(capsys, "cite", "--model", str(cite), LONG_TEXT)
    assert row["label"] in ("background", "method", "result")
    # embeddings: contrastive fine-tuning and windowed retrieval vectors
    from minisci.config import FinetuneEmbeddingsConfig
    from minisci.finetune.embeddings import dense_scores, dev_mrr, train_embeddings
    from minisci.finetune.retrieval_benchmark import Split

    params = yaml.safe_load((REPO / "params.yaml").read_text())["finetune_embeddings"]
    cfg = from_dict(
        FinetuneEmbeddingsConfig,
        {**params, "n_train": 8, "batch_size": 4, "max_length": 32, "eval_max_length": 64, "epochs": 1.0},
        "finetune_embeddings",
    )
    pairs = [{"anchor": t[:40], "positive": t} for t in corpus()[:12]] + [{"anchor": "x", "positive": LONG_TEXT}]
    train_embeddings(adapted, pairs[:8], cfg, tmp_path / "we")
    rest = pairs[2:]
    split = Split(
        candidates=[{"id": str(i), "text": p["positive"]} for i, p in enumerate(rest)],
        queries={"title": [(p["anchor"], i) for i, p in enumerate(rest)], "sentence": []},
    )
    assert 0.0 <= dev_mrr(split, dense_scores(adapted, split, cfg)) <= 1.0


@pytest.mark.slow
def test_64_position_model_is_refused_in_one_line_naming_the_length(data, tmp_path):
    """A BERT with 64 positions against 128-piece lengths: a one-line refusal naming the parameter
    (the length checks at load), never a tensor-size traceback."""
    import importlib

    model_dir = build_encoder("bert", tmp_path / "bert64", positions=64)
    pretrain = importlib.import_module("stages.pretrain")
    argv = pretrain_argv(data, tmp_path, params_file(tmp_path, model_dir, max_seq_length=128), "")
    with pytest.raises(MinisciError, match="max_seq_length"):
        pretrain.main(argv)


@pytest.mark.slow
@pytest.mark.parametrize("crf", [False, True])
def test_stage_and_cli_f1_agree_on_a_byte_level_bpe_model(encoders, data, tmp_path, capsys, crf):
    """RoBERTa (byte-level BPE): the stage's test F1 and the F1 of `minisci ner` on the same test
    sentences (as running text) agree."""
    from minisci.data.readers import load_prepared
    from minisci.tasks.ner import ner_metrics, sentence_text

    result = finetune("ner", encoders["roberta"], data["ner"], tmp_path / "w", crf=crf, epochs=6.0)
    model = save(result, tmp_path / "ner")
    test = load_prepared(data["ner"], task="ner").splits["test"]
    texts = [sentence_text(s.tokens) for s in test]
    (tmp_path / "test.txt").write_text("".join(t + "\n" for t, _ in texts))
    rows = cli(capsys, "ner", "--model", str(model), "--file", str(tmp_path / "test.txt"))
    pred = []
    for (_, word_spans), row in zip(texts, rows):
        tags = ["O"] * len(word_spans)
        for e in row["entities"]:
            inside = [i for i, (a, b) in enumerate(word_spans) if a >= e["start"] and b <= e["end"]]
            for k, i in enumerate(inside):
                tags[i] = ("B-" if k == 0 else "I-") + e["entity_group"]
        pred.append(tags)
    cli_f1 = ner_metrics([list(s.tags) for s in test], pred)["f1"]
    assert result.metrics["test"]["f1"] > 0.5
    assert cli_f1 == pytest.approx(result.metrics["test"]["f1"], abs=1e-9)
