"""``minisci demo``: a local web page (Streamlit) on the trained models.

This module is the launcher and the page's logic that needs no browser (input checks, entity
highlighting, building an index from an upload), so that tests reach it without Streamlit;
:mod:`minisci.serve.demo_page` is the Streamlit script. The page runs offline: Streamlit serves its
own bundled assets, and the launcher turns usage statistics off with command-line flags, not with
a user config file that a person's own settings could override.
"""

from __future__ import annotations

import argparse
import html
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

from minisci.errors import MinisciError


def pipeline_model(stage: str, params: str | Path = "params.yaml") -> str | None:
    """Where `dvc repro` writes the adapted model of ``stage``'s first dataset (dvc.yaml's outs);
    the datasets are the ones params.yaml names, so a user's own catalogue is followed. None when
    params.yaml lists none: a project of the other task alone."""
    try:
        import yaml

        datasets = yaml.safe_load(Path(params).read_text(encoding="utf-8"))[stage]["datasets"]
        if datasets == []:
            return None
        first = datasets[0]
    except (OSError, KeyError, IndexError, TypeError, ValueError, yaml.YAMLError):  # no usable params: a placeholder
        return f"models/{stage}/<dataset>/adapted"
    return f"models/{stage}/{first}/adapted"


def no_model(stage: str) -> str:
    """What the page and --help say when the project fine-tunes no dataset of ``stage``'s task."""
    return f"none: {stage}.datasets is empty in params.yaml"


DEFAULT_EMBEDDINGS = "models/embeddings"

# ~25,000 word pieces, ~100 windows: a few seconds of tagging on a laptop CPU. The page answers one
# person at a time, so longer texts belong to `minisci ner --file`, which shows progress.
MAX_CHARS = 100_000

# Distinct, readable behind black text; entity types take them in label order.
COLOURS = ("#ffd54f", "#81d4fa", "#a5d6a7", "#f48fb1", "#ce93d8", "#ffab91", "#b0bec5", "#e6ee9c")

PAGE = Path(__file__).with_name("demo_page.py")


def streamlit_flags(host: str, port: int) -> list[str]:
    """Streamlit options for a local, offline page that reloads nothing."""
    options = {
        "browser.gatherUsageStats": "false",  # no telemetry
        "server.headless": "true",  # no e-mail prompt, no browser opened by the server
        "server.address": host,
        "server.port": str(port),
        "server.fileWatcherType": "none",  # a demo, not a development server: no polling of the sources
        "server.maxUploadSize": "50",  # MB; collections to index on the page
        "client.toolbarMode": "minimal",  # no deploy button (it links to a hosted service)
        "global.developmentMode": "false",
    }
    return [f"--{key}={value}" for key, value in options.items()]


def _die_with_parent() -> None:
    """In the Streamlit child, before it starts (Linux): SIGTERM it when ``minisci demo`` dies, even
    by SIGKILL, so no server is left holding the port with no one to stop it."""
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


class _Stopped(Exception):
    """``minisci demo`` received SIGTERM (``kill PID``, a service manager stopping it)."""


def _raise_stopped(signum, frame):
    raise _Stopped


def launch(ner: str | None, cite: str | None, embeddings: str, index: str | None, host: str, port: int) -> int:
    """Run the page until stopped (Ctrl+C, SIGINT or SIGTERM), stopping Streamlit with it; returns
    Streamlit's exit code, 0 when stopped."""
    import signal

    if importlib.util.find_spec("streamlit") is None:
        raise MinisciError("streamlit is not installed; run `pip install -r requirements.txt`")
    options = {"--ner": ner, "--cite": cite, "--embeddings": embeddings, "--index": index}
    page_args = [x for option, value in options.items() if value for x in (option, value)]
    cmd = [sys.executable, "-m", "streamlit", "run", str(PAGE), *streamlit_flags(host, port), "--", *page_args]
    print(f"minisci demo: http://{host}:{port} (Ctrl+C stops it)", file=sys.stderr)
    if Path(embeddings).is_dir():  # which encoder uploads are indexed with, and why
        from minisci.serve.search import describe_encoder

        print(f"minisci demo: uploads are indexed with {describe_encoder(embeddings)}", file=sys.stderr)
    previous = signal.signal(signal.SIGTERM, _raise_stopped)
    try:
        server = subprocess.Popen(cmd, preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
    except BaseException:
        signal.signal(signal.SIGTERM, previous)
        raise
    try:
        return server.wait()
    except (KeyboardInterrupt, _Stopped):  # Ctrl+C in a terminal reaches Streamlit too; a kill of our PID does not
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl+C must not leave the server behind
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _stop(server)
        print("minisci demo: stopped", file=sys.stderr)
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stop(server: subprocess.Popen, grace: float = 10.0) -> None:
    """Ask the server to shut down (SIGTERM, as Streamlit expects); kill it if it does not in time."""
    if server.poll() is None:
        server.terminate()
    try:
        server.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def page_parser() -> argparse.ArgumentParser:
    """The options of ``minisci demo`` that the page itself receives."""
    p = argparse.ArgumentParser(add_help=False)
    # read when the parser is built (from the working directory's params.yaml), not at import time
    ner, cite = pipeline_model("finetune_ner"), pipeline_model("finetune_classification")
    p.add_argument("--ner", default=ner, help=f"NER model directory (default: {ner or no_model('finetune_ner')})")
    p.add_argument(
        "--cite",
        default=cite,
        help=f"citation intent model directory (default: {cite or no_model('finetune_classification')})",
    )
    p.add_argument(
        "--embeddings",
        default=DEFAULT_EMBEDDINGS,
        help=f"encoder for indexes built on the page from an uploaded JSONL, with the retriever recorded beside it "
        f"(retrieval.json; default: {DEFAULT_EMBEDDINGS})",
    )
    p.add_argument(
        "--index",
        help="an index built by `minisci index` for search and reviewers (optional); the page shows its "
        "retriever's scores: cosines for dense, BM25 scores for bm25, rank-fusion scores (~0.03) for hybrid",
    )
    return p


def add_demo_parser(sub) -> None:
    """The ``demo`` subcommand of :mod:`minisci.serve.cli`."""
    help_ = "start a local web page on the models: NER, citation intent, semantic search, reviewers"
    sp = sub.add_parser(
        "demo",
        help=help_,
        description=help_,
        parents=[page_parser()],
        epilog=DEMO_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sp.add_argument("--host", default="127.0.0.1", help="address to serve on (default: this machine only)")
    from minisci.serve.checks import PORTS, at_least

    sp.add_argument(
        "--port",
        type=at_least(*PORTS),
        default=DEFAULT_PORT,
        help=f"port to serve on, {PORTS[0]}-{PORTS[1]} (default: {DEFAULT_PORT})",
    )
    sp.set_defaults(fn=run_demo)


DEFAULT_PORT = 8501  # Streamlit's own default, so its documentation's URLs hold
DEMO_EXAMPLE = f"""example:
  minisci index --model models/embeddings --docs tests/fixtures/papers.jsonl --out /tmp/papers-index
  minisci demo --index /tmp/papers-index          # then open http://127.0.0.1:{DEFAULT_PORT}"""


def check_models(args) -> None:
    """Every model the page uses, checked before the server starts: a wrong path is one line now, not
    an error at the first click. Only config.json, the weights' header and the index's files are read."""
    from minisci.serve.models import check_encoder, check_head, check_task, check_weights, read_config
    from minisci.tasks import registry

    for option, path, command in (("--ner", args.ner, "ner"), ("--cite", args.cite, "cite")):
        if path is None:  # the project fine-tunes no dataset of this task: its tab says so
            continue
        try:
            config = read_config(path)
            check_task(Path(path), config, registry.of_command(command))
            check_weights(path)
            check_head(path, config)
        except MinisciError as e:
            raise MinisciError(f"minisci demo {option}: {e}") from None
    try:
        check_encoder(args.embeddings, read_config(args.embeddings))
    except MinisciError as e:
        raise MinisciError(f"minisci demo --embeddings: {e}") from None
    if args.index is not None:
        from minisci.serve.search import load_index, load_lexical

        try:  # read whole and checked against itself, as search reads it: a damaged index is one line now
            load_lexical(args.index, load_index(args.index)[2])
        except MinisciError as e:
            raise MinisciError(f"minisci demo --index: {e}") from None


def check_host(host: str, port: int | None = None) -> None:
    """``--host`` names an address this machine can serve on: bound here, as Streamlit binds it (IPv6
    for an address with a colon), on a free port, so a typo is one line before the server starts, not
    the server's traceback. ``port`` given: it is free on that address too (bound with SO_REUSEADDR, as
    the server binds it, so a port in TIME_WAIT passes), or one line names it: Streamlit would print
    the page's address, then its own log line, then stop, and the address printed would lead to the
    other server."""
    import errno
    import socket

    if host.startswith("unix://"):  # a Unix socket path, which Streamlit also serves on
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family) as probe:
            probe.bind((host, 0))
    except OSError as e:  # socket.gaierror (no such name) included
        raise MinisciError(
            f"minisci demo --host {host}: not an address of this machine ({e.strerror or e}); "
            "use 127.0.0.1 (this machine only), 0.0.0.0 (every interface) or one of this machine's addresses"
        ) from None
    if port is None:
        return
    try:
        with socket.socket(family) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as e:
        why = "in use (another server, or another minisci demo?)" if e.errno == errno.EADDRINUSE else e.strerror
        raise MinisciError(f"minisci demo --port {port}: {why} on {host}; choose another --port") from None


def run_demo(args) -> None:
    check_host(args.host, args.port)
    check_models(args)
    code = launch(args.ner, args.cite, args.embeddings, args.index, args.host, args.port)
    if code:
        raise MinisciError(f"the demo page stopped with exit code {code}")


def page_text(text: str | None, what: str = "text", cli: str = "minisci ner --file") -> str:
    """The text, stripped, or a one-line error for an empty or too long one."""
    text = (text or "").strip()
    if not text:
        raise MinisciError(f"Type or paste {_article(what)} {what} first.")
    if len(text) > MAX_CHARS:
        raise MinisciError(
            f"The {what} has {len(text):,} characters; the page takes at most {MAX_CHARS:,}. Use `{cli}` for longer texts."
        )
    return text


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def entity_colours(labels: list[str]) -> dict[str, str]:
    return {label: COLOURS[i % len(COLOURS)] for i, label in enumerate(labels)}


def entity_html(text: str, entities: list[dict], colours: dict[str, str]) -> str:
    """The text with each entity in a ``<mark>`` coloured by type, its type and score on hover."""
    parts, pos = [], 0
    for e in sorted(entities, key=lambda e: e["start"]):
        if e["start"] < pos:  # overlapping windows are merged upstream; never print a character twice
            continue
        colour = colours.get(e["entity_group"], COLOURS[-1])
        tip = f"{e['entity_group']} · score {e['score']:.3f}"
        parts.append(html.escape(text[pos : e["start"]]))
        parts.append(
            f'<mark class="minisci-entity" data-type="{html.escape(e["entity_group"])}" title="{html.escape(tip)}" '
            f'style="background:{colour};padding:0 .2em;border-radius:.25em">{html.escape(text[e["start"] : e["end"]])}'
            f'<sub style="font-size:.65em;margin-left:.25em">{html.escape(e["entity_group"])}</sub></mark>'
        )
        pos = e["end"]
    parts.append(html.escape(text[pos:]))
    return f'<div class="minisci-ner" style="line-height:2;white-space:pre-wrap">{"".join(parts)}</div>'


def entity_rows(text: str, entities: list[dict]) -> list[dict]:
    """The entity table: each entity's text as the input has it (a lower-casing tokenizer's decoded
    ``word`` would show "huntington disease" for "Huntington disease")."""
    return [
        {
            "type": e["entity_group"],
            "text": text[e["start"] : e["end"]],
            "start": e["start"],
            "end": e["end"],
            "score": f"{e['score']:.3f}",
        }
        for e in entities
    ]


NO_INDEX = (
    "No index yet: start the page with `--index DIR` (built by `minisci index`) or upload a JSONL collection above."
)


def legend_html(colours: dict[str, str]) -> str:
    marks = "".join(
        f'<mark style="background:{c};padding:0 .4em;margin-right:.5em;border-radius:.25em">{html.escape(t)}</mark>'
        for t, c in colours.items()
    )
    return f"<div>{marks}</div>"


def index_from_upload(encoder_dir: str | Path, name: str, data: bytes, max_length: int = 256):
    """An :class:`~minisci.serve.api.Index` of an uploaded JSONL collection, built in a temporary
    directory (the index is held in memory once loaded); errors name the uploaded file and line."""
    from minisci.serve.api import Index

    with tempfile.TemporaryDirectory(prefix="minisci-demo-") as tmp:
        path = Path(tmp) / Path(name).name
        path.write_bytes(data)
        try:
            return Index.build(encoder_dir, path, Path(tmp) / "index", max_length=max_length)
        except UnicodeDecodeError as e:
            raise MinisciError(f"{path.name}: not UTF-8 text ({e.reason} at byte {e.start})") from e
        except MinisciError as e:  # name the file as the person uploaded it, not its temporary copy
            raise MinisciError(str(e).replace(f"{tmp}/", "")) from e
