"""A NumPy index of document embeddings (:mod:`minisci.encoding`), semantic search and reviewer
recommendation.

The index is plain files: ``embeddings.npy`` (float32, loaded without pickle), ``documents.jsonl``,
``index.json`` (the encoder, relative to the index and absolute, and its content hash; dimension,
count, max_length, retriever) and, for the ``bm25`` and ``hybrid`` retrievers, ``bm25/`` (JSON and
.npy, no pickle).

The retriever (:mod:`minisci.lexical`): ``dense`` ranks by cosine, ``bm25`` by keywords, ``hybrid``
by reciprocal rank fusion of the two (its scores are fused scores, ~0.03 at the top, not cosines).
By default an index uses what ``finetune_embeddings`` measured best on its dev queries, recorded
beside the model (``retrieval.json``); any other model defaults to ``dense``.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from minisci import encoding
from minisci.encoding import dimension, embed
from minisci.errors import DataFormatError, MinisciError
from minisci.fingerprint import model_content_hash
from minisci.io import (
    OUTPUT_MARKER,
    OutputExistsError,
    atomic_path,
    check_replaceable,
    iter_jsonl,
    write_jsonl,
)
from minisci.lexical import RETRIEVERS, Bm25, hybrid_scores
from minisci.serve.checks import check_k, check_text, input_name
from minisci.serve.models import (
    PRECISIONS,
    check_encoder,
    check_max_length,
    check_weights,
    is_sentence_transformer,
    loading,
    max_positions,
    read_config,
    resolve_device,
)
from minisci.serve.precision import apply_precision

AGGREGATIONS = ("max", "mean_top3")
DEFAULT_MAX_LENGTH = 256  # word pieces per window: a typical abstract in one or two windows
INDEX_FIELDS = {"model": str, "dimension": int, "documents": int, "max_length": int}  # index.json's schema
DEFAULT_ENCODER = "models/embeddings"  # finetune_embeddings' output: the encoder that won on its dev queries
RETRIEVAL_FILE = "retrieval.json"  # beside a model from finetune_embeddings: the encoder and retriever it serves
SERVED_AS = {  # what retrieval.json's "encoder" means, for the line `minisci index` prints
    "shipped": "the base model as shipped: finetune_embeddings found it better on dev than its fine-tuned model",
    "from_baseline": "the base model fine-tuned by finetune_embeddings: better on dev than as shipped",
    "from_adapted": "the adapted encoder fine-tuned by finetune_embeddings: better on dev than the base model as shipped",
}


def encoder_sha256(model_dir: str | Path) -> str:
    """Content hash of an encoder: weights, config, tokenizer and sentence-transformers module
    settings (pooling, normalisation), not its card or metadata. Two folders with the same hash
    embed the same way, wherever they lie."""
    import hashlib

    path = Path(model_dir)
    files = {k: v for k, v in model_content_hash(path).items() if k != RETRIEVAL_FILE}
    for module in sorted(path.glob("*/*.json")):
        files[module.relative_to(path).as_posix()] = hashlib.sha256(module.read_bytes()).hexdigest()
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def served_retrieval(model_dir: str | Path) -> dict:
    """What finetune_embeddings recorded beside ``model_dir`` (``encoder``, ``retriever``), or {}."""
    path = Path(model_dir) / RETRIEVAL_FILE
    if not path.is_file():
        return {}
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataFormatError(path, None, f"not valid JSON ({e})") from None
    if not isinstance(info, dict) or info.get("retriever") not in RETRIEVERS:
        raise DataFormatError(path, None, f"expected a JSON object with 'retriever' one of {list(RETRIEVERS)}")
    return info


def describe_encoder(model_dir: str | Path) -> str:
    """One line: which encoder and why (the line `minisci index` and `minisci demo` print)."""
    served = served_retrieval(model_dir).get("encoder")
    return f"encoder {model_dir} ({SERVED_AS[served]})" if served in SERVED_AS else f"encoder {model_dir}"


def load_encoder(model_dir: str | Path, precision: str = "fp32", device: str = "cpu"):
    """(encoder, tokenizer) of a model directory; ``precision`` as in :mod:`minisci.serve.precision`.

    A sentence-transformers directory (``modules.json``) loads as a ``SentenceTransformer``, so its
    own pooling and normalisation make the embeddings; a plain encoder is mean-pooled
    (:mod:`minisci.encoding`). Safetensors weights only."""
    path = Path(model_dir)
    check_encoder(path, read_config(path))
    check_weights(path)
    device = resolve_device(device)
    if not is_sentence_transformer(path):
        with loading(path):
            model, tok = encoding.load_encoder(path)
        return apply_precision(model.to(device), precision), tok
    from sentence_transformers import SentenceTransformer

    with loading(path):
        model = SentenceTransformer(
            str(path),
            device=device,
            local_files_only=True,
            trust_remote_code=False,
            model_kwargs={"use_safetensors": True},
        )
    apply_precision(model[0].auto_model, precision)
    return model.eval(), model.tokenizer


def read_collection(path: str | Path) -> list[dict]:
    """JSONL documents with ``id`` and at least one of ``title`` / ``text``; ``authors`` optional. ``path``
    may also be ``-`` (standard input) or a pipe such as the shell's ``<(zcat papers.jsonl.gz)``."""
    with spooled(path) as source:
        with decoding(source):
            rows = list(iter_jsonl(source))
    path = input_name(path)
    docs = [collection_document(obj, path, lineno) for lineno, obj in rows]
    if not docs:
        raise DataFormatError(path, None, "no documents")
    return docs


def collection_documents(records) -> list[dict]:
    """Documents given in Python (:meth:`minisci.serve.api.Index.build`): mappings with the fields of a
    collection's lines, or documents :func:`read_collection` returned; errors name ``docs[i]``."""
    if isinstance(records, (str, bytes, Mapping)) or not isinstance(records, Iterable):
        raise MinisciError(f"docs: expected a JSONL file or a list of documents, got {type(records).__name__}")
    docs = [
        collection_document(obj, f"docs[{i}]", None, read=isinstance(obj, Mapping) and "_text" in obj)
        for i, obj in enumerate(records)
    ]
    if not docs:
        raise MinisciError("docs: no documents")
    return docs


def collection_document(obj, path, line: int | None, read: bool = False) -> dict:
    """One document as an index holds it, checked: an ``id`` (a non-blank string or an integer: an
    empty or null id could not be told apart in results), a non-empty ``title`` or ``text``, and
    ``authors`` a list of names (a blank name would be ranked as a reviewer). ``read``: a document
    that :func:`read_collection` returned, whose ``_text`` (title and text) is checked and kept."""
    if not isinstance(obj, Mapping):
        raise DataFormatError(path, line, f"expected a JSON object, got {type(obj).__name__}")
    title, text = obj.get("title"), obj.get("_text" if read else "text")
    if title is not None and not isinstance(title, str) or text is not None and not isinstance(text, str):
        raise DataFormatError(path, line, "'title' and 'text' must be strings")
    body = text if read else " ".join(x for x in (title, text) if x and x.strip())
    if "id" not in obj or not body or not body.strip():
        raise DataFormatError(path, line, "expected an 'id' and a non-empty 'title' or 'text'")
    doc_id = obj["id"]
    if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or not str(doc_id).strip():
        raise DataFormatError(path, line, f"'id' must be a non-empty string or an integer, got {doc_id!r}")
    authors = obj.get("authors", [])
    if not isinstance(authors, list) or not all(isinstance(a, str) for a in authors):
        raise DataFormatError(path, line, "'authors' must be a list of strings")
    blank = next((i for i, a in enumerate(authors, start=1) if not a.strip()), None)
    if blank is not None:
        raise DataFormatError(path, line, f"'authors' has a blank name (name {blank} of {len(authors)})")
    return {"id": str(doc_id), "title": title or "", "authors": authors, "_text": body}


@contextmanager
def spooled(path: str | Path):
    """``path`` itself when it is a regular file, a folder or nothing at all (the reader says which);
    for ``-`` (standard input), a pipe or a device, a temporary regular copy of what it gives, read once
    and deleted afterwards, since the JSONL reader takes files. Errors name ``path``, not the copy."""
    name = input_name(path)
    if str(path) != "-" and (not os.path.exists(path) or os.path.isfile(path) or os.path.isdir(path)):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="minisci-docs-") as folder:
        copy = Path(folder) / "docs.jsonl"
        with copy.open("wb") as out:
            if str(path) == "-":
                shutil.copyfileobj(getattr(sys.stdin, "buffer", None) or io.BytesIO(sys.stdin.read().encode()), out)
            else:
                with open(path, "rb") as f:
                    shutil.copyfileobj(f, out)
        try:
            yield copy
        except DataFormatError as e:
            where = f"{copy}:{e.line}" if e.line is not None else f"{copy}"
            raise DataFormatError(name, e.line, str(e).removeprefix(f"{where}: ")) from None


@contextmanager
def decoding(path: str | Path):
    """A text file that is not UTF-8 is an error naming the file, line and byte offset."""
    try:
        yield
    except UnicodeDecodeError:
        data = Path(path).read_bytes()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as e:
            line = data[: e.start].count(b"\n") + 1
            raise DataFormatError(path, line, f"not UTF-8 (byte offset {e.start})") from None
        raise


INDEX_FILES = ("index.json", "embeddings.npy", "documents.jsonl", "bm25")


def _index_before_markers(path: Path) -> bool:
    """An index written before output markers: exactly an index's own files, nothing else to lose
    (the top level looked at first: a user's big folder given as --out is not walked)."""
    if not all(p.name in INDEX_FILES or p.name == OUTPUT_MARKER for p in path.iterdir()):
        return False
    return all(_index_own(p.relative_to(path).as_posix()) for p in path.rglob("*") if not p.is_dir())


def _index_own(name: str) -> bool:
    """Is ``name`` (a file's path inside an index folder) one an index writes? Its own files at the
    top, and in ``bm25/`` the files bm25s saves (``*.index.json``, ``*.index.npy``), nothing deeper."""
    top, _, rest = name.partition("/")
    if top == "bm25":
        return "/" not in rest and rest.endswith((".index.json", ".index.npy"))
    return not rest and (top in INDEX_FILES or top == OUTPUT_MARKER)


def check_out_dir(out_dir: str | Path) -> None:
    """Only an earlier index (or an empty folder) may be replaced: a folder that also holds other
    files, ``index.json`` or not, is refused with the names of those files; so is another output of
    minisci's (a model, a prepared dataset), marker or not. Nothing is deleted."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise MinisciError(f"--out {out}: exists and is not a directory")
    _check_writable(out)
    try:
        check_replaceable(out, owned=_index_before_markers)
    except OutputExistsError:
        raise MinisciError(
            f"--out {out}: not an earlier index (no {OUTPUT_MARKER} file); refusing to replace it and delete "
            f"{files_to_lose(out)}: choose a new or empty directory"
        ) from None
    if not out.is_dir() or not any(out.iterdir()) or _index_before_markers(out) and (out / "index.json").is_file():
        return
    if (out / "index.json").is_file():  # an index of ours that someone put files into since
        theirs = files_to_lose(out, theirs_only=True)
        raise MinisciError(
            f"--out {out}: an earlier index, but it also holds files minisci did not write ({theirs}); refusing "
            "to replace it and delete them: move them out, or choose a new or empty directory"
        )
    raise MinisciError(
        f"--out {out}: not an earlier index but another output ({files_to_lose(out)}); refusing to replace "
        "it: choose a new or empty directory"
    )


def _check_writable(out: Path) -> None:
    """The index is written into a temporary folder beside ``out`` (missing folders above it are
    made): try that now, in the nearest folder that exists, so a read-only place, a file in the path
    or /proc is one line naming ``--out`` before the documents are embedded, not a temporary's name
    after."""
    import tempfile

    above = out.absolute().parent
    while not above.exists() and above != above.parent:
        above = above.parent
    if not above.is_dir():
        raise MinisciError(f"--out {out}: {above} is not a directory")
    try:
        Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".probe", dir=above)).rmdir()
    except OSError as e:
        raise MinisciError(f"--out {out}: cannot write in {above} ({e.strerror or e})") from None


def files_to_lose(out: Path, theirs_only: bool = False, limit: int = 5) -> str:
    """The files under ``out`` that replacing it would delete, for a refusal to name: first those that
    are not an index's own (the user's, which a list led by ``bm25/...`` would hide), then, unless
    ``theirs_only``, the index's; the marker left out."""
    files = [p.relative_to(out).as_posix() for p in out.rglob("*") if not p.is_dir()]
    ours = {f: _index_own(f) for f in files if f != OUTPUT_MARKER}
    files = sorted((f for f, own in ours.items() if not (own and theirs_only)), key=lambda f: (ours[f], f))
    shown = ", ".join(files[:limit]) + (f" and {len(files) - limit} more" if len(files) > limit else "")
    return shown or "empty folders"


def duplicate_ids(docs: list[dict]) -> list[str]:
    """Ids that more than one document has (search results could not tell those documents apart)."""
    seen: dict[str, int] = defaultdict(int)
    for d in docs:
        seen[d["id"]] += 1
    return sorted(i for i, n in seen.items() if n > 1)


def build_index(
    model_dir,
    docs: list[dict],
    out_dir,
    batch_size: int = 64,
    max_length: int | None = None,
    progress: Callable | None = None,
    precision: str = "fp32",
    max_tokens: int = 2048,
    device: str = "cpu",
    retriever: str | None = None,
) -> dict:
    """Embed ``docs`` into ``out_dir``; queries against the index are embedded with the same model,
    ``max_length`` and ``precision`` (recorded in ``index.json``). An existing ``out_dir`` is replaced
    only if it is an index. ``max_length`` None: 256 word pieces, or the model's maximum if smaller.
    ``retriever`` None: the one recorded beside the model (``retrieval.json``), else ``dense``."""
    check_out_dir(out_dir)
    retriever = retriever or served_retrieval(model_dir).get("retriever", "dense")
    if retriever not in RETRIEVERS:
        raise MinisciError(f"unknown retriever {retriever!r}; choose from {list(RETRIEVERS)}")
    config = read_config(model_dir)
    if max_length is None:  # the usual window, or the whole model if it takes fewer positions
        max_length = min(DEFAULT_MAX_LENGTH, max_positions(config))
    check_max_length(max_length, config, model_dir)
    model, tok = load_encoder(model_dir, precision, device)
    vecs = embed(model, tok, [d["_text"] for d in docs], batch_size, max_length, progress, max_tokens)
    info = {
        # the encoder, relative to the index (the pair moves together) and absolute (the index alone moves)
        "encoder": Path(os.path.relpath(Path(model_dir).resolve(), Path(out_dir).resolve())).as_posix(),
        "model": str(Path(model_dir).resolve()),
        "dimension": int(vecs.shape[1]),
        "documents": len(docs),
        "max_length": max_length,
        "precision": precision,
        "retriever": retriever,
        "encoder_sha256": encoder_sha256(model_dir),  # a same-sized other model must not answer queries
    }
    with atomic_path(out_dir, owned=_index_before_markers) as tmp:
        tmp.mkdir()
        if retriever != "dense":
            Bm25.build([d["_text"] for d in docs]).save(tmp / "bm25")
        np.save(tmp / "embeddings.npy", vecs, allow_pickle=False)
        write_jsonl(tmp / "documents.jsonl", [{k: v for k, v in d.items() if k != "_text"} for d in docs])
        (tmp / "index.json").write_text(json.dumps(info, indent=2) + "\n")
    return {**info, "duplicate_ids": duplicate_ids(docs)}


def duplicate_warning(ids: list[str]) -> str:
    shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
    return f"{len(ids)} document id{'s' * (len(ids) != 1)} used more than once ({shown}); results cannot tell those documents apart"


def load_index(index_dir) -> tuple[np.ndarray, list[dict], dict]:
    """Embeddings, documents and ``index.json`` of an index, checked against each other."""
    index_dir = Path(index_dir)
    if not index_dir.exists():
        raise MinisciError(f"{index_dir}: no such folder; build an index there with `minisci index --out {index_dir}`")
    if not (index_dir / "index.json").is_file():
        what = "a folder" if index_dir.is_dir() else "a file"
        raise MinisciError(f"{index_dir}: {what}, not an index (no index.json); build one with `minisci index`")
    info = _read_info(index_dir / "index.json")
    vecs = _read_embeddings(index_dir / "embeddings.npy")
    docs = _read_documents(index_dir / "documents.jsonl")
    if not (len(vecs) == len(docs) == info["documents"]):
        raise MinisciError(
            f"{index_dir}: inconsistent index: {len(vecs)} embeddings, {len(docs)} documents, "
            f"index.json says {info['documents']}; rebuild it with `minisci index`"
        )
    if vecs.shape[1] != info["dimension"]:
        raise MinisciError(
            f"{index_dir}: embeddings.npy has dimension {vecs.shape[1]}, index.json says {info['dimension']}"
        )
    return vecs, docs, info


def _read_info(path: Path) -> dict:
    try:
        info = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataFormatError(path, None, f"not valid JSON ({e}); rebuild the index with `minisci index`") from None
    if not isinstance(info, dict):
        raise DataFormatError(path, None, "expected a JSON object")
    for key, kind in INDEX_FIELDS.items():
        if not isinstance(info.get(key), kind) or isinstance(info.get(key), bool):
            raise DataFormatError(path, None, f"expected {key!r} ({kind.__name__}), got {info.get(key)!r}")
    if info.get("retriever", "dense") not in RETRIEVERS:
        raise DataFormatError(
            path, None, f"unknown retriever {info['retriever']!r}; expected one of {list(RETRIEVERS)}"
        )
    if not isinstance(info.get("encoder_sha256", ""), str):
        raise DataFormatError(path, None, f"expected 'encoder_sha256' (str), got {info['encoder_sha256']!r}")
    if info.get("precision", "fp32") not in PRECISIONS:
        raise DataFormatError(
            path, None, f"unknown precision {info['precision']!r}; expected one of {list(PRECISIONS)}"
        )
    return info


def _read_embeddings(path: Path) -> np.ndarray:
    if not path.is_file():
        raise MinisciError(f"{path}: missing; rebuild the index with `minisci index`")
    try:
        vecs = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise MinisciError(f"{path}: not a readable NumPy array ({first}); rebuild the index") from None
    if vecs.ndim != 2 or vecs.dtype.kind != "f" or not np.isfinite(vecs).all():
        raise MinisciError(f"{path}: expected a finite float matrix, got {vecs.dtype} {vecs.shape}")
    return vecs.astype(np.float32, copy=False)


def _read_documents(path: Path) -> list[dict]:
    docs = []
    with decoding(path):
        rows = list(iter_jsonl(path))
    for lineno, row in rows:
        if not isinstance(row.get("id"), str) or not isinstance(row.get("title"), str):
            raise DataFormatError(path, lineno, "expected string fields 'id' and 'title'")
        authors = row.get("authors", [])
        if not isinstance(authors, list) or not all(isinstance(a, str) for a in authors):
            raise DataFormatError(path, lineno, "'authors' must be a list of strings")
        docs.append({**row, "authors": authors})
    return docs


def encoder_of(index_dir, info: dict, model: str | Path | None = None) -> Path:
    """The encoder that embeds queries: ``model`` if given, else the one ``index.json`` records,
    found relative to the index (so the index works from any working directory and after its
    folder moved with its encoder), then at its absolute path; the first with the recorded content
    hash (a relative path may lead to another project's model)."""
    if model is not None:
        return Path(model)
    candidates = [Path(index_dir) / info["encoder"]] if isinstance(info.get("encoder"), str) else []
    candidates.append(Path(info["model"]))  # absolute; relative to the working directory for older indexes
    found = [path for path in candidates if (path / "config.json").is_file()]
    if not found:
        raise MinisciError(
            f"{index_dir}: the encoder it was built with is not found ({info['model']}); "
            "pass the same encoder with --model (its content is checked against the index)"
        )
    recorded = info.get("encoder_sha256")
    return next((path for path in found if not recorded or encoder_sha256(path) == recorded), found[0])


def load_query_encoder(index_dir, info: dict, vecs: np.ndarray, model=None, precision=None, device: str = "cpu"):
    """(encoder, tokenizer) for queries to an index, checked to give the index's dimension."""
    path = encoder_of(index_dir, info, model)
    encoder = load_encoder(path, precision or info.get("precision", "fp32"), device)
    check_dimension(index_dir, vecs, encoder[0], path)  # the plainer message where it applies
    check_same_encoder(index_dir, info, path)
    return encoder


def check_same_encoder(index_dir, info: dict, model_dir) -> None:
    """Queries must be embedded by the encoder that embedded the documents: another model of the same
    dimension (a copied index whose relative path finds another project's model) gives meaningless
    scores without any error. Indexes written before the hash was recorded are checked by dimension only."""
    recorded = info.get("encoder_sha256")
    if recorded and encoder_sha256(model_dir) != recorded:
        raise MinisciError(
            f"{index_dir}: built with another encoder than {model_dir} (content sha256 {recorded[:12]} recorded, "
            f"{encoder_sha256(model_dir)[:12]} found); pass the index's own encoder with --model, or rebuild the "
            f"index with `minisci index --model {model_dir}`"
        )


BM25_JSON = ("params.index.json", "vocab.index.json")  # what Bm25.save writes (bm25s' names), checked here
BM25_ARRAYS = {"data.csc.index.npy": "f", "indices.csc.index.npy": "iu", "indptr.csc.index.npy": "iu"}  # dtype kinds


def load_lexical(index_dir, info: dict) -> Bm25 | None:
    """The index's BM25 when its retriever uses one, its files checked first: bm25s reads them
    unchecked, so a truncated or foreign file would fail with an error that names no file, or only
    at the first query (an index out of range)."""
    if info.get("retriever", "dense") == "dense":
        return None
    path = Path(index_dir) / "bm25"
    if not path.is_dir():
        raise MinisciError(f"{path}: missing; the index's retriever is {info['retriever']}; rebuild the index")
    params, vocab = (_read_bm25_json(path / name) for name in BM25_JSON)
    _check_bm25(path, info, params, vocab, *(_read_bm25_array(path / n, kinds) for n, kinds in BM25_ARRAYS.items()))
    try:
        bm25 = Bm25.load(path)
        bm25.retriever.get_scores_from_ids([0])  # one query now: a setting bm25s cannot use fails here
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise MinisciError(f"{path / BM25_JSON[0]}: bm25s cannot use it ({first}); rebuild the index") from None
    return bm25


def _read_bm25_json(path: Path) -> dict:
    if not path.is_file():
        raise MinisciError(f"{path}: missing; rebuild the index with `minisci index`")
    try:
        value = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataFormatError(path, None, f"not valid JSON ({e}); rebuild the index with `minisci index`") from None
    if not isinstance(value, dict):
        raise DataFormatError(path, None, f"expected a JSON object, got {type(value).__name__}; rebuild the index")
    return value


def _read_bm25_array(path: Path, kinds: str) -> np.ndarray:
    """A vector of one of the dtype ``kinds``, mapped rather than read (bm25s reads it next)."""
    if not path.is_file():
        raise MinisciError(f"{path}: missing; rebuild the index with `minisci index`")
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise MinisciError(f"{path}: not a readable NumPy array ({first}); rebuild the index") from None
    if array.ndim != 1 or array.dtype.kind not in kinds or kinds == "f" and not np.isfinite(array).all():
        what = "a vector of finite floats" if kinds == "f" else "a vector of integers"
        raise MinisciError(f"{path}: expected {what}, got {array.dtype} of shape {array.shape}; rebuild the index")
    return array


def _check_bm25(path: Path, info: dict, params: dict, vocab: dict, data, indices, indptr) -> None:
    """The BM25 files against each other and the index. They hold a sparse matrix (bm25s' CSC layout):
    one column per word of the vocabulary, whose entries ``indptr`` delimits in ``data`` (scores) and
    ``indices`` (document numbers)."""
    docs = params.get("num_docs")
    if isinstance(docs, bool) or not isinstance(docs, int) or docs != info["documents"]:
        raise DataFormatError(
            path / BM25_JSON[0], None, f"'num_docs' is {docs!r}, index.json says {info['documents']}; rebuild the index"
        )
    words = len(indptr) - 1
    if words < 1 or indptr[0] != 0 or indptr[-1] != len(data) or (np.diff(indptr) < 0).any():
        raise MinisciError(
            f"{path / 'indptr.csc.index.npy'}: expected offsets rising from 0 to {len(data)} (the entries of "
            "data.csc.index.npy); rebuild the index"
        )
    if len(indices) != len(data):
        raise MinisciError(
            f"{path / 'indices.csc.index.npy'}: {len(indices)} entries, data.csc.index.npy has {len(data)}; "
            "rebuild the index"
        )
    if len(indices) and (indices.min() < 0 or indices.max() >= docs):
        raise MinisciError(
            f"{path / 'indices.csc.index.npy'}: document numbers outside 0-{docs - 1}; rebuild the index"
        )
    # bm25s numbers "" (the word of an empty document) after the matrix's columns; no query has it
    ids = (i for word, i in vocab.items() if word)
    if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < words for i in ids):
        raise DataFormatError(
            path / BM25_JSON[1],
            None,
            f"expected word ids from 0 to {words - 1} (the columns of indptr.csc.index.npy); rebuild the index",
        )


SCORES = {  # what an index's scores are, by its retriever (the demo's captions)
    "dense": "cosine similarity of the embeddings",
    "bm25": "BM25 keyword scores (0 and up, not cosines)",
    "hybrid": "reciprocal rank fusion of cosine and BM25 ranks (about 0.03 at the top, not cosines)",
}


def index_scores(info: dict, vecs: np.ndarray, query_vec: np.ndarray, query: str, bm25: Bm25 | None) -> np.ndarray:
    """One score per document by the index's retriever (cosine, BM25 or the fused ranks)."""
    cosine = vecs @ query_vec
    retriever = info.get("retriever", "dense")
    if retriever == "dense":
        return cosine
    if retriever == "bm25":
        return bm25.scores(query)
    return hybrid_scores(cosine, bm25.scores(query))


def check_dimension(index_dir, vecs: np.ndarray, model, model_dir) -> None:
    if dimension(model) != vecs.shape[1]:
        raise MinisciError(
            f"{index_dir}: embeddings have dimension {vecs.shape[1]}, the model {model_dir} gives {dimension(model)}"
        )


def _query_vector(index_dir, text: str, info: dict, vecs: np.ndarray, encoder, device: str, model=None) -> np.ndarray:
    """The query embedded as the documents were; the model must still give the index's dimension."""
    check_text(text, "query")
    if encoder is None:
        encoder = load_query_encoder(index_dir, info, vecs, model, device=device)
    else:
        check_dimension(index_dir, vecs, encoder[0], info["model"])
    model, tok = encoder
    return embed(model, tok, [text], max_length=info["max_length"])[0]


def search(index_dir, query: str, k: int = 10, encoder=None, device: str = "cpu", model=None) -> list[dict]:
    """The ``k`` documents most similar to ``query`` (by the index's retriever), best first; ``model``: the encoder,
    default the index's own (:func:`encoder_of`)."""
    check_k(k)
    vecs, docs, info = load_index(index_dir)
    query_vec = _query_vector(index_dir, query, info, vecs, encoder, device, model)
    scores = index_scores(info, vecs, query_vec, query, load_lexical(index_dir, info))
    return rank_documents(scores, docs, k, matched(info, scores))


def matched(info: dict, scores: np.ndarray) -> np.ndarray | None:
    """The documents a retriever found at all: BM25's share a word with the query (a score above 0);
    every document for the others (None)."""
    return scores > 0 if info.get("retriever", "dense") == "bm25" else None


def rank_documents(scores: np.ndarray, docs: list[dict], k: int = 10, found: np.ndarray | None = None) -> list[dict]:
    """The ``k`` best documents for one query's ``scores`` (one per document), ties in index order;
    only those ``found`` (:func:`matched`), if given."""
    order = np.argsort(-scores, kind="stable")
    top = (order[found[order]] if found is not None else order)[:k]
    return [{"rank": r + 1, "score": round(float(scores[i]), 4), **docs[i]} for r, i in enumerate(top)]


def recommend_reviewers(
    index_dir,
    abstract: str,
    k: int = 10,
    exclude: tuple[str, ...] = (),
    aggregation: str = "max",
    encoder=None,
    device: str = "cpu",
    model=None,
) -> list[dict]:
    """Authors ranked by the similarity of their papers to ``abstract`` (see :func:`rank_authors`)."""
    check_k(k)
    vecs, docs, info = load_index(index_dir)
    query_vec = _query_vector(index_dir, abstract, info, vecs, encoder, device, model)
    scores = index_scores(info, vecs, query_vec, abstract, load_lexical(index_dir, info))
    return rank_authors(scores, docs, k, exclude, aggregation, matched(info, scores))


def author_key(name: str) -> str:
    """How ``--exclude`` matches an author: case and surrounding spaces do not count."""
    return name.casefold().strip()


def rank_authors(
    scores: np.ndarray,
    docs: list[dict],
    k: int = 10,
    exclude: tuple[str, ...] = (),
    aggregation: str = "max",
    found: np.ndarray | None = None,
) -> list[dict]:
    """Authors ranked by their papers' ``scores``, each with their (up to three) best papers' ids.

    ``max``: an author's best-matching paper; ``mean_top3``: the mean of their three best (rewards
    sustained expertise over one lucky paper). Excluded authors (conflicts of interest) are matched
    case-insensitively. ``found`` (:func:`matched`): only authors with a paper the retriever found
    are ranked, and only those papers are listed (a paper BM25 did not find scores 0 and counts as
    such in ``mean_top3``): an abstract that shares no word with any paper ranks no one, rather than
    everyone at 0 in alphabetical order.
    """
    if aggregation not in AGGREGATIONS:
        raise MinisciError(f"unknown aggregation {aggregation!r}; choose from {list(AGGREGATIONS)}")
    check_k(k)
    banned = {author_key(a) for a in exclude}
    papers = defaultdict(list)
    for i, d in enumerate(docs):
        for a in d.get("authors", []):
            if author_key(a) not in banned:
                papers[a].append((float(scores[i]), d["id"], i))
    ranked = []
    for author, ps in papers.items():
        ps.sort(reverse=True)
        best = [(s, pid, i) for s, pid, i in ps[:3] if found is None or found[i]]
        if not best:
            continue
        score = ps[0][0] if aggregation == "max" else float(np.mean([s for s, _, _ in ps[:3]]))
        ranked.append({"author": author, "score": round(score, 4), "papers": [pid for _, pid, _ in best]})
    ranked.sort(key=lambda r: (-r["score"], r["author"]))
    return [{"rank": i + 1, **r} for i, r in enumerate(ranked[:k])]


def why_no_reviewers(docs: list[dict], exclude: Sequence[str] = ()) -> tuple[str, str]:
    """Why :func:`rank_authors` ranked no one over ``docs`` with ``exclude``d authors: the input to
    blame (``"index"``, ``"exclude"``, or ``"abstract"``: with the bm25 retriever, no paper of an
    author left shares a word with it) and the reason."""
    if not any(d.get("authors") for d in docs):
        return "index", "no document in the index has authors; build it from documents with an 'authors' list"
    banned = {author_key(a) for a in exclude}
    if all(author_key(a) in banned for d in docs for a in d.get("authors", [])):
        return "exclude", "every author in the index is excluded"
    whose = "by an author not excluded" if banned else "in the index"
    return "abstract", f"no paper {whose} shares a word with the abstract (the index's retriever is bm25)"


def author_holdout(vecs: np.ndarray, docs: list[dict], k: int = 3) -> dict:
    """How well :func:`rank_authors` recommends an author for their own next paper: each author's
    latest paper (the last in collection order: collections carry no dates) is taken out of the
    collection and used as the query, and the author counts as found when ranked among the top ``k``
    by their other papers. Authors with one paper only cannot be found and are left out.
    ``chance``: the top-``k`` rate of a random ranking of the candidate authors."""
    check_k(k)
    latest: dict[str, int] = {}
    for i, d in enumerate(docs):
        for a in d.get("authors", []):
            latest[a] = i
    counts = defaultdict(int)
    for d in docs:
        for a in d.get("authors", []):
            counts[a] += 1
    found, chance = [], []
    for author, i in sorted(latest.items()):
        if counts[author] < 2:
            continue
        keep = [j for j in range(len(docs)) if j != i]
        ranked = rank_authors(vecs[keep] @ vecs[i], [docs[j] for j in keep], k=len(latest))
        found.append(author in {r["author"] for r in ranked[:k]})
        chance.append(min(1.0, k / len(ranked)))
    return {
        "authors": len(found),
        "single_paper_authors": len(latest) - len(found),
        "k": k,
        "found_in_top_k": round(float(np.mean(found)), 4) if found else None,
        "chance": round(float(np.mean(chance)), 4) if chance else None,
    }
