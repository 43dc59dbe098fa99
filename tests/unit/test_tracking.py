"""Trackers against a real `mlflow server`: the preflight reads or creates the experiment, an
optional tracker that cannot work is switched off with one warning, and a server that goes
away mid-run and comes back (same port, same backend store) loses no epoch."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.settings import TrainSettings
from app.tracking.check import check_trackers
from app.tracking.trackers import Trackers, epoch_metrics, flat_params
from tests.support import (
    REPO,
    background_server,
    free_port,
    open_local,
    server_log_tail,
    wait_until,
)

EXPERIMENT = "trainctl-unit"
# One xdist worker runs this module: its mlflow server (a module fixture) then starts once, not
# once on each worker that a test of it lands on (7 s of a two-core machine each).
pytestmark = pytest.mark.xdist_group("unit-mlflow")


class MlflowServer:
    """`mlflow server` (its own venv) that a test can stop and start again on the same port and
    the same sqlite backend store, as a restarted tracking server would come back."""

    def __init__(self, binary: str, home: Path) -> None:
        self.home, self.port = home, free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.command = [
            binary, "server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
            "--backend-store-uri", f"sqlite:///{home}/mlflow.db",
            "--artifacts-destination", str(home / "artifacts"),
        ]  # fmt: skip
        # The background job runner serves no test here and would compete for the 2 cores.
        self.env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        self._running: contextlib.ExitStack | None = None

    def start(self) -> None:
        self._running = contextlib.ExitStack()
        server = self._running.enter_context(
            background_server(self.command, home=self.home, env=self.env)
        )

        def healthy() -> bool:
            try:
                with open_local(f"{self.uri}/health", timeout=2) as answer:
                    return answer.status == 200
            except OSError:
                assert server.poll() is None, server_log_tail(self.home)
                return False

        wait_until(healthy, timeout=120, what="mlflow server")

    def stop(self) -> None:
        if self._running is not None:
            self._running.close()
            self._running = None


@pytest.fixture(scope="module")
def mlflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    binary = os.environ.get("MLFLOW_BIN") or str(REPO / ".venv-mlflow" / "bin" / "mlflow")
    if not Path(binary).is_file():
        pytest.skip(f"mlflow server not found at {binary} (make setup builds .venv-mlflow)")
    server = MlflowServer(binary, tmp_path_factory.mktemp("mlflow"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def tracked(mlflow: MlflowServer, monkeypatch: pytest.MonkeyPatch) -> MlflowServer:
    for key in ("WANDB_API_KEY", "WANDB_MODE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow.uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", EXPERIMENT)
    # What the MLflow tracker sets for its client if unset, undone after each test.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
    if mlflow._running is None:  # a test that stopped it failed half way
        mlflow.start()
    return mlflow


def _record(epoch: int) -> dict[str, Any]:
    return {
        "epoch": epoch,
        "time": time.time(),
        "train_loss": 1.0 / epoch,
        "val_loss": 2.0 / epoch,
        "val_accuracy": 0.1 * epoch,
    }


def _steps(uri: str, run_id: str) -> list[int]:
    from mlflow.tracking import MlflowClient

    return sorted(m.step for m in MlflowClient(uri).get_metric_history(run_id, "val_loss"))


def test_the_preflight_creates_then_reads_the_experiment(tracked: MlflowServer) -> None:
    settings = TrainSettings(storage_path=Path("/tmp/unused"), run_name="probe")
    first, again = check_trackers(settings), check_trackers(settings)
    assert [v.problem for v in first + again] == [None, None]
    assert f"MLFLOW_TRACKING_URI={tracked.uri} answers" in first[0].detail
    assert f"experiment {EXPERIMENT} created (id " in first[0].detail
    assert f"experiment {EXPERIMENT} found (id " in again[0].detail


def test_a_server_gone_mid_run_loses_no_epoch(tracked: MlflowServer, tmp_path: Path) -> None:
    warnings: list[str] = []
    settings = TrainSettings(storage_path=tmp_path, run_name="flaky", tensorboard=False)
    trackers = Trackers.start(settings, None, warn=warnings.append, retry_s=0.2, retry_max_s=1)
    run_id = trackers.ids["mlflow"]["run_id"]
    trackers.log_epoch(_record(1))
    assert _steps(tracked.uri, run_id) == [1]

    tracked.stop()
    started = time.monotonic()
    trackers.log_epoch(_record(2))  # fails: kept
    trackers.log_epoch(_record(3))  # backing off or failing again: kept
    assert time.monotonic() - started < 5  # refused connections cost no client retries
    assert len(warnings) == 1 and "epochs 2 are kept and retried" in warnings[0], warnings
    assert trackers.delivery()["mlflow"]["undelivered_epochs"] == [2, 3]

    tracked.start()  # same port, same backend store
    time.sleep(1.1)  # past the backoff
    trackers.log_epoch(_record(4))  # the next success flushes what was kept, in order
    assert _steps(tracked.uri, run_id) == [1, 2, 3, 4]
    assert "mlflow tracking is back: epochs 2, 3, 4 delivered" in warnings[-1], warnings
    trackers.log_epoch(_record(5))
    trackers.finish("succeeded", None)

    delivery = trackers.delivery()["mlflow"]
    assert delivery["delivered_epochs"] == [1, 2, 3, 4, 5]
    assert delivery["undelivered_epochs"] == [] and delivery["errors"] >= 1
    assert _steps(tracked.uri, run_id) == [1, 2, 3, 4, 5]  # each epoch once
    from mlflow.tracking import MlflowClient

    assert MlflowClient(tracked.uri).get_run(run_id).info.status == "FINISHED"


@pytest.mark.parametrize(
    "previous",
    [["mlflow"], {"mlflow": ["run"]}, {"mlflow": {"run_id": ["x"], "tracking_uri": "?"}}],
    ids=["a-list", "a-list-for-mlflow", "a-run-id-that-is-no-text"],
)
def test_damaged_tracker_records_of_an_earlier_driver_start_a_new_run(
    tracked: MlflowServer, tmp_path: Path, previous: object
) -> None:
    """summary.json's `tracking` lies where many hands write: a list there was an
    AttributeError as the trackers started (the run failed before training)."""
    from app.run.decisions import trackers_to_close

    assert trackers_to_close({"status": "running", "tracking": ["mlflow"]}) is None
    warnings: list[str] = []
    settings = TrainSettings(storage_path=tmp_path, run_name="damaged", tensorboard=False)
    trackers = Trackers.start(settings, previous, warn=warnings.append)  # type: ignore[arg-type]
    trackers.log_epoch(_record(1))
    trackers.finish("succeeded", None)
    run_id = trackers.ids["mlflow"]["run_id"]
    assert isinstance(run_id, str) and _steps(tracked.uri, run_id) == [1]
    assert warnings == []


def test_a_server_gone_at_the_end_is_named_with_its_epochs(
    tracked: MlflowServer, tmp_path: Path
) -> None:
    warnings: list[str] = []
    settings = TrainSettings(storage_path=tmp_path, run_name="lost", tensorboard=False)
    trackers = Trackers.start(
        settings, None, warn=warnings.append, retry_s=0.1, retry_max_s=0.2, final_tries=2
    )
    trackers.log_epoch(_record(1))
    tracked.stop()
    try:
        trackers.log_epoch(_record(2))
        trackers.finish("succeeded", None)
    finally:
        tracked.start()
    delivery = trackers.delivery()["mlflow"]
    assert delivery["delivered_epochs"] == [1] and delivery["undelivered_epochs"] == [2]
    assert "ConnectionError" in delivery["last_error"] or "refused" in delivery["last_error"]
    assert "mlflow tracking: epochs 2 not delivered and its run not closed" in warnings[-1]
    assert delivery["closed"] is False

    # The finished run rerun with the server back (a RayJob retry, a CronJob's next night):
    # it delivered nothing and dropped this record, leaving the MLflow run RUNNING at epoch 1
    # (a red-team pass). Now its trackers finish what the record says they missed.
    from mlflow.tracking import MlflowClient

    from app.run.decisions import trackers_to_close

    summary = {"status": "succeeded", "tracking": trackers.ids, "tracking_delivery": {
        "mlflow": delivery}}  # fmt: skip
    previous = trackers_to_close(summary)
    assert previous == trackers.ids
    again = Trackers.start(settings, previous, warn=warnings.append)
    again.catch_up([_record(1), _record(2)])
    again.finish("succeeded", None)
    run_id = trackers.ids["mlflow"]["run_id"]
    assert again.ids["mlflow"]["run_id"] == run_id  # the same tracker run, continued
    assert _steps(tracked.uri, run_id) == [1, 2]  # each epoch once
    assert MlflowClient(tracked.uri).get_run(run_id).info.status == "FINISHED"
    finished = again.delivery()["mlflow"]
    assert finished["undelivered_epochs"] == [] and finished["closed"] is True
    summary["tracking_delivery"] = again.delivery()
    assert trackers_to_close(summary) is None  # nothing left: the next rerun starts none


def test_an_optional_tracker_that_cannot_work_is_switched_off_with_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///x.db")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setitem(__import__("sys").modules, "wandb", None)  # as if not installed
    settings = TrainSettings(
        storage_path=tmp_path, run_name="t", tensorboard=False, tracking_required=False
    )
    trackers = Trackers.start(settings, None)
    assert trackers.active == [] and trackers.ids == {}
    trackers.log_epoch({"epoch": 1, "train_loss": 1.0, "time": time.time()})
    trackers.finish("succeeded", None)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2, err
    assert err[0].startswith(
        "trainctl: warning: mlflow tracking is off (TRAIN_TRACKING_REQUIRED=false), training "
        "goes on without it: MLFLOW_TRACKING_URI=sqlite:///x.db: sqlite:// is a database store"
    )
    # Whole, and without advice to set what is set (TRAIN_TRACKING_REQUIRED=false).
    assert err[0].endswith("https://)") and "or set TRAIN_TRACKING_REQUIRED" not in err[0]
    assert err[1].startswith("trainctl: warning: wandb tracking is off")
    delivery = trackers.delivery()
    assert delivery["mlflow"]["undelivered_epochs"] == [1]
    assert "sqlite://" in delivery["mlflow"]["switched_off"]


def test_params_and_metrics_as_trackers_take_them() -> None:
    assert flat_params({"b": [1, 2], "a": "x", "c": None, "d": 0.5}) == {
        "a": "x",
        "b": "[1, 2]",
        "c": "null",
        "d": "0.5",
    }
    record = {"epoch": 2, "time": 1.0, "train_loss": 1, "val_accuracy": 0.5, "note": "x"}
    assert epoch_metrics(record) == {"train_loss": 1.0, "val_accuracy": 0.5}


def test_a_registry_left_behind_by_a_server_down_follows_on_the_rerun(
    tracked: MlflowServer, tmp_path: Path
) -> None:
    """The pointer moved while the MLflow server was down at the run's end (`MLflow registry
    not updated`), and a rerun of the finished run, the server back, said `already the
    champion` and left the registry's champion alias on the model before (a red-team pass)."""
    from mlflow.tracking import MlflowClient

    from app.promotion.step import promote_run
    from tests.promotion_support import INFO, make_run, settings_for

    client = MlflowClient(tracked.uri)
    experiment = client.get_experiment_by_name(EXPERIMENT) or client.get_experiment(
        client.create_experiment(EXPERIMENT)
    )
    run_id = client.create_run(experiment.experiment_id, run_name="r").info.run_id
    make_run(tmp_path, "r", 0.9)
    settings = settings_for(tmp_path, "r")
    summary = {"status": "succeeded", "tracking": {"mlflow": {"run_id": run_id}}}
    tracked.stop()
    try:
        first = promote_run(settings, INFO, summary)
    finally:
        tracked.start()
    assert first["champion_version"] == 1 and "error" in first["promotion"]["registry"]
    again = promote_run(settings, INFO, summary, first["promotion"])
    assert again["promotion"]["line"].startswith("promoted v1 (already the champion")
    registry = again["promotion"]["registry"]
    assert registry["registered"] is True and "error" not in registry, registry
    alias = client.get_model_version_by_alias("digits-cnn", "champion")
    assert (alias.run_id, int(alias.version)) == (run_id, registry["version"])
    # Followed once: a further rerun finds nothing missed and registers nothing again.
    promote_run(settings, INFO, summary, again["promotion"])
    assert len(client.search_model_versions("name='digits-cnn'")) == 1


def test_another_spelling_of_the_server_continues_the_run_and_another_server_is_said(
    tracked: MlflowServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trailing slash or localhost for 127.0.0.1 in MLFLOW_TRACKING_URI opened a second
    tracker run that replayed every epoch, without a word (a red-team pass)."""
    from app.tracking.clients import epoch_metrics, same_server

    settings = TrainSettings(storage_path=tmp_path, run_name="spelled", tensorboard=False)
    first = Trackers.start(settings, None)
    first.log_epoch(_record(1))
    first.finish("interrupted", None)
    # The run's address, for the driver's summary lines (MLflow's own emoji lines are off).
    url = first.ids["mlflow"]["run_url"]
    assert url.startswith(f"{tracked.uri}/#/experiments/") and url.endswith(
        f"/runs/{first.ids['mlflow']['run_id']}"
    )
    port = tracked.uri.rsplit(":", 1)[1]
    for spelling in (f"{tracked.uri}/", f"HTTP://LOCALHOST:{port}"):
        monkeypatch.setenv("MLFLOW_TRACKING_URI", spelling)
        warnings: list[str] = []
        again = Trackers.start(settings, first.ids, warn=warnings.append)
        assert again.ids["mlflow"]["run_id"] == first.ids["mlflow"]["run_id"], spelling
        assert warnings == []
        again.finish("interrupted", None)
    assert not same_server(tracked.uri, "http://127.0.0.1:1")
    assert same_server("http://***@mlflow.example.com", "http://u:p@MLflow.example.com:80/")
    # A null loss (JSON's NaN) reaches the trackers as NaN, not as nothing.
    sent = epoch_metrics({"epoch": 3, "train_loss": None, "val_loss": 1.0, "val_accuracy": 0.5})
    assert sent["train_loss"] != sent["train_loss"] and sent["val_loss"] == 1.0


def test_a_run_recorded_on_another_server_says_a_new_tracker_run_gets_every_epoch(
    tracked: MlflowServer, tmp_path: Path
) -> None:
    settings = TrainSettings(storage_path=tmp_path, run_name="moved", tensorboard=False)
    elsewhere = {"mlflow": {"run_id": "abc", "tracking_uri": "http://mlflow.old.example:5000"}}
    warnings: list[str] = []
    trackers = Trackers.start(settings, elsewhere, warn=warnings.append)
    assert trackers.ids["mlflow"]["run_id"] != "abc"
    assert warnings == [
        f"mlflow: this run's tracker run abc is on http://mlflow.old.example:5000, and "
        f"MLFLOW_TRACKING_URI is now {tracked.uri}: a new tracker run there gets every epoch"
    ]
    trackers.finish("succeeded", None)


def test_an_epoch_that_ended_after_the_stop_reaches_the_trackers_at_the_close(
    tracked: MlflowServer, tmp_path: Path
) -> None:
    """Ctrl-C reaches the workers seconds after the driver stops following: the epoch that ends
    meanwhile was in metrics.jsonl but never sent, and not named undelivered (a red-team
    pass). The driver's close hands the trackers every recorded epoch."""
    from app.run.driver import _close_trackers
    from app.runfolder import folder as run_folder

    settings = TrainSettings(storage_path=tmp_path, run_name="late", tensorboard=False)
    settings.run_dir.mkdir()
    epochs = [_record(1), _record(2), _record(3)]
    # A driver whose workers never started: the lines past the checkpoint it would resume
    # (epoch 1 here) are a set-aside checkpoint's, not this run's: not sent (found in review).
    stale = Trackers.start(settings, None)
    stale.catch_up(epochs[:1])
    summary: dict[str, Any] = {}
    _close_trackers(settings, "failed", summary, stale, [], epochs, "never-started")
    assert _steps(tracked.uri, stale.ids["mlflow"]["run_id"]) == [1]
    # This driver's workers started (their first report dropped any such lines): every
    # recorded epoch is sent at the close, one that ended after the stop included.
    run_folder.start_attempt(
        settings.run_dir, invocation="started", start_epoch=1, world_size=1, restored_from=None
    )
    trackers = Trackers.start(settings, None)
    trackers.log_epoch(_record(1))
    summary = {}
    _close_trackers(settings, "interrupted", summary, trackers, [], epochs[:2], "started")
    run_id = trackers.ids["mlflow"]["run_id"]
    assert _steps(tracked.uri, run_id) == [1, 2]
    assert summary["tracking_delivery"]["mlflow"]["delivered_epochs"] == [1, 2]


def test_a_tracker_not_configured_on_a_rerun_keeps_what_it_is_owed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finished run rerun without MLFLOW_TRACKING_URI: its close wrote `tracking` and
    `tracking_delivery` as {}, and a later rerun with the server back owed nothing (review)."""
    from app.run.driver import _close_trackers

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    settings = TrainSettings(storage_path=tmp_path, run_name="owed", tensorboard=False)
    owed = {"mlflow": {"delivered_epochs": [1], "undelivered_epochs": [2], "closed": False}}
    ids = {"mlflow": {"run_id": "abc", "tracking_uri": "http://mlflow:5000"}}
    summary: dict[str, Any] = {"tracking": ids, "tracking_delivery": owed}
    _close_trackers(settings, "succeeded", summary, Trackers.start(settings, ids), [], [], "")
    assert summary["tracking"] == ids and summary["tracking_delivery"] == owed


def test_a_continued_run_says_it_stays_in_the_experiment_it_began_in(
    tracked: MlflowServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MLFLOW_EXPERIMENT_NAME changed between reruns: the run went on logging to the first
    experiment without a word (a red-team pass)."""
    settings = TrainSettings(storage_path=tmp_path, run_name="moved-exp", tensorboard=False)
    first = Trackers.start(settings, None)
    first.finish("interrupted", None)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "another-experiment")
    warnings: list[str] = []
    again = Trackers.start(settings, first.ids, warn=warnings.append)
    assert again.ids["mlflow"]["run_id"] == first.ids["mlflow"]["run_id"]
    assert warnings == [
        f"mlflow: this run's tracker run goes on in experiment {EXPERIMENT}, where it began; "
        "MLFLOW_EXPERIMENT_NAME=another-experiment applies to new runs"
    ]
    again.finish("succeeded", None)


def test_a_finished_trial_owed_epochs_gets_them_when_the_sweep_is_rerun(
    tracked: MlflowServer, tmp_path: Path
) -> None:
    """A trial that finished while the server was down kept `undelivered_epochs` and an open
    MLflow run in its summary; Tune never runs a finished trial again, so a rerun of the sweep
    left them owed (a red-team pass). The rerun delivers them, as a finished run's rerun does."""
    from mlflow.tracking import MlflowClient

    from app.runfolder import folder as run_folder
    from app.settings.tune_plan import Trial, trial_settings
    from app.sweep.sweep import deliver_owed
    from tests.promotion_support import INFO, make_run, settings_for

    space = tmp_path / "space.yaml"
    space.write_text("lr: {grid: [0.01]}\n")
    sweep = settings_for(tmp_path / "runs", "nightly", tune_space=space, epochs=1,
                         tensorboard=False)  # fmt: skip
    trial = Trial(1, {"lr": 0.01})
    settings = trial_settings(sweep, trial, sweep.run_dir)
    make_run(sweep.run_dir / "trials", trial.trial_id, 0.9)
    run_folder.record_epoch(settings.run_dir, {**_record(1), "val_accuracy": 0.9})
    # The trial's driver started its MLflow run, then the server went before epoch 1 got there.
    started = Trackers.start(settings, None)
    owed = {"delivered_epochs": [], "undelivered_epochs": [1], "closed": False}
    run_folder.write_summary(settings.run_dir, {
        "status": "succeeded", "epochs_completed": 1, "epochs_target": 1,
        "tracking": started.ids, "tracking_delivery": {"mlflow": owed},
    })  # fmt: skip

    deliver_owed([trial], {trial.trial_id: settings}, INFO)

    run_id = started.ids["mlflow"]["run_id"]
    assert _steps(tracked.uri, run_id) == [1]
    assert MlflowClient(tracked.uri).get_run(run_id).info.status == "FINISHED"
    summary = run_folder.read_summary(settings.run_dir) or {}
    assert summary["status"] == "succeeded", summary
    assert summary["tracking_delivery"]["mlflow"]["undelivered_epochs"] == [], summary
    assert summary["tracking_delivery"]["mlflow"]["closed"] is True, summary
    assert not (settings.run_dir / "export").exists()  # a trial is never promoted itself


def test_a_server_not_answering_is_said_by_the_request_and_its_reason(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """MLflow's connection error carries urllib3's pool, retry and object addresses: each
    warning of a sweep's trials was 400 characters of it (a red-team pass)."""
    port = free_port()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://user:secret@127.0.0.1:{port}")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    warnings: list[str] = []
    settings = TrainSettings(storage_path=tmp_path, run_name="down", tensorboard=False)
    trackers = Trackers.start(settings, None, warn=warnings.append)
    (said,) = [w for w in warnings if "could not start" in w]
    assert f"127.0.0.1:{port}/api/2.0/mlflow/" in said and "Connection refused" in said, said
    assert "HTTPConnectionPool" not in said and "object at 0x" not in said, said
    assert "secret" not in said and len(said) < 300, said
    assert trackers.deliveries[0].last_error.startswith("MlflowException: API request to")
