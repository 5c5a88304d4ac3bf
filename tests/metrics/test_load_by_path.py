"""The package's ``evaluate`` metrics load by path offline and compute what the stages compute with
:mod:`minisci.metrics.scores` directly. What that is, is checked against the task kinds' counts in
tests/tasks/test_kinds.py (the contract test)."""

from minisci.metrics.scores import classification_scores, ner_scores


def test_metric_modules_load_by_path_offline_and_give_the_stages_scores(monkeypatch):
    import evaluate

    from minisci.metrics import classification_f1, ner_f1

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for module in (ner_f1, classification_f1):
        metric = evaluate.load(module.__file__, keep_in_memory=True)
        assert isinstance(metric, evaluate.Metric)
    gold, pred = [["B-X", "I-X", "O", "B-Y"], ["O", "B-Y"]], [["B-X", "I-X", "B-Y", "I-Y"], ["O", "O"]]
    ner = evaluate.load(ner_f1.__file__, keep_in_memory=True).compute(predictions=pred, references=gold)
    assert ner == ner_scores(gold, pred) and ner["per_type"]["X"] == {
        "precision": 1.0,
        "recall": 1.0,
        "f1": 1.0,
        "support": 1,
    }
    labels, gold, pred = ["a", "b", "c"], ["a", "a", "b", "b"], ["a", "b", "b", "c"]
    cls = evaluate.load(classification_f1.__file__, keep_in_memory=True).compute(
        predictions=pred, references=gold, labels=labels
    )
    assert cls == classification_scores(gold, pred, labels) and cls["accuracy"] == 0.5
    assert cls["per_class"]["c"]["absent"]
