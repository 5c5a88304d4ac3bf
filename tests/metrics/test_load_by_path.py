"""The stages score through the package's own ``evaluate`` modules, loaded by path offline. What they
compute is checked against the task kinds' counts in tests/tasks/test_kinds.py (the contract test)."""


def test_metric_modules_load_by_path_offline(monkeypatch):
    import evaluate

    from minisci.metrics import classification_f1, ner_f1

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for module in (ner_f1, classification_f1):
        metric = evaluate.load(module.__file__, keep_in_memory=True)
        assert isinstance(metric, evaluate.Metric)
    combined = evaluate.load(ner_f1.__file__, keep_in_memory=True).compute(
        predictions=[["B-X", "I-X"]], references=[["B-X", "I-X"]]
    )
    assert combined["f1"] == 1.0 and combined["per_type"]["X"]["support"] == 1
