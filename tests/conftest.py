"""Shared fixtures: one real multi-node Ray cluster for the whole session.

Starting Ray costs seconds, so every test that needs a cluster shares this one. Tests that
run `trainctl` as a subprocess point it at the cluster through TRAIN_RAY_ADDRESS; tests that
submit jobs use its job API at `http://<cluster.webui_url>`, as KubeRay's submitter does.

Token authentication: Ray turns it on by default only for clusters that `ray.init()` starts;
`Cluster` starts its nodes directly, so this cluster runs without it (unless RAY_AUTH_MODE=token
is in the environment), and clients here need no token. tests/cluster/test_token_auth.py starts
its own cluster with the chart's token settings.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# One moto S3 server per session (per pytest-xdist worker), for every module that uses it: a
# fixture imported into each test module would be a fixture of that module, one server each.
from tests.s3_support import s3_server  # noqa: F401 - the fixture
from tests.support import free_port, node_port

REPO = Path(__file__).resolve().parent.parent

# Quiet, deterministic Ray: no usage stats prompt, no log-to-driver spam in test output.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# A suite started in the background by a shell without job control (`make test > log &` in a
# script) inherits Ctrl-C ignored, and so does every trainctl it starts: the tests that press
# Ctrl-C would wait out their deadlines instead. Python's own Ctrl-C is put back (a handled
# signal is reset to the default in the processes this one starts).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# Fake AWS credentials, for every process including the cluster's: the object-storage tests talk
# to a local S3 server (tests/s3_support.py), and no test may reach a real account with a
# developer's own keys. No metadata-service lookups either (they wait for a timeout off EC2).
os.environ.update(
    AWS_ACCESS_KEY_ID="testing",
    AWS_SECRET_ACCESS_KEY="testing",
    AWS_REGION="us-east-1",
    AWS_EC2_METADATA_DISABLED="true",
)
for _name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
    os.environ.pop(_name, None)
# The cluster's processes inherit this environment. A submitted job's entrypoint finds `trainctl`
# and `python` on PATH, as it does in the image, so the test venv's bin comes first.
_VENV_BIN = str(Path(sys.executable).parent)
if os.environ.get("PATH", "").split(os.pathsep)[0] != _VENV_BIN:
    os.environ["PATH"] = os.pathsep.join([_VENV_BIN, os.environ.get("PATH", "")])


def _local_cluster_class() -> type:
    from ray.cluster_utils import Cluster

    class LocalCluster(Cluster):
        """Every node's dashboard agent and metrics exporter listen on ports of their own.

        Ray's default agent port (52365) is one per machine: the second node on it (or another
        test session's) fails to bind, and without the head's agent the job API answers
        "No available agent to submit job". Nodes added later (a replacement after a node is
        killed) get their own ports too, from this worker's band (tests/support.py node_port).
        """

        def add_node(self, wait: bool = True, **node_args: object) -> object:
            node_args.setdefault("dashboard_agent_listen_port", node_port())
            node_args.setdefault("metrics_export_port", node_port())
            return super().add_node(wait, **node_args)

    return LocalCluster


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[object]:
    """A head node (no training capacity of its own) and two worker 'nodes' on this machine.

    Each worker node carries a fake accelerator label so pool targeting can be tested on CPU.
    The head runs the dashboard and its job API, so jobs can be submitted over HTTP.

    Two of Ray's background duties that no test uses are turned down, each costing the 2 cores
    tens of seconds over a suite: the log monitor, which streams workers' output to drivers
    that ask for it (none here does: trainctl's and the tests' drivers join with log_to_driver
    off) and rescans the session's log folder, which every run grows; and each node agent's
    resource report (CPU, memory and disk of every Ray process, every 5 s by default), which
    the dashboard's pages show and nothing here reads. Metrics that Ray processes export (the
    app's, scraped by tests/cluster/test_observability.py) are not part of that report.
    """
    os.environ.setdefault("REPORTER_UPDATE_INTERVAL_MS", "60000")  # read by each node's agent
    cluster = _local_cluster_class()(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "include_dashboard": True,
            "include_log_monitor": False,
            "dashboard_host": "127.0.0.1",
            "dashboard_port": free_port(),
            # A node killed without notice (the fault tests) is declared dead after this many
            # missed health checks of this period: about 5 s instead of Ray's 15 s, so its
            # workers' restart waits less. A live node answers within 10 s as before.
            "_system_config": {"health_check_period_ms": 1000, "health_check_failure_threshold": 5},
        },
    )
    for _ in range(2):
        cluster.add_node(num_cpus=2, resources={"accelerator_type:A100": 1})
    cluster.wait_for_nodes()
    yield cluster
    cluster.shutdown()


@pytest.fixture(scope="session")
def ray_session(ray_cluster: object) -> Iterator[None]:
    """This test process connected to the shared cluster as a driver."""
    import ray

    ray.init(address=ray_cluster.address, log_to_driver=False)  # type: ignore[attr-defined]
    yield
    ray.shutdown()


# The cluster tests that train the most (faults, preemption, and the runs they share with
# test_train, test_promotion and test_observability: tests/cluster/conftest.py) form one group;
# the other cluster tests form a second. Each group runs on one pytest-xdist worker with that
# worker's own session cluster.
FAULT_MODULES = frozenset(
    {
        "test_faults",
        "test_train",
        "test_promotion",
        "test_preemption",
        "test_observability",
        "test_evaluate",  # it scores the finished run, trained in this group
    }
)


# tryfirst: pytest-xdist turns the group mark into the item's node id in its own hook of this
# name, registered after this conftest and so called before it unless this one goes first.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`make test` runs two pytest-xdist workers; the tests that use a shared Ray cluster are
    split between them in two groups, so neither worker waits for the other's cluster work.

    A group's tests run in order on one worker, and the module and session fixtures they share
    (one finished run, one MLflow server) are built once. xdist hands out the group with more
    tests first and the other next (`--loadscope-reorder`, its default), so the two groups start
    on different workers and the remaining tests fill in behind whichever finishes first. The
    fault group holds fewer tests but about as much training: the suite takes 14 to 15 minutes
    on a two-core machine where a digits run costs 45 CPU-seconds (10 to 12 where it cost 31,
    20 where it cost 47; 36 on one where `import torch` alone took 4.3 CPU-seconds, 69 s from
    launch to exit in `python -m bench.startup`). The suite keeps both cores busy, so a third
    worker gains nothing: tried twice, 18 minutes against 19.5 on the slower machine (where the
    token-auth test's own head node then missed Ray's fixed 30 s start window), and 11:04
    against 10:47 here (2026-12-04): the cores were busy throughout either way, and the third
    worker's tests, run beside the clusters', added about 75 CPU-seconds (each session cluster
    idles at about 4 CPU-seconds a minute, and every wait polls for longer).

    Where the time goes (2026-12-04, 11 min 12 s, every process's CPU sampled each second):
    1,257 CPU-seconds busy, 82 idle (most of that in the last two minutes, where the tests
    that wait on deadlines and servers run). Ray's own processes took 530 (the controllers,
    Ray Data's and Ray Train's actors and tasks, each a new Python process importing ray.train
    or ray.data, and the clusters' daemons), the training workers 199, the `trainctl` drivers
    188, the two pytest workers 198, the MLflow and S3 servers 57. A digits run costs about 30
    CPU-seconds, most of it processes Ray starts for it, little of it training; an idle actor
    costs 0.3 CPU-seconds a minute. So only fewer runs make it shorter, not more overlap.
    Tried without a measurable gain: one OpenMP thread per process, the raylets' memory monitor
    off, and a slower metrics export; then (2026-12-04, every process sampled twice a second)
    idle task workers kept 30 s instead of 1 s (122 short-lived worker processes instead of
    135, no fewer CPU-seconds), no worker prestart (none are prestarted after the first
    driver anyway), and the tests that mostly wait (deadlines, server starts) moved to the
    front or the middle of a group: they then left a core idle there instead of at the end.
    The same machine runs slower on some days: on 2026-12-05 commit 3be15c1, the one that
    measured 10:47 on 2026-12-04, took 12:58, run just after the day's HEAD took 13:00.

    One digits run of 2 epochs on 2 workers, every process sampled 5 times a second
    (2026-12-05, 55-58 busy CPU-seconds that day): the training workers 13-15 (each imports
    torch, and an optimizer imports torch._dynamo, about 4 s apiece before a step), the driver
    12-13 (imports, then evaluating, exporting and plotting the best checkpoint), Ray Train's
    controller 5 (it imports torch too, through TorchConfig), Ray Data's Parquet sampling tasks
    3-5 (Ray 2.60 samples a file per read, on a process of each node, with no switch:
    DataContext.decoding_size_estimation=False keeps the tasks), the watcher, dataset,
    split and synchronization actors about 2 each, the read tasks 2-3, and 3 to 8 worker
    processes Ray starts for leases another one took first (0.8 each). Per test, run one at a
    time: the sweep 214 CPU-seconds, the interrupted run 203, preemption 168, the data pool
    112, the S3 run 97, the RayJob 93, the damaged checkpoints 73, early stopping 70, the
    bucket fine-tune 68, the finished run 63, the failing run 53; everything else 220.
    """
    for item in items:
        if "ray_cluster" not in getattr(item, "fixturenames", ()):
            continue
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        group = "ray-faults" if module in FAULT_MODULES else "ray-cluster"
        item.add_marker(pytest.mark.xdist_group(group))
