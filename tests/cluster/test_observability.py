"""Observability on the real local multi-node cluster, with a real MLflow server.

One tracked run serves most assertions: it trains 3 epochs of digits with MLflow and
TensorBoard on, its driver is SIGKILLed once epoch 1 is committed, and a rerun finishes it
while the test scrapes every Ray node's metrics port. Then: the same MLflow run holds the
params, one point per epoch and the best checkpoint; TensorBoard's own reader finds both
epochs; the app's gauges were in Ray's Prometheus output; both attempts left their logs in
the run folder. (A failed worker's traceback read back through `trainctl logs` is checked on
test_train.py's failing run.)
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import (
    REPO,
    background_server,
    committed_epochs,
    explain,
    free_port,
    read_summary,
    run_trainctl,
    server_log_tail,
    start_trainctl,
    trainctl_env,
    wait_until,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

RUN = "observed"
EPOCHS = 3


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[], str]]:
    """`mlflow server` on 127.0.0.1 with a local store, from its own venv (.venv-mlflow: full
    mlflow pins pyarrow<26, the app's Ray Data needs 26; the app itself uses mlflow-skinny)."""
    binary = os.environ.get("MLFLOW_BIN") or str(REPO / ".venv-mlflow" / "bin" / "mlflow")
    if not Path(binary).is_file():
        pytest.skip(f"mlflow server not found at {binary} (make setup builds .venv-mlflow)")
    home = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    command = [
        binary, "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
        "--backend-store-uri", f"sqlite:///{home}/mlflow.db",
        "--artifacts-destination", str(home / "artifacts"),
    ]  # fmt: skip
    # MLflow's background job runner (a pool of huey consumers) serves no test here and would
    # compete for the 2 cores.
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    uri = f"http://127.0.0.1:{port}"
    with background_server(command, home=home, env=env) as server:

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as answer:
                    return answer.status == 200
            except OSError:
                assert server.poll() is None, server_log_tail(home)
                return False

        def ready() -> str:
            """The server's URI once it answers (it starts while the caller does other work)."""
            wait_until(healthy, timeout=120, what="mlflow server")
            return uri

        yield ready


def _env(tmp: Path, cluster: object, epochs: str = "2", **extra: str) -> dict[str, str]:
    env = trainctl_env(
        dataset="digits",
        model="cnn",
        epochs=epochs,
        num_workers="2",
        data_path=str(tmp / "data"),
        storage_path=str(tmp / "runs"),
        ray_address=cluster.address,  # type: ignore[attr-defined]
        **extra,
    )
    env["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] = "0.5"
    return env


def _train_workers(cluster: object) -> list[Any]:
    from ray.util.state import list_actors

    return list_actors(
        address=cluster.address,  # type: ignore[attr-defined]
        filters=[("class_name", "=", "RayTrainWorker"), ("state", "=", "ALIVE")],
    )


class Scraper(threading.Thread):
    """Reads every Ray node's Prometheus endpoint each second, keeping the app's lines."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        import ray

        self.urls = [
            f"http://{n['NodeManagerAddress']}:{n['MetricsExportPort']}/metrics"
            for n in ray.nodes()
            if n["Alive"]
        ]
        self.lines: set[str] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            self.scrape()

    def scrape(self) -> None:
        for url in self.urls:
            try:
                with urllib.request.urlopen(url, timeout=2) as answer:
                    text = answer.read().decode()
            except OSError:
                continue
            self.lines.update(line for line in text.splitlines() if "trainctl_" in line)


@pytest.fixture(scope="module")
def tracked(
    ray_cluster: object,
    ray_session: None,
    mlflow_server: Callable[[], str],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    started = time.monotonic()
    mlflow_uri = mlflow_server()
    print(f"mlflow up: {time.monotonic() - started:.1f}s")

    tmp = tmp_path_factory.mktemp("observed")
    # Three epochs: the kill after epoch 1 lands before the run could end on its own.
    env = _env(tmp, ray_cluster, epochs=str(EPOCHS), run_name=RUN, tensorboard="true")
    env.update(MLFLOW_TRACKING_URI=mlflow_uri, MLFLOW_EXPERIMENT_NAME="trainctl-tests")
    run_dir = tmp / "runs" / RUN

    first = start_trainctl("train", env=env, cwd=tmp)
    try:
        wait_until(lambda: 1 in committed_epochs(run_dir), timeout=240, what="epoch 1 committed")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    first_ids = read_summary(run_dir)["tracking"]
    print(f"killed after epoch 1: {time.monotonic() - started:.1f}s")
    wait_until(lambda: not _train_workers(ray_cluster), timeout=120, what="old workers gone")
    print(f"old workers gone: {time.monotonic() - started:.1f}s")

    scraper = Scraper()
    scraper.start()
    result = run_trainctl("train", env=env, cwd=tmp, timeout=400)
    time.sleep(2.0)  # Ray's agents export what the last epoch set on their next round
    scraper.stop.set()
    scraper.join()
    scraper.scrape()
    print(f"tracked run (killed + rerun): {time.monotonic() - started:.1f}s")
    return {
        "run_dir": run_dir,
        "result": result,
        "first_ids": first_ids,
        "metric_lines": scraper.lines,
        "uri": mlflow_uri,
        "env": env,
    }


def test_the_rerun_finishes_the_killed_run(tracked: dict[str, Any]) -> None:
    result = tracked["result"]
    assert result.returncode == 0, explain(result)
    summary = read_summary(tracked["run_dir"])
    assert summary["status"] == "succeeded" and summary["epochs_completed"] == EPOCHS
    assert summary["tracking"]["mlflow"]["run_id"] == tracked["first_ids"]["mlflow"]["run_id"]


def test_mlflow_holds_one_run_with_params_epochs_and_best_checkpoint(
    tracked: dict[str, Any],
) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracked["uri"])
    experiment = client.get_experiment_by_name("trainctl-tests")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1, [r.info.run_id for r in runs]  # the rerun continued, not a second
    run = runs[0]
    assert run.info.run_id == tracked["first_ids"]["mlflow"]["run_id"]
    assert run.info.status == "FINISHED" and run.info.run_name == RUN
    assert run.data.params["model"] == "cnn" and run.data.params["epochs"] == str(EPOCHS)
    assert run.data.params["storage_path"] == str(tracked["run_dir"].parent)
    for name in ("train_loss", "val_loss", "val_accuracy", "images_per_s"):
        steps = [m.step for m in client.get_metric_history(run.info.run_id, name)]
        assert sorted(steps) == list(range(1, EPOCHS + 1)), (name, steps)
    artifacts = [a.path for a in client.list_artifacts(run.info.run_id, "best_checkpoint")]
    assert artifacts, "no best checkpoint artifact"
    best = read_summary(tracked["run_dir"])["best"]["checkpoint"]
    assert sorted(Path(p).name for p in artifacts) == sorted(p.name for p in Path(best).iterdir())


def test_tensorboard_reads_every_epoch(tracked: dict[str, Any]) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folder = tracked["run_dir"] / "tensorboard"
    assert len(list(folder.glob("events.out.tfevents.*"))) == 2  # one per driver
    events = EventAccumulator(str(folder))
    events.Reload()
    steps = sorted(e.step for e in events.Scalars("val_accuracy"))
    assert steps == list(range(1, EPOCHS + 1))
    last = max(events.Scalars("val_accuracy"), key=lambda e: e.step)
    assert last.value == pytest.approx(read_summary(tracked["run_dir"])["metrics"]["val_accuracy"])


def test_ray_metrics_endpoint_exports_the_apps_figures(tracked: dict[str, Any]) -> None:
    lines = tracked["metric_lines"]
    for name in ("epoch", "train_loss", "val_accuracy", "images_per_second", "eta_seconds"):
        found = [line for line in lines if line.startswith(f"ray_trainctl_{name}{{")]
        assert found, (name, sorted(lines)[:20])
        assert any(f'run="{RUN}"' in line for line in found)


def test_both_attempts_left_driver_and_worker_logs(tracked: dict[str, Any]) -> None:
    logs = tracked["run_dir"] / "logs"
    assert sorted(p.name for p in logs.iterdir()) == ["attempt-1", "attempt-2"]
    for attempt in ("attempt-1", "attempt-2"):
        names = sorted(p.name for p in (logs / attempt).iterdir())
        assert names == ["driver.log", "worker-0.log", "worker-1.log"], (attempt, names)
    # Each line once (Ray's worker loggers reach both the tee and the root logger), and the
    # lines the workers printed are there: the rerun trained one or two epochs, undisturbed.
    for rank in (0, 1):
        lines = (logs / "attempt-2" / f"worker-{rank}.log").read_text().splitlines()
        repeated = sorted({line for line in lines if lines.count(line) > 1})
        assert not repeated, (rank, repeated)
        assert lines[0].startswith(f"=== worker rank {rank}, attempt 2 at "), lines
        reports = [line for line in lines if line.startswith("Reporting training result ")]
        assert all(line.endswith(f" from rank {rank}") for line in reports), lines
        if rank == 0:  # Ray Train says where the model goes on rank 0 only
            assert "Moving model to device: cpu" in lines, lines
        else:  # rank 0's reports can come from Ray's upload thread after the loop returned
            assert 1 <= len(reports) <= 2, lines
    driver = (logs / "attempt-2" / "driver.log").read_text()
    # Killed once epoch 1 was committed: the rerun resumes mid-run (epoch 2, or 3 when the
    # kill landed after epoch 2 was committed too).
    assert re.search(rf"resuming run {RUN} at epoch [23] from ", driver), driver
    assert f"run {RUN} succeeded: {EPOCHS}/{EPOCHS} epochs" in driver


def test_a_rerun_after_the_last_checkpoint_closes_the_open_tracker_run(
    tracked: dict[str, Any],
) -> None:
    """A driver killed after its last checkpoint leaves status running in summary.json and the
    MLflow run open; the rerun has nothing to train, and closes that same run."""
    import json

    from mlflow.tracking import MlflowClient

    run_dir = tracked["run_dir"]
    summary = read_summary(run_dir)
    (run_dir / "summary.json").write_text(json.dumps({**summary, "status": "running"}))
    client = MlflowClient(tracking_uri=tracked["uri"])
    run_id = summary["tracking"]["mlflow"]["run_id"]
    client.update_run(run_id, status="RUNNING")
    env, cwd = tracked["env"], run_dir.parent.parent
    result = run_trainctl("train", env=env, cwd=cwd, timeout=300)
    assert result.returncode == 0, explain(result)
    assert "nothing to train" in result.stdout
    assert client.get_run(run_id).info.status == "FINISHED"
    experiment = client.get_experiment_by_name("trainctl-tests")
    assert len(client.search_runs([experiment.experiment_id])) == 1
    assert read_summary(run_dir)["tracking"]["mlflow"]["run_id"] == run_id
