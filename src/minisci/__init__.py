"""minisci: adapt BERT encoders to scientific and biomedical text, reproducibly.

The Python API (:mod:`minisci.serve.api`) is imported on first use, so that ``import minisci.config``
in a stage does not pay for torch and transformers::

    from minisci import NerTagger, CitationClassifier, Index
"""

__version__ = "0.1.0"

_API = ("NerTagger", "CitationClassifier", "Index")
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    # PEP 562: resolve the API classes lazily, on first attribute access
    if name in _API:
        from minisci.serve import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
