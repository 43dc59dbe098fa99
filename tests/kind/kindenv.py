"""The kind environment of the integration suite: tools, cluster, operator, image, volume.

Used by the pytest fixtures (tests/kind/conftest.py) and by make:
    python -m tests.kind.kindenv up        # make kind-up: everything, idempotently
    python -m tests.kind.kindenv down      # make kind-down
    python -m tests.kind.kindenv diagnose  # operator, RayJob and pod logs, for CI artifacts
Every step is idempotent, so `make kind-test` after `make kind-up` reuses what exists.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tests.kind.helm_driver import HelmCli, HelmSdk

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CLUSTER = os.environ.get("KIND_CLUSTER_NAME", "trainctl")
KIND_CONFIG = HERE / "kind-config.yaml"
SHARED_PV = HERE / "shared-pv.yaml"
VALUES = HERE / "values-kind.yaml"
CHART = REPO / "charts" / "trainctl"
NAMESPACE = "trainctl-e2e"
RELEASE = "e2e"
IMAGE = "trainctl:kind-e2e"  # must match image.repository:tag in values-kind.yaml
# The CPU Ray image keeps the image small enough to `kind load` into every node; the GPU base of
# docker/Dockerfile is many gigabytes and brings nothing to CPU-only pods. The CPU torch index
# gives the matching torch+cpu/torchvision+cpu pair (see the Dockerfile's comment), and
# tests/contract/test_docker.py keeps these arguments declared there and on the pinned Ray.
BUILD_ARGS = {
    "BASE_IMAGE": "rayproject/ray:2.60.0-py311",
    "TORCH_INDEX_URL": "https://download.pytorch.org/whl/cpu",
}
KUBERAY_REPO = "https://ray-project.github.io/kuberay-helm/"
KUBERAY_CHART = "kuberay-operator"
KUBERAY_VERSION = "1.7.0"
KUBERAY_NAMESPACE = "kuberay-system"
STATE_DIR = Path(tempfile.gettempdir()) / f"trainctl-kind-{CLUSTER}"
KUBECONFIG = STATE_DIR / "kubeconfig"
ARTIFACTS = Path(os.environ.get("KIND_ARTIFACTS_DIR", STATE_DIR / "artifacts"))


def shared_host_dir() -> Path:
    """The host folder every kind node mounts at /shared (read from the committed config)."""
    config = yaml.safe_load(KIND_CONFIG.read_text())
    mounts = {m["hostPath"] for node in config["nodes"] for m in node.get("extraMounts", [])}
    if len(mounts) != 1:
        raise SystemExit(f"{KIND_CONFIG}: every node must mount the same hostPath, got {mounts}")
    return Path(mounts.pop())


# --- what is missing ---------------------------------------------------------------------------
def missing_tools() -> list[str]:
    """Everything the suite needs that this machine lacks, each named exactly."""
    missing = [
        f"`{tool}` is not on PATH"
        for tool in ("docker", "kind", "kubectl")
        if not shutil.which(tool)
    ]
    if not shutil.which("helm"):
        try:
            import helm_python  # noqa: F401
        except ImportError:
            missing.append("neither the `helm` binary nor the helm-python-sdk is available")
    if shutil.which("docker"):
        try:
            proc = subprocess.run(
                ["docker", "info", "--format", "{{.ServerVersion}}"],
                capture_output=True, text=True, timeout=30, check=False,
            )  # fmt: skip
            if proc.returncode != 0:
                first = (proc.stderr.strip().splitlines() or ["no output"])[0]
                missing.append(f"the Docker daemon did not answer `docker info` ({first})")
        except subprocess.TimeoutExpired:
            missing.append("the Docker daemon did not answer `docker info` within 30 s")
    return missing


# --- commands ----------------------------------------------------------------------------------
def env() -> dict[str, str]:
    return {**os.environ, "KUBECONFIG": str(KUBECONFIG)}


def run(*args: str, input: str | None = None, check: bool = True) -> str:
    proc = subprocess.run(
        list(args), input=input, capture_output=True, text=True, env=env(), check=False
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc.stdout


def kubectl(*args: str, input: str | None = None, check: bool = True) -> str:
    return run("kubectl", *args, input=input, check=check)


def kubectl_json(*args: str) -> Any:
    return json.loads(kubectl(*args, "-o", "json"))


def helm() -> HelmCli | HelmSdk:
    return HelmCli(env()) if shutil.which("helm") else HelmSdk(kubectl, STATE_DIR / "helm")


def trainctl(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it, against the kind cluster."""
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        capture_output=True, text=True, env=env(), cwd=REPO, check=False,
    )  # fmt: skip


# --- up / down ---------------------------------------------------------------------------------
def cluster_exists() -> bool:
    return CLUSTER in run("kind", "get", "clusters").split()


def up() -> None:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    shared = shared_host_dir()
    if not cluster_exists():
        shared.mkdir(parents=True, exist_ok=True)
        # The Ray pods run as UID 1000; hostPath ignores fsGroup, so the folder itself is open.
        shared.chmod(0o777)
        subprocess.run(
            # A kubeconfig of its own: the user's ~/.kube/config and current context stay as is.
            ["kind", "create", "cluster", "--name", CLUSTER, "--config", str(KIND_CONFIG),
             "--kubeconfig", str(KUBECONFIG), "--wait", "180s"],
            check=True,
        )  # fmt: skip
    KUBECONFIG.write_text(run("kind", "get", "kubeconfig", "--name", CLUSTER))
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    kubectl("apply", "-f", "-", input=yaml.safe_dump(namespace))
    kubectl("apply", "-f", str(SHARED_PV))
    helm().install_remote(
        KUBERAY_CHART, KUBERAY_CHART, KUBERAY_REPO, KUBERAY_VERSION, KUBERAY_NAMESPACE
    )
    build_args = [arg for k, v in BUILD_ARGS.items() for arg in ("--build-arg", f"{k}={v}")]
    subprocess.run(
        ["docker", "build", "-f", "docker/Dockerfile", "-t", IMAGE, *build_args, "."],
        cwd=REPO, check=True,
    )  # fmt: skip
    workers = [n for n in run("kind", "get", "nodes", "--name", CLUSTER).split() if "worker" in n]
    subprocess.run(
        ["kind", "load", "docker-image", IMAGE, "--name", CLUSTER, "--nodes", ",".join(workers)],
        check=True,
    )  # fmt: skip


def down() -> None:
    shared = shared_host_dir()
    if cluster_exists():
        # The run folders belong to UID 1000 inside the nodes; remove them as the node's root.
        subprocess.run(
            ["docker", "exec", f"{CLUSTER}-control-plane", "sh", "-c",
             "rm -rf /shared/* /shared/.[!.]*"],
            check=False,
        )  # fmt: skip
        own = ["--kubeconfig", str(KUBECONFIG)] if KUBECONFIG.exists() else []
        subprocess.run(["kind", "delete", "cluster", "--name", CLUSTER, *own], check=True)
    shutil.rmtree(shared, ignore_errors=True)
    shutil.rmtree(STATE_DIR, ignore_errors=True)


def diagnose(label: str = "diagnose") -> Path:
    """Operator, RayJob, pod and Ray head/submitter logs, into one file; its path is returned."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    out = ARTIFACTS / f"{label}.txt"
    commands = [
        ("get", "rayjobs,rayclusters,pods,pvc,pv", "-A", "-o", "wide"),
        ("get", "rayjobs", "-n", NAMESPACE, "-o", "yaml"),
        ("describe", "pods", "-n", NAMESPACE),
        ("get", "events", "-n", NAMESPACE, "--sort-by=.lastTimestamp"),
        ("logs", "-n", KUBERAY_NAMESPACE, f"deployment/{KUBERAY_CHART}", "--tail=500"),
        ("logs", "-n", NAMESPACE, "-l", "ray.io/node-type=head", "--all-containers",
         "--prefix", "--tail=300"),
        ("logs", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=ray-submitter",
         "--prefix", "--tail=300"),
    ]  # fmt: skip
    with out.open("w") as handle:
        for command in commands:
            handle.write(f"\n===== kubectl {' '.join(command)} =====\n")
            proc = subprocess.run(
                ["kubectl", *command], capture_output=True, text=True, env=env(), check=False
            )
            handle.write(proc.stdout + proc.stderr)
    return out


if __name__ == "__main__":
    actions = {"up": up, "down": down, "diagnose": lambda: print(diagnose().read_text())}
    if len(sys.argv) != 2 or sys.argv[1] not in actions:
        raise SystemExit(f"usage: python -m tests.kind.kindenv {{{'|'.join(actions)}}}")
    if sys.argv[1] != "down" and (problems := missing_tools()):
        raise SystemExit("the kind suite cannot run here: " + "; ".join(problems))
    actions[sys.argv[1]]()
