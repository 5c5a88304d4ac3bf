"""minisci.metrics.scores.ner_scores (the stages' NER scores, and the evaluate metric ner_f1's) gives
seqeval's strict IOB2 scores exactly, whatever it is given."""

import random

import pytest
from seqeval.metrics import accuracy_score, classification_report
from seqeval.scheme import IOB2

from minisci.data.readers import to_iob2
from minisci.metrics import load_metric, ner_f1, scores

TAGS = ["O", "B-Chemical", "I-Chemical", "B-Disease", "I-Disease", "B-DNA", "I-DNA"]
ODD = ["B--X", "I-X-", "B-", "I-", "O"]  # types seqeval reads otherwise than by their text after B-/I-


def seqeval_report(gold, pred):
    return classification_report(gold, pred, mode="strict", scheme=IOB2, output_dict=True, zero_division=0)


def random_tags(rng, n, tags, iob2):
    seqs = [[rng.choice(tags) for _ in range(rng.randint(0, 12))] for _ in range(n)]
    return [list(to_iob2(s)) for s in seqs] if iob2 else seqs


@pytest.mark.parametrize("case", range(40))
def test_the_report_is_seqevals_for_valid_and_invalid_sequences(case):
    rng = random.Random(case)
    tags = TAGS[: rng.choice([3, 5, 7])] + (ODD if case % 5 == 4 else [])
    gold = random_tags(rng, 60, tags, iob2=case % 5 != 4)
    lengths = [len(g) for g in gold]
    pred = [list(to_iob2([rng.choice(tags) for _ in range(k)])) for k in lengths]
    if case % 3 == 2:  # invalid IOB2 in the prediction: seqeval's own reader takes it
        pred = [[rng.choice(tags) for _ in range(k)] for k in lengths]
    assert scores.strict_report(gold, pred) == seqeval_report(gold, pred)


def test_valid_iob2_is_read_by_spans_and_anything_else_by_seqeval():
    good = [["B-X", "I-X", "O", "B-Y"]]
    assert all(isinstance(e, scores._SpanEntities) for e in scores.entities(good, good))
    for bad in (["O", "I-X"], ["B-X", "I-Y"], ["B-", "O"], ["B-X-", "I-X-"], ["Other"]):
        for gold, pred in ((good, [bad]), ([bad], good)):  # either side invalid: seqeval reads both
            assert not any(isinstance(e, scores._SpanEntities) for e in scores.entities(gold, pred)), bad


@pytest.mark.parametrize("name", ["bc5cdr/test.txt", "jnlpba/test.txt"])
def test_the_metric_on_real_gold_is_seqevals(shared_data, name):
    """The stages' metric, and the ``evaluate`` metric wrapping it, as seqeval computes it, on a real
    test set's gold against a prediction with one tag in ten changed (repaired to IOB2, as the stages
    repair theirs)."""
    from minisci.data.readers import read_conll

    gold = [list(to_iob2(s.tags)) for s in read_conll(shared_data / "ner" / name)]
    tags = sorted({t for g in gold for t in g})
    rng = random.Random(0)
    pred = [list(to_iob2([t if rng.random() < 0.9 else rng.choice(tags) for t in g])) for g in gold]
    report = seqeval_report(gold, pred)
    assert scores.strict_report(gold, pred) == report and len(report) >= 4
    got = load_metric(ner_f1).compute(predictions=pred, references=gold)
    assert got == scores.ner_scores(gold, pred)  # the stages' metric is that report, rounded
    assert got["entities_gold"] == int(report["micro avg"]["support"]) > 1000
    assert got["f1"] == round(float(report["micro avg"]["f1-score"]), 4)
    assert got["token_accuracy"] == round(float(accuracy_score(gold, pred)), 4)


def test_sequences_of_different_lengths_are_seqevals_error():
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        scores.strict_report([["O", "B-X"]], [["O"]])


def test_a_prefix_outside_iob2_is_seqevals_error():
    with pytest.raises(ValueError, match="Invalid token is found: E-X"):
        scores.strict_report([["B-X", "O"]], [["E-X", "O"]])
