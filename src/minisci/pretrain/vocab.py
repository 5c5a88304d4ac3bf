"""Domain vocabulary extension: whole words the base WordPiece shreds become tokens of their own.

A general-domain vocabulary splits frequent biomedical words into many pieces
("nephrotoxicity" -> ne ##ph ##rot ##ox ##ici ##ty), which spends sequence length and forces the
encoder to rebuild the word from fragments. ``pretrain.vocab_extension: N`` adds the N most frequent
words of the pretraining pairs that split into at least ``pretrain.vocab_min_pieces`` pieces.

* **Words** are counted after the tokenizer's own normaliser and pre-tokeniser (lower-casing and
  accent stripping for an uncased model, splitting at spaces and punctuation), so a counted word is
  exactly a unit that WordPiece would have split.
* **Tokens** are added as ``AddedToken(word, single_word=True, normalized=True)``: matched on the
  normalised text (so "Nephrotoxicity" matches too) and only as a whole word ("nephrotoxicityx"
  still goes through WordPiece). Added tokens are word starts, never ``##`` continuations, which is
  what whole-word masking and NER first-piece labels expect. They are saved with the tokenizer.
* **Embeddings**: each new row of the input embeddings is the mean of its old pieces' rows. The MLM
  decoder is tied to the input embeddings in BERT, so the output row follows; the decoder bias of a
  new token (its log-prior, zero for MiniLM's fresh head) is the mean of its pieces' biases.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable


@dataclasses.dataclass(frozen=True)
class VocabExtension:
    """New words, most frequent first, with the base-vocabulary ids of their pieces."""

    words: tuple[str, ...]
    pieces: tuple[tuple[int, ...], ...]
    counts: tuple[int, ...]


def word_counts(texts: Iterable[str], tokenizer) -> collections.Counter:
    """Frequencies of the words the tokenizer's normaliser and pre-tokeniser produce."""
    backend = tokenizer.backend_tokenizer
    counts: collections.Counter = collections.Counter()
    for text in texts:
        if backend.normalizer is not None:
            text = backend.normalizer.normalize_str(text)
        counts.update(word for word, _ in backend.pre_tokenizer.pre_tokenize_str(text))
    return counts


def plan_extension(texts: Iterable[str], tokenizer, n_words: int, min_pieces: int) -> VocabExtension:
    """The ``n_words`` most frequent words split into >= ``min_pieces`` pieces (ties: alphabetical)."""
    if n_words <= 0:
        return VocabExtension((), (), ())
    model = tokenizer.backend_tokenizer.model
    if type(model).__name__ != "WordPiece":  # BPE/Unigram words carry their space marker; not planned here
        from minisci.errors import MinisciError

        raise MinisciError(
            f"pretrain.vocab_extension: {n_words} needs a WordPiece tokenizer, this one is "
            f"{type(model).__name__}; set pretrain.vocab_extension: 0"
        )
    chosen = []
    for word, count in sorted(word_counts(texts, tokenizer).items(), key=lambda wc: (-wc[1], wc[0])):
        ids = tuple(t.id for t in model.tokenize(word))
        if len(ids) >= min_pieces and tokenizer.unk_token_id not in ids:  # [UNK] has no meaning to average
            chosen.append((word, ids, count))
            if len(chosen) == n_words:
                break
    words, pieces, counts = zip(*chosen) if chosen else ((), (), ())
    return VocabExtension(tuple(words), tuple(pieces), tuple(counts))


def add_tokens(tokenizer, plan: VocabExtension) -> list[int]:
    """Adds the plan's words to ``tokenizer`` (whole words, matched after normalisation); their new ids."""
    from tokenizers import AddedToken

    tokenizer.add_tokens([AddedToken(w, single_word=True, normalized=True) for w in plan.words])
    ids = tokenizer.convert_tokens_to_ids(list(plan.words))
    if len(set(ids)) != len(plan.words) or tokenizer.unk_token_id in ids:
        raise RuntimeError("vocabulary extension: some words did not become new tokens")
    return ids


def init_new_embeddings(model, new_ids: list[int], plan: VocabExtension, vocab_size: int) -> None:
    """Grows ``model`` to ``vocab_size`` tokens; each new row is the mean of its pieces' rows."""
    import torch

    model.resize_token_embeddings(vocab_size, mean_resizing=False)  # new rows are overwritten below
    weight = model.get_input_embeddings().weight
    bias = model.cls.predictions.bias if hasattr(model, "cls") else getattr(model.get_output_embeddings(), "bias", None)
    with torch.no_grad():
        for new_id, pieces in zip(new_ids, plan.pieces):
            weight[new_id] = weight[list(pieces)].mean(0)
            if bias is not None:
                bias[new_id] = bias[list(pieces)].mean()
