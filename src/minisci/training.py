"""What every training stage shares: the one place that builds ``TrainingArguments``, precision
choice, the checks at model load (lengths against positions, the tokenizer's maximum length, the
[UNK] rate, weights that start random), checkpoint bookkeeping for resume, and writing training
curves with DVCLive."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import sys
from pathlib import Path

import torch

from minisci.fingerprint import code_hash, module_closure
from minisci.io import atomic_path, write_json

CHECKPOINT_PREFIX = "checkpoint-"
FINGERPRINT = "fingerprint.json"
RUN_METRICS = "run_metrics.json"  # beside FINGERPRINT: the metrics of the run that trained the checkpoints


BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")  # the /proc/cpuinfo flags of native bf16 matrix products


def cpu_info() -> tuple[str, set[str]]:
    """This CPU's model name and feature flags, from /proc/cpuinfo (empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "", set()
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    return fields.get("model name", ""), set(fields.get("flags", "").split())


def resolve_precision(precision: str) -> str:
    """The precision a training run will actually use. ``auto``: bf16 (or fp16) on a GPU, fp32 on CPU, where
    the metrics agree across CPU models to the digits they report (not to the bit: docs/pipeline.md, "On
    another machine"). ``bf16`` on a CPU without native bf16 is refused: emulated bf16 autocast was measured
    ~24x slower than fp32, and silently running fp32 instead would mislabel the run. Native bf16 that is
    slower than fp32 (AVX512-BF16 without AMX) is warned about once, by the code_fingerprint stage."""
    from minisci.errors import ConfigError

    gpu = torch.cuda.is_available()
    if precision == "auto":
        return ("bf16" if torch.cuda.is_bf16_supported() else "fp16") if gpu else "fp32"
    if precision == "fp16" and not gpu:
        raise ConfigError("precision: fp16 needs a GPU; use fp32 (or bf16 on a CPU with avx512_bf16/amx_bf16)")
    model, flags = cpu_info()
    if precision == "bf16" and not gpu and flags.isdisjoint(BF16_CPU_FLAGS):
        model = model or "this CPU"
        raise ConfigError(
            f"precision: bf16 needs native bf16 on CPU ({' or '.join(BF16_CPU_FLAGS)}), which {model} lacks; "
            "use fp32 or auto"
        )
    return precision


def precision_flags(precision: str) -> dict[str, bool]:
    """The Trainer's bf16/fp16 switches for ``precision`` (see :func:`resolve_precision`)."""
    precision = resolve_precision(precision)
    return {"bf16": precision == "bf16", "fp16": precision == "fp16"}


def run_environment(precision: str) -> dict[str, str]:
    """What a training run's metrics need to explain themselves on another machine: the precision actually
    used, the CPU model and its bf16-relevant flags, the GPU if any, torch's version and thread count."""
    model, flags = cpu_info()
    relevant = ("avx2", "avx512f", *BF16_CPU_FLAGS, "amx_tile")
    return {
        "precision": resolve_precision(precision),
        "cpu": model,
        "cpu_flags": " ".join(f for f in relevant if f in flags),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "",
        "torch": torch.__version__,
        "threads": str(torch.get_num_threads()),
    }


def training_arguments(
    output_dir: str | Path,
    *,
    seed: int,
    batch_size: int,
    learning_rate: float,
    weight_decay: float,
    precision: str,
    grad_accum: int = 1,
    max_steps: int = -1,
    epochs: float = 1.0,
    warmup: float = 0.0,
    logging_steps: int = 50,
    save_steps: int | None = None,
    save_total_limit: int = 2,
    eval_steps: int | None = None,
    eval_batch_size: int | None = None,
    group_by_length: bool = True,
    dataloader_workers: int = 0,
    args_cls=None,
    **extra,
):
    """TrainingArguments with everything that matters set explicitly (nothing from defaults that
    changed between transformers releases): reporting off (we log with DVCLive ourselves: see
    :func:`live_callback`; transformers' own DVCLive integration would rewrite the root dvc.yaml), seeded
    data order, checkpointing only when asked, length-grouped batches. ``args_cls`` builds a
    subclass instead (sentence-transformers' training arguments); ``extra`` sets its own fields or
    overrides these. The optimizer is torch's fused AdamW, with a linear schedule and gradients clipped
    to norm 1 (the pretraining trainer builds its own optimizer and schedule, and clips the same way)."""
    from transformers import TrainingArguments

    quiet_load_reports()
    settings = dict(
        output_dir=str(output_dir),
        report_to="none",
        seed=seed,
        data_seed=seed,
        per_device_train_batch_size=batch_size,
        per_device_eval_batch_size=eval_batch_size or batch_size,
        gradient_accumulation_steps=grad_accum,
        learning_rate=learning_rate,
        weight_decay=weight_decay,
        warmup_steps=warmup,  # transformers 5: a value < 1 is a ratio of the total steps
        max_steps=max_steps,
        num_train_epochs=epochs,
        logging_steps=logging_steps,
        logging_first_step=True,
        save_strategy="steps" if save_steps else "no",
        save_steps=save_steps or 500,
        save_total_limit=save_total_limit,
        eval_strategy="steps" if eval_steps else "no",
        eval_steps=eval_steps,
        train_sampling_strategy="group_by_length" if group_by_length else "random",
        include_num_input_tokens_seen="non_padding",
        dataloader_num_workers=dataloader_workers,
        use_cpu=not torch.cuda.is_available(),
        ddp_find_unused_parameters=False,
        remove_unused_columns=False,
        disable_tqdm=not sys.stderr.isatty(),  # progress bars on a terminal; CI and log files stay quiet
        # the optimizer and its clipping and schedule, which transformers releases have changed by default
        optim="adamw_torch_fused",
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-8,
        max_grad_norm=1.0,
        lr_scheduler_type="linear",
        **precision_flags(precision),
    )
    return (args_cls or TrainingArguments)(**{**settings, **extra})


class _OneLineLoadReport(logging.Filter):
    """transformers' LOAD REPORT (a table of every missing or unexpected weight, expected here: the
    heads a stage trains are new, the pretraining heads are dropped): cut to its first line and
    counts on a terminal, dropped from a log file, where :func:`report_random_init` has already said
    what matters in one line."""

    def __init__(self, terminal: bool):
        super().__init__()
        self.terminal = terminal

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "LOAD REPORT" in message:
            if not self.terminal:
                return False
            lines = message.splitlines()
            counts = {s: sum(f"| {s}" in line for line in lines) for s in ("MISSING", "UNEXPECTED", "MISMATCH")}
            record.msg = lines[0] + " (" + ", ".join(f"{n} {s.lower()}" for s, n in counts.items() if n) + " keys)"
            record.args = ()
        return True


def quiet_load_reports() -> None:
    """Model loading reports as one line each, on every handler of transformers' logger, and when
    stderr is not a terminal (a stage's log file, CI) no report and no "Loading weights" bars at
    all (idempotent)."""
    from transformers.utils import logging as hf_logging

    terminal = sys.stderr.isatty()
    for handler in hf_logging.get_logger().handlers:
        if not any(isinstance(f, _OneLineLoadReport) for f in handler.filters):
            handler.addFilter(_OneLineLoadReport(terminal))
    if not terminal:
        hf_logging.disable_progress_bar()


# Checks at model load, shared by every stage: lengths against positions, the tokenizer's maximum
# length, the [UNK] rate of the training text, and weights that start random.

# Model types whose position ids start after the padding index (fairseq's convention): their first
# pad_token_id + 1 positions are never used for tokens.
POSITIONS_AFTER_PADDING = frozenset({"roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "data2vec-text"})
UNK_SAMPLE_WORDS = 20_000  # enough for a rate to 0.1%, a fraction of a second to tokenise
UNK_WARN_RATE = 0.01  # above this, the tokenizer probably does not fit the text (casing, script)


def usable_positions(config) -> int | None:
    """How many tokens (specials included) one sequence of this model may hold, or None where
    the config has no absolute position limit."""
    n = getattr(config, "max_position_embeddings", None)
    if not isinstance(n, int) or n <= 0:
        return None
    if config.model_type in POSITIONS_AFTER_PADDING:
        n -= (config.pad_token_id or 0) + 1
    return n


def check_at_load(config, tokenizer, lengths: dict[str, int], model: object) -> None:
    """The checks every stage makes once its model's config and tokenizer are loaded, before any
    work: :func:`check_lengths`, then :func:`fit_tokenizer_length`."""
    check_lengths(config, lengths, model)
    fit_tokenizer_length(tokenizer, config)


def check_lengths(config, lengths: dict[str, int], model: object) -> None:
    """Every length parameter (``section.key`` -> value) fits the model's positions; otherwise one
    line that names the parameter (the model would fail mid-run with a tensor-size traceback)."""
    from minisci.errors import ConfigError

    positions = usable_positions(config)
    for name, value in lengths.items():
        if positions is not None and value > positions:
            raise ConfigError(
                f"{name} {value} exceeds the model's {positions} positions ({model}); "
                f"set {name} to {positions} or less, or use a model with more positions"
            )


def fit_tokenizer_length(tokenizer, config) -> None:
    """A tokenizer without ``model_max_length`` (normal for one built with the ``tokenizers``
    library: transformers then stores a huge sentinel) takes the model's positions, so that what
    is saved beside the model truncates and windows long texts correctly."""
    positions = usable_positions(config)
    if positions is not None and tokenizer.model_max_length > 1_000_000_000:
        tokenizer.model_max_length = positions


def unk_rate(tokenizer, texts: list[str], sample_words: int = UNK_SAMPLE_WORDS) -> float:
    """The share of words (whitespace-separated) that the tokenizer turns into its unknown token
    (or into nothing), over up to ``sample_words`` words from texts spread evenly over ``texts``."""
    unk = tokenizer.unk_token_id
    step = max(1, len(texts) * 20 // sample_words)  # ~20 words a text: the sample spans the whole set
    words = [w for t in texts[::step] for w in t.split()][:sample_words]
    if not words:
        return 0.0
    pieces = tokenizer(words, add_special_tokens=False)["input_ids"]
    return round(sum(not p or unk in p for p in pieces) / len(words), 4)


def check_unk_rate(tokenizer, texts: list[str], where: str) -> float:
    """:func:`unk_rate`, with a one-line warning above :data:`UNK_WARN_RATE`."""
    rate = unk_rate(tokenizer, texts)
    if rate > UNK_WARN_RATE:
        print(
            f"warning: {where}: {rate:.1%} of the words in a sample of the training text become "
            f"{tokenizer.unk_token}; does the tokenizer fit the text (lower-casing, do_lower_case, script)?",
            file=sys.stderr,
            flush=True,
        )
    return rate


def random_tensors(model, missing: list[str]) -> list[str]:
    """Of the weights a checkpoint lacked (``missing``), those that really start random: a weight tied
    to a loaded one (an MLM decoder tied to the word embeddings) is not, and two missing weights tied
    together are one tensor."""
    loaded, seen, out = set(), set(), []
    tensors = dict(model.named_parameters(remove_duplicate=False))
    tensors.update(model.named_buffers(remove_duplicate=False))
    missing_set = set(missing)
    for name, t in tensors.items():
        if name not in missing_set:
            loaded.add(t.data_ptr())
    for name in sorted(missing):
        ptr = tensors[name].data_ptr() if name in tensors else None
        if ptr is not None and (ptr in loaded or ptr in seen):
            continue
        seen.add(ptr)
        out.append(name)
    return out


def report_random_init(model, missing: list[str], where: str, source: object) -> None:
    """One line naming the weights of ``model`` that ``source`` lacked and that start random, grouped
    by module with how many tensors each. New heads are expected (stdout); encoder parts such as a
    pooler that a head reads are not (a warning on stderr)."""
    missing = random_tensors(model, missing)
    if not missing:
        return
    modules: dict[str, int] = {}
    for name in missing:
        module = name.rsplit(".", 1)[0] if "." in name else name
        modules[module] = modules.get(module, 0) + 1
    listed = ", ".join(f"{m} ({n})" for m, n in modules.items())
    inside = [n for n in missing if n.startswith(model.base_model_prefix + ".")]
    if inside:
        print(
            f"warning: {where}: {len(missing)} tensors are not in {source} and start random, "
            f"{len(inside)} of them in the encoder: {listed}",
            file=sys.stderr,
            flush=True,
        )
    else:
        print(f"{where}: {len(missing)} tensors are not in {source} and start random: {listed}", flush=True)


def live_callback(live_dir: str | Path):
    """A Trainer callback that logs every logging step with DVCLive into ``live_dir`` while training
    runs (``metrics.json`` and ``plots/metrics/*.tsv``: watch with ``dvc plots show <live_dir>/plots``).

    Progress only: the stage's curves are still written once, from the log history, by
    :func:`write_curves` (complete after a resume). No dvc.yaml edits and no experiment commits."""
    from dvclive import Live
    from transformers.integrations import DVCLiveCallback

    return DVCLiveCallback(live=Live(dir=str(live_dir), save_dvc_exp=False, dvcyaml=None, report=None))


def running_stage() -> Path | None:
    """The stage script (``stages/<name>.py``) this process runs, or None in a test, a notebook or a
    benchmark that calls the library itself."""
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    script = Path(main).resolve() if main else None
    return script if script is not None and script.parent.name == "stages" and script.suffix == ".py" else None


def code_version() -> dict[str, str]:
    """The running stage's normalised code (its script and import closure, as its code fingerprint
    hashes it) and the training libraries' versions; outside a stage, the whole library's code.

    Part of every run id (:func:`run_id`): DVC reruns a stage when its code changes, and without this the
    rerun would resume the previous code's (possibly final) checkpoint instead of training anew.
    "The same code" is what the code_fingerprint stage means by it (minisci.fingerprint): a message,
    docstring or type-hint edit keeps a checkpoint resumable, and so does any edit of a module the
    stage does not import (serving, the report); any other edit does not.
    """
    import transformers

    package = Path(__file__).parent
    script = running_stage()
    if script is None:
        code = code_hash(sorted(package.rglob("*.py")), package)
    else:
        src = package.parent
        parts = code_hash([script], script.parent), code_hash(module_closure(script, src), src)
        code = hashlib.sha256("\0".join(parts).encode()).hexdigest()
    return {"minisci": code, "torch": torch.__version__, "transformers": transformers.__version__}


def run_id(*parts: object) -> str:
    """Identity of a training run, which decides whether a checkpoint may be resumed: ``parts``
    (params, data and model hashes) and the code version. (Not a code fingerprint: those are the
    stages' DVC dependencies, :mod:`minisci.fingerprint`.)"""
    return hashlib.sha256(json.dumps([code_version(), *parts], sort_keys=True, default=str).encode()).hexdigest()


def _read_fingerprint(stamp: Path) -> str | None:
    """The fingerprint stored in ``stamp``, or None when the file is missing or unreadable (a kill
    while the old, non-atomic code wrote it must not make every later run fail)."""
    try:
        value = json.loads(stamp.read_text(encoding="utf-8"))["fingerprint"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return value if isinstance(value, str) else None


def _safetensors_problem(path: Path) -> str | None:
    """Why a .safetensors file is truncated or corrupt, from its header alone (no tensor is read)."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8 or 8 + int.from_bytes(head, "little") > size:
            return f"{path.name} is truncated"
        try:
            header = json.loads(f.read(int.from_bytes(head, "little")))
        except ValueError:
            return f"{path.name} has a corrupt header"
    ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__" and isinstance(t, dict)]
    return f"{path.name} is truncated" if 8 + int.from_bytes(head, "little") + max(ends, default=0) > size else None


def checkpoint_problem(checkpoint: Path) -> str | None:
    """Why ``checkpoint`` cannot be resumed from, or None when it is complete.

    Complete means: ``trainer_state.json`` parses and records this checkpoint's step (the Trainer
    writes it last), every other JSON file parses, safetensors weights are whole, and the
    torch-saved states (zip archives: their index sits at the end) are whole. Nothing is unpickled.
    """
    step = int(checkpoint.name[len(CHECKPOINT_PREFIX) :])
    try:
        state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "no trainer_state.json (killed while saving)"
    except (OSError, ValueError) as e:
        return f"trainer_state.json is unreadable ({type(e).__name__})"
    if not isinstance(state, dict) or state.get("global_step", step) != step:
        return f"trainer_state.json does not describe step {step}"
    for path in sorted(checkpoint.iterdir()):
        if path.suffix == ".json":
            try:
                json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return f"{path.name} is unreadable"
        elif path.suffix == ".safetensors" and (problem := _safetensors_problem(path)):
            return problem
        elif path.suffix in (".pt", ".pth", ".bin") and not _is_whole_zip(path):
            return f"{path.name} is truncated"
    return None


def _is_whole_zip(path: Path) -> bool:
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            return all(info.header_offset < path.stat().st_size for info in z.infolist())
    except (zipfile.BadZipFile, OSError, ValueError):
        return False


def checkpoint_to_resume(ckpt_dir: str | Path, run_fingerprint: str) -> Path | None:
    """The newest *complete* checkpoint of this very run, or None.

    Checkpoints of a run with other params, data or code are deleted (the directory is kept across
    runs, so a params change must not resume a stale run); an unreadable fingerprint counts as
    another run's. A newer checkpoint that is incomplete or corrupt (see
    :func:`checkpoint_problem`) is deleted with a warning and the previous one is resumed, so the
    Trainer never meets it again when it saves that step anew.
    """
    ckpt_dir = Path(ckpt_dir)
    stamp = ckpt_dir / FINGERPRINT
    found = _read_fingerprint(stamp)
    if ckpt_dir.exists() and found != run_fingerprint:
        stale = any(ckpt_dir.glob(f"{CHECKPOINT_PREFIX}*"))
        unreadable = found is None and stamp.exists()  # whose checkpoints they are is unknown: none is trusted
        shutil.rmtree(ckpt_dir)
        if stale and unreadable:
            print(
                f"{stamp}: unreadable (cut short by a kill or a full disk?); its checkpoints are not resumable: deleted"
            )
        elif stale:
            print(f"{ckpt_dir}: checkpoints belong to another configuration: deleted")
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    write_json(stamp, {"fingerprint": run_fingerprint})
    candidates = [p for p in ckpt_dir.glob(f"{CHECKPOINT_PREFIX}*") if p.name[len(CHECKPOINT_PREFIX) :].isdigit()]
    for checkpoint in sorted(candidates, key=lambda p: int(p.name[len(CHECKPOINT_PREFIX) :]), reverse=True):
        problem = checkpoint_problem(checkpoint)
        if problem is None:
            return checkpoint
        print(f"warning: {checkpoint}: {problem}; deleting it", file=sys.stderr)  # the next line: resumed or not
        shutil.rmtree(checkpoint)
    return None


def is_final(checkpoint: Path) -> bool:
    """Whether ``checkpoint`` (a complete one) was saved at its run's last optimizer step."""
    state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
    return 0 < state.get("max_steps", 0) <= state.get("global_step", 0)


LOSS_WINDOW = "loss_window-{}.json"  # in a checkpoint, per process: the loss summed since the last logged step


def keep_loss_window(trainer, resume: Path | None) -> None:
    """Make ``trainer``, resumed from ``resume``, log the losses an uninterrupted run logs.

    The Trainer logs the mean loss of the steps since the last logged one. Resumed, it starts that
    sum afresh at the checkpoint, so where ``logging_steps`` does not divide the checkpoint's step
    (an epoch checkpoint, say) the first loss logged after it averaged fewer steps, and the curves
    differed. Each checkpoint gets the sum and the last logged step (one file per process, written
    before the Trainer's files, so a complete checkpoint has it), and a run resumed from it starts
    from them. ``train_loss``, the mean over one ``train()`` call's steps, stays that call's."""
    from transformers import TrainerCallback

    def window(folder: Path) -> Path:
        return folder / LOSS_WINDOW.format(trainer.args.process_index)

    save_checkpoint = trainer._save_checkpoint

    def save_with_window(model, trial):
        folder = Path(trainer.args.output_dir) / f"{CHECKPOINT_PREFIX}{trainer.state.global_step}"
        loss = {"loss_sum": trainer._tr_loss.item(), "last_logged_step": trainer._globalstep_last_logged}
        write_json(window(folder), loss)
        save_checkpoint(model, trial)

    class Resume(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):  # after train() has reset the window
            if resume is not None and window(resume).is_file():  # a checkpoint without one: it restarts
                saved = json.loads(window(resume).read_text(encoding="utf-8"))
                trainer._tr_loss += saved["loss_sum"]
                trainer._total_loss_scalar -= saved["loss_sum"]
                trainer._globalstep_last_logged = saved["last_logged_step"]

    trainer._save_checkpoint = save_with_window
    trainer.add_callback(Resume())


def train_or_restore(trainer, resume: Path | None) -> float:
    """``trainer.train()``, resumed from ``resume`` (with the loss being summed for the next log: see
    :func:`keep_loss_window`); but a checkpoint at the run's final step is restored (its weights
    and trainer state) without training: resuming there, the Trainer would take one step past the
    end, and a rerun of a finished run would no longer be the same run. Returns the seconds spent
    training in this call (0 when restored)."""
    if resume is not None and is_final(resume):
        from transformers import TrainerState

        print(f"{resume} is the run's final step: the model is taken from it, not trained further", flush=True)
        trainer._load_from_checkpoint(str(resume))  # what train() itself does to resume: sharded, safetensors
        trainer.state = TrainerState.load_from_json(str(resume / "trainer_state.json"))
        return 0.0
    keep_loss_window(trainer, resume)
    out = trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    return out.metrics.get("train_runtime", 0.0)


def run_metrics_store(folder: str | Path, *parts: object) -> Path:
    """Where a stage without checkpoints keeps the metrics of its run for :func:`keep_run_metrics`:
    ``folder`` (kept across runs, outside DVC's outputs), cleared when the run's fingerprint
    (``parts`` and the code version) differs from the one it holds."""
    checkpoint_to_resume(folder, run_id(*parts))  # no checkpoints there: it only clears and stamps
    return Path(folder) / RUN_METRICS


def keep_run_metrics(metrics: dict, store: Path) -> dict:
    """The metrics to publish: those stored in ``store`` by an earlier run when they hold the same
    results as ``metrics`` (they differ at most in :data:`minisci.cards.RUN_CIRCUMSTANCES`: timings,
    machine, resume step), else ``metrics``, which are stored.

    A forced rerun restores the finished run from its final checkpoint; its own timings (0 s of
    training, 0 tokens/s) describe the restore, not the run, and would change the metrics file and
    make every stage that reads it stale. ``store`` lives in the run's checkpoint folder, which is
    cleared when params, data, model or code change, so the stored metrics are of this very run."""
    from minisci.cards import result_metrics

    fresh = json.loads(json.dumps(metrics))  # as the file holds them: lists, not tuples
    try:
        stored = json.loads(store.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # none yet, or cut short: this run's are stored
        stored = None
    if isinstance(stored, dict) and result_metrics(stored) == result_metrics(fresh):
        return stored
    write_json(store, fresh)
    return fresh


CURVES = "curves"  # the folder of a stage's training curves, in its plots folder


def _is_curves_dir(path: Path) -> bool:
    """A plots folder written by the code before output markers: DVCLive's TSV files and the JSON
    plots the stages add beside them (confusion.json), nothing else."""
    return all(p.is_dir() or p.suffix in (".tsv", ".json") for p in path.rglob("*"))


def write_curves(
    log_history: list[dict], plots_dir: str | Path, keys: tuple[str, ...], extra: dict[str, object] | None = None
) -> None:
    """Training curves from the Trainer's log history, one DVCLive metric per key, x = step, in
    ``plots_dir/curves/<key>.tsv`` (DVCLive's own ``plots/metrics`` folders would nest a second
    ``plots`` under the stage's), and the ``extra`` plot files (name -> JSON data) of the same stage
    beside that folder, written together.

    Written after training from the history stored in the trainer state, so curves stay complete
    when a run was resumed from a checkpoint; the folder is replaced whole (atomically), never
    half-written.
    """
    from dvclive import Live

    with atomic_path(plots_dir, owned=_is_curves_dir) as tmp:
        with Live(dir=str(tmp), save_dvc_exp=False, dvcyaml=None) as live:
            for entry in log_history:
                values = {k: entry[k] for k in keys if k in entry}
                if not values or "step" not in entry:
                    continue
                live.step = int(entry["step"])
                for k, v in values.items():
                    live.log_metric(k, float(v), plot=True)
        # DVCLive also writes a summary and a report we do not need beside the per-metric files.
        (tmp / "metrics.json").unlink(missing_ok=True)
        (tmp / CURVES).mkdir(parents=True, exist_ok=True)  # a history without any of ``keys``: an empty folder
        if (tmp / "plots" / "metrics").is_dir():
            for tsv in (tmp / "plots" / "metrics").iterdir():
                tsv.rename(tmp / CURVES / tsv.name)
            shutil.rmtree(tmp / "plots")
        for name, obj in (extra or {}).items():
            (tmp / name).write_text(json.dumps(obj, indent=1) + "\n", encoding="utf-8")
