"""What a task kind is: its facts, the functions that encode, decode and score it, and how the
report shows it (counts in the layout of :mod:`minisci.tasks.counting`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


@dataclasses.dataclass(frozen=True)
class TaskKind:
    """One task kind: its facts, the functions that encode, decode and score it, and how the report
    shows it. :mod:`minisci.tasks` registers one per kind; everything task-specific reads it here."""

    # facts
    name: str  # the catalogue's ``task`` and the summary keys' prefix
    title: str  # how the report names a dataset of this kind
    formats: tuple[str, ...]  # catalogue file formats
    stage: str  # the fine-tuning stage (params section, folder of metrics and models)
    config: str  # the name of that section's dataclass in minisci.config
    head: str  # the transformers architecture suffix of a fine-tuned model
    auto_class: str  # the transformers Auto class of that head
    pipeline_tag: str  # the transformers pipeline task
    command: str  # the ``minisci`` command that serves it
    needs: str  # what that command needs, in words
    size_unit: str  # what a test example is: sentences | examples
    feature_unit: str  # what a training feature is: windows | texts
    valid_labels: Callable  # (a model's label names) -> whether they fit the kind (B-/I-/O for NER)
    # fine-tuning
    selection_key: str  # the dev metric that chooses the epoch
    seed_keys: tuple[str, ...]  # test metrics reported per seed and as mean +- sd
    model_labels: Callable  # (dataset labels) -> the model's label list
    values: Callable  # (training split) -> every training label value (class weights)
    encode: Callable  # (examples, tokenizer, label2id, max_length) -> training features
    collate: Callable  # (tokenizer) -> the training collator
    features: Callable  # (examples, tokenizer, cfg) -> the model inputs predict scores (dev: encoded once per seed)
    predict: Callable  # (model, tokenizer, examples, id2label, cfg, features=None) -> one prediction per example
    decode: Callable  # (predictions) -> the predicted label(s) of each example
    score: Callable  # (examples, predicted labels, labels) -> the stage's metrics
    describe: Callable  # (data, cfg, tokenizer) -> extra metrics about the data
    rows: Callable  # (examples, predictions) -> test prediction rows
    identity: Callable  # (example) -> what identifies it in the run id (resume)
    trim_dev: Callable  # (dev metrics) -> what dev_per_epoch keeps
    weights_in_metrics: bool  # whether the stage's metrics record the class weights
    # counts and scores (the layout of the module docstring)
    items: Callable  # (gold, every prediction list, labels) -> the items counted, in order
    count: Callable  # (gold, pred, items) -> counts (examples, 3 * items)
    scores: Callable  # (n_items) -> {name: summed counts -> score}; "f1" is the headline of studies
    # report facets
    metric: str  # the headline test metric, compared between arms ("f1" score of :attr:`scores`)
    metric_label: str
    score_word: str  # the headline F1 in the studies' words: F1 | macro-F1
    average: str  # how the studies' precision, recall and F1 pool the items: micro | macro
    summary_keys: tuple[str, ...]  # test metrics in summary.json
    columns: tuple[tuple[str, str], ...]  # (header, test metric) of the details table
    breakdown: str  # per-item test scores in the stage's metrics: per_type | per_class
    item_word: str  # what one breakdown row is: type | class
    label_word: str  # what a label is, in messages: entity type | class
    curves: tuple[str, ...]  # training curves overlaid for both arms in the top-level DVC plots
    report_labels: Callable  # (arms' metrics, arms' test rows) -> the labels the comparison counts over
    label_counts: str  # the per-label counts of a split in dataset.json: entities_per_type | per_label
    errors: str  # the error analysis of minisci.report.error_analysis.ANALYSES: spans | examples
    # a head class that replaces :attr:`auto_class` in fine-tuning (``finetune_ner.crf``: the CRF
    # tagger); the stage that fine-tunes the kind sets it, so no other stage reaches the head's code
    head_class: type | None = None

    def counts(self, rows: list[dict], items: list[str]) -> np.ndarray:
        """Per-example counts of test prediction rows (``gold`` and ``pred`` of each)."""
        return self.count([r["gold"] for r in rows], [r["pred"] for r in rows], items)

    def headline(self, n_items: int) -> Callable:
        """Summed counts -> the headline metric (:attr:`metric`)."""
        return self.scores(n_items)["f1"]
