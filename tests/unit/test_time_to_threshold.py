"""Time and accelerator-hours to accuracy: the first-met bookkeeping (app/run/first_met.py), the
run clock the workers carry in their checkpoints (app/training/run_clock.py), the cost of
TRAIN_GPU_HOUR_PRICE (app/runfolder/usage.py) and what `trainctl status` shows of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.run import first_met
from app.run import status as run_status
from app.runfolder import folder as run_folder
from app.runfolder import usage
from app.settings import TrainSettings
from app.training.run_clock import RunClock
from tests.support import read_summary

NOW = 1_800_000_000.0


def _settings(**values: object) -> TrainSettings:
    return TrainSettings(_env_file=None, **values)  # type: ignore[call-arg]


def _epochs() -> list[dict[str, float]]:
    """Four epochs of one worker group of 2 workers, 30 s each."""
    accuracy = [0.6, 0.85, 0.93, 0.91]
    return [
        {"epoch": e, "val_accuracy": a, "val_loss": 1 - a, "run_time_s": 30.0 * e,
         "worker_time_s": 60.0 * e}
        for e, a in enumerate(accuracy, start=1)
    ]  # fmt: skip


def test_each_threshold_once_with_the_settings_that_name_it() -> None:
    settings = _settings(
        stop_at="val_accuracy>=0.9", promote_if="beats_champion and val_accuracy>=0.9 and "
        "val_loss<0.2",
    )  # fmt: skip
    wanted = first_met.terms(settings.stop_at, settings.promote_if)
    assert [(str(t), s) for t, s in wanted] == [
        ("val_accuracy>=0.9", ["TRAIN_STOP_AT", "TRAIN_PROMOTE_IF"]),
        ("val_loss<0.2", ["TRAIN_PROMOTE_IF"]),
    ]
    assert first_met.terms(_settings().stop_at, _settings().promote_if) == []  # beats only


def test_first_met_records_the_epoch_clock_hours_and_cost() -> None:
    settings = _settings(stop_at="val_accuracy>=0.9", promote_if="val_accuracy>=0.95")
    wanted = first_met.terms(settings.stop_at, settings.promote_if)
    # 2 CPUs per worker: worker_time_s x 2 CPU-seconds.
    entries = first_met.first_met(_epochs(), wanted, per_worker=2.0, price=0.5)
    assert entries == [
        {"threshold": "val_accuracy>=0.9", "settings": ["TRAIN_STOP_AT"], "epoch": 3,
         "run_time_s": 90.0, "accelerator_hours": 0.1, "cost": 0.05},
        {"threshold": "val_accuracy>=0.95", "settings": ["TRAIN_PROMOTE_IF"], "epoch": None,
         "run_time_s": None, "accelerator_hours": None},
    ]  # fmt: skip
    # Without a price, no cost; an epoch of an older run (no clock) keeps its epoch.
    old = [{k: v for k, v in e.items() if "time" not in k} for e in _epochs()]
    (entry,) = first_met.first_met(old, wanted[:1], per_worker=1.0)
    assert entry == {"threshold": "val_accuracy>=0.9", "settings": ["TRAIN_STOP_AT"],
                     "epoch": 3, "run_time_s": None, "accelerator_hours": None}  # fmt: skip


def test_a_resumed_run_keeps_the_first_met_record_of_an_earlier_driver() -> None:
    settings = _settings(stop_at="val_accuracy>=0.9")
    wanted = first_met.terms(settings.stop_at, settings.promote_if)
    earlier = first_met.first_met(_epochs()[:3], wanted, per_worker=1.0)
    # The rerun's records met it later (say the earlier epochs' records were damaged): the
    # first record stands; with nothing earlier, this driver's own.
    later = first_met.first_met(_epochs()[3:], wanted, per_worker=1.0)
    assert first_met.keep_first(earlier, later) == earlier
    assert first_met.keep_first(None, later) == later
    assert first_met.keep_first([{"threshold": 7}, "x", {"epoch": "3"}], later) == later


@pytest.mark.parametrize(
    "entries",
    [None, {}, [None], [{"threshold": "a", "epoch": True}], [{"threshold": "a", "cost": -1}],
     [{"threshold": "a", "run_time_s": float("nan")}], [{"threshold": 3}]],
)  # fmt: skip
def test_entries_not_shaped_as_a_driver_writes_them_are_dropped(entries: object) -> None:
    assert first_met.checked(entries) == []


def test_the_run_clock_sums_worker_groups_and_weights_by_workers() -> None:
    first = RunClock.resumed(None, world=2, since=100.0)
    assert first.reading(now=130.0) == {"run_time_s": 30.0, "worker_time_s": 60.0}
    # A second group of 4 workers resumes from the checkpoint written at 30 s.
    second = RunClock.resumed(first.reading(now=130.0), world=4, since=500.0)
    assert second.reading(now=510.0) == {"run_time_s": 40.0, "worker_time_s": 100.0}
    # A damaged clock in a checkpoint counts from zero rather than from nonsense.
    assert RunClock.resumed({"run_time_s": -5, "worker_time_s": "x"}, 1, 0.0).reading(1.0) == {
        "run_time_s": 1.0, "worker_time_s": 1.0,
    }  # fmt: skip


def test_the_price_adds_a_cost_that_status_reads_back() -> None:
    record = {"kind": "gpu", "hours": 12.5, "workers": 4, "per_worker": 1.0}
    priced = {**record, "price_per_hour": 2.0, "cost": first_met.cost(12.5, 2.0)}
    assert usage.checked(priced) == {**record, "price_per_hour": 2.0, "cost": 25.0}
    assert usage.in_words(usage.checked(priced)) == (  # type: ignore[arg-type]
        "12.50 GPU-hours (4 workers x 1 GPU), cost 25.00"
    )
    assert usage.checked({**record, "cost": -3, "price_per_hour": 2.0}) == record
    assert first_met.cost(12.5, 0.0) is None


def _stopped_run(storage: Path) -> Path:
    run_dir = storage / "early"
    settings = _settings(stop_at="val_accuracy>=0.9", promote_if="val_accuracy>=0.95")
    wanted = first_met.terms(settings.stop_at, settings.promote_if)
    run_folder.write_summary(
        run_dir,
        {
            "status": "succeeded", "run_name": "early", "epochs_completed": 3,
            "epochs_target": 10, "metrics": {"val_accuracy": 0.93}, "failures": 0,
            "interruptions": [],
            "stopped_early": {"reason": "stop_at", "epoch": 3,
                              "rule": "TRAIN_STOP_AT=val_accuracy>=0.9"},
            "time_to_threshold": first_met.first_met(
                _epochs()[:3], wanted, per_worker=2.0, price=0.5
            ),
            "accelerator_hours": {"kind": "cpu", "hours": 0.1, "workers": 2, "per_worker": 2.0,
                                  "price_per_hour": 0.5, "cost": 0.05},
        },
    )  # fmt: skip
    return run_dir


def test_status_shows_the_early_stop_and_the_time_to_each_threshold(tmp_path: Path) -> None:
    status = run_status.read_run(_stopped_run(tmp_path), now=NOW)
    lines = status.lines()
    assert "  stopped early:   at epoch 3: TRAIN_STOP_AT=val_accuracy>=0.9 met" in lines
    start = lines.index(
        "  to threshold:    val_accuracy>=0.9: epoch 3, 1m30s of training, 0.10 CPU-hours, "
        "cost 0.05"
    )
    assert lines[start + 1] == " " * 19 + "val_accuracy>=0.95: not met"
    assert "  usage:           0.10 CPU-hours (2 workers x 2 CPU), cost 0.05" in lines
    cells = dict(zip(run_status.HEADER, status.row(), strict=True))
    assert cells["STATUS"] == "succeeded (early @3)" and cells["FIRST-MET"] == "@3 1m30s +1"
    record = status.record()
    assert record["stopped_early"]["epoch"] == 3
    assert record["time_to_threshold"][0]["run_time_s"] == 90.0
    assert read_summary(tmp_path / "early")["status"] == "succeeded"


def test_status_shows_nothing_of_hostile_stop_and_threshold_records(tmp_path: Path) -> None:
    run_dir = _stopped_run(tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["stopped_early"] = {"reason": "stop_at", "epoch": -1, "rule": "x"}
    summary["time_to_threshold"] = [
        {"threshold": "\x1b]0;owned\x07" + "y" * 10_000, "epoch": 2},
        {"threshold": None},
    ]
    (run_dir / "summary.json").write_text(json.dumps(summary))
    status = run_status.read_run(run_dir, now=NOW)
    assert status.stopped_early is None and len(status.time_to_threshold) == 1
    shown = "\n".join(status.lines())
    assert "\x1b" not in shown and "y" * 200 not in shown and status.problems == []
