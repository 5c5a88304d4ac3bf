"""The corpus sample is stable under new exclusions, and the contamination guard matches text that
treebank tokenisation wrote differently (on the fixture pool)."""

import json
import shutil

from conftest import FIXTURE_DATASETS, FIXTURE_MIRROR, fixture_corpora, run_sample_corpus, tiny_params

from minisci.config import SampleCorpusConfig, from_dict
from minisci.data.corpus import normalise_words
from minisci.data.prepare import write_prepared


def cfg(**kw):
    return from_dict(SampleCorpusConfig, tiny_params({"sample_corpus": kw})["sample_corpus"], "sample_corpus")


def declare(prepared, tmp_path, name, test_texts, task="classification"):
    """A copy of the prepared datasets plus one more whose test split holds ``test_texts``."""
    out = tmp_path / "prepared"
    shutil.copytree(prepared, out)
    if task == "classification":
        rows = [{"text": t, "label": "x", "line": i + 1} for i, t in enumerate(test_texts)]
    else:
        rows = [{"tokens": t.split(), "tags": ["O"] * len(t.split()), "doc_id": None, "line": 1} for t in test_texts]
    meta = {"name": name, "task": task, "splits": ["train", "dev", "test"], "labels": ["x"]}
    write_prepared(out / name, {"train": rows, "dev": rows, "test": rows}, meta)
    return out


def pool_docs(mirror=FIXTURE_MIRROR):
    return [json.loads(line) for f in ("biomedical", "general") for line in (mirror / f"corpus/{f}.jsonl").open()]


def test_a_dataset_outside_the_sample_leaves_the_corpus_unchanged(tmp_path, fixture_prepared):
    rows, punkt, m = run_sample_corpus(
        tmp_path / "out1", fixture_prepared, FIXTURE_DATASETS, cfg(), corpora=fixture_corpora(FIXTURE_MIRROR)
    )
    sampled = {r["id"] for r in rows}
    # a clean pool document that was not drawn: its first sentence becomes a new test set's text
    outside = next(
        d for d in pool_docs() if d["id"] not in sampled and not d["eval_overlap"] and len(d["text"].split()) > 20
    )
    text = " ".join(outside["text"].split()[:12])
    prepared = declare(fixture_prepared, tmp_path, "extra", [text])
    rows2, punkt2, m2 = run_sample_corpus(
        tmp_path / "out2", prepared, (*FIXTURE_DATASETS, "extra"), cfg(), corpora=fixture_corpora(FIXTURE_MIRROR)
    )
    assert m2["excluded_own_check_per_dataset"]["extra"] >= 1 and m2["excluded_total"] > m["excluded_total"]
    assert rows2 == rows and punkt2 == punkt  # so the documents, the pairs and the adapted model stay as they were


def test_a_dataset_inside_the_sample_replaces_only_what_it_excludes(tmp_path, fixture_prepared):
    rows, _, m = run_sample_corpus(
        tmp_path / "out3", fixture_prepared, FIXTURE_DATASETS, cfg(), corpora=fixture_corpora(FIXTURE_MIRROR)
    )
    victims = [r for r in rows if r["domain"] == "biomedical"][2:4]
    texts = [next(s for s in r["sentences"] if len(s.split()) >= 10) for r in victims]
    prepared = declare(fixture_prepared, tmp_path, "extra", texts)
    rows2, _, m2 = run_sample_corpus(
        tmp_path / "out4", prepared, (*FIXTURE_DATASETS, "extra"), cfg(), corpora=fixture_corpora(FIXTURE_MIRROR)
    )
    old, new = [r["id"] for r in rows], [r["id"] for r in rows2]
    removed, added = set(old) - set(new), set(new) - set(old)
    assert removed == {r["id"] for r in victims} and len(added) == 2
    assert m2["excluded_own_check_per_dataset"]["extra"] == 2
    # everything else is the same document in the same relative order
    assert [i for i in old if i not in removed] == [i for i in new if i not in added]


def test_guard_matches_treebank_tokens_against_running_text(tmp_path, fixture_prepared):
    plain = (
        "We measured the serum level (in mg/dl) of the drug, and it didn't change across the "
        'three "treated" groups [see Table 2] and {all} controls; patients cannot tell.'
    )
    ptb = (
        "We measured the serum level -LRB- in mg/dl -RRB- of the drug , and it did n't change across the "
        "three `` treated '' groups -LSB- see Table 2 -RSB- and -LCB- all -RCB- controls ; patients can not tell ."
    )
    assert normalise_words(plain) == normalise_words(ptb)
    mirror = tmp_path / "mirror"
    shutil.copytree(FIXTURE_MIRROR, mirror)
    doc = {"id": "fixture:ptb-twin", "source": "s", "title": "", "text": plain, "kind": "abstract"}
    with (mirror / "corpus/general.jsonl").open("a") as f:
        f.write(json.dumps({**doc, "eval_overlap": False}) + "\n")
    prepared = declare(fixture_prepared, tmp_path, "ptb_ner", [ptb], task="ner")
    rows, _, m = run_sample_corpus(
        tmp_path / "out5", prepared, (*FIXTURE_DATASETS, "ptb_ner"), cfg(n_docs=40), corpora=fixture_corpora(mirror)
    )
    assert m["excluded_own_check_per_dataset"]["ptb_ner"] == 1
    assert "fixture:ptb-twin" not in {r["id"] for r in rows}
