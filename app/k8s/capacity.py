"""Whether each pool's pods can hold what its run asks of them, refused at render.

A RayJob whose training workers fit on none of its Ray nodes is admitted by KubeRay, gets its
GPU pods scheduled, and then waits forever: Ray Train's placement group stays pending. So both
engines refuse, with the same message (charts/trainctl/templates/_checks.tpl,
`trainctl.capacityChecks` and `trainctl.memoryCheck`):

- each pod's Ray node has its CPU limit rounded up (KubeRay's num-cpus) and holds one training
  worker per GPU (one on a CPU pool), each reserving train.cpus_per_worker;
- Ray Data's tasks need a CPU left somewhere: on a data pool, on the head, or on the pool's pods;
- a sweep's trial (tune.workersPerTrial) must fit in the pool;
- a Ray pod's memory is at least 512Mi (less is nearly always a missing unit: 512 is bytes).

The chart does its arithmetic with sprig: quantities parsed with Go's ParseFloat and multiplied
through exact decimals (`mulf`, `subf`), which is not IEEE arithmetic (0.3 x 10 is 3 there).
The helpers here do theirs the same way, so both engines decide alike on every value.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, localcontext
from typing import Any

from app.k8s.canonical import scalar
from app.k8s.values import enabled_pools, merged_train
from app.settings import TrainSettings

MIN_MEMORY = 512 * 1024**2  # "512Mi"
_NUMBER = re.compile(r"[+]?([0-9]+([.][0-9]*)?|[.][0-9]+)([eE][-+]?[0-9]+)?")
_FACTORS = {"": 1.0, "m": 0.001, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_FACTORS.update({f"{s}i": float(1024**n) for n, s in enumerate("KMGTPE", start=1)})
_DEFAULT_CPUS_PER_WORKER = TrainSettings.model_fields["cpus_per_worker"].default


def problems(values: dict[str, Any]) -> list[str]:
    """One line per pool (or pod kind) that cannot hold its part of the run."""
    found = [_memory_problem("head.memory", values["head"]["memory"])]
    data = values.get("dataPool") or {}
    if data.get("enabled"):
        found.append(_memory_problem("dataPool.memoryPerWorker", data["memoryPerWorker"]))
        found.append(_data_cpu_problem(data["cpusPerWorker"]))
    for pool, p in enabled_pools(values).items():
        found += _pool_problems(values, pool, p)
        found.append(_memory_problem(f"nodePools.{pool}.memoryPerWorker", p["memoryPerWorker"]))
    return [line for line in found if line]


def _pool_problems(values: dict[str, Any], pool: str, p: dict[str, Any]) -> list[str]:
    gpus = int(p["gpusPerWorker"])
    per_pod = max(1, gpus)
    cpw = float(merged_train(values, p).get("cpus_per_worker") or _DEFAULT_CPUS_PER_WORKER)
    cpus = scalar(p["cpusPerWorker"])
    node = _ceil(amount(cpus))
    need = _mulf(per_pod, cpw)
    fit = f"{per_pod} training worker(s) per pod at train.cpus_per_worker {scalar(cpw)}"
    if need > node:
        return [
            f"nodePools.{pool}: {fit} do not fit in cpusPerWorker {cpus} (a Ray node of "
            f"{scalar(node)} CPUs: KubeRay rounds the limit up), so the workers would wait "
            "forever; lower train.cpus_per_worker or raise cpusPerWorker"
        ]
    found = []
    data_pool = bool((values.get("dataPool") or {}).get("enabled"))
    if not data_pool and _subf(node, need) < 1.0 and _head_cpus(values["head"]) < 1.0:
        found.append(
            f"nodePools.{pool}: {fit} take every CPU of its pods (cpusPerWorker {cpus}), "
            "and the head has none for Ray, so Ray Data's tasks would wait forever; leave one: "
            "lower train.cpus_per_worker, raise cpusPerWorker, give the head Ray CPUs "
            "(head.rayStartParams num-cpus) or enable dataPool"
        )
    tune = values.get("tune") or {}
    trial, replicas = int(tune.get("workersPerTrial") or 0), int(p["replicas"])
    if tune.get("enabled") and trial > 0:
        fix = "so no trial could start; lower tune.workersPerTrial or raise "
        fix += f"nodePools.{pool}.replicas"
        if gpus > 0 and trial > replicas * gpus:
            found.append(
                f"tune.workersPerTrial ({trial}) is more training workers than pool {pool} has "
                f"({replicas} pod(s) x {gpus} GPU(s)), {fix}"
            )
        if gpus == 0 and _mulf(trial, cpw) > _mulf(replicas, node):
            found.append(
                f"tune.workersPerTrial ({trial}) at train.cpus_per_worker {scalar(cpw)} needs "
                f"more CPUs than pool {pool} has ({replicas} pod(s) of {scalar(node)}), {fix}"
            )
    return found


def _head_cpus(head: dict[str, Any]) -> float:
    """The head's Ray CPUs: its num-cpus flag where set, else its limit rounded up."""
    params = head.get("rayStartParams") or {}
    if "num-cpus" in params:
        return amount(params["num-cpus"])
    return _ceil(amount(head["cpu"]))


def _ceil(value: float) -> float:
    """sprig's ceil (Go's math.Ceil: +Inf stays +Inf)."""
    return float(math.ceil(value)) if math.isfinite(value) else value


def _data_cpu_problem(quantity: Any) -> str | None:
    if amount(quantity) >= 1.0:
        return None
    return (
        f"dataPool.cpusPerWorker is {scalar(quantity)}, below 1 CPU: KubeRay starts a data "
        "node's Ray with its CPU limit rounded up, so Ray would run a whole decoding task on a "
        "fraction of a CPU and the pool would slow the run it was added to speed up; give it "
        "as 1, 2, 16..."
    )


def _memory_problem(key: str, quantity: Any) -> str | None:
    if amount(quantity) >= MIN_MEMORY:
        return None
    return (
        f"{key} is {scalar(quantity)}, below 512Mi: a Ray pod running torch needs at least that "
        "(a number without a unit is bytes); give it as 16Gi, 512Mi..."
    )


def amount(quantity: Any) -> float:
    """A Kubernetes quantity as a plain number (cores, bytes), as the chart's trainctl.amount
    computes it: the leading number (0 where unreadable) times its suffix's factor (0 for an
    unknown suffix; the schema lets none through)."""
    text = scalar(quantity)
    match = _NUMBER.match(text)
    number = match.group(0) if match else ""
    return _mulf(_go_float(number), _FACTORS.get(text[len(number) :], 0.0))


def _go_float(text: str) -> float:
    """sprig's float64 on a number _NUMBER matched: Go's ParseFloat, or 0 where it fails (out
    of range, or nothing to read)."""
    try:
        value = float(text)
    except ValueError:
        return 0.0
    return value if math.isfinite(value) else 0.0


def _decimal(value: float) -> Decimal:
    return Decimal(repr(float(value)))  # shopspring's NewFromFloat: the shortest round-trip digits


def _mulf(a: float, b: float) -> float:
    """sprig's mulf: exact decimal product of the two floats' shortest forms, then rounded."""
    with localcontext() as context:
        context.prec = 800  # exact for any two float64s
        return float(_decimal(a) * _decimal(b))


def _subf(a: float, b: float) -> float:
    """sprig's subf, likewise."""
    with localcontext() as context:
        context.prec = 800
        return float(_decimal(a) - _decimal(b))
