import itertools

import pytest
import torch
from conftest import learnable_ner_files, prepare

from minisci.data.readers import to_iob2
from minisci.finetune.crf import CRF, allowed_transitions, word_level
from minisci.finetune.ner import run_finetune_ner

LABELS = ["O", "B-A", "I-A", "B-B", "I-B"]


def valid(path):
    tags = [LABELS[i] for i in path]
    return list(to_iob2(tags)) == tags  # to_iob2 only changes an I- that cannot follow its predecessor


def make_crf(seed=0):
    crf = CRF(LABELS)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in crf.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    return crf


def test_allowed_transitions():
    start_ok, trans_ok = allowed_transitions(LABELS)
    assert start_ok.tolist() == [True, True, False, True, False]
    assert trans_ok[LABELS.index("B-A"), LABELS.index("I-A")] and trans_ok[LABELS.index("I-A"), LABELS.index("I-A")]
    assert (
        not trans_ok[LABELS.index("O"), LABELS.index("I-A")] and not trans_ok[LABELS.index("B-B"), LABELS.index("I-A")]
    )


def test_viterbi_only_emits_valid_sequences_even_when_emissions_favour_invalid_ones():
    crf = CRF(LABELS)
    emissions = torch.full((6, 5), -5.0)
    emissions[:, LABELS.index("I-A")] = 5.0  # argmax would be I-A everywhere, starting with an I-
    emissions[3, LABELS.index("I-B")] = 9.0  # ... and I-B after I-A
    path = crf.decode(emissions)
    assert valid(path), [LABELS[i] for i in path]
    assert [LABELS[i] for i in path][:3] == ["B-A", "I-A", "I-A"]


@pytest.mark.parametrize("seed", range(5))
def test_viterbi_and_likelihood_match_brute_force(seed):
    crf = make_crf(seed).requires_grad_(False)
    T = 4
    emissions = torch.randn(T, 5, generator=torch.Generator().manual_seed(100 + seed))
    start, trans, end = crf.scores()

    def score(path):
        s = start[path[0]] + emissions[0, path[0]] + end[path[-1]]
        return s + sum(trans[a, b] + emissions[t + 1, b] for t, (a, b) in enumerate(zip(path, path[1:])))

    paths = [p for p in itertools.product(range(5), repeat=T) if valid(p)]
    best = max(paths, key=lambda p: float(score(p)))
    assert tuple(crf.decode(emissions)) == best
    gold = torch.tensor([list(best)])
    nll = crf.neg_log_likelihood(emissions[None], gold, torch.ones(1, T, dtype=torch.bool))
    log_z = torch.logsumexp(torch.stack([score(p) for p in paths]), 0)  # invalid paths carry ~e^-10000
    assert float(nll) == pytest.approx(float(log_z - score(best)), abs=1e-3)


def test_a_window_that_starts_inside_an_entity_is_scored_as_a_continuation():
    """A training window cut from inside an entity starts with its gold I-X: its likelihood is over
    every path valid after some tag (a free start, no start score), not a forbidden start (~1e4);
    the other rows of the batch keep the IOB2 start."""
    crf = make_crf(2).requires_grad_(False)
    T = 4
    emissions = torch.randn(2, T, 5, generator=torch.Generator().manual_seed(7))
    _, trans, end = crf.scores()

    def continues(path):  # valid once something came before it
        return valid((LABELS.index("B-A"),) + tuple(path)) or valid((LABELS.index("B-B"),) + tuple(path))

    def score(em, path):
        s = em[0, path[0]] + end[path[-1]]
        return s + sum(trans[a, b] + em[t + 1, b] for t, (a, b) in enumerate(zip(path, path[1:])))

    gold = (LABELS.index("I-A"), LABELS.index("I-A"), 0, LABELS.index("B-B"))
    paths = [p for p in itertools.product(range(5), repeat=T) if continues(p)]
    expected = torch.logsumexp(torch.stack([score(emissions[0], p) for p in paths]), 0) - score(emissions[0], gold)
    mask = torch.ones(1, T, dtype=torch.bool)
    nll = crf.neg_log_likelihood(emissions[:1], torch.tensor([gold]), mask)
    assert float(nll) == pytest.approx(float(expected), abs=1e-3)
    assert float(nll) < 100
    other = (LABELS.index("B-A"), LABELS.index("I-A"), 0, 0)
    alone = crf.neg_log_likelihood(emissions[1:], torch.tensor([other]), mask)
    both = crf.neg_log_likelihood(emissions, torch.tensor([gold, other]), torch.ones(2, T, dtype=torch.bool))
    assert float(both) == pytest.approx((float(nll) + float(alone)) / 2, abs=1e-4)


def test_masked_positions_do_not_count():
    crf = make_crf(1).requires_grad_(False)
    em = torch.randn(2, 5, 5)
    tags = torch.tensor([[1, 2, 0, 0, 0], [1, 2, 0, 3, 4]])
    mask = torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    both = crf.neg_log_likelihood(em, tags, mask)
    first = crf.neg_log_likelihood(em[:1, :2], tags[:1, :2], mask[:1, :2])
    second = crf.neg_log_likelihood(em[1:], tags[1:], mask[1:])
    assert float(both) == pytest.approx((float(first) + float(second)) / 2, abs=1e-5)


def test_word_level_gathers_first_pieces():
    logits = torch.arange(2 * 6 * 2, dtype=torch.float).view(2, 6, 2)
    labels = torch.tensor([[-100, 1, -100, 0, -100, -100], [-100, 0, 1, 1, -100, -100]])
    em, tags, mask = word_level(logits, labels)
    assert tags.tolist() == [[1, 0, 0], [0, 1, 1]] and mask.tolist() == [[True, True, False], [True, True, True]]
    assert torch.equal(em[0, :2], logits[0, [1, 3]])


def test_tiny_model_with_crf_learns_and_decodes_valid_spans(tmp_path, tiny_model_dir):
    from helpers import ner_cfg

    data = prepare(learnable_ner_files(tmp_path / "raw"), "bc5cdr", tmp_path / "prepared")
    r = run_finetune_ner(data, tiny_model_dir, ner_cfg(crf=True), tmp_path / "work")
    assert r.metrics["test"]["f1"] > 0.9, r.metrics["dev_per_epoch"]
    assert r.model.config.crf is True
    for row in r.test_predictions:
        assert list(to_iob2(row["pred"])) == row["pred"]
    # The saved model reloads with its trained CRF weights.
    from minisci.finetune.crf import BertCrfForTokenClassification

    r.model.save_pretrained(tmp_path / "m")
    again = BertCrfForTokenClassification.from_pretrained(tmp_path / "m")
    assert torch.equal(again.crf.transitions, r.model.crf.transitions)
    assert torch.count_nonzero(again.crf.transitions) > 0
