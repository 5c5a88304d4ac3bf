"""What the CLI tells a user whose model path is wrong: never "pass --model" (they did), and after
the quick profile the fine-tuned models that do exist (the README's BC5CDR paths do not)."""

from __future__ import annotations

import json

from minisci.serve import cli


def test_a_missing_model_names_no_option_the_user_already_gave(tmp_path, capsys):
    missing = tmp_path / "models" / "finetune_ner" / "bc5cdr" / "adapted"
    assert cli.main(["ner", "--model", str(missing), "aspirin"]) == 1
    err = capsys.readouterr().err
    assert (
        err
        == f"error: {missing}: not a model directory (no such directory); check the path, or run `dvc repro` to train it\n"
    )
    assert "--model" not in err


def test_a_missing_model_names_the_models_of_its_kind_that_exist(tmp_path, capsys):
    root = tmp_path / "models" / "finetune_ner"
    quick = root / "ncbi_disease" / "adapted"
    quick.mkdir(parents=True)
    (quick / "config.json").write_text(json.dumps({"architectures": ["BertForTokenClassification"]}))
    (root / "ncbi_disease" / "baseline").mkdir()  # no config.json: not a model, not named
    assert cli.main(["ner", "--model", str(root / "bc5cdr" / "adapted"), "aspirin"]) == 1
    err = capsys.readouterr().err
    assert err.endswith(f"(no such directory); models that exist: {quick}\n"), err


def test_precision_help_does_not_promise_the_pipeline_for_a_crf(capsys):
    try:
        cli.main(["ner", "--help"])
    except SystemExit:
        pass
    out = " ".join(capsys.readouterr().out.split())
    assert "CRF head" in out and "exactly the transformers pipeline;" not in out
