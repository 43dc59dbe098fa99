"""The RayJob the chart renders runs for real: its entrypoint, runtime env and head env, submitted
through the job API of the shared local cluster, train and leave the run where the manifest says.

What is translated (tests/rayjob_support.py): the shared volume's mount path becomes a temporary
folder. Everything else is the rendered manifest's own text.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.contract.k8s_support import EXAMPLES, load_yaml
from tests.rayjob_support import (
    head_env,
    job_runtime_env,
    mount_path,
    relocate,
    render_pool,
    submit_and_wait,
)
from tests.support import read_summary

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

POOL = "pool-a"  # CPU-sized (gpusPerWorker 0) with acceleratorType A100, like the cluster's nodes
EPOCHS = 1


def _cpu_values() -> dict:
    """The CPU example, one pool, trimmed to a small run: synthetic data, cnn, two workers."""
    values = load_yaml(EXAMPLES / "values-cpu.yaml")
    values["train"] = {
        "dataset": "synthetic",
        "model": "cnn",
        "epochs": EPOCHS,
        "global_batch_size": 64,
    }
    values["nodePools"]["pool-b"]["enabled"] = False
    return values


def test_rendered_rayjob_trains_and_leaves_the_run_where_the_manifest_says(
    ray_cluster: object, tmp_path: Path
) -> None:
    from ray.job_submission import JobSubmissionClient

    job, objects = render_pool(_cpu_values(), POOL)
    manifest_env = head_env(job, objects)
    assert manifest_env["TRAIN_NUM_WORKERS"] == "2" and manifest_env["TRAIN_USE_GPU"] == "false"
    env = relocate(manifest_env, mount_path(job), tmp_path / "volume")

    client = JobSubmissionClient(f"http://{ray_cluster.webui_url}")  # type: ignore[attr-defined]
    status, logs = submit_and_wait(
        client,
        entrypoint=job["spec"]["entrypoint"],
        runtime_env=job_runtime_env(job, env),
        timeout=600,
    )
    assert status == "SUCCEEDED", logs[-6000:]
    assert "ok    cluster:" in logs, logs[-6000:]  # the preflight ran first and passed

    # The run folder is <TRAIN_STORAGE_PATH>/<TRAIN_RUN_NAME>, and the run name is the RayJob's.
    assert env["TRAIN_RUN_NAME"] == job["metadata"]["name"]
    run_dir = Path(env["TRAIN_STORAGE_PATH"]) / env["TRAIN_RUN_NAME"]
    summary = read_summary(run_dir)
    assert summary["status"] == "succeeded", summary
    assert summary["run_name"] == job["metadata"]["name"]
    assert summary["epochs_completed"] == EPOCHS
    assert summary["settings"]["accelerator_type"] == "A100"
    assert Path(summary["checkpoint"]) == run_dir / f"checkpoint_epoch_{EPOCHS:04d}"
    for epoch in range(1, EPOCHS + 1):
        assert (run_dir / f"checkpoint_epoch_{epoch:04d}" / "model.pt").is_file()
    # The dataset was prepared on the volume's data path, where the other pods would find it.
    assert (Path(env["TRAIN_DATA_PATH"]) / "synthetic" / "train").is_dir()
