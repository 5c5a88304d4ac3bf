"""The task kinds (minisci.tasks): one contract that every registered kind meets, a toy third kind
that flows through the report and the studies unchanged, no task name compared outside tasks/, and
no import circles in the package."""

from __future__ import annotations

import ast
import dataclasses
import json
import random
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import REPO, synthetic_embeddings_metrics

from minisci.config import ExportMetricsConfig
from minisci.data.readers import Example, NerSentence, to_iob2
from minisci.fingerprint import minisci_imports, module_file
from minisci.metrics.scores import classification_scores
from minisci.report import export, studies
from minisci.tasks import counting, registry
from minisci.tasks.classification import CLASSIFICATION

# 1. the contract: encode -> predict -> decode -> counts -> scores, checked against the metric modules


def _ner_examples(rng: random.Random) -> list[NerSentence]:
    words, types = ["aspirin", "causes", "liver", "damage", "in", "rats", "heart", "failure"], ["Chemical", "Disease"]
    tags = ["O"] + [f"{p}-{t}" for t in types for p in "BI"]
    return [
        NerSentence(tuple(rng.choices(words, k=n)), tuple(to_iob2([rng.choice(tags) for _ in range(n)])), None, i)
        for i, n in enumerate(rng.randint(1, 30) for _ in range(40))
    ]


def _classification_examples(rng: random.Random) -> list[Example]:
    labels = ["background", "method", "result", "never"]  # "never" is declared, never in gold
    return [Example(f"text {i} about {rng.choice(['a', 'b', 'c'])}", rng.choice(labels[:3]), i) for i in range(60)]


# Every registered kind needs a tiny fixture here: examples and the dataset's declared labels.
FIXTURES = {
    "ner": (_ner_examples, ["Chemical", "Disease"]),
    "classification": (_classification_examples, ["background", "method", "result", "never"]),
}


class HashModel:
    """A stand-in for a fine-tuned model: fixed random logits per word piece (token heads) or their
    mean (sequence heads), so that predictions are arbitrary but deterministic."""

    def __init__(self, n_labels: int, per_token: bool, vocab: int):
        import torch

        self.table = torch.randn(vocab, n_labels, generator=torch.Generator().manual_seed(0))
        self.per_token = per_token
        self.weight = torch.zeros(1)

    def parameters(self):
        return iter([self.weight])

    def eval(self):
        return self

    def __call__(self, input_ids, attention_mask=None, token_type_ids=None):
        logits = self.table[input_ids]
        return SimpleNamespace(logits=logits if self.per_token else logits[:, 0])


@pytest.mark.parametrize("name", list(registry.KINDS))
def test_every_kind_encodes_decodes_counts_and_scores_as_its_metric_module(name, tiny_model_dir):
    from transformers import AutoTokenizer

    kind = registry.get(name)
    assert name in FIXTURES, f"the kind {name!r} needs a tiny fixture in FIXTURES"
    make, declared = FIXTURES[name]
    examples = make(random.Random(0))
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    labels = kind.model_labels(declared)
    label2id = {lab: i for i, lab in enumerate(labels)}
    cfg = SimpleNamespace(max_length=12, eval_batch_size=7)  # short: long NER sentences are windowed
    # encode: one feature per window or text, with labels the loss can read
    feats = kind.encode(examples, tokenizer, label2id, cfg.max_length)
    assert feats and all(len(f["input_ids"]) <= cfg.max_length and "labels" in f for f in feats)
    assert kind.collate(tokenizer)(feats[:3])["input_ids"].shape[0] == 3
    # predict and decode: one prediction per example
    model = HashModel(len(labels), per_token=kind.head.endswith("TokenClassification"), vocab=len(tokenizer))
    predictions = kind.predict(model, tokenizer, examples, dict(enumerate(labels)), cfg)
    # the inputs encoded once (as the stage encodes dev once per seed) predict the same
    features = kind.features(examples, tokenizer, cfg)
    assert kind.predict(model, tokenizer, examples, dict(enumerate(labels)), cfg, features) == predictions
    pred = kind.decode(predictions)
    assert len(pred) == len(examples)
    metrics = kind.score(examples, pred, labels)
    # counts -> scores: the headline equals the metric module's, from the saved prediction rows
    rows = kind.rows(examples, predictions)
    items = kind.items([r["gold"] for r in rows], [[r["pred"] for r in rows]], labels)
    counts = kind.counts(rows, items)
    assert counts.shape == (len(examples), 3 * len(items))
    scores = {k: round(float(f(counts.sum(0))), 4) for k, f in kind.scores(len(items)).items()}
    assert scores["f1"] == metrics[kind.metric] and 0 < metrics[kind.metric] < 1
    for shared in ("precision", "recall", "accuracy"):
        if shared in scores and shared in metrics:  # NER: micro P and R; classification: accuracy
            assert scores[shared] == metrics[shared]
    for k, item in enumerate(items):  # per item, the breakdown the stage reports
        if metrics[kind.breakdown].get(item, {}).get("f1") is not None:
            assert round(float(counting.f1(counting.item(counts.sum(0), k))), 4) == metrics[kind.breakdown][item]["f1"]


def test_the_registry_maps_entries_commands_pipelines_and_configs_to_kinds():
    assert registry.of_entry({"task": "classification"}) is CLASSIFICATION
    assert registry.of_command("cite") is CLASSIFICATION and registry.of_stage("finetune_ner") is registry.NER
    assert registry.of_pipeline("token-classification") is registry.NER
    assert registry.of_config({"architectures": ["BertCrfForTokenClassification"]}) is registry.NER
    assert registry.of_config({"architectures": ["BertForMaskedLM"]}) is None
    with pytest.raises(Exception, match=r"unknown task 'parsing'; known: ner, classification"):
        registry.get("parsing")


def test_the_facts_the_configuration_reads_are_each_kinds_own():
    """config.py validates catalogue entries by minisci.tasks.facts (data only, so that stages that
    fine-tune nothing do not import task code); every registered kind's facts are its own."""
    from minisci.tasks import facts

    assert set(facts.FACTS) == set(registry.KINDS)
    for name, kind in registry.KINDS.items():
        assert facts.get(name) == facts.KindFacts.of(kind)


def test_a_registered_kind_is_known_to_the_configuration(toy_kind):
    from minisci.config import DatasetConfig, finetune_config
    from minisci.tasks import facts

    assert facts.get("toy").stage == "finetune_toy" and finetune_config(facts.get("toy")).__name__ == TOY.config
    entry = DatasetConfig(task="toy", dir="d", splits={"train": "a", "dev": "b", "test": "c"}, format="jsonl")
    assert entry.task == "toy"
    registry.unregister("toy")
    with pytest.raises(Exception, match="task must be one of"):
        DatasetConfig(task="toy", dir="d", splits={"train": "a", "dev": "b", "test": "c"}, format="jsonl")
    registry.register(TOY)


# 2. a third kind, registered here only, through the report and the studies --------------------------------

TOY = dataclasses.replace(
    CLASSIFICATION, name="toy", title="toy", stage="finetune_toy", command="toy", pipeline_tag="toy-classification"
)


@dataclasses.dataclass(frozen=True)
class ToyExportConfig(ExportMetricsConfig):
    equivalence_margin_toy: float = 2.0


@pytest.fixture
def toy_kind():
    registry.register(TOY)
    yield TOY
    registry.unregister(TOY.name)


def _toy_rows(rng: random.Random, gold: list[str], accuracy: float, seeds: list[int]) -> list[dict]:
    preds = {str(s): [g if rng.random() < accuracy else rng.choice(["pos", "neg"]) for g in gold] for s in seeds}
    first = preds[str(seeds[0])]
    return [
        {"i": i, "gold": g, "pred": first[i], "probs": [0.6, 0.4], "preds": {s: p[i] for s, p in preds.items()}}
        for i, g in enumerate(gold)
    ]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_a_third_kind_flows_through_export_and_studies_unchanged(toy_kind, tmp_path, monkeypatch):
    rng, seeds, labels = random.Random(0), [1, 2], ["pos", "neg"]
    gold = [rng.choice(labels) for _ in range(80)]
    metrics, models = tmp_path / "metrics", tmp_path / "models"
    rows = {"baseline": _toy_rows(rng, gold, 0.7, seeds), "adapted": _toy_rows(rng, gold, 0.8, seeds)}
    for arm, arm_rows in rows.items():
        test = classification_scores(gold, [r["pred"] for r in arm_rows], labels)
        m = {"labels": labels, "seeds": seeds, "test": test, "dev": test, "best_epoch": 1, "wall_seconds": 1.0}
        _write(metrics / "finetune_toy/set" / f"{arm}.json", json.dumps(m))
        _write(
            models / "finetune_toy/set" / arm / "test_predictions.jsonl",
            "".join(json.dumps(r) + "\n" for r in arm_rows),
        )
    pretrain = {w: {"mlm_accuracy": 0.1, "perplexity": 9.0, "nsp_accuracy": 0.5} for w in ("before", "after")}
    _write(
        metrics / "pretrain" / "13.json",
        json.dumps({**pretrain, "train": {"steps": 1, "tokens_seen": 9, "tokens_per_second": 1}}),
    )
    for name in ("sample_corpus", "make_pairs"):
        _write(metrics / f"{name}.json", "{}")
    _write(metrics / "finetune_embeddings.json", json.dumps(synthetic_embeddings_metrics()))
    cfg = ToyExportConfig(100, 13, 0.5, 1.0, 3)
    # the report: summary keys, a headline row, a details table, the chart bars, the compare plots
    data = export.collect(metrics, models, cfg, {"toy": ["set"]}, {}, None, "enc")
    summary = export.summary(data)
    assert summary["toy.set.adapted.test.macro_f1"] > summary["toy.set.baseline.test.macro_f1"]
    md = export.report(data, cfg)
    assert "| toy | set | macro-F1 | 2 |" in md and "### toy: set" in md and "toy ±2.0" in md
    export.write_compare_plots(data, tmp_path / "plots", tmp_path / "compare")
    assert (tmp_path / "compare/toy/adapted/dev_macro_f1.tsv").is_file()
    assert export.charts(data, tmp_path / "plots", tmp_path / "charts")[-1].name == "confusion_set.png"
    # the studies: a toy dataset of the catalogue is scored by its kind
    files = {}
    for rev, arm in (("c0", "baseline"), ("e1", "adapted")):
        files[(rev, f"metrics/finetune_toy/set/{arm}.json")] = json.dumps({"seeds": seeds, "labels": labels})
        files[(rev, f"models/finetune_toy/set/{arm}/test_predictions.jsonl")] = "\n".join(map(json.dumps, rows[arm]))
    monkeypatch.setattr(studies, "_read", lambda root, rev, path: files[(rev, path)])
    catalog = {"set": {"task": "toy"}}
    index = {"exp": {"rev": "e1", "commit": "c0", "params": {}, "commit_params": {}, "catalog": catalog}}
    spec = studies.parse_spec(
        {
            "experiments": {"exp": {"set": {}}},
            "studies": {
                "s": {"dataset": "set", "a": {"commit_of": "exp"}, "b": {"experiment": "exp", "arm": "adapted"}}
            },
        },
        "spec",
    )
    result = studies.run_study(spec.studies["s"], REPO, [], index, resamples=200, seed=0)
    assert result["task"] == "toy" and result["types"] == ["pos", "neg"]
    assert result["delta"]["f1"]["difference"] == data["tasks"][("toy", "set")]["bootstrap"]["difference"]
    assert "macro-F1" in studies.study_markdown(spec.studies["s"], result, spec)


# 3. no task name compared outside tasks/, and no import circles -------------------------------------------

TASK_NAMES = {"ner", "classification", "cite"}


def _compared_names(path: Path) -> list[int]:
    """Lines where a task name literal is compared (==, !=, in, not in, is) in ``path``."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            for x in [node.left, *node.comparators]:
                elts = x.elts if isinstance(x, (ast.Tuple, ast.List, ast.Set)) else [x]
                if any(isinstance(e, ast.Constant) and e.value in TASK_NAMES for e in elts):
                    lines.append(node.lineno)
    return lines


def test_no_task_name_is_compared_outside_tasks():
    """What differs between task kinds is read from the kind (minisci.tasks), never decided by comparing
    its name: a new kind then needs no edit of the report, serving or the benchmarks."""
    found = {
        p.relative_to(REPO).as_posix(): lines
        for folder in ("src", "stages", "benchmarks")
        for p in sorted((REPO / folder).rglob("*.py"))
        if "minisci/tasks/" not in p.as_posix() and (lines := _compared_names(p))
    }
    assert found == {}


def test_the_scan_finds_a_comparison(tmp_path):
    f = tmp_path / "x.py"
    f.write_text('if task == "ner":\n    pass\nok = kind in ("cite", "x")\nfine = {"ner": 1}\n')
    assert _compared_names(f) == [1, 3]


def _import_cycles(src: Path) -> list[list[str]]:
    """Strongly connected groups of more than one module in minisci's import graph (imports inside
    functions included: a lazy import is still a dependency)."""
    graph = {}
    for p in (src / "minisci").rglob("*.py"):
        name = ".".join(p.relative_to(src).with_suffix("").parts).removesuffix(".__init__")
        graph[name] = {m for m in minisci_imports(p, src) if module_file(m, src)}
    reach = {m: set() for m in graph}
    for m in graph:  # small graph: a search from every module
        todo = list(graph[m])
        while todo:
            n = todo.pop()
            if n in graph and n not in reach[m]:
                reach[m].add(n)
                todo += graph[n]
    groups = {frozenset({m} | {n for n in reach[m] if m in reach[n]}) for m in graph}
    return sorted(sorted(g) for g in groups if len(g) > 1)


def test_no_import_circles():
    assert _import_cycles(REPO / "src") == []


def test_a_circle_is_found(tmp_path):
    pkg = tmp_path / "minisci"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from minisci import b\n")
    (pkg / "b.py").write_text("def f():\n    from minisci.a import x\n")
    (pkg / "c.py").write_text("import minisci.a\n")
    assert _import_cycles(tmp_path) == [["minisci.a", "minisci.b"]]


def test_counts_are_additive_and_the_layout_is_one_triple_per_item():
    c = np.array([[1, 1, 2, 0, 1, 0], [0, 0, 1, 1, 1, 1]], dtype=float).sum(0)
    assert list(counting.triples(c, 2)[1]) == [1, 2, 1]
    assert float(counting.micro(counting.f1, 2)(c)) == pytest.approx(2 * 2 / (3 + 4))
    assert float(counting.macro(counting.f1, 2)(c)) == pytest.approx((2 / 4 + 2 / 3) / 2)


def test_counting_truncated_test_texts_gives_no_indexing_errors_warning(tiny_model_dir):
    """describe counts the test texts longer than max_length; a text longer than the tokenizer's
    model_max_length is only counted (and truncated when encoded), so transformers' "will result in
    indexing errors" warning must not be printed."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.model_max_length = 8
    data = SimpleNamespace(splits={"train": [], "test": [Example("the cell line was treated " * 5, "a", 1)]}, meta={})
    facts = CLASSIFICATION.describe(data, SimpleNamespace(max_length=16), tokenizer)
    assert facts["test_truncated_texts"] == 1
    assert "sequence-length-is-longer-than-the-specified-maximum" not in tokenizer.deprecation_warnings
