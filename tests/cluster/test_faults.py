"""Fault injection on the real local multi-node cluster: the run survives and resumes.

Every injection waits until Ray's controller has *committed* a checkpoint (it is in Ray's
checkpoint snapshot), so no test races the commit.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from app.run import checkpoints
from tests.support import (
    FINISHED_EPOCHS,
    FinishedRun,
    committed_epochs,
    explain,
    read_history,
    read_summary,
    run_trainctl,
    start_trainctl,
    trainctl_env,
    wait_until,
)

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.slow,
    pytest.mark.timeout(900),
]

EPOCHS = 4
RUN = "faults"


def _env(tmp: Path, cluster: object, **overrides: str) -> dict[str, str]:
    values = {
        "dataset": "synthetic",
        "model": "cnn",
        "epochs": str(EPOCHS),
        "num_workers": "2",
        "global_batch_size": "64",
        "data_path": str(tmp / "data"),
        "storage_path": str(tmp / "runs"),
        "run_name": RUN,
        "ray_address": cluster.address,  # type: ignore[attr-defined]
        "max_failures": "3",
    }
    values.update(overrides)
    env = trainctl_env(**values)
    env["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] = "0.5"  # notice dead workers quickly
    return env


def _attempts(run_dir: Path) -> list[dict]:
    lines = (run_dir / "attempts.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _train_workers(cluster: object) -> list[dict]:
    from ray.util.state import list_actors

    actors = list_actors(
        address=cluster.address,  # type: ignore[attr-defined]
        filters=[("class_name", "=", "RayTrainWorker"), ("state", "=", "ALIVE")],
    )
    return [actor.__dict__ if hasattr(actor, "__dict__") else dict(actor) for actor in actors]


def _assert_recovered_run(run_dir: Path, resumed_after: int) -> None:
    summary = read_summary(run_dir)
    assert summary["status"] == "succeeded", summary
    assert summary["epochs_completed"] == EPOCHS
    assert summary["failures"] >= 1
    assert summary["restored_from"], summary
    # The group that took over started right after a committed epoch: nothing committed was
    # trained again, and the history holds each epoch exactly once.
    restart = _attempts(run_dir)[-1]
    assert restart["start_epoch"] > resumed_after
    assert restart["restored_from"].endswith(f"checkpoint_epoch_{restart['start_epoch'] - 1:04d}")
    assert [row["epoch"] for row in read_history(run_dir)] == list(range(1, EPOCHS + 1))


# A killed training worker (one process, not its node) is tested on a run folder in an S3
# bucket: tests/cluster/test_object_storage.py. A run on the volume recovers from a lost node
# below, which kills its workers too.


def test_lost_worker_node_is_survived(
    ray_cluster: object, ray_session: None, tmp_path: Path
) -> None:
    run_dir = tmp_path / "runs" / RUN
    # Pinned to the pool's label, the workers run on worker nodes only, never on the head.
    env = _env(tmp_path, ray_cluster, accelerator_type="A100")
    driver = start_trainctl("train", env=env, cwd=tmp_path)
    wait_until(lambda: 1 in committed_epochs(run_dir), timeout=900, what="epoch 1 committed")

    node_id = _train_workers(ray_cluster)[0]["node_id"]
    node = next(n for n in ray_cluster.worker_nodes if n.node_id == node_id)  # type: ignore[attr-defined]
    ray_cluster.remove_node(node, allow_graceful=False)  # type: ignore[attr-defined]
    # A replacement joins, as a Kubernetes node pool would bring one back.
    ray_cluster.add_node(num_cpus=2, resources={"accelerator_type:A100": 1})  # type: ignore[attr-defined]

    assert driver.wait(timeout=1200) == 0, (tmp_path / "driver.log").read_text()[-5000:]
    _assert_recovered_run(run_dir, resumed_after=1)


def _signal_after_next_commit(
    cluster: object, run_dir: Path, env: dict[str, str], tmp: Path, sig: signal.Signals, after: int
) -> tuple[int, int]:
    """Start `trainctl train`, send `sig` once epoch `after` + 1 is committed, and return its
    exit code and the newest verified checkpoint's epoch once its workers are gone."""
    driver = start_trainctl("train", env=env, cwd=tmp)
    wait_until(lambda: after + 1 in committed_epochs(run_dir), timeout=900, what="next commit")
    driver.send_signal(sig)
    code = driver.wait(timeout=300)
    # Ray ends a dead driver's workers a moment later, and rank 0 may finish writing one more
    # checkpoint meanwhile. That checkpoint is complete and verified, so it is the one to
    # resume from: read what is on storage once the old workers are gone.
    wait_until(lambda: not _train_workers(cluster), timeout=120, what="old workers gone")
    newest = checkpoints.scan(run_dir).latest
    assert newest is not None and newest.epoch > after
    return code, newest.epoch


def test_driver_evicted_then_killed_and_each_rerun_resumes(
    ray_cluster: object, tmp_path: Path
) -> None:
    """One run stopped twice, the two ways a driver ends early: evicted (SIGTERM, as Kubernetes
    does) after its first commit, then its rerun killed outright (SIGKILL) after one more.
    Each rerun resumes after the newest verified checkpoint; the last one finishes the run."""
    run_dir = tmp_path / "runs" / RUN
    epochs = EPOCHS + 1  # room for two interruptions, each of which may commit one epoch more
    env = _env(tmp_path, ray_cluster, epochs=str(epochs))

    code, evicted_at = _signal_after_next_commit(
        ray_cluster, run_dir, env, tmp_path, signal.SIGTERM, after=0
    )
    assert code == 143
    summary = read_summary(run_dir)
    assert summary["status"] == "interrupted", summary
    assert summary["epochs_completed"] >= 1
    assert "Traceback" not in (tmp_path / "driver.log").read_text()

    _, killed_at = _signal_after_next_commit(
        ray_cluster, run_dir, env, tmp_path, signal.SIGKILL, after=evicted_at
    )
    log = (tmp_path / "driver.log").read_text()
    assert f"resuming run {RUN} at epoch {evicted_at + 1}" in log, log[-3000:]
    assert killed_at < epochs, "the killed rerun finished the run: no room left to resume"

    rerun = run_trainctl("train", env=env, cwd=tmp_path, timeout=900)
    assert rerun.returncode == 0, explain(rerun)
    assert f"resuming run {RUN} at epoch {killed_at + 1}" in rerun.stdout, explain(rerun)
    summary = read_summary(run_dir)
    assert summary["status"] == "succeeded" and summary["epochs_completed"] == epochs
    assert summary["restored_from"].endswith(f"checkpoint_epoch_{killed_at:04d}")
    assert [row["epoch"] for row in read_history(run_dir)] == list(range(1, epochs + 1))


def test_corrupt_and_partial_newest_checkpoints_fall_back_to_the_last_good_one(
    finished_run: FinishedRun, tmp_path: Path
) -> None:
    """The two newest checkpoints are damaged in the two ways storage damages them: the rerun
    sets both aside, each with its reason, and resumes after the last good one.

    One rerun checks both kinds: a `trainctl train` is about half a minute of this machine.
    """
    # A finished run (every checkpoint kept), copied: the same start as training one here.
    env, run_dir = finished_run.copy_to(tmp_path)
    name, last, more = run_dir.name, FINISHED_EPOCHS, FINISHED_EPOCHS + 1
    partial, good = last - 1, last - 2
    env = {**env, "TRAIN_EPOCHS": str(more), "TRAIN_CHECKPOINTS_TO_KEEP": "10"}  # keep them all

    # Truncated weights in the newest checkpoint.
    model = run_dir / f"checkpoint_epoch_{last:04d}" / "model.pt"
    model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    # A partial one before it: the upload never finished, so meta.json never arrived.
    (run_dir / f"checkpoint_epoch_{partial:04d}" / "meta.json").unlink()

    rerun = run_trainctl("train", env=env, cwd=tmp_path, timeout=900)
    assert rerun.returncode == 0, explain(rerun)
    assert f"checkpoint checkpoint_epoch_{last:04d} is unusable" in rerun.stdout, explain(rerun)
    assert f"checkpoint_epoch_{partial:04d} is unusable: meta.json is missing" in rerun.stdout
    assert f"resuming run {name} at epoch {good + 1}" in rerun.stdout, explain(rerun)
    assert (run_dir / f"corrupt_checkpoint_epoch_{last:04d}").is_dir()
    assert (run_dir / f"corrupt_checkpoint_epoch_{partial:04d}").is_dir()
    # The epochs after the good one were trained again: their new checkpoints are whole.
    assert {ref.epoch for ref in checkpoints.scan(run_dir).good} >= {good, partial, last, more}
    summary = read_summary(run_dir)
    assert summary["epochs_completed"] == more and summary["status"] == "succeeded", summary
    assert summary["restored_from"].endswith(f"checkpoint_epoch_{good:04d}"), summary
    assert [row["epoch"] for row in read_history(run_dir)] == list(range(1, more + 1))
