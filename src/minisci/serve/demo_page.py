"""The Streamlit script of ``minisci demo`` (started by :func:`minisci.serve.demo.launch`; the options
after ``--`` are :func:`minisci.serve.demo.page_parser`'s).

Models and indexes are loaded once per server by ``st.cache_resource`` and shared by every request;
a failed load is not cached, so fixing a path and reloading the page is enough. Every error a person
can cause (:class:`~minisci.errors.MinisciError`) is shown in the tab, one line, and the page goes on.
"""

from __future__ import annotations

import sys

import streamlit as st

# Imported here, before the first Streamlit call: a click reruns the script by interrupting the running
# one at its next Streamlit call, and a transformers import cut in half (its lazy modules load inside
# the cached loaders below) fails every later run with "cannot import name 'pipeline'".
from transformers import AutoModel, pipeline  # noqa: F401

from minisci.errors import MinisciError
from minisci.serve import demo
from minisci.serve.api import CitationClassifier, Index, NerTagger
from minisci.serve.search import SCORES, why_no_reviewers


@st.cache_resource(show_spinner="Loading the NER model...")
def load_tagger(model_dir: str) -> NerTagger:
    return NerTagger(model_dir)


@st.cache_resource(show_spinner="Loading the citation model...")
def load_classifier(model_dir: str) -> CitationClassifier:
    return CitationClassifier(model_dir)


@st.cache_resource(show_spinner="Loading the index...")
def load_index(index_dir: str) -> Index:
    return Index(index_dir)


@st.cache_resource(show_spinner="Embedding the uploaded collection...", max_entries=4)
def upload_index(encoder_dir: str, name: str, data: bytes) -> Index:
    return demo.index_from_upload(encoder_dir, name, data)


def ner_tab(model_dir: str | None) -> None:
    if model_dir is None:
        st.info(f"No NER model ({demo.no_model('finetune_ner')}); start the demo with --ner DIR for one.")
        return
    with st.form("ner"):
        text = st.text_area("Biomedical text", height=150, placeholder="Naloxone reverses the effect of clonidine.")
        submitted = st.form_submit_button("Tag entities")
    if not submitted:
        st.caption(f"Model: `{model_dir}`. Long texts are split into overlapping windows, not cut.")
        return
    try:
        text = demo.page_text(text)
        tagger = load_tagger(model_dir)
        entities = tagger(text)
    except MinisciError as e:
        st.error(str(e))
        return
    colours = demo.entity_colours(tagger.labels)
    st.html(demo.legend_html(colours))
    st.html(demo.entity_html(text, entities, colours))
    if not entities:
        st.info("No entities found.")
        return
    st.table(demo.entity_rows(text, entities))


def cite_tab(model_dir: str | None) -> None:
    if model_dir is None:
        st.info(
            f"No citation intent model ({demo.no_model('finetune_classification')}); "
            "start the demo with --cite DIR for one."
        )
        return
    with st.form("cite"):
        text = st.text_area("Citation sentence", placeholder="We used the protocol described by Smith et al. (2001).")
        submitted = st.form_submit_button("Classify intent")
    if not submitted:
        st.caption(f"Model: `{model_dir}`.")
        return
    try:
        result = load_classifier(model_dir)(demo.page_text(text, "citation sentence", "minisci cite --file"))
    except MinisciError as e:
        st.error(str(e))
        return
    st.subheader(f"{result['label']} ({result['score']:.3f})")
    for label, p in sorted(result["scores"].items(), key=lambda kv: -kv[1]):
        st.progress(p, text=f"{label}: {p:.3f}")


def current_index(index_dir: str | None, encoder_dir: str) -> Index | None:
    """The uploaded collection's index if there is one, else ``--index``'s (also after an upload
    failed: its error is shown and the page goes on with the server's own index)."""
    upload = st.file_uploader("Build an index from a JSONL collection (id, title, text, authors)", type=["jsonl"])
    if upload is not None:
        try:
            index = upload_index(encoder_dir, upload.name, upload.getvalue())
            st.caption(f"Index of `{upload.name}`: {len(index)} documents, embedded with `{encoder_dir}`.")
            return index
        except MinisciError as e:
            st.error(str(e))
    if index_dir:
        try:
            index = load_index(index_dir)
        except MinisciError as e:
            st.error(str(e))
            return None
        st.caption(f"Index `{index_dir}`: {len(index)} documents.")
        return index
    st.info(demo.NO_INDEX)
    return None


def score_meaning(index: Index) -> str:
    """What the index's scores are: cosines only for the dense retriever."""
    return SCORES[index.info.get("retriever", "dense")]


def search_tab(index: Index | None) -> None:
    with st.form("search"):
        query = st.text_input("Query", placeholder="antibiotic resistance in hospital infections")
        k = st.slider("Results", 1, 50, 10)
        submitted = st.form_submit_button("Search")
    if not submitted:
        return
    if index is None:
        st.warning(demo.NO_INDEX)
        return
    try:
        hits = index.search(demo.page_text(query, "query", "minisci search"), k=k)
    except MinisciError as e:
        st.error(str(e))
        return
    if not hits:  # only the bm25 retriever leaves documents out: those that share no word with the query
        st.info("No document shares a word with the query (the index's retriever is bm25).")
        return
    st.caption(f"Scores: {score_meaning(index)}.")
    st.table([{"rank": h["rank"], "score": f"{h['score']:.4f}", "id": h["id"], "title": h["title"]} for h in hits])


def reviewers_tab(index: Index | None) -> None:
    with st.form("reviewers"):
        abstract = st.text_area("Abstract", height=150)
        exclude = st.text_area("Conflicts of interest: authors to exclude, one per line", height=80)
        col1, col2 = st.columns(2)
        k = col1.slider("Reviewers", 1, 50, 10)
        aggregation = col2.radio(
            "Author score", ("max", "mean_top3"), horizontal=True, help="best paper, or mean of three best"
        )
        submitted = st.form_submit_button("Recommend reviewers")
    if not submitted:
        return
    if index is None:
        st.warning(demo.NO_INDEX.replace("above", "in the Semantic search tab"))
        return
    banned = [line.strip() for line in exclude.splitlines() if line.strip()]
    try:
        ranked = index.reviewers(demo.page_text(abstract, "abstract", "minisci reviewers"), k, banned, aggregation)
    except MinisciError as e:
        st.error(str(e))
        return
    if not ranked:
        st.warning(why_no_reviewers(index.documents, banned)[1].capitalize() + ".")
        return
    paper = "best paper" if aggregation == "max" else "mean of the three best papers"
    st.caption(f"Author scores: {paper}, by {score_meaning(index)}.")
    titles = {d["id"]: d.get("title") or d["id"] for d in index.documents}
    st.table(
        [
            {
                "rank": r["rank"],
                "author": r["author"],
                "score": f"{r['score']:.4f}",
                "papers": " · ".join(titles[p] for p in r["papers"]),
            }
            for r in ranked
        ]
    )
    if banned:
        st.caption("Excluded: " + ", ".join(banned))


def main() -> None:
    args, _ = demo.page_parser().parse_known_args(sys.argv[1:])
    st.set_page_config(page_title="minisci demo", layout="wide")
    st.title("minisci")
    ner, cite, search, reviewers = st.tabs(["NER", "Citation intent", "Semantic search", "Reviewer recommendation"])
    with ner:
        ner_tab(args.ner)
    with cite:
        cite_tab(args.cite)
    with search:
        index = current_index(args.index, args.embeddings)
        search_tab(index)
    with reviewers:
        st.caption("Authors of the Semantic search tab's index.")
        reviewers_tab(index)


main()
