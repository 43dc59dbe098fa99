"""`trainctl train` end to end on the shared multi-node Ray cluster: real Ray, torch and files."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.support import explain, read_history, read_summary, run_trainctl, trainctl_env

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def _settings(tmp: Path, cluster: object, **overrides: str) -> dict[str, str]:
    values = {
        "dataset": "synthetic",
        "model": "cnn",
        "epochs": "2",
        "num_workers": "2",
        "global_batch_size": "64",
        "data_path": str(tmp / "data"),
        "storage_path": str(tmp / "runs"),
        "ray_address": cluster.address,  # type: ignore[attr-defined]
        "max_failures": "0",
    }
    values.update(overrides)
    return trainctl_env(**values)


@pytest.fixture(scope="module")
def synthetic_run(ray_cluster: object, tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("synthetic")
    env = _settings(tmp, ray_cluster)
    result = run_trainctl("train", env=env, cwd=tmp)
    assert result.returncode == 0, explain(result)
    return tmp, env, result


def test_two_workers_train_and_leave_a_complete_run_folder(synthetic_run) -> None:
    tmp, _, result = synthetic_run
    run_dir = tmp / "runs" / "synthetic-cnn"
    summary = read_summary(run_dir)
    assert summary["status"] == "succeeded"
    assert summary["run_name"] == "synthetic-cnn"
    assert summary["epochs_completed"] == 2
    assert set(summary["metrics"]) == {"train_loss", "val_loss", "val_accuracy"}
    assert summary["best"]["epoch"] in (1, 2)
    assert summary["failures"] == 0 and summary["restored_from"] is None
    assert summary["settings"]["num_workers"] == "2"
    history = read_history(run_dir)
    assert [row["epoch"] for row in history] == [1, 2]
    assert all(row["images_per_s"] > 0 and row["first_batch_s"] >= 0 for row in history)
    assert (run_dir / "curves.png").read_bytes()[:4] == b"\x89PNG"
    # One readable progress line per epoch, with throughput and an ETA.
    lines = [line for line in result.stdout.splitlines() if "epoch 2/2" in line]
    assert lines and "ETA" in lines[0] and "val_acc" in lines[0], explain(result)
    assert " img/s " in lines[0], explain(result)


def test_checkpoint_loads_on_cpu_without_ray(synthetic_run) -> None:
    tmp, _, _ = synthetic_run
    summary = read_summary(tmp / "runs" / "synthetic-cnn")
    weights = torch.load(Path(summary["checkpoint"]) / "model.pt", weights_only=True)
    assert all(not key.startswith("module.") for key in weights)  # unwrapped, not DDP's names
    state = torch.load(Path(summary["checkpoint"]) / "train_state.pt", weights_only=True)
    assert state["epoch"] == 2 and state["optimizer"]["state"]


def test_rerun_of_a_finished_run_trains_nothing_and_more_epochs_continue_it(
    synthetic_run,
) -> None:
    tmp, env, _ = synthetic_run
    run_dir = tmp / "runs" / "synthetic-cnn"
    again = run_trainctl("train", env=env, cwd=tmp)
    assert again.returncode == 0, explain(again)
    assert "already finished 2 epochs" in again.stdout
    assert read_summary(run_dir)["epochs_completed"] == 2

    more = run_trainctl("train", env={**env, "TRAIN_EPOCHS": "3"}, cwd=tmp)
    assert more.returncode == 0, explain(more)
    assert "resuming run synthetic-cnn at epoch 3" in more.stdout
    summary = read_summary(run_dir)
    assert summary["epochs_completed"] == 3
    assert summary["restored_from"].endswith("checkpoint_epoch_0002")
    assert [row["epoch"] for row in read_history(run_dir)] == [1, 2, 3]


def test_digits_two_workers_learn(ray_cluster: object, tmp_path: Path) -> None:
    env = _settings(tmp_path, ray_cluster, dataset="digits", epochs="6", lr="0.003")
    result = run_trainctl("train", env=env, cwd=tmp_path)
    assert result.returncode == 0, explain(result)
    summary = read_summary(tmp_path / "runs" / "digits-cnn")
    assert summary["metrics"]["val_accuracy"] >= 0.9, summary


def test_bad_settings_exit_2_before_anything_is_written(tmp_path: Path) -> None:
    env = trainctl_env(epochs="0", model="gpt", storage_path=str(tmp_path / "runs"))
    result = run_trainctl("train", env=env, cwd=tmp_path)
    assert result.returncode == 2, explain(result)
    assert "TRAIN_EPOCHS='0'" in result.stderr and "TRAIN_MODEL='gpt'" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / "runs").exists()


def test_more_workers_than_the_cluster_holds_exit_2(ray_cluster: object, tmp_path: Path) -> None:
    env = _settings(tmp_path, ray_cluster, num_workers="40", global_batch_size="64")
    result = run_trainctl("train", env=env, cwd=tmp_path)
    assert result.returncode == 2, explain(result)
    assert "needs 40 CPUs" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_failure_during_training_exits_1_with_cause_and_locations(
    ray_cluster: object, tmp_path: Path
) -> None:
    wrong = tmp_path / "wrong.pt"
    torch.save({"unrelated.weight": torch.zeros(1)}, wrong)
    env = _settings(tmp_path, ray_cluster, warm_start=str(wrong), epochs="1")
    result = run_trainctl("train", env=env, cwd=tmp_path)
    assert result.returncode == 1, explain(result)
    assert "training failed" in result.stderr and "state_dict" in result.stderr, explain(result)
    assert str(tmp_path / "runs" / "synthetic-cnn") in result.stderr
    assert "Traceback" not in result.stderr
    assert read_summary(tmp_path / "runs" / "synthetic-cnn")["status"] == "failed"
