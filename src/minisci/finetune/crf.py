"""A linear-chain CRF over word-level emissions, constrained to valid IOB2.

Transitions that IOB2 forbids (``O -> I-X``, ``B-X -> I-Y``, ``I-X -> I-Y``, and starting with
``I-X``) get a score of -10,000 in training *and* decoding, so Viterbi can only emit valid tag
sequences and the model never spends probability mass on invalid ones. One exception in training: a
window cut from inside an entity (a sentence longer than ``max_length``) begins with its gold ``I-X``;
that row is scored as the continuation it is, with a free start (no start score, any first tag), not
as an impossible sentence whose loss would be ~10,000. Emissions are read at the
first word piece of each word, like the softmax head.

The CRF sits on whatever token-classification model transformers has for the encoder (BERT,
RoBERTa, DistilBERT, ELECTRA, DeBERTa-v2, ModernBERT, ...): :class:`CrfForTokenClassification`
picks the class from the checkpoint's config, and an encoder whose weights do not load is an error,
never a randomly initialised stand-in.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch
from torch import nn
from transformers import BertForTokenClassification

from minisci.errors import MinisciError

NEG = -1.0e4  # score of a forbidden transition (finite, so no NaN in logsumexp)
# Off-diagonal of the log-semiring identity: exp() of it is exactly 0 in fp32, and it is finite, so a
# logsumexp over nothing but padding stays finite and its gradient is 0, not NaN (as -inf would give).
IDENTITY_OFF = -1.0e30


def allowed_transitions(labels: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """(start_ok [n], trans_ok [n, n]) under IOB2: I-X only after B-X or I-X."""
    n = len(labels)
    start_ok = torch.tensor([not lab.startswith("I-") for lab in labels])
    trans_ok = torch.ones(n, n, dtype=torch.bool)
    for j, to in enumerate(labels):
        if to.startswith("I-"):
            for i, frm in enumerate(labels):
                trans_ok[i, j] = frm != "O" and frm[2:] == to[2:]
    return start_ok, trans_ok


class CRF(nn.Module):
    def __init__(self, labels: list[str]):
        super().__init__()
        n = len(labels)
        self.labels = list(labels)
        self.transitions = nn.Parameter(torch.zeros(n, n))
        self.start = nn.Parameter(torch.zeros(n))
        self.end = nn.Parameter(torch.zeros(n))

    def reset_parameters(self) -> None:
        for p in (self.transitions, self.start, self.end):
            nn.init.zeros_(p)

    def scores(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # Masks are rebuilt from the labels (cheap) rather than kept in buffers, which
        # transformers' meta-device loading would leave uninitialised.
        start_ok, trans_ok = (m.to(self.start.device) for m in allowed_transitions(self.labels))
        return self.start.masked_fill(~start_ok, NEG), self.transitions.masked_fill(~trans_ok, NEG), self.end

    def neg_log_likelihood(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Mean over the batch of -log p(tags | emissions); ``mask[:, 0]`` must be all true and each
        row's mask a prefix (as :func:`word_level` gives).

        Vectorised over time, because a loop of per-word steps is thousands of tiny kernels per batch
        (launch-bound on a GPU): the gold path's score is one gather and sum, and the partition
        function multiplies the per-word transition matrices in the log semiring as a balanced tree,
        log2(words) levels of whole-batch ops instead of one step per word."""
        start, trans, end = self.scores()
        emissions = emissions.float()  # bf16 under autocast; fp32 parameters promote it anyway
        batch = torch.arange(len(tags), device=tags.device)
        steps = mask[:, 1:]
        # rows whose gold path starts inside an entity continue one: a free start (see the module)
        inside = torch.tensor([lab.startswith("I-") for lab in self.labels], device=tags.device)[tags[:, 0]]
        start = torch.where(inside[:, None], torch.zeros_like(start), start)  # [B, n]
        # 1. score of the gold path
        gold = emissions.gather(2, tags.unsqueeze(2)).squeeze(2)  # [B, T]
        score = start[batch, tags[:, 0]] + gold[:, 0]
        if tags.shape[1] > 1:
            score = score + ((trans[tags[:, :-1], tags[:, 1:]] + gold[:, 1:]) * steps).sum(1)
        last = tags[batch, mask.sum(1) - 1]
        score = score + end[last]
        # 2. log partition function: alpha_T = (start + e_0) (x) M_1 (x) ... (x) M_{T-1}, where
        # M_t[i, j] = trans[i, j] + e_t[j] for a real word and the log-semiring identity for padding
        # (alpha carries over unchanged, as the masked forward algorithm does)
        alpha = start + emissions[:, 0]
        if tags.shape[1] > 1:
            n = trans.shape[0]
            eye = torch.full((n, n), IDENTITY_OFF, device=trans.device).fill_diagonal_(0.0)
            m = trans + emissions[:, 1:].unsqueeze(2)  # [B, T-1, from, to]
            m = torch.where(steps[:, :, None, None], m, eye)
            while m.shape[1] > 1:
                if m.shape[1] % 2:  # pad with the identity to an even count
                    m = torch.cat([m, eye.expand(m.shape[0], 1, n, n)], dim=1)
                m = _log_matmul(m[:, 0::2], m[:, 1::2])
            alpha = torch.logsumexp(alpha.unsqueeze(2) + m[:, 0], dim=1)
        log_z = torch.logsumexp(alpha + end, dim=1)
        return (log_z - score).mean()

    @torch.no_grad()
    def decode(self, emissions: torch.Tensor) -> list[int]:
        """Viterbi path of one sequence of word emissions [T, n]; only valid IOB2 sequences."""
        return self.decode_batch([emissions])[0]

    @torch.no_grad()
    def decode_batch(self, emissions: list[torch.Tensor]) -> list[list[int]]:
        """Viterbi paths of sequences of word emissions ([T_k, n] each); only valid IOB2 sequences.

        One padded batch, stepped word by word for all sequences at once: a per-sequence loop is
        O(sequences x words) tiny ops, and with the model on a GPU it also synced once per sequence.
        Runs on the CPU in fp32 wherever the model and its logits are (the logits may be bf16). Each
        sequence's arithmetic is exactly the unbatched recursion's, so ties break the same way."""
        if not emissions:
            return []
        start, trans, end = (x.detach().float().cpu() for x in self.scores())
        lengths = torch.tensor([len(e) for e in emissions])
        em = torch.nn.utils.rnn.pad_sequence([e.detach().float().cpu() for e in emissions], batch_first=True)
        n_seq, width, n = em.shape
        keep = torch.arange(n).expand(n_seq, n)  # back-pointer of a padded step: stay in place
        score = start + em[:, 0]
        back = []
        for t in range(1, width):
            total = score.unsqueeze(2) + trans  # [seq, from, to]
            best, idx = total.max(dim=1)
            live = (t < lengths).unsqueeze(1)
            score = torch.where(live, best + em[:, t], score)
            back.append(torch.where(live, idx, keep))
        state = (score + end).argmax(dim=1, keepdim=True)
        path = [state]
        for idx in reversed(back):
            state = idx.gather(1, state)
            path.append(state)
        rows = torch.cat(path[::-1], dim=1).tolist()
        return [row[:k] for row, k in zip(rows, lengths.tolist())]


def _log_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Matrix product in the log semiring over the last two axes: out[..., i, k] = logsumexp_j(a[..., i, j] + b[..., j, k])."""
    return torch.logsumexp(a.unsqueeze(-1) + b.unsqueeze(-3), dim=-2)


def word_level(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gather the labelled (first-piece) positions of each row to the front: emissions [B, W, n],
    tags [B, W], mask [B, W]."""
    labelled = labels != -100
    order = torch.argsort((~labelled).int(), dim=1, stable=True)
    counts = labelled.sum(1)
    width = max(1, int(counts.max()))
    idx = order[:, :width]
    emissions = logits.gather(1, idx.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
    mask = torch.arange(width, device=logits.device).unsqueeze(0) < counts.unsqueeze(1)
    tags = labels.gather(1, idx).masked_fill(~mask, 0)
    return emissions, tags, mask


@functools.cache
def crf_class(base_cls: type) -> type:
    """``base_cls`` (a ``*ForTokenClassification`` class) with a constrained CRF on top
    (``config.crf = True``); e.g. ``BertForTokenClassification`` -> ``BertCrfForTokenClassification``.

    Saved as an ordinary token-classification checkpoint of the encoder plus ``crf.*`` weights:
    ``transformers.pipeline`` loads it with argmax decoding; minisci decodes with Viterbi.
    """

    class CrfTagger(base_cls):
        def __init__(self, config):
            super().__init__(config)
            config.crf = True
            self.crf = CRF([config.id2label[i] for i in range(config.num_labels)])

        def _init_weights(self, module):
            # transformers 5 materialises missing weights through _init_weights only.
            if isinstance(module, CRF):
                module.reset_parameters()
            else:
                super()._init_weights(module)

        def crf_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
            emissions, tags, mask = word_level(logits, labels)
            return self.crf.neg_log_likelihood(emissions, tags, mask)

    name = base_cls.__name__.replace("ForTokenClassification", "CrfForTokenClassification")
    CrfTagger.__name__ = CrfTagger.__qualname__ = name
    return CrfTagger


BertCrfForTokenClassification = crf_class(BertForTokenClassification)


class CrfForTokenClassification:
    """``from_pretrained`` of the CRF tagger that fits a checkpoint's encoder, as
    ``AutoModelForTokenClassification`` does for the softmax head."""

    @staticmethod
    def from_pretrained(path: str | Path, **kwargs):
        from transformers import AutoConfig, AutoModelForTokenClassification

        config = AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=False)
        try:
            base_cls = AutoModelForTokenClassification._model_mapping[type(config)]
        except KeyError:
            raise MinisciError(
                f"{path}: transformers has no token-classification model for {config.model_type!r}; "
                "the CRF head needs one (set finetune_ner.crf: false to check the softmax head too)"
            ) from None
        want_info = kwargs.pop("output_loading_info", False)
        model, info = crf_class(base_cls).from_pretrained(path, output_loading_info=True, **kwargs)
        prefix = model.base_model_prefix + "."
        missing = sorted(k for k in info["missing_keys"] if k.startswith(prefix))
        if missing:  # the encoder itself did not load: never train a random one in its place
            raise MinisciError(
                f"{path}: {len(missing)} encoder weights of the {config.model_type} model did not load "
                f"into {base_cls.__name__} (e.g. {missing[0]}); the CRF head needs the checkpoint's own encoder"
            )
        return (model, info) if want_info else model
