"""Issue 35 on a real multi-node Ray cluster: a data pool decodes the image folder, the
training node trains, and the result is the one a cluster without a pool gives.

On the session cluster of this group (tests/conftest.py), whose unlabelled nodes stand for the
GPU pool: a node labelled `trainctl.io/role=data` is added once the run without a pool is done,
and removed (with its replacement) when this module's tests end, so the group's later tests see
the cluster as it was. A second cluster of its own would make two clusters on this machine at
once besides the other group's: Ray Train's placement-group cleaner, finding "the" cluster from
/tmp/ray's last-started one, then took that cluster's training runs for dead. Two
`trainctl train` runs of one image folder (1 worker, same seed) serve every assertion:

- the reference, without a data node: ingest on the training node;
- the pooled run, with a data node that is killed without notice inside epoch 1 and replaced
  by a new labelled one (as a spot CPU node pool would): every Ray Data decode task ran on a
  data node and none elsewhere (Ray's state API), the training worker off them, every
  train image trained exactly once in each epoch (the test-only sample log of
  app/training/sample_log.py), and the final weights bit-equal to the reference's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from app.k8s.rules import DATA_NODE_LABEL
from app.runfolder import checkpoint_names
from app.training.sample_log import ENV as SAMPLE_LOG
from tests.folder_support import image_folder
from tests.support import (
    committed,
    explain,
    read_summary,
    run_trainctl,
    start_trainctl,
    train_workers,
    trainctl_env,
    wait_until,
)

# With the session cluster's second group (tests/conftest.py): its tests run on one xdist worker,
# one after another, so no other test places work on the cluster while the data node is there.
pytestmark = [
    pytest.mark.cluster,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.xdist_group("ray-cluster"),
]

EPOCHS = 2
PER_CLASS = (160, 8)  # 480 train images of 3 classes: 30 steps of 16 per epoch
DATA = dict([DATA_NODE_LABEL])
MAP_TASK = "to_folder_rows"  # the decode stage: ReadItems->MapBatches(to_folder_rows)


@dataclass
class PoolRuns:
    reference: Path
    pooled: Path
    pooled_log: str
    training_ids: set[str]  # the cluster's unlabelled nodes
    data_ids: tuple[str, str]  # the data node, then its replacement
    decode_tasks: list[Any]  # the pooled run's decode tasks, as the state API lists them
    workers: list[Any]  # the pooled run's training workers
    samples: Path


def _env(tmp: Path, cluster: Any, runs: str, **more: str) -> dict[str, str]:
    return trainctl_env(
        dataset="folder", data_path=str(tmp / "images"), storage_path=str(tmp / runs),
        run_name="pool", model="cnn", image_size="16", epochs=str(EPOCHS), num_workers="1",
        global_batch_size="16", compile="off", seed="7", max_failures="3",
        ray_address=cluster.address, **more,
    )  # fmt: skip


def _decode_tasks(cluster: Any) -> list[Any]:
    from ray.util.state import list_tasks

    tasks = list_tasks(
        address=cluster.address, limit=10_000, detail=True, raise_on_missing_output=False
    )
    return [t for t in tasks if MAP_TASK in t.name]


@pytest.fixture(scope="module")
def pool_runs(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PoolRuns]:
    tmp = tmp_path_factory.mktemp("pool")
    image_folder(tmp / "images", per_class=PER_CLASS)
    cluster = ray_cluster
    training_ids = {node.node_id for node in cluster.list_all_nodes()}
    added: list[Any] = []  # the data nodes, removed at the end whatever happens
    try:
        reference = run_trainctl("train", env=_env(tmp, cluster, "reference"), cwd=tmp)
        assert reference.returncode == 0, explain(reference)
        assert "trainctl: data: decoding on the training nodes" in reference.stdout
        before = {t.task_id for t in _decode_tasks(cluster)}

        data = cluster.add_node(num_cpus=2, labels=DATA)
        added.append(data)
        cluster.wait_for_nodes()
        samples = tmp / "samples"
        samples.mkdir()
        env = _env(tmp, cluster, "pooled", checkpoint_every="5")
        # Workers of a running cluster do not inherit this environment: a job's runtime env does.
        env["RAY_JOB_CONFIG_JSON_ENV_VAR"] = json.dumps(
            {"runtime_env": {"env_vars": {SAMPLE_LOG: str(samples)}}}
        )
        driver = start_trainctl("train", env=env, cwd=tmp)
        pooled = tmp / "pooled" / "pool"
        wait_until(
            lambda: committed(pooled, r"checkpoint_epoch_0000_step_"),
            timeout=600,
            what="a step checkpoint in epoch 1",
        )
        workers = train_workers(cluster)
        cluster.remove_node(data, allow_graceful=False)  # lost without notice, mid-epoch
        added.remove(data)
        replacement = cluster.add_node(num_cpus=2, labels=DATA)
        added.append(replacement)
        log = tmp / "driver.log"
        assert driver.wait(timeout=600) == 0, log.read_text()[-5000:]
        decode = [t for t in _decode_tasks(cluster) if t.task_id not in before]
        yield PoolRuns(
            tmp / "reference" / "pool", pooled, log.read_text(), training_ids,
            (data.node_id, replacement.node_id), decode, workers, samples,
        )  # fmt: skip
    finally:
        for node in added:
            cluster.remove_node(node)


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    path = run_dir / checkpoint_names.dir_name(EPOCHS) / "model.pt"
    return torch.load(path, map_location="cpu", weights_only=True)


def test_decoding_runs_on_the_data_nodes_and_training_on_its_own(pool_runs: PoolRuns) -> None:
    runs = pool_runs
    assert "trainctl: data: decoding on 1 data-pool node (2 CPUs)" in runs.pooled_log
    first, _ = runs.data_ids
    where = {t.node_id for t in runs.decode_tasks}
    # The data node decoded (the replacement too, where Ray rebuilt lost blocks there); the
    # training node none.
    assert first in where and where <= set(runs.data_ids), (where, runs.data_ids)
    selectors = {json.dumps(t.label_selector, sort_keys=True) for t in runs.decode_tasks}
    assert selectors == {json.dumps(DATA)}, selectors
    # The training worker stayed on the training node, kept off the data node by its selector.
    assert runs.workers and {w.node_id for w in runs.workers} <= runs.training_ids, runs.workers
    summary = read_summary(runs.pooled)
    assert summary["ingest"] == {
        "where": "data_pool", "label": "trainctl.io/role=data", "nodes": 1, "cpus": 2.0,
        "max_nodes": None, "max_cpus": None,  # no autoscaler here: no ceiling reported
    }, summary.get("ingest")  # fmt: skip
    assert read_summary(runs.reference)["ingest"] == {"where": "training_nodes"}


def test_losing_the_data_node_mid_epoch_loses_no_image_and_trains_none_twice(
    pool_runs: PoolRuns,
) -> None:
    runs = pool_runs
    summary = read_summary(runs.pooled)
    assert (summary["status"], summary["epochs_completed"]) == ("succeeded", EPOCHS), summary
    seen: dict[int, list[str]] = {}  # epoch -> the fingerprint of every image trained, all steps
    for line in (runs.samples / "rank-0.txt").read_text().splitlines():
        epoch, _, prints = line.split(" ", 2)
        seen.setdefault(int(epoch), []).extend(prints.split(","))
    assert sorted(seen) == list(range(1, EPOCHS + 1)), sorted(seen)
    train = PER_CLASS[0] * 3
    first = sorted(seen[1])
    assert len(set(first)) == train, "the test data has twin images"
    for epoch in range(1, EPOCHS + 1):
        assert sorted(seen[epoch]) == first, epoch  # each image once: none lost, none twice


def test_a_data_pool_changes_nothing_the_run_learns(pool_runs: PoolRuns) -> None:
    """Same seed, 1 worker: the weights after decoding on the data nodes, one of them lost
    mid-epoch, are bit-equal to the weights after decoding on the training node."""
    mine, reference = _weights(pool_runs.pooled), _weights(pool_runs.reference)
    assert mine.keys() == reference.keys()
    for name in mine:
        assert torch.equal(mine[name], reference[name]), name
