"""Trackers that cannot work cost one warning each, and training code never sees an error."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from app.settings import TrainSettings
from app.tracking import Trackers, epoch_metrics, flat_params


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the block ends


def test_unreachable_mlflow_and_missing_wandb_warn_once_and_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setitem(__import__("sys").modules, "wandb", None)  # as if not installed
    settings = TrainSettings(storage_path=tmp_path, run_name="t", tensorboard=False)
    started = time.monotonic()
    trackers = Trackers.start(settings, None)
    assert time.monotonic() - started < 60  # no minutes of client retries
    assert trackers.active == [] and trackers.ids == {}
    trackers.log_epoch({"epoch": 1, "train_loss": 1.0, "time": time.time()})
    trackers.finish("succeeded", None)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2, err
    assert err[0].startswith("trainctl: warning: mlflow tracking could not start, training goes on")
    assert err[1].startswith("trainctl: warning: wandb tracking could not start")


def test_a_tracker_failing_mid_run_is_dropped_after_one_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    class Flaky:
        name = "flaky"
        calls = 0

        def log_epoch(self, record: dict) -> None:
            Flaky.calls += 1
            raise ConnectionError("server went away\nmore detail")

    trackers = Trackers()
    trackers.active.append(Flaky())
    for epoch in (1, 2, 3):
        trackers.log_epoch({"epoch": epoch})
    assert Flaky.calls == 1 and trackers.active == []
    assert capsys.readouterr().err == (
        "trainctl: warning: flaky tracking failed (log_epoch), training goes on without it: "
        "server went away\n"
    )


def test_params_and_metrics_as_trackers_take_them() -> None:
    assert flat_params({"b": [1, 2], "a": "x", "c": None, "d": 0.5}) == {
        "a": "x",
        "b": "[1, 2]",
        "c": "null",
        "d": "0.5",
    }
    record = {"epoch": 2, "time": 1.0, "train_loss": 1, "val_accuracy": 0.5, "note": "x"}
    assert epoch_metrics(record) == {"train_loss": 1.0, "val_accuracy": 0.5}
