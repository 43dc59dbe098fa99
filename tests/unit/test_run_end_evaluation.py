"""The run-end evaluation's failure path and its MLflow keys, without Ray: a run whose data
cannot be scored is still trained and exported, says so, and is promoted only by a gate that
does not need the evaluation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.promotion.step import promote_run
from app.tracking.eval_log import evaluation_metrics, metric_keys
from tests.promotion_support import INFO, make_run, settings_for


def _promote(storage: Path, name: str, gate: str) -> dict:
    make_run(storage, name, 0.9)
    settings = settings_for(storage, name, promote_if=gate)
    # INFO names no data folder: the evaluation fails in its checks, before Ray is joined.
    return promote_run(settings, INFO, {"status": "succeeded"}, evaluate=True)


def test_a_failed_evaluation_keeps_the_run_and_a_plain_gate_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from app import ray_cluster

    joined = []  # the checks fail first: Ray is never joined (this process may be in one)
    monkeypatch.setattr(ray_cluster, "join_or_start", lambda *args, **kw: joined.append(args))
    summary = _promote(tmp_path, "plain", "beats_champion")
    assert joined == []
    evaluation = summary["evaluation"]
    assert evaluation["judged_on"] == "valid"
    assert "records no data location" in evaluation["error"]
    assert "the run is trained and exported" in evaluation["note"]
    assert summary["promoted"] is True and summary["status"] == "succeeded"
    assert (tmp_path / "plain" / "export" / "model_card.json").is_file()
    out = capsys.readouterr().out
    assert "trainctl: run-end evaluation failed: --split: the model card records no data" in out
    assert "promotion goes on: the gate has no per-class term" in out
    on_disk = json.loads((tmp_path / "plain" / "summary.json").read_text())
    assert on_disk["evaluation"] == evaluation


def test_a_failed_evaluation_keeps_the_champion_under_a_per_class_gate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = _promote(tmp_path, "classes", "beats_champion and min_class_recall>=0.5")
    assert summary["promoted"] is False and summary["status"] == "succeeded"
    reason = summary["promotion"]["reason"]
    assert reason.startswith("the per-class terms need the run-end evaluation, which failed")
    assert "records no data location" in reason
    out = capsys.readouterr().out
    assert "the gate needs it: the champion is kept" in out
    assert out.strip().splitlines()[-1].startswith("trainctl: kept no champion: not promoted")
    assert not (tmp_path / "champions" / "digits-cnn.json").exists()


def test_class_names_become_distinct_mlflow_keys() -> None:
    keys = metric_keys("valid", ["cat", "big dog", "big/dog", "ünï", "", "x" * 300])
    assert keys["cat"] == "cat" and keys["big dog"] == "big_dog"
    assert keys["big/dog"] == "big_dog_2"  # the same key as "big dog": its label appended
    assert keys["ünï"] == "_n_" and keys[""] == "_"
    assert len(f"eval_valid_precision_{keys['x' * 300]}") <= 250
    assert len(set(keys.values())) == len(keys)


def test_an_evaluations_figures_by_key() -> None:
    metrics = {
        "accuracy": 0.75, "macro": {"f1": 0.7}, "weighted": {"f1": 0.72},
        "expected_calibration_error": 0.05,
        "per_class": [{"class": "a b", "recall": 1.0, "precision": 0.5, "f1": 0.6667},
                      {"class": "c", "recall": 0.5, "precision": 1.0, "f1": 0.6667}],
    }  # fmt: skip
    assert evaluation_metrics("test", metrics) == {
        "eval_test_accuracy": 0.75, "eval_test_macro_f1": 0.7, "eval_test_weighted_f1": 0.72,
        "eval_test_ece": 0.05, "eval_test_recall_a_b": 1.0, "eval_test_precision_a_b": 0.5,
        "eval_test_f1_a_b": 0.6667, "eval_test_recall_c": 0.5, "eval_test_precision_c": 1.0,
        "eval_test_f1_c": 0.6667,
    }  # fmt: skip


def test_the_evaluation_reaches_tensorboard_as_scalars_and_the_confusion_image(
    tmp_path: Path,
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from app.evaluation.evaluate import EvalReport
    from app.evaluation.report import confusion_png
    from app.tracking.eval_log import log_to_tensorboard

    folder = tmp_path / "run" / "eval" / "valid"
    folder.mkdir(parents=True)
    confusion = {"classes": ["cat", "dog"], "matrix": [[3, 1], [0, 4]], "most_confused": [
        {"true": "cat", "predicted": "dog", "count": 1, "share_of_true": 0.25}]}  # fmt: skip
    (folder / "confusion.png").write_bytes(confusion_png(confusion))
    metrics = {
        "accuracy": 0.875, "macro": {"f1": 0.87}, "weighted": {"f1": 0.87},
        "expected_calibration_error": 0.1,
        "per_class": [{"class": "cat", "recall": 0.75, "precision": 1.0, "f1": 0.857},
                      {"class": "dog", "recall": 1.0, "precision": 0.8, "f1": 0.889}],
    }  # fmt: skip
    log_dir = tmp_path / "run" / "tensorboard"
    record = log_to_tensorboard(log_dir, {"valid": EvalReport(folder, metrics)}, step=3)
    assert record == {"log_dir": str(log_dir / "eval"), "scalars": 10, "step": 3}
    # A TensorBoard run of its own: the training curves' folder keeps one file per driver.
    assert not list(log_dir.glob("events.out.tfevents.*"))
    events = EventAccumulator(str(log_dir / "eval"))
    events.Reload()
    recall = events.Scalars("eval/valid/recall_cat")
    assert [(e.step, e.value) for e in recall] == [(3, 0.75)]
    assert [e.value for e in events.Scalars("eval/valid/accuracy")] == [0.875]
    assert "eval/valid/confusion" in events.Tags()["images"]


@pytest.mark.parametrize(
    ("rows", "side", "in_driver"),
    [
        (359, 8, True),  # digits' valid split: what the cluster tests' runs score
        (4096, 64, True),
        (4097, 64, False),
        (334, 224, True),  # 334 x 224 x 224 = 16,758,784 pixels, just within
        (335, 224, False),
        (1, 4097, False),  # one huge image is not "small" either
    ],
)
def test_a_run_end_scores_only_small_splits_in_its_driver(
    rows: int, side: int, in_driver: bool
) -> None:
    from app.evaluation.scoring import fits_in_process

    card = {"input": {"channels": 3, "height": side, "width": side}}
    assert fits_in_process(rows, card) is in_driver
