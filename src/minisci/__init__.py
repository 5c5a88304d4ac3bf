"""minisci: adapt BERT encoders to scientific and biomedical text, reproducibly."""

__version__ = "0.1.0"
