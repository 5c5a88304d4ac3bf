"""One room per task kind: the registry (:mod:`minisci.tasks.registry`) that the config, the seed loop, the report, serving and the
benchmarks read.

A :class:`~minisci.tasks.kind.TaskKind` holds everything that differs between task kinds (NER,
classification): its facts (catalogue format, stage, head, pipeline tag, CLI command), its functions
(encode, collate, predict, decode, score), its counts in the one layout of :mod:`minisci.tasks.kind`
and its report facets. Code outside this package never compares a task name: it asks the registry
for the kind (by catalogue task, stage, command, pipeline tag or model config) and reads the kind.
A new kind is one module here and one :func:`register` call.
"""
