"""Everything minisci takes from transformers' pipeline *internals*, in one place.

``minisci ner`` / ``cite`` keep the pipelines' own pre- and post-processing (so their output equals
``pipeline(...)``'s) but run the model forward themselves, in length-sorted batches. That needs the
pipelines' private parameter dicts (``_preprocess_params``, ``_postprocess_params``) and, for the
exact re-implementation of the "first" aggregation, ``get_tag`` and ``aggregate_overlapping_entities``.
None of these are public API: this is the module to check after a transformers upgrade
(written against transformers 5.23; ``tests/serve/test_cli.py`` compares the output with the pipeline's,
float for float, and fails if they drift).
"""

from __future__ import annotations

import numpy as np
import torch

from minisci.cards import marks_subwords


def preprocess(pipe, text: str):
    """The pipeline's own preprocessing of one text (token classification: a generator of windows)."""
    return pipe.preprocess(text, **pipe._preprocess_params)


def postprocess(pipe, outputs):
    """The pipeline's own postprocessing of the model outputs of one text."""
    return pipe.postprocess(outputs, **pipe._postprocess_params)


def first_applies(pipe) -> bool:
    """Whether :func:`first_postprocess` reproduces ``pipe.postprocess``: aggregation "first" on raw text
    (not pre-split words) with a fast tokenizer. A tokenizer without a continuing-subword prefix (byte-level
    BPE ``Ġ``, SentencePiece ``▁``) takes its words from its own pre-tokeniser, as the NER evaluation and the
    CRF path do, not from the pipeline's heuristic, which glues punctuation to the word before it
    ("clonidine." one entity) and warns "Tokenizer does not support real words"."""
    from transformers.pipelines.token_classification import AggregationStrategy

    model = getattr(getattr(pipe.tokenizer, "_tokenizer", None), "model", None)
    return (
        pipe._postprocess_params.get("aggregation_strategy") == AggregationStrategy.FIRST
        and not pipe._preprocess_params.get("is_split_into_words")
        and pipe.tokenizer.is_fast
        and model is not None
    )


def first_postprocess(pipe, outputs: list[dict]) -> list[dict]:
    """``pipe.postprocess`` for aggregation "first", output for output, float for float.

    The pipeline builds a dict and decodes a string for every word piece and every word, most of
    them "O" and then thrown away; this follows the same steps (softmax in NumPy per window, words
    from the tokenizer's offsets, each word labelled by its first piece, adjacent words grouped by
    B-/I- tag, the group's score the mean of its words' scores, windows merged by the pipeline's own
    ``aggregate_overlapping_entities``) but decodes strings only for the entities it returns.
    """
    ignore = pipe._postprocess_params.get("ignore_labels") or ["O"]
    id2label = pipe.model.config.id2label
    tags = {i: pipe.get_tag(name) for i, name in id2label.items()}
    unk = pipe.tokenizer.unk_token_id
    to_string = pipe.tokenizer.convert_tokens_to_string
    sentence = outputs[0]["sentence"]
    word_aware = marks_subwords(pipe.tokenizer)
    starts = None if word_aware else sorted(a for a, _ in text_words(pipe.tokenizer, sentence))
    start_set = set(starts or ())
    entities = []
    for out in outputs:
        logits = out["logits"][0].to(torch.float32).numpy()
        maxes = np.max(logits, axis=-1, keepdims=True)
        shifted_exp = np.exp(logits - maxes)
        scores = shifted_exp / shifted_exp.sum(axis=-1, keepdims=True)
        ids = out["input_ids"][0].tolist()
        pieces = pipe.tokenizer.convert_ids_to_tokens(ids)
        words: list[list] = []  # [first piece index, start, end, pieces]
        claimed: set[int] = set()  # word starts whose first piece has been seen
        for i, (tid, special, (start, end)) in enumerate(
            zip(ids, out["special_tokens_mask"][0].tolist(), out["offset_mapping"][0].tolist())
        ):
            if special:
                continue
            piece, is_subword = pieces[i], False
            if starts is not None:  # the pre-tokeniser's words; a piece's offsets may hold its leading space
                start += len(sentence[start:end]) - len(sentence[start:end].lstrip())
                if start >= end:  # a lone space piece (Ġ, ▁) is the first piece of the next word, as in training
                    start = end = next((a for a in starts if a >= end), end)
                is_subword = start in claimed or start not in start_set
                claimed.add(start)
                if tid == unk:
                    piece = sentence[start:end]
            elif tid == unk:
                piece = sentence[start:end]
            else:
                is_subword = len(piece) != end - start
            if words and is_subword:
                words[-1][2] = end
                words[-1][3].append(piece)
            else:
                words.append([i, start, end, [piece]])
        if not words:
            continue
        first = np.array([w[0] for w in words])
        labels = scores[first].argmax(axis=-1).tolist()
        group: list[int] = []
        for w, label in enumerate(labels + [None]):
            if group and label is not None:
                bi, tag = tags[label]
                if tag == tags[labels[group[-1]]][1] and bi != "B":
                    group.append(w)
                    continue
            if group:
                name = id2label[labels[group[0]]].split("-", 1)[-1]
                if name not in ignore:
                    members = [words[g] for g in group]
                    entities.append(
                        {
                            "entity_group": name,
                            "score": np.mean(np.nanmean([scores[words[g][0]][labels[g]] for g in group])),
                            "word": to_string([to_string(m[3]) for m in members]).strip(),
                            "start": members[0][1],
                            "end": members[-1][2],
                        }
                    )
            group = [w]
    return pipe.aggregate_overlapping_entities(entities) if len(outputs) > 1 else entities


def is_punctuation(char: str) -> bool:
    """BERT's punctuation: ASCII symbols (``$``, ``+``, ``^`` included) and Unicode category P*."""
    import unicodedata

    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def text_words(tokenizer, text: str) -> list[tuple[int, int]]:
    """Character spans of the tokenizer's pre-tokenised words in ``text``, without the leading space
    that byte-level BPE (``Ġ``) and SentencePiece (``▁``) words carry; whitespace-separated words
    where the tokenizer has no pre-tokeniser. Every punctuation character is a word of its own, as
    in the NER datasets' tokenisation and BERT's pre-tokeniser (a WordPiece tokenizer's words are
    unchanged): SentencePiece splits only at spaces ("effect," one word), byte-level BPE keeps runs
    of punctuation together ("]." one word)."""
    import re

    pre = tokenizer.backend_tokenizer.pre_tokenizer
    if pre is None:
        found = [m.span() for m in re.finditer(r"\S+", text)]
    else:
        found = [span for _, span in pre.pre_tokenize_str(text)]
    words = []
    for a, b in found:
        a += len(text[a:b]) - len(text[a:b].lstrip())
        start = a
        for c in range(a, b):
            if is_punctuation(text[c]):
                if start < c:
                    words.append((start, c))
                words.append((c, c + 1))
                start = c + 1
        if start < b:
            words.append((start, b))
    return words
