"""The end of a succeeded run (app/run/driver.py `_conclude`): retention, summary and promotion
from one scan of the run folder, so that every checkpoint file is hashed once. Real
checkpoints written by the app's own write_checkpoint, no Ray; the hashing function is the
real one, wrapped with a counter."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest

from app.promotion.step import promote_run
from app.run import driver as run
from app.runfolder import checkpoint_names, checkpoints
from app.runfolder import folder as run_folder
from app.storage import reading
from tests.promotion_support import INFO, make_run, settings_for

ACCURACY = {1: 0.70, 2: 0.90, 3: 0.80}  # epoch 2 is the best, epoch 3 the newest


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> Counter[Path]:
    """Every file hashed through the checkpoints module, counted by path."""
    seen: Counter[Path] = Counter()
    real = reading.sha256_of

    def counting(path: Path, root: Path | None = None) -> str:
        seen[path] += 1
        return real(path, root)

    monkeypatch.setattr(checkpoints, "sha256_of", counting)
    return seen


def _run_folder(storage: Path) -> Path:
    for epoch, accuracy in ACCURACY.items():
        run_dir = make_run(storage, "r", accuracy, epoch=epoch, seed=epoch)
    return run_dir


def test_the_end_of_a_run_hashes_every_checkpoint_file_once(
    tmp_path: Path, hashed: Counter[Path]
) -> None:
    run_dir = _run_folder(tmp_path)
    written = sorted(p for p in run_dir.glob("checkpoint_*/*.pt"))
    assert len(written) == 2 * len(ACCURACY)
    hashed.clear()  # write_checkpoint hashed them too: count only the run's end

    summary = run._conclude(settings_for(tmp_path, "r"), INFO, time.monotonic(), "", None, None)

    assert sorted(hashed) == written and set(hashed.values()) == {1}, hashed
    # The handed-over list is the one retention kept (2 by default), and its best is promoted.
    assert sorted(p.name for p in run_dir.glob("checkpoint_*")) == [
        checkpoint_names.dir_name(2),
        checkpoint_names.dir_name(3),
    ]
    assert summary["promoted"] is True and summary["champion_version"] == 1
    pointer = json.loads((tmp_path / "champions" / "digits-cnn.json").read_text())
    assert pointer["epoch"] == 2 and pointer["value"] == ACCURACY[2]
    on_disk = json.loads((run_dir / "summary.json").read_text())
    assert on_disk["status"] == "succeeded" and on_disk["promotion"]["line"].startswith("promoted")


def test_promotion_without_the_drivers_scan_still_finds_the_best(
    tmp_path: Path, hashed: Counter[Path]
) -> None:
    """Its other callers (tests, tools) hand nothing over: it scans, and hashes, itself."""
    run_dir = _run_folder(tmp_path)
    hashed.clear()
    summary = promote_run(settings_for(tmp_path, "r"), INFO, {"status": "succeeded"})
    assert len(hashed) == 2 * len(ACCURACY) and set(hashed.values()) == {1}
    assert summary["promoted"] is True and summary["promotion"]["value"] == ACCURACY[2]
    assert (run_dir / "export" / "model_card.json").is_file()


def test_a_handed_over_scan_is_used_as_given(tmp_path: Path, hashed: Counter[Path]) -> None:
    """Given the verified list, promotion ranks that list and hashes nothing."""
    run_dir = _run_folder(tmp_path)
    good = checkpoints.scan(run_dir).good
    hashed.clear()
    newest_only = [ref for ref in good if ref.epoch == 3]
    summary = promote_run(settings_for(tmp_path, "r"), INFO, {"status": "s"}, good=newest_only)
    assert not hashed
    assert summary["promotion"]["value"] == ACCURACY[3]


def test_the_end_of_a_run_adds_its_hours_and_time_to_earlier_drivers_and_labels_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _run_folder(tmp_path)
    # An earlier driver's hour, as the running summary carries it.
    earlier = {"kind": "cpu", "hours": 1.0, "workers": 2, "per_worker": 1.0}
    # ... and its tracker run, which a driver that starts no tracker (a finished run's rerun
    # with none left open) carries into the final summary.
    tracking = {"mlflow": {"run_id": "0123abcd"}}
    # ... and its wall time: a trial or run resumed three times took all its drivers' time.
    running = {"status": "running", "accelerator_hours": earlier, "tracking": tracking,
               "duration_s": 5000.0}  # fmt: skip
    run_folder.write_summary(run_dir, running)
    run_folder.start_attempt(
        run_dir, invocation="this", start_epoch=1, world_size=2, restored_from=None
    )
    attempts = run_dir / run_folder.ATTEMPTS_FILE
    record = {**json.loads(attempts.read_text()), "time": time.time() - 3600}  # an hour ago
    attempts.write_text(json.dumps(record) + "\n")
    for epoch, accuracy in ACCURACY.items():
        metrics = {"train_loss": 0.5, "val_loss": 1 - accuracy, "val_accuracy": accuracy}
        run_folder.record_epoch(run_dir, {"epoch": epoch, **metrics})

    summary, _ = run._finish(
        settings_for(tmp_path, "r"), "succeeded", time.monotonic() - 60, "this", None
    )

    hours = summary["accelerator_hours"]
    # 2 CPU workers (TRAIN_NUM_WORKERS's default, 1 CPU each) for an hour, on top of the 1.0.
    assert (hours["kind"], hours["workers"], hours["per_worker"]) == ("cpu", 2, 1.0)
    assert 3.0 <= hours["hours"] < 3.5, hours
    assert json.loads((run_dir / "summary.json").read_text())["accelerator_hours"] == hours
    assert 5060 <= summary["duration_s"] < 5400, summary["duration_s"]
    assert summary["tracking"] == tracking
    line = next(x for x in capsys.readouterr().out.splitlines() if " succeeded: " in x)
    assert line == (
        "trainctl: run r succeeded: 3/10 epochs; last epoch val_accuracy 0.8000; "
        "best checkpoint (epoch 2) val_accuracy 0.9000; 0 failure(s) recovered"
    )


def test_a_run_whose_earlier_driver_was_killed_unsaid_counts_its_training_clock(
    tmp_path: Path,
) -> None:
    """A driver killed after its last epoch (SIGKILL: a sweep's driver, a lost node) wrote no
    summary; its rerun, which only concludes, recorded 0.03 s and a few CPU-seconds for the
    whole run. The training clock each epoch carries is the floor of both figures."""
    run_dir = _run_folder(tmp_path)
    for epoch, accuracy in ACCURACY.items():
        clock = {"run_time_s": 400.0 * epoch, "worker_time_s": 800.0 * epoch}
        run_folder.record_epoch(run_dir, {"epoch": epoch, "val_accuracy": accuracy, **clock})

    summary, _ = run._finish(settings_for(tmp_path, "r"), "succeeded", time.monotonic(), "", None)

    assert summary["duration_s"] == 1200.0  # the last epoch's run_time_s
    assert summary["accelerator_hours"]["hours"] == round(2400.0 / 3600, 6)  # 1 CPU each
    assert summary["accelerator_hours"]["kind"] == "cpu"
