"""One tracked run whose driver ends early twice, shared by the preemption and observability
tests (each `trainctl train` is about half a minute of this machine's two cores).

The run: synthetic data, the cnn, 1 CPU worker, 3 epochs of 125 steps with a step checkpoint
every 40, tracked to a real MLflow server and to TensorBoard. Its driver is stopped by SIGTERM
inside epoch 2 (a pod eviction, a Kueue preemption); its rerun is killed outright (SIGKILL)
once it committed a step checkpoint of its own; the rerun after that finishes while every Ray
node's metrics port is scraped. Beside it, an uninterrupted reference run of the same seed.

What each driver left is recorded here as it happens; the tests assert on the record.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.runfolder import checkpoints
from app.runfolder.checkpoints import CheckpointRef
from app.runfolder.folder import read_progress
from tests.support import (
    committed,
    committed_steps,
    explain,
    open_local,
    read_summary,
    run_trainctl,
    start_trainctl,
    train_workers,
    trainctl_env,
    wait_until,
)

RUN = "preempt"
EPOCHS = 3
ROWS = 2000  # 125 steps of 16 per epoch on one worker: three step checkpoints each (every 40)
EXPERIMENT = "trainctl-tests"


def env_for(tmp: Path, cluster: object, storage: str, **overrides: str) -> dict[str, str]:
    values = {
        "dataset": "synthetic",
        "model": "cnn",
        "epochs": "2",
        "num_workers": "1",
        "global_batch_size": "16",
        "checkpoint_every": "40",
        "data_path": str(tmp / "data"),
        "storage_path": str(tmp / storage),
        "run_name": RUN,
        "ray_address": cluster.address,  # type: ignore[attr-defined]
        "max_failures": "3",
        "checkpoints_to_keep": "5",
    }
    values.update(overrides)
    env = trainctl_env(**values)
    env["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] = "0.5"
    return env


def prepare_data(tmp: Path, rows: int) -> None:
    from app.data.kinds import prepare_dataset

    prepare_dataset("synthetic", tmp / "data" / "synthetic", rows=rows)


class Scraper(threading.Thread):
    """Reads every Ray node's Prometheus endpoint each second, keeping the app's lines."""

    def __init__(self, cluster: object) -> None:
        super().__init__(daemon=True)
        self.urls = [
            f"http://{node.node_ip_address}:{node.metrics_export_port}/metrics"
            for node in cluster.list_all_nodes()  # type: ignore[attr-defined]
        ]
        self.lines: set[str] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            self.scrape()

    def scrape(self) -> None:
        for url in self.urls:
            try:
                with open_local(url, timeout=2) as answer:
                    text = answer.read().decode()
            except OSError:
                continue
            self.lines.update(line for line in text.splitlines() if "trainctl_" in line)


@dataclass
class InterruptedRun:
    tmp: Path
    env: dict[str, str]
    run_dir: Path
    reference_dir: Path
    mlflow_uri: str
    # the stopped driver (attempt 1)
    stopped_code: int = 0
    stopped_log: str = ""
    stop_s: float = 0.0
    jit: dict[str, Any] = field(default_factory=dict)
    newest_after_stop: CheckpointRef | None = None
    status_after_stop: str = ""
    first_tracking: dict[str, Any] = field(default_factory=dict)
    # the killed rerun (attempt 2)
    killed_log: str = ""
    killed_at: CheckpointRef | None = None
    # the rerun that finishes (attempt 3)
    final: subprocess.CompletedProcess[str] | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    metric_lines: set[str] = field(default_factory=set)


def run_interrupted(cluster: object, tmp: Path, mlflow_uri: str) -> InterruptedRun:
    prepare_data(tmp, ROWS)
    reference = run_trainctl(
        "train", env=env_for(tmp, cluster, "reference", epochs=str(EPOCHS)), cwd=tmp, timeout=900
    )
    assert reference.returncode == 0, explain(reference)

    env = env_for(tmp, cluster, "runs", epochs=str(EPOCHS), tensorboard="true")
    env.update(MLFLOW_TRACKING_URI=mlflow_uri, MLFLOW_EXPERIMENT_NAME=EXPERIMENT)
    run = InterruptedRun(tmp, env, tmp / "runs" / RUN, tmp / "reference" / RUN, mlflow_uri)
    log_file = tmp / "driver.log"

    # Attempt 1: SIGTERM once Ray committed the first step checkpoint of epoch 2.
    driver = start_trainctl("train", env=env, cwd=tmp)
    wait_until(
        lambda: committed(run.run_dir, r"checkpoint_epoch_0001_step_"),
        timeout=900,
        what="a step checkpoint in epoch 2",
    )
    stopped_at = time.monotonic()
    driver.send_signal(signal.SIGTERM)
    run.stopped_code = driver.wait(timeout=300)
    run.stop_s = time.monotonic() - stopped_at
    run.stopped_log = log_file.read_text()
    run.jit = read_progress(run.run_dir).get("jit") or {}
    run.newest_after_stop = checkpoints.scan(run.run_dir).latest
    summary = read_summary(run.run_dir)
    run.status_after_stop, run.first_tracking = summary["status"], summary["tracking"]

    # Attempt 2: killed outright once it committed a step checkpoint after the resumed one.
    seen = len(run.stopped_log)
    rerun = start_trainctl("train", env=env, cwd=tmp)
    resumed = int(run.jit.get("step", 0))
    wait_until(
        lambda: any(step > resumed for step in committed_steps(run.run_dir)),
        timeout=900,
        what="a step checkpoint after the resumed one",
    )
    rerun.send_signal(signal.SIGKILL)
    rerun.wait(timeout=60)
    run.killed_log = log_file.read_text()[seen:]
    # Ray ends a dead driver's workers a moment later, and rank 0 may commit one more
    # checkpoint meanwhile: whole and verified, so it is what the next rerun resumes from.
    wait_until(lambda: not train_workers(cluster), timeout=120, what="old workers gone")
    run.killed_at = checkpoints.scan(run.run_dir).latest

    # Attempt 3: finishes, while the app's Ray gauges are scraped.
    scraper = Scraper(cluster)
    scraper.start()
    run.final = run_trainctl("train", env=env, cwd=tmp, timeout=900)
    time.sleep(2.0)  # Ray's agents export what the last epoch set on their next round
    scraper.stop.set()
    scraper.join()
    scraper.scrape()
    run.metric_lines = scraper.lines
    run.summary = read_summary(run.run_dir)
    return run
