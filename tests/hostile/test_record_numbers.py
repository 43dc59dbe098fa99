"""Numbers in records another hand wrote that no float holds.

JSON has integers of any size, and Python reads `1` followed by 400 zeros as an int; float()
and math.isfinite raise OverflowError on it, and a format such as `{:.4f}` does too. Every reader
of a run folder's, a sweep's or a progress file's figures takes such a number as missing, as it
takes text or NaN (app/formatting.py `finite`), never as an internal error.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.hostile.support import trainctl

HUGE = 10**400


def test_a_threshold_and_the_gate_take_it_as_missing() -> None:
    from app.formatting import finite  # what the gate reads its metrics through
    from app.settings.gate import parse_gate

    (threshold,) = parse_gate("val_accuracy>=0.5").thresholds
    assert threshold.met_by(0.6) and not threshold.met_by(HUGE)
    assert finite(HUGE) is None and finite(3) == 3.0


def test_a_checkpoints_training_state_and_run_clock_start_afresh() -> None:
    from app.training.early_stop import Progress
    from app.training.run_clock import RunClock

    assert Progress.of({"best": HUGE, "best_epoch": 2}).best is None
    assert Progress.of({"best": 0.5}).best == 0.5
    clock = RunClock.resumed({"run_time_s": HUGE, "worker_time_s": 12.5}, world=2, since=0.0)
    assert (clock.before_s, clock.before_worker_s) == (0.0, 12.5)


def test_epoch_lines_trackers_and_the_divergence_line_leave_it_out() -> None:
    from app.run.decisions import diverged_since
    from app.runfolder.epoch_record import epoch_line, pace
    from app.tracking.clients import epoch_metrics

    record = {"epoch": 1, "train_loss": HUGE, "val_accuracy": 0.75, "epoch_time_s": HUGE}
    line = epoch_line(record, 3)
    assert "75.00%" in line or "0.75" in line, line
    assert pace(record) is None
    assert epoch_metrics(record) == {"val_accuracy": 0.75}
    nan = epoch_metrics({"train_loss": float("nan")})["train_loss"]
    assert nan != nan  # a diverged loss still reaches the trackers, as the NaN it is
    # A loss no float holds is no finite loss: the run says it diverged, as for NaN.
    assert diverged_since([record]) == 1


def test_what_submit_wait_says_of_a_run_and_a_sweep_leaves_it_out(tmp_path: Path) -> None:
    from app.k8s.follow import summary_line, sweep_line
    from app.storage.location import parse_location

    run_dir = parse_location(tmp_path)
    summary = {"status": "succeeded", "best": {"metric": "val_accuracy", "val_accuracy": HUGE}}
    assert "best val_accuracy" not in summary_line(summary, run_dir)
    sweep = {"sweep": "s", "trials": [{"status": "succeeded"}], "best": {"best": HUGE}}
    assert "sweep s" in sweep_line(sweep, run_dir)


def test_status_of_a_sweep_whose_figures_no_float_holds(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    trial = {"trial": "trial-0001", "status": "succeeded", "values": {"lr": HUGE},
             "best": HUGE, "epochs": HUGE, "run_time_s": HUGE, "duration_s": HUGE}  # fmt: skip
    record = {"sweep": "s", "metric": "val_accuracy", "trials": [trial, {**trial, "best": 0.5}],
              "best": {"trial": "trial-0001", "best": HUGE}}  # fmt: skip
    (sweep_dir / "sweep.json").write_text(json.dumps(record))
    trial_dir = sweep_dir / "trials" / "trial-0001"  # the ended trial's own folder
    trial_dir.mkdir(parents=True)
    (trial_dir / "summary.json").write_text(json.dumps({"status": "succeeded"}))
    for args in ((), ("--json",)):
        result = trainctl("status", str(sweep_dir), *args)
        assert result.code == 0 and "internal error" not in result.text, result.text


def test_a_count_from_a_record_is_a_whole_number_in_its_range() -> None:
    """One rule for every count, epoch and version a record holds: JSON's true is no count
    (Python's bool is an int), and 2.0 is not a whole number there."""
    from app.formatting import finite, whole

    assert [whole(v) for v in (3, 0, -2, True, 2.0, "3", None, HUGE)] == [
        3, 0, -2, None, None, None, None, HUGE
    ]  # fmt: skip
    assert whole(0, least=1) is None and whole(5, 1, 4) is None and whole(4, 1, 4) == 4
    assert [finite(v) for v in (3, 0.5, True, float("nan"), float("inf"), HUGE, "1")] == [
        3.0, 0.5, None, None, None, None, None
    ]  # fmt: skip


def test_an_epoch_record_out_of_range_is_a_damaged_line_and_a_diverged_loss_is_shown(
    tmp_path: Path,
) -> None:
    """An epoch of 400 digits passed the metrics line's check (an int) and made `compare`
    plot it (an internal error); a NaN loss is what a diverged run records and its epoch
    line says so, as it did before figures were read through `finite`."""
    from app.runfolder import folder as run_folder
    from app.runfolder.epoch_record import epoch_line

    run_dir = tmp_path / "r"
    run_dir.mkdir()
    lines = [
        {"epoch": HUGE, "val_accuracy": 0.5},
        {"epoch": 1, "val_accuracy": 0.5, "val_loss": HUGE},
        {"epoch": 2, "val_accuracy": 0.6, "val_loss": 0.4, "time": HUGE},
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert [r["epoch"] for r in run_folder.epochs(run_dir)] == [2]
    other = tmp_path / "other"
    other.mkdir()
    (other / "metrics.jsonl").write_text(json.dumps({"epoch": 1, "val_accuracy": 0.4}) + "\n")
    result = trainctl("compare", str(run_dir), str(other), "--out", str(tmp_path / "c.png"))
    assert result.code == 0 and "internal error" not in result.text, result.text
    line = epoch_line({"epoch": 3, "train_loss": float("nan"), "val_loss": float("inf")}, 10)
    assert "train_loss nan" in line and "val_loss inf" in line, line


def test_submit_wait_and_the_trackers_take_an_epochs_odd_time_as_unknown() -> None:
    """`time` is no required field of an epoch line: 400 digits, null or text there ended
    `submit --wait` in an internal error, and a tracker replaying the line failed on it at
    every retry, holding back every later epoch."""
    from app.k8s.follow import FollowState, advance
    from app.tracking.clients import _wall

    records = [{"epoch": 1, "val_accuracy": 0.5, "time": odd} for odd in (HUGE, None, "x")]
    tick = advance(FollowState(), None, name="r", elapsed_s=1.0, records=records)
    assert tick is not None
    assert all(_wall(record) > 0 for record in records)


def test_the_end_line_of_a_run_leaves_out_a_figure_no_float_holds() -> None:
    from app.run.decisions import _figures

    assert _figures({"val_loss": HUGE, "val_accuracy": 0.5}, "val_loss") == "val_accuracy 0.5000"
    assert _figures({"val_loss": float("nan")}, "val_loss") == "val_loss nan"
