"""The data pool as the driver finds it (app/data/pool.py): from Ray's node rows and the
autoscaler's node groups, the line the run prints and the record summary.json keeps.
Placement itself is proven on a real cluster: tests/cluster/test_data_pool.py."""

from __future__ import annotations

from typing import Any

from ray.data import ExecutionOptions

from app.data.pool import (
    DataPool,
    ingest_line,
    ingest_record,
    pool_from,
    training_selector,
)
from app.k8s.rules import DATA_GROUP, DATA_NODE_LABEL

KEY, VALUE = DATA_NODE_LABEL


def _node(cpus: float, labels: dict[str, str] | None = None, alive: bool = True) -> dict[str, Any]:
    return {"Alive": alive, "Labels": labels or {}, "Resources": {"CPU": cpus, "GPU": 0.0}}


DATA = {KEY: VALUE}


def test_no_labelled_node_and_no_data_group_is_no_pool() -> None:
    nodes = [_node(44, {"ray.io/node-id": "a"}), _node(8, {KEY: "other"}), _node(8, DATA, False)]
    assert pool_from(nodes) is None
    assert pool_from(nodes, [("l4", 44.0, 2)]) is None  # a GPU group is not a data pool
    assert training_selector(None) is None  # Ray's default placement, as before pools
    assert ingest_line(None) == "decoding on the training nodes"
    assert ingest_record(None) == {"where": "training_nodes"}


def test_fixed_pool_counts_the_live_labelled_nodes() -> None:
    nodes = [_node(44), _node(8, DATA), _node(8, DATA), _node(8, DATA), _node(8, DATA, False)]
    pool = pool_from(nodes)
    assert pool == DataPool(nodes=3, cpus=24.0)  # no autoscaler report: no ceiling known
    assert pool is not None and not pool.grows
    assert ingest_line(pool) == "decoding on 3 data-pool nodes (24 CPUs)"
    assert ingest_record(pool) == {
        "where": "data_pool", "label": f"{KEY}={VALUE}", "nodes": 3, "cpus": 24.0,
        "max_nodes": None, "max_cpus": None,
    }  # fmt: skip
    fixed = pool_from(nodes, [(DATA_GROUP, 8.0, 3)])  # reported, at its size
    assert fixed == DataPool(3, 24.0, 3, 24.0) and not fixed.grows
    assert training_selector(pool) == {KEY: f"!{VALUE}"}


def test_autoscaled_pool_at_min_zero_is_found_from_the_autoscaler_groups() -> None:
    pool = pool_from([_node(44)], [("l4", 44.0, 1), (DATA_GROUP, 16.0, 8)])
    assert pool == DataPool(nodes=0, cpus=0.0, max_nodes=8, max_cpus=128.0)
    assert pool.grows
    assert ingest_line(pool) == (
        "decoding on data-pool nodes, none up yet; the autoscaler adds data nodes while ingest "
        "waits, up to 8 (128 CPUs)"
    )
    one = pool_from([_node(16, DATA)], [(DATA_GROUP, 16.0, 8)])
    assert one is not None
    assert ingest_line(one).startswith("decoding on 1 data-pool node (16 CPUs);")


def test_unbounded_or_empty_autoscaler_groups_fall_back_to_the_nodes_there() -> None:
    assert pool_from([_node(8, DATA)], [(DATA_GROUP, 8.0, -1)]) == DataPool(1, 8.0)
    assert pool_from([], [(DATA_GROUP, 8.0, 0)]) is None
    assert pool_from([], [(DATA_GROUP, 0.0, 4)]) is None


def test_place_scopes_ray_data_to_the_pool_and_caps_its_cpus_at_a_known_ceiling() -> None:
    options = ExecutionOptions(preserve_order=True)
    DataPool(1, 8.0, 4, 32.0).place(options)
    assert options.label_selector == {KEY: VALUE}
    assert options.resource_limits.cpu == 32.0
    assert options.preserve_order  # the rest of the options as they were
    # No ceiling known: Ray Data's own budget, whose extra tasks are an autoscaler's demand.
    unknown = DataPool(2, 16.0).place(ExecutionOptions())
    assert unknown.label_selector == {KEY: VALUE}
    assert unknown.resource_limits == ExecutionOptions().resource_limits


def test_the_capacity_check_leaves_the_pools_cpus_out_of_the_workers() -> None:
    """A cluster of 2 training CPUs beside a 16-CPU pool holds no 4-CPU request: `check` and
    `train` said it fit (18 CPUs), and the workers then waited for CPUs no node would give
    them (a red-team pass). The pool's CPUs are named in the refusal."""
    from app.ray_cluster import capacity_problems
    from app.settings import TrainSettings

    settings = TrainSettings(_env_file=None, num_workers="2", cpus_per_worker=2)
    nodes = [_node(2.0), _node(8.0, DATA), _node(8.0, DATA)]
    pool = pool_from(nodes)
    assert pool is not None
    resources = {"CPU": 18.0}
    assert capacity_problems(settings, resources) == []  # the pool's CPUs counted as workers'
    assert capacity_problems(settings, resources, pool.cpus) == [
        "TRAIN_NUM_WORKERS=2 x TRAIN_CPUS_PER_WORKER=2 needs 4 CPUs; the Ray cluster has 18, "
        "16 of them on the data pool (no training there)"
    ]
    assert capacity_problems(settings, {"CPU": 20.0}, pool.cpus) == []  # 4 for training
