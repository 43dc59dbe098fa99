"""Issue 34 points 5 and 6 on the real cluster: a digits run whose TRAIN_STOP_AT is reachable
stops at the first epoch that meets it, says so in summary.json and its last line, keeps its
checkpoints, is judged for promotion, records the time, accelerator-hours and cost to each
threshold; a rerun with the same settings does not train on; `trainctl status` shows it all.

The run signs its export (TRAIN_SIGNING_KEY): Ray Train's controller witnesses each checkpoint
as rank 0 reports it (app/export/witness.py), and before the rerun a writer of the storage
plants a checkpoint past the last epoch, re-hashed over its edits, which the rerun sets aside
instead of finding nothing to train and signing it.

One run (one worker, a few epochs) and its rerun are shared by every test here.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from tests.support import (
    explain,
    read_history,
    read_summary,
    run_trainctl,
    trainctl_env,
    write_signing_key,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

EPOCHS = 8
STOP_AT = "val_accuracy>=0.6"
PROMOTE_IF = "val_accuracy>=0.6 and val_loss<0.0001"  # the second term is not met here
PRICE = 2.0


@dataclass(frozen=True)
class StoppedRun:
    run_dir: Path
    first: CompletedProcess[str]
    summary: dict
    history: list[dict]
    attempts: str
    checkpoints: list[str]
    rerun: CompletedProcess[str]
    status: CompletedProcess[str]
    signing_key: Path

    @property
    def stop_epoch(self) -> int:
        return next(r["epoch"] for r in self.history if r["val_accuracy"] >= 0.6)


def _checkpoints(run_dir: Path) -> list[str]:
    return sorted(p.name for p in run_dir.glob("checkpoint_epoch_*"))


@pytest.fixture(scope="module")
def stopped(ray_cluster: object, tmp_path_factory: pytest.TempPathFactory) -> StoppedRun:
    tmp = tmp_path_factory.mktemp("early-stop")
    signing_key = write_signing_key(tmp)
    env = trainctl_env(
        dataset="digits", model="cnn", epochs=str(EPOCHS), lr="0.003", num_workers="1",
        global_batch_size="64", checkpoints_to_keep=str(EPOCHS), data_path=str(tmp / "data"),
        storage_path=str(tmp / "runs"), run_name="early",
        ray_address=ray_cluster.address,  # type: ignore[attr-defined]
        max_failures="0", stop_at=STOP_AT, promote_if=PROMOTE_IF, gpu_hour_price=str(PRICE),
        signing_key=str(signing_key),
    )  # fmt: skip
    run_dir = tmp / "runs" / "early"
    first = run_trainctl("train", env=env, cwd=tmp)
    assert first.returncode == 0, explain(first)
    summary, history = read_summary(run_dir), read_history(run_dir)
    attempts = (run_dir / "attempts.jsonl").read_text()
    checkpoints = _checkpoints(run_dir)
    _plant(run_dir / checkpoints[-1], run_dir / "checkpoint_epoch_0009")
    rerun = run_trainctl("train", env=env, cwd=tmp)
    status = run_trainctl("status", str(run_dir), env=env, cwd=tmp)
    return StoppedRun(
        run_dir, first, summary, history, attempts, checkpoints, rerun, status, signing_key
    )


def _plant(source: Path, target: Path) -> None:
    """A copy of the last checkpoint as epoch 9, its meta.json re-hashed over the new epoch
    (and the witness copied along): every checksum holds, and it is past TRAIN_EPOCHS."""
    from app.runfolder import checkpoints

    shutil.copytree(source, target)
    meta = json.loads((target / "meta.json").read_text())
    meta["epoch"] = 9
    meta.pop("stopped", None)
    meta["meta_sha256"] = checkpoints._meta_digest(meta)
    (target / "meta.json").write_text(json.dumps(meta))
    checkpoints.verify(target)


def test_the_run_stops_at_the_first_epoch_that_meets_stop_at(stopped: StoppedRun) -> None:
    epoch = stopped.stop_epoch
    assert epoch < EPOCHS, "the stop must come before the last epoch to test anything"
    assert [r["epoch"] for r in stopped.history] == list(range(1, epoch + 1))
    summary = stopped.summary
    assert summary["status"] == "succeeded" and summary["epochs_completed"] == epoch
    assert summary["stopped_early"] == {
        "reason": "stop_at", "epoch": epoch, "rule": f"TRAIN_STOP_AT={STOP_AT}",
    }  # fmt: skip
    line = f"stopped early at epoch {epoch}: TRAIN_STOP_AT={STOP_AT} met"
    assert f"{epoch}/{EPOCHS} epochs" in stopped.first.stdout and line in stopped.first.stdout
    # Its checkpoints are kept, the last one records the stop; promotion still judged it.
    assert stopped.checkpoints == [f"checkpoint_epoch_{e:04d}" for e in range(1, epoch + 1)]
    meta = json.loads((stopped.run_dir / stopped.checkpoints[-1] / "meta.json").read_text())
    assert meta["stopped"] == summary["stopped_early"]
    assert summary["promoted"] is False and "is not < 0" in summary["promotion"]["line"]


def test_summary_records_time_hours_and_cost_to_each_threshold(stopped: StoppedRun) -> None:
    record = stopped.history[stopped.stop_epoch - 1]
    hours = stopped.summary["accelerator_hours"]
    assert hours["kind"] == "cpu" and hours["price_per_hour"] == PRICE
    assert hours["cost"] == round(hours["hours"] * PRICE, 6)
    to_hours = round(record["worker_time_s"] * hours["per_worker"] / 3600, 6)
    assert stopped.summary["time_to_threshold"] == [
        {"threshold": STOP_AT, "settings": ["TRAIN_STOP_AT", "TRAIN_PROMOTE_IF"],
         "epoch": stopped.stop_epoch, "run_time_s": record["run_time_s"],
         "accelerator_hours": to_hours, "cost": round(to_hours * PRICE, 6)},
        {"threshold": "val_loss<0.0001", "settings": ["TRAIN_PROMOTE_IF"], "epoch": None,
         "run_time_s": None, "accelerator_hours": None},
    ]  # fmt: skip
    # The clock runs forward epoch by epoch, one worker: worker time equals run time.
    times = [r["run_time_s"] for r in stopped.history]
    assert times == sorted(times) and times[0] > 0
    assert all(r["worker_time_s"] == r["run_time_s"] for r in stopped.history)


def test_every_checkpoint_is_witnessed_and_the_export_signed(stopped: StoppedRun) -> None:
    from app.export import signature, witness
    from app.runfolder import checkpoints

    key = signature.private_key(stopped.signing_key).public_key()
    for name in stopped.checkpoints:
        ref = checkpoints.verify(stopped.run_dir / name)
        assert witness.problem(ref, key) is None, name
    export = stopped.run_dir / "export"
    card = (export / "model_card.json").read_bytes()
    signature.check(export, stopped.run_dir, card, key)
    assert json.loads(card)["checkpoint"]["epoch"] == stopped.stop_epoch


def test_a_rerun_with_the_same_settings_does_not_train_on(stopped: StoppedRun) -> None:
    rerun = stopped.rerun
    assert rerun.returncode == 0, explain(rerun)
    # The planted checkpoint: set aside, not "9 epochs finished" and exported.
    assert (
        "checkpoint checkpoint_epoch_0009 is unusable: witness.sig does not verify" in rerun.stdout
    ), explain(rerun)
    assert (stopped.run_dir / "corrupt_checkpoint_epoch_0009").is_dir()
    epoch = stopped.stop_epoch
    assert f"stopped early at epoch {epoch}: TRAIN_STOP_AT={STOP_AT} met" in rerun.stdout
    assert "nothing to train" in rerun.stdout
    assert read_history(stopped.run_dir) == stopped.history  # not one more epoch
    assert (stopped.run_dir / "attempts.jsonl").read_text() == stopped.attempts  # no group
    assert _checkpoints(stopped.run_dir) == stopped.checkpoints
    after = read_summary(stopped.run_dir)
    assert after["stopped_early"] == stopped.summary["stopped_early"]
    assert after["time_to_threshold"] == stopped.summary["time_to_threshold"]


def test_status_shows_the_stop_and_the_time_to_each_threshold(stopped: StoppedRun) -> None:
    result = stopped.status
    assert result.returncode == 0, explain(result)
    lines = result.stdout.splitlines()
    epoch = stopped.stop_epoch
    assert f"  stopped early:   at epoch {epoch}: TRAIN_STOP_AT={STOP_AT} met" in lines
    first = next(line for line in lines if line.startswith("  to threshold:    "))
    assert first.startswith(f"  to threshold:    {STOP_AT}: epoch {epoch}, ")
    assert "of training" in first and "CPU-hours, cost" in first
    assert " " * 19 + "val_loss<0.0001: not met" in lines
    assert any(line.startswith("  usage:") and ", cost " in line for line in lines)
