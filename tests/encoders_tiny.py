"""Tiny random encoders of six architectures, each with its own tokenizer built offline.

A user's model folder as ``save_pretrained`` writes it: a masked-LM checkpoint (safetensors) and a
fast tokenizer trained with the ``tokenizers`` library on a few fixture sentences, in the family the
architecture ships with: WordPiece (BERT, DistilBERT, ELECTRA), byte-level BPE (RoBERTa,
ModernBERT) and SentencePiece-style Unigram (DeBERTa-v2).
"""

from __future__ import annotations

from pathlib import Path

from conftest import ENTITY_WORDS, OTHER_WORDS

POSITIONS = 130  # RoBERTa reserves two, so every model takes 128 pieces
SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
BERT_SPECIALS = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
ROBERTA_SPECIALS = {"pad": "<pad>", "unk": "<unk>", "cls": "<s>", "sep": "</s>", "mask": "<mask>"}

# architecture -> (tokenizer family, special tokens, segment ids in the tokenizer's output)
ARCHITECTURES = {
    "bert": ("wordpiece", BERT_SPECIALS, True),
    "roberta": ("bpe", ROBERTA_SPECIALS, False),
    "distilbert": ("wordpiece", BERT_SPECIALS, False),
    "electra": ("wordpiece", BERT_SPECIALS, True),
    "deberta-v2": ("unigram", BERT_SPECIALS, True),
    "modernbert": ("bpe", BERT_SPECIALS, False),
}


def corpus() -> list[str]:
    """Sentences the tokenizers are trained on: the NER and citation fixtures' words, and some more."""
    extra = "we used the method of smith et al . has been widely studied our results agree with lung cancer"
    words = ENTITY_WORDS + OTHER_WORDS + extra.split() + ["background", "method", "result", "hepatocellular"]
    return [" ".join(words[i:] + words[:i]) for i in range(len(words))] * 3


def unigram_vocab(specials: list[str]) -> list[tuple[str, float]]:
    """A SentencePiece-style vocabulary with scores: the corpus words as ``▁word`` pieces, a few
    word-internal pieces, and single characters, so any other word splits into pieces."""
    words = sorted({w for s in corpus() for w in s.split()})
    pieces = [("▁" + w, -5.0) for w in words if len(w) > 3 and w[0] != "c"]  # "c..." words split
    pieces += [(p, -6.0) for p in ("in", "er", "ent", "ce", "at", "ph")]
    chars = sorted({c for w in words for c in w} | set("abcdefghijklmnopqrstuvwxyz0123456789.,-()"))
    pieces += [("▁", -8.0)] + [(c, -10.0) for c in chars]
    return [(t, 0.0) for t in specials] + pieces


def build_tokenizer(family: str, specials: dict, with_types: bool, out: Path):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    order = [specials[k] for k in ("pad", "unk", "cls", "sep", "mask")]
    if family == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token=specials["unk"]))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(vocab_size=120, special_tokens=order)
    elif family == "bpe":
        tok = Tokenizer(models.BPE(unk_token=None))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=400, special_tokens=order, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        )
    else:
        trainer = None  # the library's Unigram trainer degenerates to characters on so small a corpus
        tok = Tokenizer(models.Unigram(unigram_vocab(order), unk_id=1, byte_fallback=False))
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    if trainer is not None:
        tok.train_from_iterator(corpus(), trainer)
    cls, sep = specials["cls"], specials["sep"]
    pair = f"{cls} $A {sep} $B:1 {sep}:1" if with_types else f"{cls} $A {sep} $B {sep}"
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}",
        pair=pair,
        special_tokens=[(t, tok.token_to_id(t)) for t in (cls, sep)],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        **{f"{k}_token": v for k, v in specials.items()},
        model_max_length=POSITIONS - 2,
        model_input_names=["input_ids", "token_type_ids", "attention_mask"]
        if with_types
        else ["input_ids", "attention_mask"],
    )
    fast.save_pretrained(out)
    return fast


def model_config(arch: str, tok, positions: int = POSITIONS):
    from transformers import AutoConfig

    ids = {"pad_token_id": tok.pad_token_id}
    if arch == "distilbert":
        return AutoConfig.for_model(
            arch,
            vocab_size=len(tok),
            dim=32,
            n_layers=2,
            n_heads=2,
            hidden_dim=64,
            max_position_embeddings=positions,
            **ids,
        )
    extra: dict = {"max_position_embeddings": positions, **ids}
    if arch == "roberta":
        extra.update(type_vocab_size=1, bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id)
    if arch == "electra":
        extra["embedding_size"] = 32
    if arch == "deberta-v2":
        extra.update(type_vocab_size=0, relative_attention=True, position_buckets=16, pos_att_type=["p2c", "c2p"])
    if arch == "modernbert":
        extra.update(
            cls_token_id=tok.cls_token_id,
            sep_token_id=tok.sep_token_id,
            bos_token_id=tok.cls_token_id,
            eos_token_id=tok.sep_token_id,
            local_attention=16,
            global_attn_every_n_layers=2,
        )
    return AutoConfig.for_model(arch, vocab_size=len(tok), **SIZES, **extra)


def build_encoder(arch: str, out: Path, positions: int = POSITIONS) -> Path:
    """A tiny random ``AutoModelForMaskedLM`` of ``arch`` and its tokenizer, saved in ``out``."""
    import torch
    from transformers import AutoModelForMaskedLM

    family, specials, with_types = ARCHITECTURES[arch]
    tok = build_tokenizer(family, specials, with_types, out)
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_config(model_config(arch, tok, positions))
    model.save_pretrained(out)
    return out
