"""Settings for the Ray cluster and the worker group: how many workers, on what, and how
long to wait for the cluster."""

from __future__ import annotations

import re
from typing import NamedTuple

from pydantic import BaseModel, Field, field_validator

# ASCII digits only: Python's \d also takes other scripts' digits, which int() then reads.
WORKERS_PATTERN = re.compile(r"\A\s*([0-9]+)\s*(?:-\s*([0-9]+)\s*)?\Z")
MAX_WORKERS = 10_000


class WorkerRange(NamedTuple):
    """How many training workers to run: fixed when min == max, elastic otherwise."""

    min: int
    max: int

    @property
    def elastic(self) -> bool:
        return self.min != self.max


class ScalingSettings(BaseModel):
    num_workers: str = Field(
        "2",
        description="Training workers: a count such as `4`, or `MIN-MAX` such as `2-8` for "
        "elastic training that grows and shrinks with the cluster.",
    )
    use_gpu: bool = Field(False, description="Give each worker one GPU and train with NCCL.")
    # Ray counts fractional resources in steps of 0.0001: a smaller request is refused only
    # once the workers are being placed, after Ray started.
    cpus_per_worker: float = Field(
        1.0, ge=0.0001, le=512, description="CPUs reserved per worker (at least 0.0001)."
    )
    accelerator_type: str | None = Field(
        None,
        description="Ray accelerator type to pin workers to, e.g. A100 or L4 "
        "(matches Ray's `accelerator_type:<name>` node resource).",
    )
    ray_address: str | None = Field(
        None,
        description="Ray cluster to join, e.g. `auto` or ray://host:10001. Empty starts a "
        "local cluster unless RAY_ADDRESS is set (as it is inside a RayJob).",
    )
    capacity_wait_s: float = Field(
        10,
        ge=0,
        le=3600,
        description="Seconds to let a joined cluster's nodes come up before a request it "
        "cannot hold (workers, GPUs, accelerator type) is refused with exit 2.",
    )

    ray_connect_timeout: float = Field(
        60,
        gt=0,
        le=3600,
        description="Seconds to wait for the Ray cluster at TRAIN_RAY_ADDRESS (or RAY_ADDRESS) "
        "to answer before giving up with exit 2; retries are announced every 5 s.",
    )

    @field_validator("num_workers")
    @classmethod
    def _workers_is_count_or_range(cls, value: str) -> str:
        match = WORKERS_PATTERN.match(value)
        if not match:
            raise ValueError("must be a whole number such as 4, or MIN-MAX such as 2-8")
        low = int(match.group(1))
        high = int(match.group(2) or low)
        if match.group(2) is None and low < 1:
            raise ValueError("must be at least 1 (a count of workers, or MIN-MAX such as 2-8)")
        if low < 1 or high < low:
            raise ValueError("needs 1 <= MIN <= MAX")
        if high > MAX_WORKERS:
            raise ValueError(f"at most {MAX_WORKERS} workers")
        return f"{low}" if low == high else f"{low}-{high}"

    @property
    def workers(self) -> WorkerRange:
        low, _, high = self.num_workers.partition("-")
        return WorkerRange(int(low), int(high or low))
