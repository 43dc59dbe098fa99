"""Fine-tuning a torchvision model from a state-dict file with TRAIN_FREEZE=backbone, on the
shared Ray cluster: one tiny run (mobilenet_v3_small, 32px RGB, one epoch, two workers) that
also covers a zoo model training to `succeeded` and augmentation in the loop."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision.models import get_model

from tests import parquet_support as data
from tests.support import explain, read_history, read_summary, run_trainctl, trainctl_env

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

CLASSES = 4
HEAD = "classifier.3."  # mobilenet_v3_small's last Linear (app/training/zoo.py head_prefix)


def _dataset(root: Path) -> None:
    rng = np.random.default_rng(7)
    for split, rows in (("train", 48), ("valid", 16)):
        labels = np.arange(rows, dtype=np.int64) % CLASSES
        # A colour per class under noise: something the head can learn in one epoch.
        images = rng.integers(0, 80, (rows, 32, 32, 3)) + (labels * 50)[:, None, None, None]
        data.write(root / split / "part-0.parquet", images.astype(np.uint8), labels)


def test_frozen_backbone_is_unchanged_after_fine_tuning_from_a_weights_file(
    ray_cluster: object, tmp_path: Path
) -> None:
    _dataset(tmp_path / "data")
    torch.manual_seed(0)
    saved = get_model("mobilenet_v3_small", weights=None).state_dict()  # 1000-class head
    weights = tmp_path / "pretrained.pt"
    torch.save(saved, weights)
    env = trainctl_env(
        dataset="parquet",
        model="mobilenet_v3_small",
        weights=str(weights),
        freeze="backbone",
        augment="crop_flip",
        epochs="1",
        num_workers="2",
        global_batch_size="16",
        compile="off",
        data_path=str(tmp_path / "data"),
        storage_path=str(tmp_path / "runs"),
        run_name="fine-tune",
        ray_address=ray_cluster.address,  # type: ignore[attr-defined]
        max_failures="0",
    )
    result = run_trainctl("train", env=env, cwd=tmp_path)
    assert result.returncode == 0, explain(result)
    run_dir = tmp_path / "runs" / "fine-tune"
    summary = read_summary(run_dir)
    assert summary["status"] == "succeeded", summary
    assert summary["settings"]["freeze"] == "backbone"
    assert summary["settings"]["augment"] == "crop_flip"
    assert [row["epoch"] for row in read_history(run_dir)] == [1]

    checkpoint = Path(summary["checkpoint"])
    trained = torch.load(checkpoint / "model.pt", weights_only=True)
    backbone = [key for key in saved if not key.startswith(HEAD)]
    assert len(backbone) > 100
    # Weights and BatchNorm statistics alike: the frozen backbone is exactly the file's.
    changed = [key for key in backbone if not torch.equal(trained[key], saved[key])]
    assert not changed, changed[:5]
    assert trained[HEAD + "weight"].shape == (CLASSES, 1024)  # a new head for 4 classes
    state = torch.load(checkpoint / "train_state.pt", weights_only=True)
    groups = state["optimizer"]["param_groups"]
    assert [len(group["params"]) for group in groups] == [2]  # the head's weight and bias only
