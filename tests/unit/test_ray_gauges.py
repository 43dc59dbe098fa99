"""The epoch figures rank 0 exports as Ray gauges (app/training/ray_gauges.py)."""

from __future__ import annotations

from app.training.ray_gauges import figures


def test_epoch_figures_for_the_gauges() -> None:
    record = {
        "epoch": 3,
        "train_loss": 0.5,
        "val_loss": 0.25,
        "val_accuracy": 0.9,
        "images_per_s": 1200.0,
        "epoch_time_s": 10.0,
    }
    assert figures(record, target_epochs=5) == {
        "trainctl_epoch": 3.0,
        "trainctl_train_loss": 0.5,
        "trainctl_val_loss": 0.25,
        "trainctl_val_accuracy": 0.9,
        "trainctl_images_per_second": 1200.0,
        "trainctl_eta_seconds": 20.0,
    }
    assert figures({"epoch": 5, "epoch_time_s": 10.0}, 5) == {
        "trainctl_epoch": 5.0,
        "trainctl_eta_seconds": 0.0,
    }
