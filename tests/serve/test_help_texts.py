"""Small things a user reads: every stage's --help description is a whole sentence, the CLI shows
an entity as the input wrote it, and a fine-tuning stage's last line says where its output went."""

from __future__ import annotations

import importlib
import re

import pytest
from conftest import REPO

from minisci.serve import cli

STAGES = sorted(p.name for p in (REPO / "stages").glob("*.py"))


@pytest.mark.parametrize("stage", STAGES)
def test_stage_help_description_is_not_cut_mid_sentence(stage, capsys):
    # in this process (the stages folder is on pytest's pythonpath): a subprocess per stage spent
    # ~10 s importing torch and transformers again
    module = importlib.import_module(stage.removesuffix(".py"))
    with pytest.raises(SystemExit) as e:
        module.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    description = " ".join(out.split("\n\n")[1].split())
    assert description.startswith(f"Stage {stage.removesuffix('.py')}") or description[0].isupper()
    assert description.endswith("."), description


def test_stage_last_line_names_its_output():
    for stage in ("finetune_ner.py", "finetune_classification.py"):
        prints = (REPO / "stages" / stage).read_text().split("    print(")[-1]
        assert "-> {args.out}" in prints and "(from {args.model})" in prints, stage


def test_cli_shows_entities_as_the_input_wrote_them(tiny_finetuned, capsys):
    """The tiny tokenizer lower-cases: the pipeline's ``word`` is "aspirin"; the text says "ASPIRIN"."""
    text = "Patients received ASPIRIN after treatment with Heparin."
    assert cli.main(["ner", "--model", str(tiny_finetuned["ner"]), "--jsonl", text]) == 0
    import json

    entities = json.loads(capsys.readouterr().out)["entities"]
    assert entities and any(e["word"] != text[e["start"] : e["end"]] for e in entities)
    assert cli.main(["ner", "--model", str(tiny_finetuned["ner"]), text]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    assert [line.split("\t")[-1] for line in lines] == [text[e["start"] : e["end"]] for e in entities]


@pytest.mark.parametrize("task", ["ner", "cite"])
def test_a_tokenizer_without_a_maximum_length_takes_the_models_positions(task, tiny_finetuned, tmp_path, capsys):
    """A tokenizer built with the `tokenizers` library has no model_max_length (a huge sentinel):
    a text of over 512 pieces is windowed (ner) or truncated (cite) at the model's 64 positions,
    and `minisci ner`'s default window overlap fits them."""
    import json
    import shutil

    model = shutil.copytree(tiny_finetuned[task], tmp_path / "m")
    config = json.loads((model / "tokenizer_config.json").read_text())
    config.pop("model_max_length", None)
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    text = " ".join(["patients received aspirin after treatment with heparin"] * 80)  # ~640 pieces
    assert cli.main([task, "--model", str(model), "--jsonl", text]) == 0
    row = json.loads(capsys.readouterr().out)
    if task == "ner":
        assert len(row["entities"]) >= 80 and max(e["end"] for e in row["entities"]) > len(text) - 10
    else:
        assert row["label"] in row["scores"]


def test_each_commands_precision_help_describes_its_own_output(capsys):
    """--precision's fp32 is the entities for ner, the labels for cite, the embeddings for index: cite's and
    index's help say nothing of entities or a CRF head."""
    helps = {}
    for command in ("ner", "cite", "index"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        out = " ".join(capsys.readouterr().out.split())
        helps[command] = out.split("--precision {fp32,bf16,int8} ", 1)[1]
    assert "entities" in helps["ner"] and "CRF head" in helps["ner"]
    assert "text-classification pipeline" in helps["cite"]
    assert "embeds the documents, recorded in the index" in helps["index"]
    for command in ("cite", "index"):
        option = helps[command].split(" --", 1)[0]
        assert not any(word in option for word in ("NER", "CRF", "Viterbi", "entities")), option


@pytest.mark.parametrize("command", ["ner", "cite", "index", "search", "reviewers", "demo"])
def test_each_option_states_its_default_once(command, capsys):
    """The formatter adds "(default: X)" to an option with a default; its help text does not say it again."""
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    options = re.split(r"\n  (?=-)", capsys.readouterr().out.split("\noptions:\n", 1)[1])
    for option in options:
        assert " ".join(option.split()).count("default: ") <= 1, option
