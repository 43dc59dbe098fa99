"""A run folder and its data in an S3 bucket, on the real local cluster and a real S3 server.

The tests run in order and share one run, `s3run`, in one bucket:
1. train 3 epochs from Parquet files in the bucket; a training worker is killed once epoch 1 is
   committed, and the run recovers from the bucket's checkpoint, keeping the newest two;
2. the newest checkpoint's weights are truncated in the bucket; the next `train` sets that
   checkpoint aside, with its reason.
What the bucket holds is read with the tests' own S3 client (tests/s3_support.py), not the app's.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
from torchvision.models import get_model

from app.data.kinds import prepare_dataset
from tests.folder_support import image_bytes, image_folder
from tests.s3_support import Bucket, S3Server
from tests.support import (
    explain,
    run_trainctl,
    start_trainctl,
    train_workers,
    trainctl_env,
    wait_until,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(900)]

RUN = "s3run"
SECRET = "testing"  # the fake AWS secret every process has (tests/conftest.py)


@pytest.fixture(scope="module")
def bucket(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Bucket:
    """The bucket, holding a Parquet dataset at data/ (train/ and valid/) put there by hand."""
    bucket = s3_server.bucket("trainctl-runs")
    local = tmp_path_factory.mktemp("s3data") / "synthetic"
    # 1,200 rows: at 8 per step an epoch still outlasts the kill's latency, at less compute.
    prepare_dataset("synthetic", local, seed=3, rows=1200)
    bucket.upload(local, "data")
    return bucket


def _env(bucket: Bucket, cluster: object, epochs: int) -> dict[str, str]:
    env = trainctl_env(
        dataset="parquet",
        data_path=bucket.uri("data"),
        storage_path=bucket.uri("runs"),
        storage_endpoint=bucket.endpoint,
        run_name=RUN,
        model="cnn",
        epochs=str(epochs),
        num_workers="2",
        # Small steps: an epoch lasts long enough for a worker to be killed inside the next one.
        global_batch_size="8",
        ray_address=cluster.address,  # type: ignore[attr-defined]
        max_failures="3",
    )
    env["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] = "0.5"  # notice the dead worker quickly
    return env


def _json(bucket: Bucket, key: str) -> Any:
    return json.loads(bucket.read(f"runs/{RUN}/{key}"))


def _jsonl(bucket: Bucket, key: str) -> list[dict[str, Any]]:
    text = bucket.read(f"runs/{RUN}/{key}").decode()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _committed(bucket: Bucket) -> set[int]:
    """Epochs in Ray's checkpoint snapshot in the bucket: registered by its controller."""
    try:
        text = bucket.read(f"runs/{RUN}/checkpoint_manager_snapshot.json").decode()
    except FileNotFoundError:
        return set()
    return {int(e) for e in re.findall(r"checkpoint_epoch_(\d{4})", text)}


def _assert_no_secret(bucket: Bucket) -> None:
    for key in bucket.keys(f"runs/{RUN}"):
        if key.endswith((".json", ".jsonl", ".log")):
            text = bucket.read(f"runs/{RUN}/{key}").decode(errors="replace")
            assert f"={SECRET}" not in text and f'"{SECRET}"' not in text, key


def test_training_on_s3_recovers_a_killed_worker_from_the_buckets_checkpoint(
    bucket: Bucket, ray_cluster: object, tmp_path: Path
) -> None:
    driver = start_trainctl("train", env=_env(bucket, ray_cluster, 3), cwd=tmp_path)
    wait_until(lambda: 1 in _committed(bucket), timeout=600, what="epoch 1 committed in S3")
    os.kill(int(train_workers(ray_cluster)[0].pid), signal.SIGKILL)
    assert driver.wait(timeout=600) == 0, (tmp_path / "driver.log").read_text()[-5000:]

    summary = _json(bucket, "summary.json")
    assert summary["status"] == "succeeded", summary
    assert summary["epochs_completed"] == 3
    assert summary["failures"] >= 1, summary
    assert summary["run_dir"] == bucket.uri(f"runs/{RUN}")
    restart = _jsonl(bucket, "attempts.jsonl")[-1]
    assert restart["restored_from"].startswith(bucket.uri(f"runs/{RUN}/checkpoint_epoch_"))
    assert [row["epoch"] for row in _jsonl(bucket, "metrics.jsonl")] == [1, 2, 3]

    # TRAIN_CHECKPOINTS_TO_KEEP=2: the oldest is gone from the bucket, the newest two remain,
    # whole.
    keys = bucket.keys(f"runs/{RUN}")
    folders = {k.split("/")[0] for k in keys if k.startswith("checkpoint_epoch_")}
    assert folders == {"checkpoint_epoch_0002", "checkpoint_epoch_0003"}, folders
    for epoch in (2, 3):
        folder = f"checkpoint_epoch_{epoch:04d}"
        assert {f"{folder}/{name}" for name in ("meta.json", "model.pt", "train_state.pt")} <= set(
            keys
        )
        assert _json(bucket, f"{folder}/meta.json")["epoch"] == epoch
    assert bucket.read(f"runs/{RUN}/curves.png").startswith(b"\x89PNG")
    assert {"logs/attempt-1/driver.log", "logs/attempt-1/worker-0.log"} <= set(keys)
    worker_log = bucket.read(f"runs/{RUN}/logs/attempt-1/worker-0.log").decode()
    assert worker_log.count("=== worker rank 0, attempt 1") >= 2  # the restart appended
    _assert_no_secret(bucket)


# A rerun that resumes from the bucket's checkpoints (the driver verifies them there, then the
# workers load one) is the restart above as far as the workers go, and the damaged-checkpoint
# rerun below as far as the driver goes.


def test_corrupt_checkpoint_object_is_set_aside_with_its_reason(
    bucket: Bucket, ray_cluster: object, tmp_path: Path
) -> None:
    """The newest checkpoint's weights truncated in the bucket: the next `train` sets it aside.

    Run with TRAIN_EPOCHS=2, which the checkpoint before it already holds: the driver verifies
    the bucket's checkpoints and sets the bad one aside before deciding there is nothing to
    train, so no Ray work is needed to see it (resuming past a bad checkpoint is tested on a
    volume in test_faults.py, and scan-after-quarantine in a bucket in tests/unit)."""
    weights = f"runs/{RUN}/checkpoint_epoch_0003/model.pt"
    bucket.write(weights, bucket.read(weights)[:1000])

    result = run_trainctl("train", env=_env(bucket, ray_cluster, 2), cwd=tmp_path)
    assert result.returncode == 0, explain(result)
    assert "checkpoint checkpoint_epoch_0003 is unusable: model.pt does not match" in result.stdout
    assert f"run {RUN} already finished 2 epochs" in result.stdout

    keys = set(bucket.keys(f"runs/{RUN}"))
    reason = bucket.read(f"runs/{RUN}/corrupt_checkpoint_epoch_0003/UNUSABLE.txt").decode()
    assert "model.pt does not match its recorded checksum" in reason
    assert "corrupt_checkpoint_epoch_0003/model.pt" in keys  # kept for inspection
    assert not any(key.startswith("checkpoint_epoch_0003/") for key in keys)
    summary = _json(bucket, "summary.json")
    assert summary["status"] == "succeeded", summary
    assert summary["checkpoint"] == bucket.uri(f"runs/{RUN}/checkpoint_epoch_0002")


def test_fine_tuning_on_an_image_folder_in_the_bucket_keeps_the_backbone_and_class_names(
    bucket: Bucket, ray_cluster: object, tmp_path: Path
) -> None:
    """TRAIN_DATASET=folder from s3://: PNG and JPEG files (color and grayscale) decoded by the
    Ray workers through the bucket's client, fine-tuning a torchvision model
    (mobilenet_v3_small, two workers, augmentation on) from a state-dict file in the bucket
    with TRAIN_FREEZE=backbone. The frozen backbone ends exactly as the file had it, only the
    new head trains; the class names land in classes.json and in the checkpoint; a rerun whose
    folders name another class is refused before Ray starts. One run for all of it: a
    `trainctl train` is half a minute of this machine."""
    for relative, data in image_folder(tmp_path / "src").items():
        bucket.write(f"folder/{relative}", data)
    bucket.write("folder/train/README.txt", b"not an image")  # skipped, counted
    torch.manual_seed(0)
    saved = get_model("mobilenet_v3_small", weights=None).state_dict()  # 1000-class head
    torch.save(saved, tmp_path / "pretrained.pt")
    bucket.write("weights/pretrained.pt", (tmp_path / "pretrained.pt").read_bytes())
    env = trainctl_env(
        dataset="folder", data_path=bucket.uri("folder"), storage_path=bucket.uri("runs"),
        storage_endpoint=bucket.endpoint, run_name="s3folder", model="mobilenet_v3_small",
        weights=bucket.uri("weights/pretrained.pt"), freeze="backbone", augment="crop_flip",
        image_size="32", compile="off", epochs="1", num_workers="2", global_batch_size="8",
        max_failures="0", ray_address=ray_cluster.address,  # type: ignore[attr-defined]
    )  # fmt: skip
    result = run_trainctl("train", env=env, cwd=tmp_path)
    assert result.returncode == 0, explain(result)
    summary = json.loads(bucket.read("runs/s3folder/summary.json"))
    assert (summary["status"], summary["epochs_completed"]) == ("succeeded", 1), summary
    assert (summary["settings"]["freeze"], summary["settings"]["augment"]) == (
        "backbone", "crop_flip"
    )  # fmt: skip
    names = ["Zebra", "cat", "dog"]
    assert json.loads(bucket.read("runs/s3folder/classes.json")) == {"class_names": names}
    meta = json.loads(bucket.read("runs/s3folder/checkpoint_epoch_0001/meta.json"))
    assert meta["class_names"] == names

    trained = _torch_object(bucket, "runs/s3folder/checkpoint_epoch_0001/model.pt")
    backbone = [key for key in saved if not key.startswith(HEAD)]
    assert len(backbone) > 100
    # Weights and BatchNorm statistics alike: the frozen backbone is exactly the file's.
    changed = [key for key in backbone if not torch.equal(trained[key], saved[key])]
    assert not changed, changed[:5]
    assert trained[HEAD + "weight"].shape == (len(names), 1024)  # a new head for 3 classes
    state = _torch_object(bucket, "runs/s3folder/checkpoint_epoch_0001/train_state.pt")
    groups = state["optimizer"]["param_groups"]
    assert [len(group["params"]) for group in groups] == [2]  # the head's weight and bias only

    bucket.write("folder/train/emu/1.png", image_bytes(1, 0, "PNG"))
    rerun = run_trainctl("train", env={**env, "TRAIN_EPOCHS": "2"}, cwd=tmp_path)
    assert rerun.returncode == 2, explain(rerun)
    assert "classes differ from those run s3folder recorded" in rerun.stderr, explain(rerun)
    assert "new: emu" in rerun.stderr


HEAD = "classifier.3."  # mobilenet_v3_small's last Linear (app/training/zoo.py head_prefix)


def _torch_object(bucket: Bucket, key: str) -> dict[str, Any]:
    """A tensor file from the bucket, read with torch's safe loader (no code runs)."""
    return torch.load(io.BytesIO(bucket.read(key)), map_location="cpu", weights_only=True)
