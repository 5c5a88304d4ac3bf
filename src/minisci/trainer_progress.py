"""Training progress: the Trainer's own ProgressCallback and PrinterCallback replaced by
:class:`StageProgress` (:func:`use_stage_progress`). They print every log as a dict of strings, and
the printer has no total and no time left; this prints what :mod:`minisci.progress` prints for any
long work (a bar on a terminal, one plain line per logging step in a log)."""

from __future__ import annotations

import sys
import time

from transformers import PrinterCallback, ProgressCallback, TrainerCallback

from minisci.progress import number, on_terminal, progress_line

# Keys of the Trainer's logs that are not worth a column in a progress line.
QUIET_KEYS = {
    "total_flos",
    "num_input_tokens_seen",
    "train_runtime",
    "train_samples_per_second",
    "train_steps_per_second",
    "train_tokens_per_second",
}


class StageProgress(TrainerCallback):
    """Training progress: a bar (total steps, time left, the last loss) on a terminal, else one
    plain line per logging step."""

    def __init__(self, what: str, terminal: bool | None = None, stream=None):
        self.what = what
        self.terminal = on_terminal() if terminal is None else terminal
        self.stream = stream
        self.bar = None
        self.start = 0.0
        self.first_step = 0

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        self.start, self.first_step = time.monotonic(), state.global_step
        if self.terminal:
            from tqdm import tqdm

            self.bar = tqdm(
                total=state.max_steps,
                initial=state.global_step,
                desc=self.what,
                unit="step",
                dynamic_ncols=True,
                file=self.stream or sys.stderr,
            )

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.update(state.global_step - self.bar.n)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        numbers = {
            k: v
            for k, v in logs.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in QUIET_KEYS
        }
        if self.first_step and "train_loss" in numbers:
            # the Trainer averages train_loss over this run's steps only: after a resume it is not the
            # uninterrupted run's, so the line says so (the metrics file keeps the logged losses)
            numbers = {("train_loss_since_resume" if k == "train_loss" else k): v for k, v in numbers.items()}
        if self.bar is not None:
            self.bar.set_postfix({k: number(v) for k, v in numbers.items() if k in ("loss", "epoch")}, refresh=False)
            return
        elapsed = time.monotonic() - self.start
        line = progress_line(self.what, state.global_step, state.max_steps, elapsed, self.first_step, numbers, "steps")
        print(line, file=self.stream or sys.stdout, flush=True)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def use_stage_progress(trainer, what: str):
    """``trainer`` with :class:`StageProgress` instead of transformers' progress bar or printer; in a
    log, transformers' other bars (writing a checkpoint's shards) are off too."""
    if not on_terminal():
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(StageProgress(what))
    return trainer
