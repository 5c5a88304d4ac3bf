"""The loss chart draws this run only: a curve that an earlier run or experiment left in plots/ (the
committed BC5CDR curves after the quick profile's NCBI run) is not drawn beside this run's."""

from __future__ import annotations

from pathlib import Path

from minisci.report import export


def curve(root: Path, rel: str, points: int = 3) -> None:
    path = root / rel / export.CURVES / "loss.tsv"
    path.parent.mkdir(parents=True)
    path.write_text("step\tloss\n" + "".join(f"{10 * i}\t{1.0 / (i + 1)}\n" for i in range(points)))


def test_only_this_runs_datasets_are_drawn_and_labelled_by_dataset_and_arm(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve(tmp_path, "pretrain")
    for arm in ("baseline", "adapted"):
        curve(tmp_path, f"finetune_ner/ncbi_disease/{arm}")
        curve(tmp_path, f"finetune_ner/bc5cdr/{arm}")  # left by another run
    curve(tmp_path, "finetune_classification/scicite/adapted", points=1)
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    runs = {"finetune_ner": ["ncbi_disease"], "finetune_classification": ["scicite"]}
    export._loss_chart(plt, tmp_path, tmp_path / "loss.png", runs)
    fig = figures[0]
    labels = {ax.get_title(): [line.get_label() for line in ax.get_lines()] for ax in fig.axes}
    assert labels == {
        "pretraining (MLM + NSP)": ["loss"],
        "NER fine-tuning": ["ncbi_disease, adapted", "ncbi_disease, baseline"],
        "classification fine-tuning": ["scicite, adapted"],
    }
    assert fig._suptitle.get_text() == "Training loss, this run only"
    single = next(ax for ax in fig.axes if ax.get_title() == "classification fine-tuning").get_lines()[0]
    assert single.get_marker() == "o"  # one point is drawn as a point, not an invisible line
