"""A run alone goes without Ray Train's placement-group cleaner; a sweep's trial keeps it
(app/run/job_trainer.py says why)."""

from __future__ import annotations

from typing import Any

from app.run.job_trainer import trainer_class


def _callback_types(own_job: bool) -> list[type]:
    from ray.train import ScalingConfig

    trainer = trainer_class(own_job=own_job)(_loop, scaling_config=ScalingConfig(num_workers=1))
    return [type(callback) for callback in trainer._create_default_callbacks()]


def _loop(config: Any = None) -> None:
    pass


def test_a_run_alone_has_every_default_callback_but_the_placement_group_cleaner() -> None:
    from ray.train.torch import TorchTrainer
    from ray.train.v2._internal.callbacks.placement_group_callback import (
        PlacementGroupCleanerCallback,
    )

    rays = _callback_types(own_job=False)
    assert trainer_class(own_job=False) is TorchTrainer
    # Ray still starts a cleaner by default: what is left out is there to be left out.
    assert PlacementGroupCleanerCallback in rays
    alone = _callback_types(own_job=True)
    assert alone == [kind for kind in rays if kind is not PlacementGroupCleanerCallback]
    assert issubclass(trainer_class(own_job=True), TorchTrainer)
