"""The registry of task kinds: every kind by its catalogue name, and the look-ups that map a catalogue
entry, a stage, a ``minisci`` command, a pipeline task or a model config to its kind."""

from __future__ import annotations

from minisci.errors import MinisciError
from minisci.tasks import facts
from minisci.tasks.classification import CLASSIFICATION
from minisci.tasks.kind import TaskKind
from minisci.tasks.ner import NER

KINDS: dict[str, TaskKind] = {}


def register(kind: TaskKind) -> TaskKind:
    """Add a kind to the registry, and its facts to what the configuration knows (tests register toy
    kinds and :func:`unregister` them)."""
    KINDS[kind.name] = kind
    facts.FACTS[kind.name] = facts.KindFacts.of(kind)
    return kind


def unregister(name: str) -> None:
    KINDS.pop(name, None)
    facts.FACTS.pop(name, None)


register(NER)
register(CLASSIFICATION)


def names() -> tuple[str, ...]:
    return tuple(KINDS)


def _find(attr: str, value, what: str) -> TaskKind:
    for k in KINDS.values():
        if getattr(k, attr) == value:
            return k
    known = ", ".join(str(getattr(k, attr)) for k in KINDS.values())
    raise MinisciError(f"unknown {what} {value!r}; known: {known}")


def get(name: str) -> TaskKind:
    """The kind of a catalogue ``task`` name."""
    return _find("name", name, "task")


def of_entry(entry) -> TaskKind:
    """The kind of a catalogue entry (a :class:`~minisci.config.DatasetConfig` or its mapping)."""
    return get(entry["task"] if isinstance(entry, dict) else entry.task)


def of_stage(stage: str) -> TaskKind:
    return _find("stage", stage, "fine-tuning stage")


def of_command(command: str) -> TaskKind:
    return _find("command", command, "command")


def of_pipeline(tag: str) -> TaskKind:
    return _find("pipeline_tag", tag, "pipeline task")


def of_config(config: dict) -> TaskKind | None:
    """The kind whose head a model's ``config.json`` (parsed) has, or None (a bare encoder)."""
    archs = config.get("architectures") or []
    return next((k for k in KINDS.values() if any(a.endswith(k.head) for a in archs)), None)
