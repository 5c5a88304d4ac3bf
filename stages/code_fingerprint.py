"""Stage code_fingerprint: what each stage's result can depend on besides its data and params, one
small file per stage script -> data/fingerprints/<stage>.json, and the base model's content ->
data/fingerprints/model_base.json. Also checks, before any other stage runs, every stage's params
section as its stage will read it, that every dataset a fine-tuning stage lists is in the catalogue,
and that each fine-tuning section's seeds fit the pretraining seeds (``pretrain.seed_design``): a
misfit fails here, not in its own stage after the stages before it (every pretraining seed, for the
adapted arm's) have run. A training section's ``precision: bf16`` on a machine without a
GPU is checked here too: refused where the CPU has no native bf16 (as that section's stage would refuse
it), and a warning with the measured ratio where this CPU's bf16 matrix products are slower than fp32's
(a probe of the base model's widest layer, tens of milliseconds).

Usage: python stages/code_fingerprint.py --stages stages --out data/fingerprints

Every other stage depends on its own fingerprint file instead of its source files, so an edit that
cannot change a result (a message, a docstring, a comment, a type hint, formatting) reruns only this
stage (a few seconds); see src/minisci/fingerprint.py for what counts as the same code.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from minisci import config
from minisci.config import (
    CORPORA_FILE,
    DATASETS_FILE,
    ExportMetricsConfig,
    FetchDataConfig,
    FinetuneEmbeddingsConfig,
    MakePairsConfig,
    ModelConfig,
    SampleCorpusConfig,
    check_finetune_datasets,
    check_scratch_config,
    load_params,
    load_section,
)
from minisci.data.fetch import read_manifest
from minisci.errors import ConfigError, MinisciError
from minisci.fingerprint import model_content_hash, module_closure, stage_fingerprint
from minisci.io import write_json
from minisci.pretrain.model import ModelResolutionError, check_base_model, check_tokenizer_files, resolve_model_path
from minisci.pretrain.seeds import load_pretrain, load_seed_design
from minisci.stage import description, run_stage
from minisci.tasks import registry

# the sections whose stages take them whole; the fine-tuning sections are checked by check_seed_plan
SECTIONS = {
    "fetch_data": FetchDataConfig,
    "sample_corpus": SampleCorpusConfig,
    "make_pairs": MakePairsConfig,
    "finetune_embeddings": FinetuneEmbeddingsConfig,
    "export_metrics": ExportMetricsConfig,
}


def check_sections(path: str) -> None:
    """Each stage's params section as its stage will read it (keys, types, ranges), so that a bad value
    (``pretrain.mlm_probability: 1.5``, a typo in a key) fails here, not after the stages before its own;
    and no section that no stage reads (``dvc exp run -S +finetune_nre.epochs=3`` would otherwise run
    the default experiment under a name that says otherwise)."""
    known = [*SECTIONS, "model", "pretrain", *(kind.stage for kind in registry.KINDS.values())]
    unknown = sorted(set(load_params(path)) - set(known) - {"datasets", "corpora"})  # catalogues: their own error
    if unknown:
        raise ConfigError(f"{path}: unknown params section {unknown[0]!r}: no stage reads it; the sections: {known}")
    for section, cls in SECTIONS.items():
        load_section(cls, section, path)
    load_pretrain(path)


def check_tapt_datasets(path: str, catalogue: str) -> None:
    """``sample_corpus.tapt_datasets`` names catalogue entries: checked here, not after ``prepare_data``."""
    names = load_section(SampleCorpusConfig, "sample_corpus", path).tapt_datasets
    declared = config.load_catalog(catalogue)
    if unknown := sorted(set(names) - set(declared)):
        raise ConfigError(
            f"params sample_corpus.tapt_datasets: {unknown} are not in the datasets catalogue {catalogue}; "
            f"declared: {sorted(declared)}"
        )


def check_seed_plan(path: str) -> None:
    """Each fine-tuning section as its stages will read it (an empty ``datasets`` list is refused here,
    not by ``export_metrics`` after every other stage), with seeds the pretraining seeds' design can
    spread over them (paired: a multiple of the pretraining seeds), as its adapted arm's
    stage will ask; a design the fine-tuning stages do not run (``cross``) is refused here too."""
    design = load_seed_design(path)
    for kind in registry.KINDS.values():
        section = load_section(getattr(config, kind.config), kind.stage, path)  # its own checks first
        if design.design != "paired":
            raise ConfigError(
                f"{path}: pretrain.seed_design: the fine-tuning stages run paired, not {design.design} "
                "(cross is for studies: minisci.report.bootstrap.pretrain_components)"
            )
        try:
            design.runs(section.seeds)
        except ConfigError as e:
            raise ConfigError(f"{path}: {kind.stage}.seeds: {e}") from None


# The folders sample_corpus reads corpora from (its --corpus-dirs in dvc.yaml; a test keeps them equal),
# and fetch_data's output folder with the manifest of what it copies there.
CORPUS_DIRS = ("data/raw/corpus", "data/corpora")
FETCHED, MANIFEST = "data/raw", "data/manifest.tsv"


def check_catalogue_files(datasets: str, corpora: str) -> None:
    """Each catalogue file holds its one mapping: an entry written at the top level, outside
    ``datasets:`` or ``corpora:``, would otherwise be read by no stage, and say nothing."""
    for path, key in ((datasets, "datasets"), (corpora, "corpora")):
        if not Path(path).is_file():
            continue  # the loaders say so where a stage needs the file
        if extra := [k for k in load_params(path) if k != key]:
            raise ConfigError(
                f"{path}: top-level key {extra[0]!r} is not read: entries go under '{key}:' (indent it there)"
            )


def check_dataset_files(catalogue: str, manifest: str = MANIFEST, fetched: str = FETCHED) -> None:
    """Where each catalogue entry's split files are, before DVC acts on any stage: inside its ``dir``
    (the folder its ``prepare_data`` stage depends on, so DVC sees an edit), and, under fetch_data's
    output folder, files fetch_data copies there: DVC replaces that folder whole at its next checkout,
    deleting anything else in it. Published scores name the task's metric or ``f1.<label>``."""
    copied = None
    for name, entry in config.load_catalog(catalogue).items():
        where = f"{catalogue}: datasets.{name}"
        folder = os.path.normpath(entry.dir)
        for split, file in entry.splits.items():
            path = os.path.normpath(os.path.join(folder, file))
            if Path(file).is_absolute() or Path(folder) not in Path(path).parents:  # dir "." holds "train.txt"
                raise ConfigError(
                    f"{where}.splits.{split}: {file!r} is not inside dir {entry.dir!r}, the folder DVC watches "
                    "for this dataset; give a file name inside it"
                )
            if Path(fetched) in Path(path).parents and Path(manifest).is_file():  # fetch_data says if it is not
                if copied is None:
                    copied = {os.path.normpath(os.path.join(fetched, e.path)) for e in read_manifest(manifest)}
                if path not in copied:
                    raise ConfigError(
                        f"{where}: {path} is not a file fetch_data copies ({manifest}): {fetched} is fetch_data's "
                        f"output, which DVC replaces whole, deleting what else is there; put your dataset in a "
                        f"folder of its own (e.g. data/{name}) and 'dvc add' it"
                    )
        metric = registry.KINDS[entry.task].metric
        names = set(entry.keep_types or entry.labels or ())
        for key in entry.published or {}:
            label = key.removeprefix("f1.") if key.startswith("f1.") else None
            known = key == metric or (bool(label) and (not names or label in names))
            if not known:
                raise ConfigError(
                    f"{where}.published: {key!r} names no score of this dataset: a {entry.task} dataset's report "
                    f"shows {metric!r} and 'f1.<label>'" + (f" with a label of {sorted(names)}" if names else "")
                )


def check_corpora(corpora: str) -> None:
    """The corpus catalogue as sample_corpus reads it (entries, fields, where each corpus lies), so a
    typo fails here, not after DVC has removed sample_corpus's outputs to rerun it."""
    if not Path(corpora).is_file():
        return  # sample_corpus says so (it needs the file)
    from minisci.data.corpus import check_tracked  # nltk: imported only here, where it is needed

    check_tracked(config.load_corpora(corpora), list(CORPUS_DIRS), FETCHED, MANIFEST, corpora)


def check_precision(path: str, model_cfg: ModelConfig) -> None:
    """The training sections that ask for ``precision: bf16``, where no GPU is: refused without native
    bf16, a ``warning:`` line when a probe of the base model's feed-forward shape finds bf16 the slower
    here. ``auto`` is fp32 on a CPU."""
    sections = [
        f"{name}.precision"
        for name, section in load_params(path).items()
        if isinstance(section, dict) and section.get("precision") == "bf16"
    ]
    if not sections:
        return  # the usual case: nothing imported (torch takes seconds, and this stage always runs)
    import torch

    if torch.cuda.is_available():
        return
    from minisci.bf16 import SLOWER, bf16_speed_ratio, why_slower
    from minisci.training import resolve_precision

    where = f"{path}: {', '.join(sections)}"
    try:
        resolve_precision("bf16")
    except ConfigError as e:
        raise ConfigError(f"{where}: {str(e).removeprefix('precision: ')}") from None
    if model_cfg.base == "scratch":
        model = model_cfg.scratch_config
    else:
        model = json.loads((resolve_model_path(model_cfg.base) / "config.json").read_text(encoding="utf-8"))
    width, depth = widest_layer(model)
    if (ratio := bf16_speed_ratio(width, depth, rows=1024)) < SLOWER:  # a training batch's pieces (8 x 128)
        print(
            f"warning: {where}: bf16 will train slower than fp32 on this CPU: its bf16 matrix products ran at "
            f"{ratio:.2f}x fp32's speed in a probe of a {width}x{depth} layer ({why_slower()}); auto trains in fp32 here",
            file=sys.stderr,
        )


def tokenizer_top_id(path: Path) -> tuple[int, Path] | None:
    """The largest token id a saved tokenizer can produce, and the file that says so: from
    ``tokenizer.json`` (a fast tokenizer, which transformers prefers), else ``vocab.txt`` (an id per
    line) or ``vocab.json``, with ``added_tokens.json``'s ids. None for a sentencepiece model alone
    (its size is in a binary file this stage does not parse)."""
    top: tuple[int, Path] | None = None

    def read_json(file: Path):
        try:
            return json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ModelResolutionError(f"{file}: unreadable tokenizer file ({' '.join(str(e).split())})") from None

    def seen(ids, file: Path) -> None:
        nonlocal top
        ids = [i for i in ids if isinstance(i, int)]
        if ids and (top is None or max(ids) > top[0]):
            top = max(ids), file

    if (file := path / "tokenizer.json").is_file():
        data = read_json(file)
        model = data.get("model") if isinstance(data, dict) else None
        vocab = model.get("vocab") if isinstance(model, dict) else None
        if isinstance(vocab, dict):
            seen(vocab.values(), file)
        elif isinstance(vocab, list):  # Unigram: a list of [piece, score], the id is the index
            seen([len(vocab) - 1], file)
        seen([t.get("id") for t in data.get("added_tokens") or [] if isinstance(t, dict)], file)
        return top
    if (file := path / "vocab.txt").is_file():
        with file.open("rb") as f:
            seen([sum(1 for _ in f) - 1], file)
    elif (file := path / "vocab.json").is_file():
        vocab = read_json(file)
        seen(vocab.values() if isinstance(vocab, dict) else [], file)
    if (file := path / "added_tokens.json").is_file():
        added = read_json(file)
        seen(added.values() if isinstance(added, dict) else [], file)
    return top


def check_tokenizer(model_cfg: ModelConfig) -> None:
    """The tokenizer the stages will load (``model.tokenizer``, else the base's) has no id beyond the
    base model's embeddings (``vocab_size``): otherwise one line here, instead of an IndexError in the
    first forward pass of pretrain or a fine-tuning stage. Read from the files, so this always-run
    stage imports neither transformers nor torch. A folder without tokenizer files, from which
    transformers would build a tokenizer that reads every word as [UNK], is refused too."""
    name = model_cfg.tokenizer or model_cfg.base
    which = "model.tokenizer" if model_cfg.tokenizer else "model.base"
    if name == "scratch":
        return
    try:
        folder = resolve_model_path(name)
    except ModelResolutionError as e:  # its advice names model.base, the usual key: name the one that gave it
        raise ModelResolutionError(str(e).replace("set model.base to", f"set {which} to")) from None
    try:
        check_tokenizer_files(folder)
    except MinisciError as e:
        raise ModelResolutionError(f"{which} {name!r}: {e}") from None
    if model_cfg.base == "scratch":  # its embeddings are sized from the tokenizer
        return
    base = resolve_model_path(model_cfg.base)
    size = json.loads((base / "config.json").read_text(encoding="utf-8")).get("vocab_size")
    top = tokenizer_top_id(folder)
    if isinstance(size, int) and top is not None and top[0] >= size:
        raise ModelResolutionError(
            f"{which} {name!r}: {top[1]} has token ids up to {top[0]}, but model {model_cfg.base!r} has "
            f"{size} token embeddings (vocab_size in its config.json); use the tokenizer saved with the model"
        )


def widest_layer(model: dict) -> tuple[int, int]:
    """The feed-forward shape (hidden size x intermediate size) of a model's config; BERT-base's
    768x3072 where the config does not give it (BertConfig's defaults, or other key names)."""
    try:
        return int(model.get("hidden_size", 768)), int(model.get("intermediate_size", 3072))
    except (TypeError, ValueError):
        return 768, 3072


def check_running_code(stages: Path) -> None:
    """The library code the stages run is the checkout's ``src/minisci``, or the same bytes: the
    fingerprints describe the checkout's files, so a stage running another copy (an editable install
    of another clone, a wheel installed before an edit) would record results under code it did not
    run. Only what some stage script in ``stages`` imports counts (the closures, this stage's own
    included, and the package ``__init__`` files): a queued DVC experiment runs from a copy of the
    workspace but imports the install, so an edit of the workspace's serving or report code while a
    queue runs changes no result and stops nothing. Skipped where the checkout holds no package (a
    project of stage scripts alone)."""
    # the package as loaded (not an import statement: the closure of this stage would then hold all of it)
    here = stages.parent / "src" / "minisci"
    running = Path(sys.modules["minisci"].__file__).resolve().parent
    if running == here.resolve() or not (here / "__init__.py").is_file():
        return
    used = {p for script in sorted(stages.glob("*.py")) for p in module_closure(script, here.parent)}
    files = {p.relative_to(here).as_posix() for p in used}
    files |= {p.relative_to(d).as_posix() for d in (here, running) for p in d.rglob("__init__.py")}
    differ = sorted(f for f in files if not ((here / f).is_file() and (running / f).is_file()) or
                    (here / f).read_bytes() != (running / f).read_bytes())  # fmt: skip
    if differ:
        raise MinisciError(
            f"the minisci package that runs is {running}, not this checkout's {here.relative_to(stages.parent)}, "
            f"and {len(differ)} of the files the stages import differ (first: {differ[0]}); install this "
            "checkout (pip install -e .) or run with PYTHONPATH=src"
        )


def _stage_of(path: Path) -> str | None:
    """The stage a fingerprint file names, or None for a file that is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data.get("stage") if isinstance(data, dict) else None


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=description(__doc__))
    p.add_argument("--stages", required=True, help="folder of the stage scripts")
    p.add_argument("--out", required=True, help="folder for the fingerprint files")
    p.add_argument("--params", default="params.yaml")
    p.add_argument("--catalogue", default=DATASETS_FILE, help=f"the dataset catalogue (default {DATASETS_FILE})")
    args = p.parse_args(argv)

    check_running_code(Path(args.stages).resolve())  # first: every check below runs that code
    check_sections(args.params)
    check_seed_plan(args.params)  # the fine-tuning sections' own checks (types, ranges) first
    check_finetune_datasets(args.params, args.catalogue)
    check_tapt_datasets(args.params, args.catalogue)
    check_catalogue_files(args.catalogue, CORPORA_FILE)
    check_dataset_files(args.catalogue)
    check_corpora(CORPORA_FILE)
    model_cfg = load_section(ModelConfig, "model", args.params)
    if model_cfg.base == "scratch":  # the first stage that reads model.base: a bad one fails here
        check_scratch_config(model_cfg.scratch_config)
    else:
        # pretrain.nsp too: a RoBERTa with nsp: true is refused here, not by pretrain after the corpus stages
        check_base_model(model_cfg.base, resolve_model_path(model_cfg.base), load_pretrain(args.params)[0].nsp)
    check_tokenizer(model_cfg)
    check_precision(args.params, model_cfg)
    root = Path(args.stages).resolve().parent
    out = Path(args.out)
    prints = {  # all computed before any is written: a file that does not parse leaves the old ones
        script.stem: {"stage": script.stem, **stage_fingerprint(script.resolve(), root)}
        for script in sorted(Path(args.stages).glob("*.py"))
        if script.stem != "code_fingerprint"
    }
    sources = {"base": model_cfg.base, "tokenizer": model_cfg.tokenizer}  # tokenizer: None = the base's
    base = {
        role: {"name": name, "files": model_content_hash(resolve_model_path(name))}
        for role, name in sources.items()
        if name not in (None, "scratch")
    }
    for name, fingerprint in prints.items():
        write_json(out / f"{name}.json", fingerprint)
    write_json(out / "model_base.json", base)
    for stale in sorted(set(out.glob("*.json")) - {out / f"{name}.json" for name in [*prints, "model_base"]}):
        if _stage_of(stale) == stale.stem:  # a fingerprint this stage wrote for a script that is gone
            stale.unlink()
    print(f"code_fingerprint: {len(list(out.glob('*.json'))) - 1} stages, base model {model_cfg.base}")


if __name__ == "__main__":
    sys.exit(run_stage(main))
