"""Masked-language-model + next-sentence-prediction batches, as in BERT.

``mlm_probability`` of the maskable tokens are selected (never [CLS]/[SEP]/[PAD] or other
special tokens); of those 80% become [MASK], 10% a random token, 10% stay unchanged. Labels are
the original ids at selected positions and -100 elsewhere (-100 is what PyTorch's cross-entropy
ignores). With whole-word masking a word is selected or not as a unit: WordPiece ``##``
continuations follow their word; for byte-level BPE (``Ġ``) and SentencePiece (``▁``), whose
markers sit on word *starts*, every unmarked piece continues its word, and the first piece after a
special token starts one (a segment's first word has no leading space). Batches are padded to their
own longest example.
"""

from __future__ import annotations

import dataclasses
import hashlib

import torch
from transformers import TrainerCallback

IGNORE = -100  # label of positions that do not contribute to the MLM loss


def encode_pair(a_ids: list[int], b_ids: list[int], cls_id: int, sep_id: int, max_length: int) -> dict:
    """``[CLS] A [SEP] B [SEP]`` within ``max_length``: A is cut from the front and B from the
    back, so the A/B boundary that NSP is about always survives."""
    budget = max_length - 3
    la, lb = len(a_ids), len(b_ids)
    while la + lb > budget:  # trim the longer segment, as BERT's truncate_seq_pair does
        if la > lb:
            la -= 1
        else:
            lb -= 1
    a_ids, b_ids = a_ids[len(a_ids) - la :], b_ids[:lb]
    input_ids = [cls_id, *a_ids, sep_id, *b_ids, sep_id]
    token_type_ids = [0] * (len(a_ids) + 2) + [1] * (len(b_ids) + 1)
    return {"input_ids": input_ids, "token_type_ids": token_type_ids}


START_MARKERS = {"bpe": "Ġ", "sentencepiece": "▁"}  # byte-level BPE's space, SentencePiece's space


def word_continuations(tokenizer) -> tuple[str | None, torch.Tensor]:
    """(scheme, is_continuation [vocab]) where scheme is "wordpiece", "bpe", "sentencepiece" or None
    (no word boundaries known). Added tokens (a vocabulary extension) are whole words: starts."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    kind = type(backend.model).__name__ if backend is not None else ""
    vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    added = set(getattr(tokenizer, "added_tokens_decoder", {}))
    prefix = getattr(backend.model, "continuing_subword_prefix", None) if kind == "WordPiece" else None
    if kind == "WordPiece" or (not kind and any(t.startswith("##") for t in vocab)):
        prefix = prefix or "##"
        return "wordpiece", torch.tensor([t.startswith(prefix) for t in vocab])
    for scheme, marker in START_MARKERS.items():
        if kind in ("BPE", "Unigram", "") and any(t.startswith(marker) for t in vocab):
            cont = [i not in added and not t.startswith(marker) for i, t in enumerate(vocab)]
            return scheme, torch.tensor(cont)
    return None, torch.zeros(len(vocab), dtype=torch.bool)


@dataclasses.dataclass
class MlmNspCollator:
    """Pads a batch and masks each example.

    With ``seed`` set and an ``idx`` in each feature, the masks of an example depend only on
    (seed, epoch, idx): they are the same whatever the batch composition, the number of processes,
    or a resume from a checkpoint (the Trainer restores the global RNG only after the first resumed
    batch is built). ``epoch`` is advanced by :class:`EpochCallback`, so each epoch masks anew
    (dynamic masking, as in RoBERTa). Without a seed the global torch RNG is used.
    """

    tokenizer: object
    mlm_probability: float = 0.15
    whole_word: bool = False
    pad_to_multiple_of: int | None = None
    seed: int | None = None
    epoch: int = 0

    def __post_init__(self) -> None:
        tok = self.tokenizer
        self.special_ids = torch.tensor(sorted(set(tok.all_special_ids)))
        self.scheme, self.is_continuation = word_continuations(tok)
        if self.whole_word and self.scheme is None:
            raise ValueError(
                "whole-word masking needs word boundaries in the vocabulary (WordPiece ##, byte-level BPE Ġ "
                "or SentencePiece ▁); set pretrain.whole_word_masking: false for this tokenizer"
            )

    def pad(self, features: list[dict]) -> dict[str, torch.Tensor]:
        longest = max(len(f["input_ids"]) for f in features)
        if self.pad_to_multiple_of:
            m = self.pad_to_multiple_of
            longest = (longest + m - 1) // m * m
        ids = torch.full((len(features), longest), self.tokenizer.pad_token_id, dtype=torch.long)
        types = torch.zeros_like(ids)
        attn = torch.zeros_like(ids)
        for i, f in enumerate(features):
            n = len(f["input_ids"])
            ids[i, :n] = torch.tensor(f["input_ids"])
            types[i, :n] = torch.tensor(f["token_type_ids"])
            attn[i, :n] = 1
        return {"input_ids": ids, "token_type_ids": types, "attention_mask": attn}

    def generator(self, feature: dict) -> torch.Generator | None:
        if self.seed is None or "idx" not in feature:
            return None
        key = hashlib.blake2b(f"{self.seed}/{self.epoch}/{feature['idx']}".encode(), digest_size=8).digest()
        return torch.Generator().manual_seed(int.from_bytes(key, "little") >> 1)

    def select(self, ids: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor:
        """Boolean mask of the positions of one (unpadded) example selected for prediction."""
        special = torch.isin(ids, self.special_ids)
        draw = torch.rand(ids.shape, generator=gen) < self.mlm_probability
        if not self.whole_word:
            selected = draw & ~special
        else:
            starts = ~self.is_continuation[ids] & ~special
            if self.scheme != "wordpiece":  # a segment's first word carries no start marker
                starts |= torch.cat([torch.tensor([False]), special[:-1]]) & ~special
            # Position of the word start (or special token) that each piece belongs to.
            owner = torch.where(starts | special, torch.arange(len(ids)), 0).cummax(dim=0).values
            selected = (draw & starts)[owner] & ~special
        maskable = torch.nonzero(~special).flatten()
        if not selected.any() and len(maskable):  # no example without an MLM target
            selected[maskable[torch.randint(len(maskable), (1,), generator=gen)]] = True
        return selected

    def mask(self, ids: torch.Tensor, gen: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """80/10/10 masking of one example: (input ids, labels)."""
        selected = self.select(ids, gen)
        labels = torch.where(selected, ids, torch.full_like(ids, IGNORE))
        to_mask = selected & (torch.rand(ids.shape, generator=gen) < 0.8)
        to_random = selected & ~to_mask & (torch.rand(ids.shape, generator=gen) < 0.5)
        random_ids = torch.randint(len(self.tokenizer), ids.shape, generator=gen)
        ids = torch.where(to_mask, torch.full_like(ids, self.tokenizer.mask_token_id), ids)
        ids = torch.where(to_random, random_ids, ids)
        return ids, labels

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        batch = self.pad(features)
        labels = torch.full_like(batch["input_ids"], IGNORE)
        for i, f in enumerate(features):
            n = len(f["input_ids"])
            batch["input_ids"][i, :n], labels[i, :n] = self.mask(batch["input_ids"][i, :n], self.generator(f))
        batch["labels"] = labels
        if "next_sentence_label" in features[0]:
            batch["next_sentence_label"] = torch.tensor([f["next_sentence_label"] for f in features])
        return batch


class EpochCallback(TrainerCallback):
    """Tells the collator which epoch it is masking for (also after a resume)."""

    def __init__(self, collator: MlmNspCollator):
        self.collator = collator

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.collator.epoch = int(state.epoch or 0)
