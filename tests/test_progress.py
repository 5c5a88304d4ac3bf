"""Progress of training and scoring: a bar with the total and the time left on a terminal, one plain
line per logging interval in a log, numbers printed as numbers."""

from __future__ import annotations

import io
from types import SimpleNamespace

from transformers import PrinterCallback, ProgressCallback

from minisci.progress import Progress, WorkProgress, progress_line, scoring
from minisci.trainer_progress import StageProgress, use_stage_progress


def state(step: int, total: int = 100):
    return SimpleNamespace(is_world_process_zero=True, global_step=step, max_steps=total)


def test_a_line_gives_step_total_numbers_and_time_left():
    line = progress_line("fine-tuning", 20, 100, 60.0, numbers={"loss": 0.43214, "epoch": 0.4}, unit="steps")
    assert line == "fine-tuning: 20/100 steps (20%), loss 0.4321, epoch 0.4; 1:00 elapsed, about 4:00 left"


def test_time_left_counts_only_the_steps_this_run_did():
    # resumed at step 50: 10 steps in 60 s, 40 to go
    assert progress_line("pretraining", 60, 100, 60.0, since=50).endswith("1:00 elapsed, about 4:00 left")
    assert progress_line("pretraining", 50, 100, 0.0, since=50).endswith("0:00 elapsed")
    assert progress_line("pretraining", 100, 100, 90.0).endswith("1:30 elapsed")  # done: nothing left


def test_in_a_log_each_logging_step_is_one_plain_line(capsys):
    progress = StageProgress("fine-tuning, seed 13", terminal=False)
    progress.on_train_begin(None, state(0), None)
    progress.on_log(
        None, state(20), None, logs={"loss": 0.4321, "grad_norm": 3.25, "learning_rate": 1e-05, "epoch": 0.4}
    )
    progress.on_log(None, state(40), None, logs={"loss": 0.2, "total_flos": 12345.0, "train_runtime": 7.8})
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(
        "fine-tuning, seed 13: 20/100 steps (20%), loss 0.4321, grad_norm 3.25, learning_rate 1e-05, epoch 0.4; "
    )
    assert "left" in lines[0] and "'" not in lines[0] and "{" not in lines[0]  # numbers, not a dict of strings
    assert "total_flos" not in lines[1] and "train_runtime" not in lines[1]


def test_on_a_terminal_a_bar_with_the_total(capsys):
    out = io.StringIO()
    progress = StageProgress("pretraining", terminal=True, stream=out)
    progress.on_train_begin(None, state(0, 375), None)
    progress.on_step_end(None, state(30, 375), None)
    progress.on_log(None, state(30, 375), None, logs={"loss": 5.5})
    progress.on_train_end(None, state(375, 375), None)
    assert "/375" in out.getvalue() and "pretraining" in out.getvalue()
    assert capsys.readouterr().out == ""  # no line per log besides the bar


def test_the_trainer_prints_no_dict_of_strings(tmp_path, tiny_model_dir):
    from transformers import BertForMaskedLM, Trainer

    from minisci.training import training_arguments

    args = training_arguments(tmp_path, seed=1, batch_size=2, learning_rate=1e-3, weight_decay=0.0, precision="fp32")
    trainer = use_stage_progress(Trainer(model=BertForMaskedLM.from_pretrained(tiny_model_dir), args=args), "x")
    kinds = {type(c) for c in trainer.callback_handler.callbacks}
    assert StageProgress in kinds and PrinterCallback not in kinds and ProgressCallback not in kinds


def test_scoring_in_a_log_prints_a_line_per_interval(capsys):
    assert list(scoring([1, 2, 3], "scoring 30 inputs", terminal=False, every=0.0)) == [1, 2, 3]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("scoring 30 inputs: 1/3 batches (33%); ") and len(lines) == 3
    assert lines[-1].startswith("scoring 30 inputs: 3/3 batches (100%); ")  # the total time, when done
    assert list(scoring([1, 2], "quick", terminal=False)) == [1, 2]
    assert capsys.readouterr().out == ""  # shorter than the interval: silent


def test_work_reported_by_a_callback_prints_units_done_and_time_left(capsys):
    progress = WorkProgress("finetune_embeddings: test, shipped", 10, "windows", terminal=False, every=0.0)
    for _ in range(5):
        progress(2)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5
    assert lines[0].startswith("finetune_embeddings: test, shipped: 2/10 windows (20%)") and "left" in lines[0]
    assert lines[-1].startswith("finetune_embeddings: test, shipped: 10/10 windows (100%)")
    quiet = WorkProgress("x", 10, "windows", terminal=False)  # every 30 s: work shorter than that prints nothing
    quiet(10)
    assert capsys.readouterr().out == ""


def test_work_on_a_terminal_is_a_bar_with_its_total_and_no_log_lines(capsys):
    progress = WorkProgress("scoring", 10, "windows", terminal=True, every=0.0)
    progress(4)
    progress(6)
    out, err = capsys.readouterr()
    assert out == "" and "scoring:" in err and "0/10 [" in err and "windows/s" in err  # the total, the unit
    assert progress.bar.n == 10 and err.endswith(" \r")  # all counted, and the bar erased when done


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_log_gets_one_line_per_interval_and_a_final_line():
    out = io.StringIO()
    p = Progress("scan x", total=1000, unit="bytes", stream=out, log_interval=0.0)
    p.update(10, 250)
    p.update(20, 500)
    p.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and all(line.startswith("scan x: ") for line in lines)
    assert "25% of 1,000 bytes" in lines[0] and "docs/s" in lines[0] and "ETA " in lines[0]
    assert "100% of 1,000 bytes" in lines[-1] and "ETA 0:00" in lines[-1]


def test_log_is_quiet_between_intervals_and_terminal_redraws_in_place():
    out = io.StringIO()
    p = Progress("scan x", total=10, unit="rows", stream=out, log_interval=3600)
    p.update(1, 1)
    assert out.getvalue() == ""
    tty = Tty()
    p = Progress("scan x", total=10, unit="rows", stream=tty)
    p.close()
    assert tty.getvalue().startswith("\r\033[K") and tty.getvalue().endswith("\n")


def test_an_empty_file_reads_as_its_size_not_one_byte():
    out = io.StringIO()
    p = Progress("scan x", total=0, unit="bytes", stream=out, log_interval=0.0)
    p.update(0, 0)
    p.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and all("100% of 0 bytes" in line and "ETA 0:00" in line for line in lines)


def test_a_resumed_run_labels_its_train_loss_as_since_the_resume(capsys):
    """The Trainer's final train_loss averages only the steps this run did: after a resume it differs
    from the uninterrupted run's, so it must not read as the run's."""
    for first, key in ((0, "train_loss 9.7"), (6, "train_loss_since_resume 5")):
        progress = StageProgress("fine-tuning, seed 13", terminal=False)
        progress.on_train_begin(None, state(first, 12), None)
        progress.on_log(None, state(12, 12), None, logs={"train_loss": 9.7 if not first else 5.0, "epoch": 2.0})
        line = capsys.readouterr().out.strip()
        assert f", {key}, epoch 2;" in line, line
