"""End to end on a real Kubernetes (kind): the chart, the KubeRay operator and the app image.

The tests run in file order and build on each other, as one release's life does: install and
train both pools; `trainctl submit` attaches to what Helm made; an upgrade changing one pool's
training value starts exactly one new run (a worker pod is killed during it); a tagged submit
runs and waits on its own; uninstall leaves every run (never a Ray cluster) for the documented
`kubectl delete ... -l app.kubernetes.io/instance=<release>`, and keeps the claim.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.k8s.status import JobView, judge, progress_line
from app.runfolder import folder as run_folder
from tests.kind import kindenv
from tests.kind.kindenv import CHART, NAMESPACE, RELEASE, VALUES, kubectl, kubectl_json, trainctl

pytestmark = [pytest.mark.kind, pytest.mark.slow, pytest.mark.timeout(3600)]

MOUNT_PATH = "/mnt/trainctl"  # storage.mountPath (the chart's default)
RUNS = "runs"  # storage.runsSubPath (the chart's default)


def rayjobs() -> dict[str, dict[str, Any]]:
    """This release's RayJobs by pool (the newest per pool when several exist)."""
    items = kubectl_json(
        "get", "rayjobs", "-n", NAMESPACE, "-l", f"app.kubernetes.io/instance={RELEASE}"
    )["items"]
    by_pool: dict[str, dict[str, Any]] = {}
    for item in sorted(items, key=lambda i: i["metadata"]["creationTimestamp"]):
        by_pool[item["metadata"]["labels"]["trainctl.io/pool"]] = item
    return by_pool


def wait_terminal(name: str, timeout_s: float = 1800) -> dict[str, Any]:
    """Poll until KubeRay calls the RayJob finished; the same judgement `submit --wait` makes."""
    deadline = time.monotonic() + timeout_s
    while True:
        obj = kubectl_json("get", "rayjob", name, "-n", NAMESPACE)
        view = JobView.of(obj)
        if judge(view).terminal:
            return obj
        if time.monotonic() > deadline:
            raise AssertionError(f"RayJob {name} not finished after {timeout_s}s: {view}")
        print(progress_line(view, timeout_s - (deadline - time.monotonic())))
        time.sleep(5)


def assert_succeeded(obj: dict[str, Any]) -> None:
    status = obj.get("status", {})
    assert (status.get("jobDeploymentStatus"), status.get("jobStatus")) == (
        "Complete",
        "SUCCEEDED",
    ), judge(JobView.of(obj)).problems


def on_host(shared: Path, pod_path: str) -> Path:
    """A path inside the pods' volume mount, as seen through the host folder behind the PV."""
    return shared / Path(pod_path).relative_to(MOUNT_PATH)


def run_summary(shared: Path, name: str) -> dict[str, Any]:
    path = shared / RUNS / name / "summary.json"
    assert path.is_file(), f"no summary.json at {path}"
    return yaml.safe_load(path.read_text())


def helm_upgrade(*extra_values: dict[str, Any], tmp: Path) -> None:
    files = [VALUES]
    for index, values in enumerate(extra_values):
        files.append(tmp / f"override-{index}.yaml")
        files[-1].write_text(yaml.safe_dump(values))
    kindenv.helm().upgrade_install(RELEASE, CHART, NAMESPACE, files)


@pytest.fixture(scope="module")
def installed(kind_env: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`helm install` of both pools, each RayJob waited for until it is finished."""
    helm_upgrade(tmp=tmp_path_factory.mktemp("values"))
    jobs = rayjobs()
    assert sorted(jobs) == ["pool-a", "pool-b"]
    return {pool: wait_terminal(obj["metadata"]["name"]) for pool, obj in jobs.items()}


def test_install_trains_both_pools_to_success(installed: dict[str, Any], kind_env: Path) -> None:
    for obj in installed.values():
        assert_succeeded(obj)
        name = obj["metadata"]["name"]
        summary = run_summary(kind_env, name)
        assert summary["status"] == "succeeded" and summary["epochs_completed"] == 2
        checkpoint = on_host(kind_env, summary["checkpoint"])
        assert (checkpoint / "model.pt").is_file(), f"no model.pt in {checkpoint}"


def test_submit_attaches_to_the_run_helm_created(installed: dict[str, Any], kind_env: Path) -> None:
    name = installed["pool-b"]["metadata"]["name"]
    before = kubectl("get", "rayjobs", "-n", NAMESPACE, "-o", "name").split()
    proc = trainctl(
        "submit", "--values", str(VALUES), "--pool", "pool-b", "--release", RELEASE,
        "--namespace", NAMESPACE, "--wait", "--storage-mount", str(kind_env),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"rayjob/{name} exists: attaching" in proc.stdout
    assert f"run {name} succeeded: 2/2 epochs" in proc.stdout
    assert kubectl("get", "rayjobs", "-n", NAMESPACE, "-o", "name").split() == before


@pytest.fixture(scope="module")
def upgraded(
    installed: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, Any]]:
    """`helm upgrade` changing one training value of pool-a (a longer run: 30 epochs)."""
    helm_upgrade(
        {"nodePools": {"pool-a": {"train": {"epochs": 30}}}}, tmp=tmp_path_factory.mktemp("v")
    )
    return {"old": installed, "new": rayjobs()}


def test_upgrade_renames_only_the_changed_pool_and_keeps_the_old_run(
    upgraded: dict[str, dict[str, Any]],
) -> None:
    old, new = upgraded["old"], upgraded["new"]
    assert new["pool-a"]["metadata"]["name"] != old["pool-a"]["metadata"]["name"]
    # pool-b's values did not change: same name, same object, no rerun.
    assert new["pool-b"]["metadata"]["uid"] == old["pool-b"]["metadata"]["uid"]
    old_name = old["pool-a"]["metadata"]["name"]
    found = kubectl("get", "rayjob", old_name, "-n", NAMESPACE, "--ignore-not-found", "-o", "json")
    assert found.strip(), (
        f"helm upgrade deleted the previous run's RayJob {old_name}: the chart must keep "
        "RayJobs that leave the manifest (helm.sh/resource-policy: keep)"
    )
    kept = yaml.safe_load(found)
    assert kept["metadata"]["uid"] == old["pool-a"]["metadata"]["uid"]
    assert kept["metadata"]["generation"] == old["pool-a"]["metadata"]["generation"]
    assert kept["spec"] == old["pool-a"]["spec"]
    assert_succeeded(kept)
    # Its settings and network policy stay with it (a run still going would need them).
    for kind in ("configmap", "networkpolicy"):
        left = kubectl("get", kind, old_name, "-n", NAMESPACE, "--ignore-not-found", "-o", "name")
        assert left.strip(), f"helm upgrade deleted the previous run's {kind} {old_name}"


def _node_labels() -> dict[str, dict[str, str]]:
    nodes = kubectl_json("get", "nodes")["items"]
    return {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in nodes}


def test_worker_pod_deleted_mid_run_is_recovered(
    upgraded: dict[str, dict[str, Any]], kind_env: Path
) -> None:
    name = upgraded["new"]["pool-a"]["metadata"]["name"]
    run_dir = kind_env / RUNS / name
    deadline = time.monotonic() + 1200
    while len(run_folder.epochs(run_dir)) < 2:  # training is under way, with checkpoints
        assert time.monotonic() < deadline, f"no 2 epochs in {run_dir} after 20 min"
        assert not judge(JobView.of(kubectl_json("get", "rayjob", name, "-n", NAMESPACE))).terminal
        time.sleep(2)

    cluster = kubectl_json("get", "rayjob", name, "-n", NAMESPACE)["status"]["rayClusterName"]
    pods = kubectl_json("get", "pods", "-n", NAMESPACE, "-l", f"ray.io/cluster={cluster}")["items"]
    labels = _node_labels()
    placement = {
        p["metadata"]["name"]: (p["metadata"]["labels"]["ray.io/node-type"], p["spec"]["nodeName"])
        for p in pods
    }
    for role, node in placement.values():
        expected = (
            ("trainctl.io/node-role", "cpu") if role == "head" else ("trainctl.io/fake-pool", "a")
        )
        assert labels[node].get(expected[0]) == expected[1], placement

    victim = next(pod for pod, (role, _) in placement.items() if role == "worker")
    kubectl("delete", "pod", victim, "-n", NAMESPACE, "--wait=false")

    final = wait_terminal(name)
    assert_succeeded(final)
    summary = run_summary(kind_env, name)
    assert summary["epochs_completed"] == 30
    assert summary["failures"] >= 1, summary


def test_submit_wait_runs_a_tagged_run_to_success(
    installed: dict[str, Any], kind_env: Path
) -> None:
    proc = trainctl(
        "submit", "--values", str(VALUES), "--pool", "pool-b", "--release", RELEASE,
        "--namespace", NAMESPACE, "--run-tag", "kind-suite", "--wait", "--timeout", "1800",
        "--storage-mount", str(kind_env),
    )  # fmt: skip
    created = [line.split()[0] for line in proc.stdout.splitlines() if " created " in line]
    name = next((c.split("/", 1)[1] for c in created if c.startswith("rayjob/")), None)
    assert name, f"no RayJob created:\n{proc.stdout}{proc.stderr}"
    try:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert name != installed["pool-b"]["metadata"]["name"]
        assert "Running / job RUNNING" in proc.stdout
        assert "epoch 2/2" in proc.stdout
        assert f"RayJob {name} succeeded" in proc.stdout
        assert run_summary(kind_env, name)["status"] == "succeeded"
    finally:
        # Not part of the Helm release: remove it so the uninstall check below is about Helm.
        for kind in ("rayjob", "configmap", "networkpolicy"):
            kubectl("delete", kind, name, "-n", NAMESPACE, "--ignore-not-found")


def names_of(kinds: str) -> set[str]:
    """`kind/name` of this release's objects of these kinds (comma-separated, as kubectl)."""
    selector = f"app.kubernetes.io/instance={RELEASE}"
    out = kubectl("get", kinds, "-n", NAMESPACE, "-l", selector, "-o", "name")
    found = set()
    for line in out.split():  # rayjob.ray.io/NAME, configmap/NAME, ...
        kind, name = line.split("/", 1)
        found.add(f"{kind.split('.', 1)[0]}/{name}")
    return found


def test_uninstall_keeps_the_runs_until_the_documented_cleanup_and_keeps_the_claim(
    upgraded: dict[str, dict[str, Any]],
) -> None:
    runs = {
        upgraded["old"]["pool-a"]["metadata"]["name"],
        upgraded["new"]["pool-a"]["metadata"]["name"],
        upgraded["new"]["pool-b"]["metadata"]["name"],
    }
    kindenv.helm().uninstall(RELEASE, NAMESPACE)

    # No Ray cluster outlives its job: shutdownAfterJobFinishes deletes each one after the TTL
    # (120 s in values-kind.yaml), kept RayJob or not, so nothing holds the pools' nodes.
    deadline = time.monotonic() + 300
    while left := kubectl("get", "rayclusters", "-n", NAMESPACE, "-o", "name").split():
        assert time.monotonic() < deadline, f"Ray clusters still there 5 min later: {left}"
        time.sleep(5)
    # Every run Helm made stays (helm.sh/resource-policy: keep), with its ConfigMap and policy;
    # what only the release needed is gone.
    kept = {f"{kind}/{name}" for kind in ("rayjob", "configmap", "networkpolicy") for name in runs}
    assert names_of("rayjobs,configmaps,networkpolicies") == kept
    for kind, name in (("secret", f"{RELEASE}-ray-auth"), ("serviceaccount", f"{RELEASE}-ray")):
        gone = kubectl("get", kind, name, "-n", NAMESPACE, "--ignore-not-found", "-o", "name")
        assert not gone.strip(), f"helm uninstall left {kind}/{name}"

    # The cleanup NOTES.txt and docs/kubernetes.md give removes them all.
    kubectl(
        "delete", "rayjobs,configmaps,networkpolicies", "-n", NAMESPACE,
        "-l", f"app.kubernetes.io/instance={RELEASE}", "--wait=true",
    )  # fmt: skip
    assert names_of("rayjobs,configmaps,networkpolicies") == set()
    assert not kubectl("get", "rayjobs,rayclusters", "-n", NAMESPACE, "-o", "name").split()

    claim = kubectl_json("get", "pvc", f"{RELEASE}-shared", "-n", NAMESPACE)
    assert claim["status"]["phase"] == "Bound"
