"""A linear-chain CRF over word-level emissions, constrained to valid IOB2.

Transitions that IOB2 forbids (``O -> I-X``, ``B-X -> I-Y``, ``I-X -> I-Y``, and starting with
``I-X``) get a score of -10,000 in training *and* decoding, so Viterbi can only emit valid tag
sequences and the model never spends probability mass on invalid ones. Emissions are read at the
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
        """Mean over the batch of -log p(tags | emissions); ``mask[:, 0]`` must be all true."""
        start, trans, end = self.scores()
        batch = torch.arange(len(tags))
        # 1. score of the gold path
        score = start[tags[:, 0]] + emissions[batch, 0, tags[:, 0]]
        for t in range(1, tags.shape[1]):
            step = trans[tags[:, t - 1], tags[:, t]] + emissions[batch, t, tags[:, t]]
            score = score + step * mask[:, t]
        last = tags[batch, mask.sum(1) - 1]
        score = score + end[last]
        # 2. log partition function (forward algorithm)
        alpha = start + emissions[:, 0]
        for t in range(1, tags.shape[1]):
            nxt = torch.logsumexp(alpha.unsqueeze(2) + trans.unsqueeze(0), dim=1) + emissions[:, t]
            alpha = torch.where(mask[:, t : t + 1], nxt, alpha)
        log_z = torch.logsumexp(alpha + end, dim=1)
        return (log_z - score).mean()

    @torch.no_grad()
    def decode(self, emissions: torch.Tensor) -> list[int]:
        """Viterbi path of one sequence of word emissions [T, n]; only valid IOB2 sequences. Runs on
        the CPU in fp32 wherever the model and its logits are: a word-by-word loop of [n, n] steps is
        launch-bound on a GPU, and the logits may be bf16."""
        start, trans, end = (x.detach().float().cpu() for x in self.scores())
        emissions = emissions.detach().float().cpu()
        score = start + emissions[0]
        back = []
        for t in range(1, len(emissions)):
            total = score.unsqueeze(1) + trans  # [from, to]
            score, idx = total.max(dim=0)
            score = score + emissions[t]
            back.append(idx)
        best = int((score + end).argmax())
        path = [best]
        for idx in reversed(back):
            best = int(idx[best])
            path.append(best)
        return path[::-1]


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
