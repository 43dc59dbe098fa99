"""The TorchTrainer class a run uses: Ray's own, less its placement-group cleaner and its Ctrl-C
handler when the run is the only training of its Ray job.

Ray Train 2.60 starts, beside every TorchTrainer's controller, a detached actor that asks the
state API once a second whether the controller is alive, and removes the run's placement group
once it is not. It exists for trainings started by something that outlives them (a Ray Tune
trial stopped by ASHA, whose group would otherwise hold its CPUs and GPUs until the sweep's
driver exits). It also counts an empty answer of the state API as "dead": on a loaded head a
live run's group was removed, and the run failed with "Destroying worker since its placement
group was removed" (seen in this project's test suite; ray-project/ray#65447 names the cause).

`trainctl train` is its Ray job's driver and runs one training: Ray removes the job's placement
groups when the driver exits, which it does as soon as the training ends, well or not. There the
cleaner adds nothing but that risk, a process per run and a state-API query a second, so a run
goes without it. A sweep's trial on a cluster it joined keeps it: its trainings end long before
the sweep's driver. On a local cluster the sweep started (no dashboard, so no state API of its
own) the cleaner asks whichever cluster this machine started last, and trials go without it too
(app/sweep/sweep.py).
"""

from __future__ import annotations

from typing import Any


def trainer_class(*, own_job: bool) -> Any:
    """Ray's TorchTrainer, or with `own_job` (the job ends with this run) the same trainer
    without Ray Train's placement-group cleaner."""
    from ray.train.torch import TorchTrainer

    if not own_job:
        return TorchTrainer
    from ray.train.v2._internal.callbacks.placement_group_callback import (
        PlacementGroupCleanerCallback,
    )

    class OwnJobTrainer(TorchTrainer):  # type: ignore[misc, valid-type]
        def _create_default_callbacks(self) -> list[Any]:
            return [
                callback
                for callback in super()._create_default_callbacks()
                if not isinstance(callback, PlacementGroupCleanerCallback)
            ]

        def _register_sigint_handler(self, controller: Any) -> None:
            """Left out: Ray Train 2.60's own Ctrl-C handler aborts the controller and ends
            the driver with exit 1 and no word (its comment: "for some reason the process still
            exits with 1"), the run's summary left `running`. Without it Ctrl-C is the
            KeyboardInterrupt that ray.get lets out, and the driver records the run stopped
            and exits 130, as it does for SIGTERM (143)."""

    return OwnJobTrainer
