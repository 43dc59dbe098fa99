"""What the driver hands every Ray Train worker: one frozen, typed plan, built once.

Ray passes `train_loop_config` (a dict) to each worker; trainctl's holds one entry, the plan,
under PLAN_KEY, and the worker reads it back with `WorkerPlan.of` and nothing else. Every field
pickles plainly (settings, the dataset's description, storage paths, the verified warm start).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.data.schema import DatasetInfo
from app.runfolder.interruptions import Cause
from app.settings import TrainSettings
from app.storage.location import RunPath
from app.training.early_stop import StopRule, rule_of

PLAN_KEY = "trainctl_plan"


@dataclass(frozen=True)
class WorkerPlan:
    settings: TrainSettings  # resolved: no `auto` left (app/training/accel.py)
    info: DatasetInfo
    invocation: str  # this driver's id: its stop requests and progress records carry it
    log_attempt: int  # the driver's attempt: logs go to <run_dir>/logs/attempt-K/
    resume_from: RunPath | None = None  # the verified checkpoint the driver chose, if any
    # resume_from's files' sha256s as the driver verified them: the workers load those bytes.
    resume_files: dict[str, str] = field(default_factory=dict)
    # How the previous driver did not finish (a rerun after it): "stopped" (SIGTERM, Ctrl-C) or
    # "failure"; None where it finished or there was none.
    interrupted: Cause | None = None
    warm_start: Any = None  # app/training/warm_start.WarmStart as preflight verified it

    @property
    def stop_rule(self) -> StopRule:
        return rule_of(self.settings)

    def config(self) -> dict[str, Any]:
        """Ray's train_loop_config."""
        return {PLAN_KEY: self}

    @staticmethod
    def of(config: Mapping[str, Any]) -> WorkerPlan:
        plan = config.get(PLAN_KEY)
        if not isinstance(plan, WorkerPlan):
            raise TypeError(f"the training loop needs a WorkerPlan under {PLAN_KEY!r}")
        return plan
