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


def test_a_run_alone_leaves_ctrl_c_to_the_driver() -> None:
    """Ray Train's own Ctrl-C handler ended the driver with exit 1 and no word, the run's
    summary left `running`; a run's trainer registers none, so Ctrl-C reaches the driver as a
    KeyboardInterrupt (recorded as stopped, exit 130). Checked against Ray's trainer: the
    handler it installs is there to be left out."""
    import signal

    from ray.train import ScalingConfig

    before = signal.getsignal(signal.SIGINT)
    try:
        for own_job, replaced in ((True, False), (False, True)):
            trainer = trainer_class(own_job=own_job)(
                _loop, scaling_config=ScalingConfig(num_workers=1)
            )
            trainer._register_sigint_handler(controller=None)
            assert (signal.getsignal(signal.SIGINT) is not before) is replaced, own_job
            signal.signal(signal.SIGINT, before)
    finally:
        signal.signal(signal.SIGINT, before)
