"""What every training stage shares: the one place that builds ``TrainingArguments``, precision
choice, checkpoint bookkeeping for resume, and writing training curves with DVCLive."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import sys
from pathlib import Path

import torch

CHECKPOINT_PREFIX = "checkpoint-"
FINGERPRINT = "fingerprint.json"


def precision_flags(precision: str) -> dict[str, bool]:
    """bf16/fp16 only where a GPU supports them: on CPU, bf16 autocast is many times slower."""
    if precision == "auto":
        if torch.cuda.is_available():
            precision = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        else:
            precision = "fp32"
    if precision in ("bf16", "fp16") and not torch.cuda.is_available():
        precision = "fp32"
    return {"bf16": precision == "bf16", "fp16": precision == "fp16"}


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
    args_cls=None,
    **extra,
):
    """TrainingArguments with everything that matters set explicitly (nothing from defaults that
    changed between transformers releases): reporting off (we log with DVCLive ourselves: see
    :func:`live_callback`; transformers' own DVCLive integration would rewrite the root dvc.yaml), seeded
    data order, checkpointing only when asked, length-grouped batches. ``args_cls`` builds a
    subclass instead (sentence-transformers' training arguments); ``extra`` sets its own fields or
    overrides these."""
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
        dataloader_num_workers=0,
        use_cpu=not torch.cuda.is_available(),
        ddp_find_unused_parameters=False,
        remove_unused_columns=False,
        disable_tqdm=not sys.stderr.isatty(),  # progress bars on a terminal; CI and log files stay quiet
        **precision_flags(precision),
    )
    return (args_cls or TrainingArguments)(**{**settings, **extra})


class _OneLineLoadReport(logging.Filter):
    """transformers' LOAD REPORT (a table of every missing or unexpected weight, expected here: the
    heads a stage trains are new, the pretraining heads are dropped) cut to its first line and counts."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "LOAD REPORT" in message:
            lines = message.splitlines()
            counts = {s: sum(f"| {s}" in line for line in lines) for s in ("MISSING", "UNEXPECTED", "MISMATCH")}
            record.msg = lines[0] + " (" + ", ".join(f"{n} {s.lower()}" for s, n in counts.items() if n) + " keys)"
            record.args = ()
        return True


def quiet_load_reports() -> None:
    """Model loading reports as one line each, on every handler of transformers' logger (idempotent)."""
    from transformers.utils import logging as hf_logging

    for handler in hf_logging.get_logger().handlers:
        if not any(isinstance(f, _OneLineLoadReport) for f in handler.filters):
            handler.addFilter(_OneLineLoadReport())


def live_callback(live_dir: str | Path):
    """A Trainer callback that logs every logging step with DVCLive into ``live_dir`` while training
    runs (``metrics.json`` and ``plots/metrics/*.tsv``: watch with ``dvc plots show <live_dir>/plots``).

    Progress only: the stage's curves are still written once, from the log history, by
    :func:`write_curves` (complete after a resume). No dvc.yaml edits and no experiment commits."""
    from dvclive import Live
    from transformers.integrations import DVCLiveCallback

    return DVCLiveCallback(live=Live(dir=str(live_dir), save_dvc_exp=False, dvcyaml=None, report=None))


def code_version() -> dict[str, str]:
    """The library's own source and the training libraries' versions.

    Part of every run fingerprint: DVC reruns a stage when its code changes, and without this the
    rerun would resume the previous code's (possibly final) checkpoint instead of training anew.
    """
    import transformers

    package = Path(__file__).parent
    h = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        h.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    return {"minisci": h.hexdigest(), "torch": torch.__version__, "transformers": transformers.__version__}


def fingerprint(*parts: object) -> str:
    """Identity of a training run: ``parts`` (params, data and model hashes) and the code version."""
    return hashlib.sha256(json.dumps([code_version(), *parts], sort_keys=True, default=str).encode()).hexdigest()


def checkpoint_to_resume(ckpt_dir: str | Path, run_fingerprint: str) -> Path | None:
    """The newest *complete* checkpoint of this very run, or None.

    Checkpoints of a run with other params or data are deleted (DVC keeps this directory across
    runs as a ``persist`` output, so a params change must not resume a stale run). A checkpoint is
    complete once its ``trainer_state.json`` exists: the Trainer writes that file last, so a
    directory without it is the remains of a kill during saving and is ignored.
    """
    ckpt_dir = Path(ckpt_dir)
    stamp = ckpt_dir / FINGERPRINT
    if ckpt_dir.exists() and (not stamp.is_file() or json.loads(stamp.read_text())["fingerprint"] != run_fingerprint):
        shutil.rmtree(ckpt_dir)
        print(f"{ckpt_dir}: checkpoints belong to another configuration; starting fresh")
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps({"fingerprint": run_fingerprint}) + "\n")
    complete = [
        p
        for p in ckpt_dir.glob(f"{CHECKPOINT_PREFIX}*")
        if p.name[len(CHECKPOINT_PREFIX) :].isdigit() and (p / "trainer_state.json").is_file()
    ]
    return max(complete, key=lambda p: int(p.name[len(CHECKPOINT_PREFIX) :]), default=None)


def write_curves(
    log_history: list[dict], plots_dir: str | Path, keys: tuple[str, ...], extra: dict[str, object] | None = None
) -> None:
    """Training curves from the Trainer's log history, one DVCLive metric per key, x = step, and the
    ``extra`` plot files (name -> JSON data) of the same stage, written together.

    Written after training from the history stored in the trainer state, so curves stay complete
    when a run was resumed from a checkpoint.
    """
    from dvclive import Live

    plots_dir = Path(plots_dir)
    if plots_dir.exists():
        shutil.rmtree(plots_dir)
    with Live(dir=str(plots_dir), save_dvc_exp=False, dvcyaml=None) as live:
        for entry in log_history:
            values = {k: entry[k] for k in keys if k in entry}
            if not values or "step" not in entry:
                continue
            live.step = int(entry["step"])
            for k, v in values.items():
                live.log_metric(k, float(v), plot=True)
    # DVCLive also writes a summary and a report we do not need beside the per-metric files.
    (plots_dir / "metrics.json").unlink(missing_ok=True)
    for name, obj in (extra or {}).items():
        (plots_dir / name).write_text(json.dumps(obj, indent=1) + "\n", encoding="utf-8")
