"""The project's metrics as ``evaluate`` modules, one file each, loaded by path (never from the hub):
``evaluate.load(minisci.metrics.ner_f1.__file__)``. They ship as ordinary package modules."""
