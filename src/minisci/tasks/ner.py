"""The NER task kind: token classification of tokenised sentences, IOB2 tags, entity-level scores.

* Words are encoded as they are in running text (the sentence's words joined by spaces, tokenised
  whole, each piece given to its word by character offsets), so the pieces are those ``minisci ner``
  sees on the same text, for WordPiece, byte-level BPE (``Ġword``) and SentencePiece alike.
* Only the first word piece of each word carries a label; the others get -100 (ignored by the
  loss), and the word's prediction is read from its first piece.
* Sentences longer than ``max_length`` pieces are split into windows at word boundaries; the
  windows' predictions are merged back so every word gets exactly one prediction.
* Tags are IOB2 throughout (SciBERT's IOB1 BC5CDR copy is converted by the reader without changing
  a span). Predicted tag sequences are repaired to valid IOB2 with the same rule (a stray ``I-X``
  opens an entity), and scored with seqeval in strict IOB2 mode
  (the package's ``evaluate`` module :mod:`minisci.metrics.ner_f1`).
* A CRF-trained model (``finetune_ner.crf``) is decoded with its constrained Viterbi.
* Counts: per sentence and entity type, ``[tp, predicted, gold]`` exact typed spans; the headline is
  micro F1 over the types.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from minisci.data.readers import NerSentence, spans, to_iob2
from minisci.tasks import facts
from minisci.tasks.kind import TaskKind

if TYPE_CHECKING:
    import numpy as np
    import torch

IGNORE = -100


# 1. labels and windows ---------------------------------------------------------------------------------


def sentence_text(words: tuple[str, ...] | list[str]) -> tuple[str, list[tuple[int, int]]]:
    """The running text of a tokenised sentence (words joined by one space) and each word's span."""
    spans_, pos = [], 0
    for w in words:
        spans_.append((pos, pos + len(w)))
        pos += len(w) + 1
    return " ".join(words), spans_


def text_pieces(texts: list[str], word_spans: list[list[tuple[int, int]]], tokenizer) -> list[list[list[int]]]:
    """Word pieces of every word *as the words are encoded in running text*, one batched call.

    Each text is tokenised whole, as ``minisci ner`` and the pipeline tokenise it, and every piece
    goes to the word its characters belong to (a piece of only the space before a word, such as a
    lone byte-level ``Ġ``, to the word that follows). Tokenising each word alone would be wrong for
    byte-level BPE: a word inside a sentence is encoded with its leading space (``Ġcauses``), a word
    alone without it. A word without any piece (e.g. a zero-width character) gets the unknown token.
    """
    enc = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    unk = tokenizer.unk_token_id  # once: a tokenizer's special-token attributes are slow to read
    out = []
    for ids, offsets, spans_, text in zip(enc["input_ids"], enc["offset_mapping"], word_spans, texts):
        owner = [-1] * (len(text) + 1)
        for w, (a, b) in enumerate(spans_):
            owner[a:b] = [w] * (b - a)
        pieces: list[list[int]] = [[] for _ in spans_]
        for piece, (a, b) in zip(ids, offsets):
            mine = [owner[c] for c in range(a, b) if owner[c] >= 0]
            w = mine[0] if mine else next((o for o in owner[b:] if o >= 0), -1)
            if w >= 0:
                pieces[w].append(piece)
        out.append([p or [unk] for p in pieces])
    return out


def word_pieces(sentences: list[NerSentence], tokenizer) -> list[list[list[int]]]:
    """Word pieces of every word of tokenised sentences, encoded as their running text."""
    texts, word_spans = zip(*(sentence_text(s.tokens) for s in sentences)) if sentences else ((), ())
    return text_pieces(list(texts), list(word_spans), tokenizer)


def windows(pieces: list[list[int]], max_length: int) -> list[tuple[int, int]]:
    """Split a sentence's words into consecutive ``(start, end)`` word ranges whose pieces fit in
    ``max_length - 2`` ([CLS] and [SEP]). Every word is in exactly one window; a single word
    longer than the budget gets a window of its own (its extra pieces are dropped, its first
    piece, which carries the prediction, is kept)."""
    budget = max_length - 2
    out, start, used = [], 0, 0
    for i, p in enumerate(pieces):
        n = min(len(p), budget)
        if used + n > budget and i > start:
            out.append((start, i))
            start, used = i, 0
        used += n
    out.append((start, len(pieces)))
    return out


def encode_sentences(
    sentences, tokenizer, label2id: dict[str, int] | None, max_length: int, pieces: list | None = None
) -> list[dict]:
    """Model inputs, one per window: input_ids, labels (first piece of each word), and where the
    window's words sit in their sentence (sentence, word_start, first_positions). ``pieces``: the
    words' pieces when already known (:func:`text_pieces` of a raw text), else :func:`word_pieces`."""
    feats = []
    budget = max_length - 2
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id  # read once, not per window
    all_pieces = word_pieces(sentences, tokenizer) if pieces is None else pieces
    for si, (s, pieces) in enumerate(zip(sentences, all_pieces)):
        for start, end in windows(pieces, max_length):
            ids, labels, firsts = [cls], [IGNORE], []
            for w in range(start, end):
                p = pieces[w][:budget]
                firsts.append(len(ids))
                ids.extend(p)
                tag_id = label2id[s.tags[w]] if label2id is not None else IGNORE
                labels.extend([tag_id] + [IGNORE] * (len(p) - 1))
            ids.append(sep)
            labels.append(IGNORE)
            feats.append(
                {"input_ids": ids, "labels": labels, "sentence": si, "word_start": start, "first_positions": firsts}
            )
    return feats


def argmax_decode(emissions: torch.Tensor) -> list[int]:
    return emissions.argmax(-1).tolist()


def merge_predictions(
    feats: list[dict],
    logits: list[torch.Tensor],
    n_words: list[int],
    id2label: dict[int, str],
    decode=argmax_decode,
    decode_batch=None,
) -> list[list[str]]:
    """One valid IOB2 tag per word: the first-piece emissions of a sentence's windows are joined in
    word order and decoded as one sequence (argmax, or the CRF's Viterbi), so a CRF does not cut an
    entity at a window's edge (a window's own Viterbi could not start inside one). ``decode_batch``
    (e.g. the CRF's ``decode_batch``), when given, decodes all sentences in one call instead of
    ``decode`` one by one."""
    import torch

    parts: list[list[tuple[int, torch.Tensor]]] = [[] for _ in n_words]
    for f, lg in zip(feats, logits):
        parts[f["sentence"]].append((f["word_start"], lg[f["first_positions"]]))
    for si, (n, windows_) in enumerate(zip(n_words, parts)):
        windows_.sort(key=lambda w: w[0])
        at = 0  # the windows must tile the sentence's words: each starts where the one before ends
        for start, em in windows_:
            if start != at:
                raise AssertionError(
                    f"sentence {si}: word {min(start, at)} predicted {'twice' if start < at else 'never'}"
                )
            at += len(em)
        if at != n:
            raise AssertionError(
                f"sentence {si}: {n - at} words without a prediction"
                if at < n
                else f"sentence {si}: {at} predictions for {n} words"
            )
    todo = [si for si, w in enumerate(parts) if w]
    emissions = [torch.cat([em for _, em in parts[si]]) for si in todo]
    paths = decode_batch(emissions) if decode_batch is not None else [decode(e) for e in emissions]
    tags: list[list[str]] = [[] for _ in n_words]
    for si, path in zip(todo, paths):
        tags[si] = [id2label[label_id] for label_id in path]
    return [list(to_iob2(t)) for t in tags]


# 2. metrics ------------------------------------------------------------------------------------------------


def ner_metrics(gold: list[list[str]], pred: list[list[str]]) -> dict:
    """Entity-level micro/macro P/R/F1 (strict IOB2), per-type P/R/F1, token accuracy
    (:func:`minisci.metrics.scores.ner_scores`, what the ``evaluate`` metric ``ner_f1`` computes)."""
    from minisci.metrics.scores import ner_scores

    return ner_scores(gold, pred)


def predict(
    model,
    tokenizer,
    sentences: list[NerSentence],
    id2label: dict[int, str],
    max_length: int,
    batch_size: int,
    feats: list[dict] | None = None,
) -> list[list[str]]:
    """One valid IOB2 tag per word of each sentence; ``feats``: the sentences' windows
    (:func:`encode_sentences` without labels), when already encoded."""
    from minisci.batching import pad_collator, sorted_logits

    feats = encode_sentences(sentences, tokenizer, None, max_length) if feats is None else feats
    logits = sorted_logits(model, feats, pad_collator(tokenizer), batch_size)
    crf = getattr(model, "crf", None)
    decode_batch = crf.decode_batch if crf is not None else None
    return merge_predictions(feats, logits, [len(s.tokens) for s in sentences], id2label, decode_batch=decode_batch)


def checked_metrics(sentences: list[NerSentence], pred: list[list[str]]) -> dict:
    """:func:`ner_metrics` of predicted tags, checked to have scored every gold entity of the reader."""
    metrics = ner_metrics([list(s.tags) for s in sentences], pred)
    expected = sum(len(spans(s.tags)) for s in sentences)
    if metrics["entities_gold"] != expected:  # every gold entity of the reader must be scored
        raise AssertionError(f"seqeval counted {metrics['entities_gold']} gold entities, the reader {expected}")
    return metrics


# 3. the kind ---------------------------------------------------------------------------------------------------


def label_list(types: list[str]) -> list[str]:
    """O first, then B-/I- of every entity type in the dataset's label order (sorted when read from train)."""
    return ["O"] + [f"{p}-{t}" for t in types for p in "BI"]


def collator(tokenizer):
    from minisci.batching import pad_collator

    return pad_collator(tokenizer, label_pad=IGNORE)


def training_features(sentences, tokenizer, label2id: dict[str, int], max_length: int) -> list[dict]:
    """Windows with their labels, as the Trainer takes them."""
    feats = encode_sentences(sentences, tokenizer, label2id, max_length)
    return [{"input_ids": f["input_ids"], "labels": f["labels"]} for f in feats]


def describe(data, cfg, tokenizer) -> dict:
    return {
        "train_sentences": len(data.splits["train"]),
        "tag_scheme": data.meta["scheme"],
        "test_entities_reader": sum(len(spans(s.tags)) for s in data.splits["test"]),
    }


def prediction_rows(sentences: list[NerSentence], predictions: list[list[str]]) -> list[dict]:
    return [
        {"sentence": i, "tokens": list(s.tokens), "gold": list(s.tags), "pred": p}
        for i, (s, p) in enumerate(zip(sentences, predictions))
    ]


def count_items(gold: list[list[str]], preds: list[list[list[str]]], labels: list[str]) -> list[str]:
    """Every entity type in the gold or any prediction, sorted: the pooled counts are then every span."""
    return sorted({s[0] for tags in [*gold, *(p for pred in preds for p in pred)] for s in spans(tags)})


def count(gold: list[list[str]], pred: list[list[str]], items: list[str]) -> np.ndarray:
    """Per sentence and type: [true positives, predicted, gold] exact typed spans."""
    import numpy as np

    where = {t: i for i, t in enumerate(items)}
    out = np.zeros((len(gold), 3 * len(items)))
    for i, (g, p) in enumerate(zip(gold, pred)):
        gs, ps = set(spans(g)), set(spans(p))
        for s in gs & ps:
            out[i, 3 * where[s[0]]] += 1
        for s in ps:
            out[i, 3 * where[s[0]] + 1] += 1
        for s in gs:
            out[i, 3 * where[s[0]] + 2] += 1
    return out


def scores(n_items: int) -> dict:
    """Entity precision, recall and F1 pooled over the types (micro)."""
    from minisci.tasks import counting

    return {name: counting.micro(f, n_items) for name, f in counting.SCORES.items()}


NER = TaskKind(
    **dataclasses.asdict(facts.NER),
    title="NER",
    head="ForTokenClassification",
    auto_class="AutoModelForTokenClassification",
    pipeline_tag="token-classification",
    command="ner",
    needs="a token-classification (NER) model with B-/I-/O labels",
    size_unit="sentences",
    feature_unit="windows",
    valid_labels=lambda labels: all(v == "O" or v[:2] in ("B-", "I-") for v in labels),
    selection_key="f1",
    seed_keys=("precision", "recall", "f1", "macro_f1"),
    model_labels=label_list,
    values=lambda split: [t for s in split for t in s.tags],
    encode=training_features,
    collate=collator,
    features=lambda sentences, tokenizer, cfg: encode_sentences(sentences, tokenizer, None, cfg.max_length),
    predict=lambda model, tokenizer, sentences, id2label, cfg, features=None: predict(
        model, tokenizer, sentences, id2label, cfg.max_length, cfg.eval_batch_size, features
    ),
    decode=lambda predictions: predictions,
    score=lambda sentences, pred, labels: checked_metrics(sentences, pred),
    describe=describe,
    rows=prediction_rows,
    identity=lambda s: (s.tokens, s.tags),
    trim_dev=lambda m: m,
    weights_in_metrics=True,
    items=count_items,
    count=count,
    scores=scores,
    metric="f1",
    metric_label="entity F1 (micro)",
    score_word="F1",
    average="micro",
    summary_keys=("precision", "recall", "f1"),
    columns=(
        ("P", "precision"),
        ("R", "recall"),
        ("F1", "f1"),
        ("macro-F1", "macro_f1"),
        ("token acc.", "token_accuracy"),
    ),
    breakdown="per_type",
    item_word="type",
    curves=("dev_f1", "loss"),
    report_labels=lambda arms, preds: arms["baseline"]["labels"],
    label_counts="entities_per_type",
    errors="spans",
)
