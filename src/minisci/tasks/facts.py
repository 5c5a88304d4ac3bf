"""What the configuration knows of each task kind: its catalogue name, the file formats it reads, its
fine-tuning stage and that stage's params class, and what one of its labels is called in messages.

Data only, so the stages that read the configuration but fine-tune nothing (the data, pretraining
and embedding stages) do not import the task code (:mod:`minisci.tasks.ner`, ...): their code
fingerprints leave it out, and an edit of how a kind encodes or scores reruns only the stages that
do. Each kind's :class:`~minisci.tasks.kind.TaskKind` is built from its facts here, and
:func:`minisci.tasks.registry.register` adds a new kind's facts (a test keeps the two in step).
"""

from __future__ import annotations

import dataclasses

from minisci.errors import MinisciError


@dataclasses.dataclass(frozen=True)
class KindFacts:
    name: str  # the catalogue's ``task``
    formats: tuple[str, ...]  # catalogue file formats
    stage: str  # the fine-tuning stage (params section, folder of metrics and models)
    config: str  # the name of that section's dataclass in minisci.config
    label_word: str  # what a label is, in messages: entity type | class

    @classmethod
    def of(cls, kind) -> KindFacts:
        """The facts of a kind (a :class:`~minisci.tasks.kind.TaskKind`)."""
        return cls(**{f.name: getattr(kind, f.name) for f in dataclasses.fields(cls)})


NER = KindFacts(
    name="ner", formats=("conll",), stage="finetune_ner", config="FinetuneNerConfig", label_word="entity type"
)
CLASSIFICATION = KindFacts(
    name="classification",
    formats=("jsonl",),
    stage="finetune_classification",
    config="FinetuneClassificationConfig",
    label_word="class",
)

FACTS: dict[str, KindFacts] = {k.name: k for k in (NER, CLASSIFICATION)}


def names() -> tuple[str, ...]:
    return tuple(FACTS)


def get(name: str) -> KindFacts:
    """The facts of a catalogue ``task`` name."""
    if name not in FACTS:
        raise MinisciError(f"unknown task {name!r}; known: {', '.join(FACTS)}")
    return FACTS[name]
