import json
import shutil

import pytest
import sample_corpus as stage  # noqa: E402
from conftest import (
    FIXTURE_DATASETS,
    FIXTURE_MIRROR,
    fixture_corpora,
    prepare,
    run_sample_corpus,
    tiny_params,
    write_params,
)

from minisci.config import SampleCorpusConfig, from_dict
from minisci.data.corpus import SentenceIndex, normalise_words, punkt_from_json
from minisci.errors import ConfigError, DataFormatError


def cfg(**kw):
    return from_dict(SampleCorpusConfig, tiny_params({"sample_corpus": kw})["sample_corpus"], "sample_corpus")


def test_ratio_exclusions_and_counts(tmp_path, fixture_prepared):
    rows, punkt, m = run_sample_corpus(
        tmp_path / "out1", fixture_prepared, FIXTURE_DATASETS, cfg(), corpora=fixture_corpora(FIXTURE_MIRROR)
    )
    domains = [r["domain"] for r in rows]
    assert domains.count("biomedical") == 24 and domains.count("general") == 6
    ids = {r["id"] for r in rows}
    assert m["excluded_eval_overlap_flag"] == 3  # the three flagged BC5CDR test abstracts
    assert m["excluded_own_check"] == 4 and m["excluded_own_check_only"] == 1  # + the planted one
    assert m["excluded_own_check_per_dataset"] == {"bc5cdr": 4, "scicite": 0}
    assert not ids & {"fixture:planted", "pmid:8701013", "pmid:439781", "pmid:22836123"}
    assert m["total_docs"] == 30 and m["total_sentences"] == sum(len(r["sentences"]) for r in rows)
    assert all(len(s.split()) >= 4 for r in rows for s in r["sentences"])


def test_own_check_alone_catches_flagged_documents(tmp_path, fixture_prepared):
    # Independent of the pool flag: the three flagged abstracts contain test sentences too.
    _, _, m = run_sample_corpus(
        tmp_path / "out2", fixture_prepared, FIXTURE_DATASETS, cfg(), corpora=fixture_corpora(FIXTURE_MIRROR)
    )
    assert m["excluded_flag_only"] == 0


def test_same_seed_same_bytes_other_seed_differs(tmp_path, fixture_prepared):
    outs = []
    for seed in (1, 1, 2):
        values = tiny_params({"sample_corpus": {"seed": seed}})
        for entry in values["corpora"].values():
            entry["path"] = str(FIXTURE_MIRROR / entry["path"].removeprefix("data/raw/"))
        params = write_params(tmp_path, values)
        out = tmp_path / f"out{len(outs)}"
        stage.main(
            [
                "--corpus-dirs",
                str(FIXTURE_MIRROR),
                "--num-proc",
                "2",
                "--datasets",
                str(fixture_prepared),
                "--out",
                str(out),
                "--metrics",
                str(tmp_path / "m.json"),
                "--params",
                str(params),
                "--catalogue",
                str(tmp_path / "data/datasets.yaml"),
                "--corpora-catalogue",
                str(tmp_path / "data/corpora.yaml"),
            ]
        )
        outs.append((out / "documents.jsonl").read_bytes() + (out / "punkt_params.json").read_bytes())
    assert outs[0] == outs[1] and outs[0] != outs[2]


def test_too_few_documents_is_a_clear_error(tmp_path, fixture_prepared):
    with pytest.raises(ConfigError, match="need 48 biomedical documents but the pool has only 45"):
        run_sample_corpus(
            tmp_path / "out3",
            fixture_prepared,
            FIXTURE_DATASETS,
            cfg(n_docs=60),
            corpora=fixture_corpora(FIXTURE_MIRROR),
        )


def test_tapt_adds_training_text_and_guards_it(tmp_path):
    mirror = tmp_path / "mirror"
    shutil.copytree(FIXTURE_MIRROR, mirror)
    train = mirror / "classification/scicite/train.jsonl"
    test_text = json.loads((mirror / "classification/scicite/test.jsonl").read_text().splitlines()[0])["text"]
    train.write_text(
        json.dumps(
            {"text": "A clean training citation about method choices in prior work (Smith 2001).", "label": "method"}
        )
        + "\n"
        + json.dumps({"text": test_text, "label": "background"})
        + "\n"
        + "".join(json.dumps({"text": "x", "label": lab}) + "\n" for lab in ("background", "method", "result"))
    )
    prepared = tmp_path / "prepared"
    for name in FIXTURE_DATASETS:
        prepare(mirror, name, prepared / name)
    rows, _, m = run_sample_corpus(
        tmp_path / "out4", prepared, FIXTURE_DATASETS, cfg(tapt_datasets=["scicite"]), corpora=fixture_corpora(mirror)
    )
    tapt = [r for r in rows if r["domain"] == "tapt"]
    # the test citation is guarded out; one-word rows keep no sentence
    assert len(tapt) == 1 and m["excluded_tapt_docs"] == 1 and m["tapt_docs"] == 1


def test_punkt_params_round_trip(tmp_path, fixture_prepared):
    _, punkt, _ = run_sample_corpus(
        tmp_path / "out5", fixture_prepared, FIXTURE_DATASETS, cfg(), corpora=fixture_corpora(FIXTURE_MIRROR)
    )
    tok = punkt_from_json(json.loads(json.dumps(punkt)))
    assert tok.tokenize("We used 5 mg. of drug. Patients improved.")[-1] == "Patients improved."


def test_sentence_index_exact_containment():
    idx = SentenceIndex([normalise_words("The quick brown fox jumps over the lazy dog .")], k=8)
    assert idx.contains_any(normalise_words("Intro. THE quick-brown fox jumps over the lazy dog! End"))
    assert not idx.contains_any(normalise_words("the quick brown fox jumps over the lazy cat"))


def test_malformed_pool_line(tmp_path, fixture_prepared):
    mirror = tmp_path / "mirror"
    shutil.copytree(FIXTURE_MIRROR, mirror)
    with (mirror / "corpus/general.jsonl").open("a") as f:
        f.write('{"id": "x", "text": "t", "source": "s", "kind": "abstract"}\n')
    with pytest.raises(
        DataFormatError, match=r"general.jsonl:17: field 'eval_overlap' \(flag_field\) must be true or false, missing"
    ):
        run_sample_corpus(tmp_path / "out6", fixture_prepared, FIXTURE_DATASETS, cfg(), corpora=fixture_corpora(mirror))
