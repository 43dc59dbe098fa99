"""Running the real `trainctl` command the way users and the RayJob entrypoint do."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def trainctl_env(base: Mapping[str, str] | None = None, **settings: str) -> dict[str, str]:
    """`base` (the current environment by default) minus any TRAIN_*, MLFLOW_* or WANDB_* the
    developer has set, plus `settings`.

    Tests that build environments on threads pass a snapshot taken on the main thread: pytest
    sets and deletes PYTEST_CURRENT_TEST there, and reading os.environ meanwhile can fail.
    """
    source = os.environ if base is None else base
    # A developer's own trackers stay out too: a test that wants one sets it.
    mine = ("TRAIN_", "MLFLOW_", "WANDB_")
    env = {k: v for k, v in source.items() if not k.startswith(mine)}
    env.update({f"TRAIN_{k.upper()}": str(v) for k, v in settings.items()})
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_trainctl(
    *args: str, env: dict[str, str], cwd: Path, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def read_summary(run_dir: Path) -> dict[str, Any]:
    """The run's summary as the app reads it; a test that expects one fails without it."""
    from app.runfolder.folder import read_summary as app_read_summary

    summary = app_read_summary(run_dir)
    assert summary is not None, f"no readable summary.json in {run_dir}"
    return summary


def read_history(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def explain(result: subprocess.CompletedProcess[str]) -> str:
    """Assertion message: the command's own output, trimmed to what fits on a screen."""
    return (
        f"exit {result.returncode}\n--- stdout\n{result.stdout[-4000:]}"
        f"\n--- stderr\n{result.stderr[-6000:]}"
    )


def start_trainctl(*args: str, env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    """`trainctl` in the background, for tests that interrupt it; output goes to cwd/driver.log."""
    log = (cwd / "driver.log").open("a")
    return subprocess.Popen(
        [sys.executable, "-m", "app", *args],
        env=env,
        cwd=cwd,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


NODE_PORTS_BASE = 20000  # below the kernel's ephemeral range (32768-60999 by default)
NODE_PORTS_PER_WORKER = 2000
_node_ports = itertools.count()


def node_port() -> int:
    """A port for one of a test Ray node's own listeners (its metrics exporter, its dashboard
    agent), from a band of this pytest-xdist worker's own.

    A port from `free_port` is free when asked and taken when the node binds it, seconds later.
    With two session clusters starting nodes side by side, the other one's node (or anything
    binding port 0) could take it first: this node then exported no metrics, and a scrape of
    "its" port read the other cluster's (tests/cluster/interrupted_run.py). Ports below the
    ephemeral range, in a band per worker, are taken by no one else.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    base = NODE_PORTS_BASE + NODE_PORTS_PER_WORKER * (int(worker or 0) % 6)
    for _ in range(NODE_PORTS_PER_WORKER):
        port = base + next(_node_ports) % NODE_PORTS_PER_WORKER
        with socket.socket() as sock:
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                continue  # held by an earlier node of this session, or another program
        return port
    raise RuntimeError(f"no free port in {base}-{base + NODE_PORTS_PER_WORKER - 1}")


# The servers the tests start on 127.0.0.1 are reached directly, never through a proxy.
# urllib's module-level opener keeps the proxies of the environment it was first built in, so a
# test that points downloads at a dead proxy (to make them fail) would leave every later
# urlopen in this process refused, the server alive and never asked.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def open_local(url: str | urllib.request.Request, *, timeout: float) -> Any:
    """urlopen for a server on this machine, whatever proxies this process has seen."""
    return _DIRECT.open(url, timeout=timeout)


@contextlib.contextmanager
def background_server(
    command: list[str], *, home: Path, env: Mapping[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """A server the tests start (MLflow, moto): run in `home`, its output in home/server.log,
    in its own session so that teardown ends its children too (SIGTERM, then SIGKILL)."""
    log = (home / "server.log").open("w")
    server = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, cwd=home, env=env, start_new_session=True
    )
    try:
        yield server
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)
        log.close()


def server_log_tail(home: Path) -> str:
    return (home / "server.log").read_text(errors="replace")[-3000:]


def wait_until(predicate: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


def committed(run_dir: Path, pattern: str) -> bool:
    """A checkpoint whose folder name matches `pattern` is committed: in Ray's snapshot, read by
    the app's own reader (app.runfolder.folder.ray_committed)."""
    from app.runfolder.folder import ray_committed

    return any(re.search(pattern, name) for name in ray_committed(run_dir))


def committed_steps(run_dir: Path) -> list[int]:
    """The global steps of the mid-epoch checkpoints Ray has committed."""
    from app.runfolder.checkpoint_names import parse_name
    from app.runfolder.folder import ray_committed

    parsed = (parse_name(name) for name in ray_committed(run_dir))
    return sorted(found[1] for found in parsed if found is not None and found[1] is not None)


def write_ray_snapshot(run_dir: Path, *names: str) -> None:
    """Ray's snapshot of the checkpoints it has committed, in its own format (Ray 2.60)."""
    from app.runfolder.folder import RAY_SNAPSHOT

    results = [{"version": 0, "checkpoint_dir_name": name, "metrics": {}} for name in names]
    snapshot = {"ray_version": "2.60.0", "checkpoint_results": results}
    (run_dir / RAY_SNAPSHOT).write_text(json.dumps(snapshot))


def write_signing_key(folder: Path) -> Path:
    """A fresh Ed25519 private key, as `openssl genpkey -algorithm ed25519` writes it."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    path = folder / "signing.pem"
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )  # fmt: skip
    path.write_bytes(pem)
    return path


# A driver of its own that takes every CPU of the head and holds it until its stdin closes.
_HOLD_HEAD = """
import sys, ray
ray.init(address=sys.argv[1], log_to_driver=False)
cpus = next(n["Resources"]["CPU"] for n in ray.nodes() if n["Alive"]
            and "node:__internal_head__" in n["Resources"])
@ray.remote
class Holder:
    def ready(self):
        return True
holder = Holder.options(num_cpus=cpus, resources={"node:__internal_head__": 0.001}).remote()
ray.get(holder.ready.remote(), timeout=120)
print("held", flush=True)
sys.stdin.read()
"""


@contextlib.contextmanager
def head_without_cpus(cluster: object) -> Iterator[None]:
    """Inside: the cluster's head has no CPU free, as a Kubernetes head has none (num-cpus 0),
    so that work the head must not depend on for CPUs is seen to go elsewhere, and work that
    must run there is seen to need none."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_HEAD, cluster.address],  # type: ignore[attr-defined]
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env=trainctl_env(),
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        yield
    finally:
        holder.kill()
        holder.wait(timeout=60)


def actor_nodes(cluster: object, class_name: str) -> list[str | None]:
    """The node of every actor of `class_name` the cluster has started, alive or not (None:
    never placed). Ray lists a class defined in a function by its name or by its qualified
    name (Tune's trial actors: `ImplicitFunc`, or `wrap_function.<locals>.ImplicitFunc`, from
    one run of the same sweep to the next): either is the class's."""
    from ray.util.state import list_actors

    actors = list_actors(
        address=cluster.address,  # type: ignore[attr-defined]
        limit=10_000,
        detail=True,
        raise_on_missing_output=False,
    )
    return [a.node_id for a in actors if a.class_name.rsplit(".", 1)[-1] == class_name]


def train_workers(cluster: object) -> list[Any]:
    """The training worker actors the cluster's state API lists as alive."""
    from ray.util.state import list_actors

    return list_actors(
        address=cluster.address,  # type: ignore[attr-defined]
        filters=[("class_name", "=", "RayTrainWorker"), ("state", "=", "ALIVE")],
        detail=True,
    )


def placement_group_cleaners(cluster: object) -> int:
    """How many of Ray Train's placement-group cleaner actors the cluster has started, alive or
    not (app/run/job_trainer.py)."""
    from ray.train.v2._internal.execution.controller.placement_group_cleaner import (
        PlacementGroupCleaner,
    )
    from ray.util.state import list_actors

    return len(
        list_actors(
            address=cluster.address,  # type: ignore[attr-defined]
            filters=[("class_name", "=", PlacementGroupCleaner.__name__)],
            limit=10_000,
            raise_on_missing_output=False,
        )
    )


def committed_epochs(run_dir: Path) -> set[int]:
    """Epochs whose checkpoint Ray's controller has registered (written to its snapshot).

    A checkpoint on disk is not yet committed: Ray counts it only once every worker's report is
    collected. Fault tests inject only after this, so they never race the commit.
    """
    from app.runfolder.checkpoint_names import parse_name
    from app.runfolder.folder import ray_committed

    parsed = (parse_name(name) for name in ray_committed(run_dir))
    # End-of-epoch checkpoints only: not the mid-epoch ones (checkpoint_epoch_0001_step_...).
    return {found[0] for found in parsed if found is not None and found[1] is None}


FINISHED_EPOCHS = 6


@dataclass(frozen=True)
class FinishedRun:
    tmp: Path
    env: dict[str, str]
    result: subprocess.CompletedProcess[str]
    cleaners_started: int = 0  # Ray Train's placement-group cleaners the run started

    @property
    def run_dir(self) -> Path:
        return self.tmp / "runs" / "digits-cnn"

    def copy_to(self, dest: Path) -> tuple[dict[str, str], Path]:
        """The run folder copied under `dest/runs`, and the env that continues it there."""
        run_dir = dest / "runs" / self.run_dir.name
        shutil.copytree(self.run_dir, run_dir)
        return {**self.env, "TRAIN_STORAGE_PATH": str(dest / "runs")}, run_dir


def python_on_a_full_disk(
    script: str, max_file_bytes: int, *args: str
) -> subprocess.CompletedProcess[str]:
    """`script` run by this Python where no file may grow past `max_file_bytes`: writes past it
    fail with EFBIG (SIGXFSZ ignored), the operating system refusing them as a full disk does,
    without mounting a file system. The file itself is made first, as on a disk with an inode
    and no block left."""
    limit = (
        "import resource, signal\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({max_file_bytes}, "
        "resource.getrlimit(resource.RLIMIT_FSIZE)[1]))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", limit + script, *args],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip


def trainctl_on_a_full_disk(max_file_bytes: int, *args: str) -> subprocess.CompletedProcess[str]:
    """`trainctl *args` where no file may grow past `max_file_bytes` (python_on_a_full_disk);
    its output comes back through pipes, which the limit does not cover."""
    script = (
        "import sys\nfrom app.cli import main\nsys.argv = ['trainctl', *sys.argv[1:]]\nmain()\n"
    )
    return python_on_a_full_disk(script, max_file_bytes, *args)
