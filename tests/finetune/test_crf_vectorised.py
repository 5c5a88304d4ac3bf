"""The vectorised CRF (tree-reduced forward algorithm, one-gather gold score, batched Viterbi) against
the per-word loops it replaced, kept here verbatim as the reference: identical Viterbi paths, equal
losses and gradients to float tolerance, on random inputs with ragged masks."""

import pytest
import torch

from minisci.finetune.crf import CRF, word_level
from minisci.tasks.ner import argmax_decode, merge_predictions

LABELS = ["O", "B-A", "I-A", "B-B", "I-B"]


def reference_nll(crf, emissions, tags, mask):
    """``CRF.neg_log_likelihood`` before vectorisation: a Python loop over words (with the free start
    of a row whose gold path begins with an I- tag)."""
    start, trans, end = crf.scores()
    batch = torch.arange(len(tags))
    inside = torch.tensor([crf.labels[int(t)].startswith("I-") for t in tags[:, 0]])
    start = torch.where(inside[:, None], 0.0, start)
    score = start[batch, tags[:, 0]] + emissions[batch, 0, tags[:, 0]]
    for t in range(1, tags.shape[1]):
        step = trans[tags[:, t - 1], tags[:, t]] + emissions[batch, t, tags[:, t]]
        score = score + step * mask[:, t]
    last = tags[batch, mask.sum(1) - 1]
    score = score + end[last]
    alpha = start + emissions[:, 0]
    for t in range(1, tags.shape[1]):
        nxt = torch.logsumexp(alpha.unsqueeze(2) + trans.unsqueeze(0), dim=1) + emissions[:, t]
        alpha = torch.where(mask[:, t : t + 1], nxt, alpha)
    log_z = torch.logsumexp(alpha + end, dim=1)
    return (log_z - score).mean()


@torch.no_grad()
def reference_decode(crf, emissions):
    """``CRF.decode`` before batching: one sequence, a Python loop over words."""
    start, trans, end = (x.detach().float().cpu() for x in crf.scores())
    emissions = emissions.detach().float().cpu()
    score = start + emissions[0]
    back = []
    for t in range(1, len(emissions)):
        total = score.unsqueeze(1) + trans
        score, idx = total.max(dim=0)
        score = score + emissions[t]
        back.append(idx)
    best = int((score + end).argmax())
    path = [best]
    for idx in reversed(back):
        best = int(idx[best])
        path.append(best)
    return path[::-1]


def grad_of(p):
    return torch.zeros_like(p) if p.grad is None else p.grad.clone()  # one-word rows: no transition used


def random_crf(seed, labels=LABELS):
    crf = CRF(labels)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in crf.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    return crf


def ragged_batch(seed, batch, width, n):
    g = torch.Generator().manual_seed(seed)
    emissions = 3 * torch.randn(batch, width, n, generator=g)
    lengths = torch.randint(1, width + 1, (batch,), generator=g)
    lengths[0] = width  # the batch's longest row fills the width, as word_level makes it
    mask = torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)
    tags = torch.randint(0, n, (batch, width), generator=g).masked_fill(~mask, 0)
    return emissions, tags, mask


@pytest.mark.parametrize(("seed", "batch", "width"), [(0, 1, 1), (1, 3, 2), (2, 7, 5), (3, 16, 33), (4, 32, 64)])
def test_loss_and_gradients_match_the_per_word_loop(seed, batch, width):
    crf = random_crf(seed)
    emissions, tags, mask = ragged_batch(seed, batch, width, len(LABELS))
    em_new = emissions.clone().requires_grad_()
    em_old = emissions.clone().requires_grad_()
    new = crf.neg_log_likelihood(em_new, tags, mask)
    new.backward()
    grads_new = [em_new.grad] + [grad_of(p) for p in crf.parameters()]
    crf.zero_grad()
    old = reference_nll(crf, em_old, tags, mask)
    old.backward()
    grads_old = [em_old.grad] + [grad_of(p) for p in crf.parameters()]
    assert torch.isfinite(new)
    torch.testing.assert_close(new, old, rtol=1e-5, atol=1e-4)
    for a, b in zip(grads_new, grads_old):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_loss_matches_on_bf16_emissions_and_many_labels():
    labels = ["O"] + [f"{p}-{t}" for t in "ABCDE" for p in "BI"]  # jnlpba-sized
    crf = random_crf(7, labels)
    emissions, tags, mask = ragged_batch(7, 24, 40, len(labels))
    emissions = emissions.bfloat16()
    torch.testing.assert_close(
        crf.neg_log_likelihood(emissions, tags, mask), reference_nll(crf, emissions, tags, mask), rtol=1e-5, atol=1e-4
    )


def test_loss_through_word_level_matches():
    crf = random_crf(5)
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(6, 20, len(LABELS), generator=g)
    labels = torch.randint(0, len(LABELS), (6, 20), generator=g)
    labels[torch.rand(6, 20, generator=g) < 0.4] = -100
    labels[:, 0] = -100  # [CLS]
    labels[2, 1] = 1  # every row has a word
    labels[2, 2:] = -100  # a one-word row
    em, tags, mask = word_level(logits, labels)
    torch.testing.assert_close(crf.neg_log_likelihood(em, tags, mask), reference_nll(crf, em, tags, mask))


@pytest.mark.parametrize("seed", range(4))
def test_batched_viterbi_paths_are_identical(seed):
    crf = random_crf(seed)
    g = torch.Generator().manual_seed(50 + seed)
    lengths = [1, 2, 3, 17, 40, 5, 1, 33] + torch.randint(1, 60, (12,), generator=g).tolist()
    emissions = [3 * torch.randn(k, len(LABELS), generator=g) for k in lengths]
    if seed == 0:  # ties: equal emissions everywhere, and zero parameters
        emissions = [torch.zeros(k, len(LABELS)) for k in lengths]
        crf = CRF(LABELS)
    if seed == 1:
        emissions = [e.bfloat16() for e in emissions]
    assert crf.decode_batch(emissions) == [reference_decode(crf, e) for e in emissions]
    assert [crf.decode(e) for e in emissions[:5]] == [reference_decode(crf, e) for e in emissions[:5]]
    assert crf.decode_batch([]) == []


def test_merge_predictions_batched_equals_one_by_one():
    crf = random_crf(3)
    g = torch.Generator().manual_seed(3)
    feats = [
        {"sentence": 0, "word_start": 0, "first_positions": [1, 2, 4]},
        {"sentence": 0, "word_start": 3, "first_positions": [1, 3]},
        {"sentence": 1, "word_start": 0, "first_positions": [1]},
        {"sentence": 2, "word_start": 0, "first_positions": [1, 2, 3, 5, 6, 7]},
    ]
    logits = [torch.randn(9, len(LABELS), generator=g) for _ in feats]
    id2label = dict(enumerate(LABELS))
    n_words = [5, 1, 6]
    one_by_one = merge_predictions(feats, logits, n_words, id2label, crf.decode)
    assert merge_predictions(feats, logits, n_words, id2label, decode_batch=crf.decode_batch) == one_by_one
    assert merge_predictions(feats, logits, n_words, id2label, lambda e: reference_decode(crf, e)) == one_by_one
    assert merge_predictions(feats, logits, n_words, id2label) == merge_predictions(
        feats, logits, n_words, id2label, argmax_decode
    )


def test_an_entity_across_a_window_edge_is_decoded_whole():
    """A sentence longer than max_length is cut into windows; the CRF decodes the sentence's joined
    emissions, so an entity that runs across the cut stays one entity (each window decoded on its own
    could not start with I-A, and would split it in two)."""
    crf = CRF(LABELS)
    strong = {0: "O", 1: "B-A", 2: "I-A", 3: "I-A"}
    emissions = torch.full((4, len(LABELS)), -5.0)
    for word, label in strong.items():
        emissions[word, LABELS.index(label)] = 5.0
    feats = [
        {"sentence": 0, "word_start": 0, "first_positions": [1, 2]},
        {"sentence": 0, "word_start": 2, "first_positions": [1, 2]},
    ]
    logits = [
        torch.cat([torch.zeros(1, len(LABELS)), emissions[0:2]]),
        torch.cat([torch.zeros(1, len(LABELS)), emissions[2:4]]),
    ]
    merged = merge_predictions(feats, logits, [4], dict(enumerate(LABELS)), decode_batch=crf.decode_batch)
    assert merged == [["O", "B-A", "I-A", "I-A"]]
    assert [crf.decode(emissions[2:4])] != [[LABELS.index("I-A")] * 2]  # what a window alone gives
