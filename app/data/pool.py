"""The data pool: Ray Data's CPU work on CPU-only nodes, the training workers off them.

A RayJob rendered with `dataPool.enabled` (charts/trainctl, docs/kubernetes.md "Data pool") has
a worker group `data` whose Ray nodes carry the node label `trainctl.io/role=data`
(app/k8s/rules.py DATA_NODE_LABEL). At run start the driver looks for that pool; with one:

- every task and actor Ray Data starts for the run (read, decode, resize, map/map_batches, the
  cache's materialization, the split) carries the label selector `trainctl.io/role=data`, set
  once on the DataContext the datasets are built under (`placed`) and on the execution options
  the train split runs with (app/data/exact_split.py): Ray Data's operators merge it into every
  task's remote arguments (ray.data._internal.execution.util.merge_label_selector);
- where the autoscaler reported the pool's ceiling (maxReplicas x CPUs per node), Ray Data's
  CPU budget and its own scale-up requests are capped there. Otherwise the budget stays Ray
  Data's own: the CPUs Ray Train left free, the data nodes' and (a few) the training nodes',
  so Ray Data starts somewhat more tasks than the data nodes run at once. The extra ones wait
  for a data node, which is harmless for a fixed pool and, for an autoscaled one, is the
  demand that makes Ray's autoscaler add data nodes: capping the budget at the CPUs there now
  would keep an autoscaled pool at its minimum;
- the training workers get `ScalingConfig(label_selector={"trainctl.io/role": "!data"})`: a
  worker never lands on a data node, and no ingest task lands on a worker's node, so each
  worker keeps the CPUs it reserved (TRAIN_CPUS_PER_WORKER) for its loop.

Why a node label rather than a custom resource or Ray Data's `exclude_resources`: a label
selects without being consumed, so Ray Data's tasks keep asking for real CPUs and its
backpressure sees the real budget; tasks that wait for a data node are, to Ray's autoscaler v2
(KubeRay 1.5.1+), demand for the group whose nodes carry the label, which is how an autoscaled
pool grows while ingest is the bottleneck (up to its maxReplicas); `exclude_resources` is
deprecated in Ray 2.60 in favour of exactly this selector; and Ray's state API reports each
task's selector and node, so placement is checked (tests/cluster/test_data_pool.py). Why the
DataContext's selector rather than `label_selector=` on each read/map call: one setting covers
the tasks Ray Data adds itself (split, materialization, its coordinator actors) and every
dataset kind, without touching their code.

Without data-pool nodes nothing here changes anything: no selector, no limit, Ray's defaults.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from app.k8s.rules import DATA_GROUP, DATA_NODE_LABEL

LABEL_KEY, LABEL_VALUE = DATA_NODE_LABEL
SELECTOR = {LABEL_KEY: LABEL_VALUE}
# Ray's label-selector syntax for "not this value" (a node without the label matches too).
TRAINING_SELECTOR = {LABEL_KEY: f"!{LABEL_VALUE}"}


@dataclass(frozen=True)
class DataPool:
    """The data nodes alive at run start and, where the autoscaler reported it, the most the
    pool may grow to (its maxReplicas for the group, as nodes and CPUs; None when unknown)."""

    nodes: int
    cpus: float
    max_nodes: int | None = None
    max_cpus: float | None = None

    @property
    def grows(self) -> bool:
        return self.max_cpus is not None and self.max_cpus > self.cpus

    def place(self, options: Any) -> Any:
        """Ray Data ExecutionOptions scoped to the pool: its selector and, where known, a CPU
        budget of the pool's ceiling (module docstring)."""
        options.label_selector = dict(SELECTOR)
        if self.max_cpus is not None:
            options.resource_limits = options.resource_limits.copy(cpu=self.max_cpus)
        return options


def pool_from(
    nodes: Iterable[Mapping[str, Any]], groups: Iterable[tuple[str, float, int]] = ()
) -> DataPool | None:
    """The pool described by `ray.nodes()` rows and the autoscaler's node groups
    ((name, CPUs per node, max nodes), max -1 for unbounded); None without one."""
    cpus = [
        float(node.get("Resources", {}).get("CPU", 0.0))
        for node in nodes
        if node.get("Alive") and (node.get("Labels") or {}).get(LABEL_KEY) == LABEL_VALUE
    ]
    count, total = len(cpus), sum(cpus)
    ceiling = [
        (most, most * per_node)
        for name, per_node, most in groups
        if name == DATA_GROUP and most >= max(1, count) and per_node > 0
    ]
    if ceiling:
        return DataPool(count, total, *ceiling[0])
    return DataPool(count, total) if count and total > 0 else None


def find_data_pool() -> DataPool | None:
    """The connected cluster's data pool, from its nodes' labels and, where an autoscaler
    reported its node groups to Ray, the group's ceiling (a pool at minReplicas 0 is then found
    with no node up). Ray 2.60's KubeRay autoscaler does not report them (nothing in Ray's
    Python calls ReportClusterConfig): there the pool is the labelled nodes up at start."""
    import ray

    return pool_from(ray.nodes(), _autoscaler_groups())


def _autoscaler_groups() -> list[tuple[str, float, int]]:
    """The node groups an autoscaler reported to Ray's GCS; [] where none did. Read through the
    private accessor Ray Data itself uses for the same report (ray.data's cluster autoscaler,
    `is_autoscaling_enabled`): a Ray without it reads as no report."""
    try:
        from ray._private.state import state

        config = state.get_cluster_config()
    except Exception:  # a private API that may change: the pool is then what is there now
        return []
    if config is None:
        return []
    return [
        (group.name, float(group.resources.get("CPU", 0)), int(group.max_count))
        for group in config.node_group_configs
    ]


def training_selector(pool: DataPool | None) -> dict[str, str] | None:
    """ScalingConfig.label_selector of the training workers: off the data nodes, or Ray's
    default (None) without a pool."""
    return dict(TRAINING_SELECTOR) if pool else None


@contextlib.contextmanager
def placed(pool: DataPool | None) -> Iterator[None]:
    """Datasets created inside run their tasks on the pool's nodes (a Dataset keeps a copy of
    the DataContext it was created under); the process-wide context is restored after, so
    nothing else this driver reads (evaluation, promotion) inherits the selector."""
    if pool is None:
        yield
        return
    import copy

    import ray.data

    context = ray.data.DataContext.get_current()
    saved = copy.copy(context.execution_options)
    pool.place(context.execution_options)
    try:
        yield
    finally:
        context.execution_options = saved


def ingest_line(pool: DataPool | None) -> str:
    """Where ingest runs, for the run's output (`trainctl: data: ...`)."""
    if pool is None:
        return "decoding on the training nodes"
    now = f"{_count(pool.nodes, 'data-pool node')} ({_cpus(pool.cpus)})"
    if pool.nodes == 0:
        now = "data-pool nodes, none up yet"
    if not pool.grows or pool.max_cpus is None:
        return f"decoding on {now}"
    return (
        f"decoding on {now}; the autoscaler adds data nodes while ingest waits, up to "
        f"{pool.max_nodes} ({_cpus(pool.max_cpus)})"
    )


def ingest_record(pool: DataPool | None) -> dict[str, Any]:
    """summary.json's `ingest`: where Ray Data's CPU work ran, as the run found the cluster."""
    if pool is None:
        return {"where": "training_nodes"}
    return {
        "where": "data_pool",
        "label": f"{LABEL_KEY}={LABEL_VALUE}",
        "nodes": pool.nodes,
        "cpus": pool.cpus,
        "max_nodes": pool.max_nodes,
        "max_cpus": pool.max_cpus,
    }


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _cpus(cpus: float) -> str:
    whole = math.floor(cpus)
    return _count(whole, "CPU") if whole == cpus else f"{cpus:g} CPUs"
