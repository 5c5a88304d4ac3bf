"""The Python API to the trained models: load once, call many times, in batches.

Three classes wrap what the ``minisci`` commands run (:mod:`minisci.serve.inference`,
:mod:`minisci.serve.search`), so a call gives the same output as the command line::

    >>> from minisci import CitationClassifier, Index, NerTagger
    >>> tagger = NerTagger("models/finetune_ner/bc5cdr/adapted")
    >>> [e["word"] for e in tagger("Patients received aspirin after surgery.")]
    ['aspirin']
    >>> len(tagger(["Heparin was given.", "Insulin was given."]))  # a list in, one result per text out
    2
    >>> clf = CitationClassifier("models/finetune_classification/scicite/adapted")
    >>> clf("We used the method of Smith et al.")["label"] in clf.labels
    True
    >>> index = Index("index/")  # built by `minisci index` or Index.build
    >>> [hit["rank"] for hit in index.search("lung cancer treatment", k=2)]
    [1, 2]
    >>> index.reviewers("Shortest paths in sparse graphs.", k=1, exclude=["Ada"])[0]["rank"]
    1

``tests/serve/test_api.py`` runs these examples on tiny models laid out under those paths.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, overload

from minisci.errors import MinisciError
from minisci.serve import checks, inference, models, search
from minisci.tasks.classification import CLASSIFICATION
from minisci.tasks.kind import TaskKind
from minisci.tasks.ner import NER

# The model class suffix each task needs (config.json's "architectures"), so that a citation model
# given to the tagger fails with one line instead of tagging nonsense.


def check_task(model_dir: str | Path, kind: TaskKind) -> Path:
    """``model_dir`` if it holds a fine-tuned model of the task ``kind``, else a one-line error."""
    path = models.model_path(model_dir)
    models.check_task(path, models.read_config(path), kind)
    return path


def _one_or_many(texts: str | Sequence[str], what: str = "texts") -> tuple[list[str], bool]:
    """A text or a list of texts, checked as the command line checks its inputs."""
    if isinstance(texts, str):
        return [texts], True
    if isinstance(texts, (bytes, bytearray)):  # a Sequence, but of ints: not "input 1: got int"
        raise MinisciError(
            f"{what}: expected a text (str) or a list of texts, got {type(texts).__name__} (decode it first)"
        )
    if not isinstance(texts, Sequence):
        raise MinisciError(f"{what}: expected a text (str) or a list of texts, got {type(texts).__name__}")
    return list(texts), False


class NerTagger:
    """Biomedical entity tagger on a ``finetune_ner`` model, as ``minisci ner``.

    Args:
        model_dir: a fine-tuned token-classification model directory.
        batch_size: windows per length-sorted batch.
        stride: tokens of overlap between the windows of a text longer than the model's maximum
            length (long texts are windowed, not cut); default 64, or half a window of a model with
            fewer positions.
        precision: ``fp32`` (full precision: the transformers pipeline's output, or for a CRF head the stage's decoding), ``bf16`` or ``int8``
            (see :mod:`minisci.serve.precision`).
        backend: ``torch``, or ``onnx`` (ONNX Runtime on CPU, fp32 or int8; see
            :mod:`minisci.serve.onnx_backend`).

    Call it on one text for its entities, or on a list of texts for one list per text. An entity is
    ``{"entity_group", "score", "word", "start", "end"}`` with character offsets into the text.
    """

    def __init__(
        self,
        model_dir: str | Path,
        batch_size: int = 32,
        stride: int | None = None,
        precision: str = "fp32",
        backend: str = "torch",
    ):
        self.model_dir = check_task(model_dir, NER)
        self.batch_size = checks.check_whole_number("batch_size", batch_size, 1)
        if stride is not None:
            checks.check_whole_number("stride", stride, 0)
        self.pipe = inference.token_classifier(self.model_dir, stride=stride, precision=precision, backend=backend)

    @property
    def labels(self) -> list[str]:
        """Entity types (the B-/I- prefixes and "O" dropped), in label-id order."""
        names = [n.split("-", 1)[-1] for _, n in sorted(self.pipe.model.config.id2label.items()) if n != "O"]
        return list(dict.fromkeys(names))

    @overload
    def __call__(self, texts: str, progress: Callable | None = None) -> list[dict]: ...
    @overload
    def __call__(self, texts: Sequence[str], progress: Callable | None = None) -> list[list[dict]]: ...

    def __call__(self, texts, progress=None):
        batch, single = _one_or_many(texts)
        out = inference.tag(self.pipe, batch, self.batch_size, progress)
        return out[0] if single else out


class CitationClassifier:
    """Citation intent classifier on a ``finetune_classification`` model, as ``minisci cite``.

    Args: ``model_dir``, ``batch_size``, ``precision`` and ``backend`` as for :class:`NerTagger`.

    Call it on one text for ``{"label", "score", "scores"}`` (``scores``: every label's probability),
    or on a list of texts for one such dict per text.
    """

    def __init__(self, model_dir: str | Path, batch_size: int = 32, precision: str = "fp32", backend: str = "torch"):
        self.model_dir = check_task(model_dir, CLASSIFICATION)
        self.batch_size = checks.check_whole_number("batch_size", batch_size, 1)
        self.pipe = inference.text_classifier(self.model_dir, precision=precision, backend=backend)

    @property
    def labels(self) -> list[str]:
        """Class names, in label-id order."""
        return [n for _, n in sorted(self.pipe.model.config.id2label.items())]

    @overload
    def __call__(self, texts: str, progress: Callable | None = None) -> dict: ...
    @overload
    def __call__(self, texts: Sequence[str], progress: Callable | None = None) -> list[dict]: ...

    def __call__(self, texts, progress=None):
        batch, single = _one_or_many(texts)
        out = inference.classify(self.pipe, batch, self.batch_size, progress)
        return out[0] if single else out


class Index:
    """A search index (``minisci index``) loaded once: semantic search and reviewer recommendation.

    Args:
        index_dir: the index directory.
        encoder_dir: the encoder that embeds queries; default the one recorded in ``index.json``
            (give it when the index was built elsewhere: queries must use the index's encoder).
        precision: default the index's.
    """

    def __init__(self, index_dir: str | Path, encoder_dir: str | Path | None = None, precision: str | None = None):
        self.index_dir = models.model_path(index_dir, "index_dir")
        self.vectors, self.documents, self.info = search.load_index(self.index_dir)
        self.encoder = search.load_query_encoder(self.index_dir, self.info, self.vectors, encoder_dir, precision)
        self.lexical = search.load_lexical(self.index_dir, self.info)  # None for a dense index

    @classmethod
    def build(cls, model_dir: str | Path, docs: str | Path | list[dict], out_dir: str | Path, **options: Any) -> Index:
        """Embed a JSONL collection (``id``, ``title``/``text``, optional ``authors``), or a list of documents
        (dicts with those fields, or what :func:`minisci.serve.search.read_collection` returned), into
        ``out_dir``, and load it. A document without an ``id``, title or text, or with a blank author, raises
        :class:`~minisci.errors.MinisciError` naming its line, or ``docs[i]`` in a list.
        ``options``: ``batch_size``, ``max_length``, ``precision``, ``max_tokens``, ``retriever`` of ``minisci index``."""
        is_file = isinstance(docs, (str, Path))
        documents = search.read_collection(docs) if is_file else search.collection_documents(docs)
        info = search.build_index(model_dir, documents, out_dir, **options)
        if info["duplicate_ids"]:
            warnings.warn(search.duplicate_warning(info["duplicate_ids"]), stacklevel=2)
        return cls(out_dir, encoder_dir=model_dir)

    def __len__(self) -> int:
        return len(self.documents)

    def _scores(self, texts: list[str]):
        from minisci.encoding import embed

        if not texts:  # no query, no scores (the encoder takes no empty batch)
            return []
        model, tok = self.encoder
        vecs = embed(model, tok, texts, max_length=self.info["max_length"])
        return [search.index_scores(self.info, self.vectors, v, t, self.lexical) for v, t in zip(vecs, texts)]

    @overload
    def search(self, queries: str, k: int = 10) -> list[dict]: ...
    @overload
    def search(self, queries: Sequence[str], k: int = 10) -> list[list[dict]]: ...

    def search(self, queries, k=10):
        """The ``k`` best documents per query: ``{"rank", "score", "id", "title", "authors"}``, as ``minisci search``;
        an empty list of queries gives an empty list."""
        checks.check_k(k)
        batch, single = _one_or_many(queries, "queries")
        if not batch:
            return []
        for q in batch:
            checks.check_text(q, "query")
        out = [search.rank_documents(s, self.documents, k, search.matched(self.info, s)) for s in self._scores(batch)]
        return out[0] if single else out

    def reviewers(
        self, abstract: str, k: int = 10, exclude: Sequence[str] = (), aggregation: str = "max"
    ) -> list[dict]:
        """Authors ranked by their papers' similarity to ``abstract``: ``{"rank", "author", "score", "papers"}``,
        as ``minisci reviewers``. ``exclude``: conflicts of interest (case-insensitive names);
        ``aggregation``: ``max`` (best paper) or ``mean_top3``. No one (``[]``) when no paper's author is left
        to rank, or a ``bm25`` index finds no paper that shares a word with ``abstract``
        (:func:`minisci.serve.search.why_no_reviewers` says which)."""
        checks.check_k(k)
        exclude = checks.check_exclude(exclude)
        scores = self._scores([checks.check_text(abstract, "abstract")])[0]
        found = search.matched(self.info, scores)  # bm25: an abstract that shares no word with a paper ranks no one
        return search.rank_authors(scores, self.documents, k, exclude, aggregation, found)
