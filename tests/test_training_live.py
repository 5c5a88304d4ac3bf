"""Feedback while a stage runs: DVCLive step metrics during training, progress bars only on a
terminal, and one line per model load instead of transformers' LOAD REPORT table."""

import logging

import pytest

from minisci.training import training_arguments


def test_live_metrics_are_written_during_finetuning(tiny_finetuned):
    root = tiny_finetuned["ner"].parent
    curves = {p.name for p in (root / "w1").rglob("live/plots/metrics/*.tsv")}
    assert "loss.tsv" in curves, sorted(curves)
    assert not list(root.rglob("live/dvc.yaml")), "DVCLive must not write a dvc.yaml"


def test_progress_bars_only_on_a_terminal(tmp_path, monkeypatch):
    kwargs = dict(seed=1, batch_size=2, learning_rate=1e-3, weight_decay=0.0, precision="fp32")
    monkeypatch.setattr("sys.stderr.isatty", lambda: False, raising=False)
    assert training_arguments(tmp_path, **kwargs).disable_tqdm
    monkeypatch.setattr("sys.stderr.isatty", lambda: True, raising=False)
    assert not training_arguments(tmp_path, **kwargs).disable_tqdm
    assert training_arguments(tmp_path, **kwargs).report_to in ([], "none", ["none"])


@pytest.mark.parametrize("terminal", [True, False])
def test_load_report_is_one_line_on_a_terminal_and_dropped_from_logs(tiny_model_dir, terminal):
    from transformers import BertForTokenClassification
    from transformers.utils import logging as hf_logging

    from minisci.training import _OneLineLoadReport

    one_line = _OneLineLoadReport(terminal)
    seen = []
    sink = logging.Handler()
    sink.emit = lambda record: seen.append(record.getMessage()) if one_line.filter(record) else None
    logger = hf_logging.get_logger()
    logger.addHandler(sink)
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_warning()  # other tests (the CLI's) may have silenced transformers
    try:
        BertForTokenClassification.from_pretrained(tiny_model_dir, num_labels=3)
    finally:
        logger.removeHandler(sink)
        hf_logging.set_verbosity(level)
    reports = [m for m in seen if "LOAD REPORT" in m]
    if not terminal:
        assert reports == []
        return
    assert reports and all("\n" not in m for m in reports), reports
    assert "missing" in reports[0] and "unexpected" in reports[0]
