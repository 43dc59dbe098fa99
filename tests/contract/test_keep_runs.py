"""What stays of a run when its config changes or the release goes, in both engines.

Every run's RayJob, ConfigMap and NetworkPolicy carry `helm.sh/resource-policy: keep`: `helm
upgrade` to a changed config leaves the previous run as it was (a run in flight finishes with
its settings and network policy; a finished one's RayJob stays as its record), and `helm
uninstall` leaves them for `kubectl delete rayjobs,configmaps,networkpolicies -l
app.kubernetes.io/instance=<release>`. GitOps tools prune by default; `runAnnotations` opts
out without renaming anything (docs/gitops.md says why that is not the default).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from app.k8s.render import load_values, render_objects, render_schedule_objects
from tests.contract.k8s_support import (
    EXAMPLES,
    KEPT_BY_GITOPS,
    REPO,
    VALUES_FILES,
    helm_render,
    load_yaml,
    of_kind,
)
from tests.kind.helm_driver import helm_deletes

KEEP = ("helm.sh/resource-policy", "keep")
RUN_KINDS = ("RayJob", "ConfigMap", "NetworkPolicy")
SHARED = ("Secret", "ServiceAccount")  # the chart's, when it creates them


def shared_by_runs(obj: dict[str, Any]) -> bool:
    """The auth Secret and ServiceAccount every run's pods start with (not the schedule's)."""
    component = obj["metadata"]["labels"].get("app.kubernetes.io/component")
    return obj["kind"] in SHARED and component in ("ray", "ray-auth")


GITOPS_PREFIXES = ("argocd.argoproj.io/", "kustomize.toolkit.fluxcd.io/")
THREE_POOLS = load_yaml(EXAMPLES / "values-three-pools.yaml")


def python_render(values: dict[str, Any], tmp_path: Path) -> list[dict[str, Any]]:
    """`trainctl render`'s objects for user values, through the same schema check."""
    path = tmp_path / "values.yaml"
    path.write_text(json.dumps(values))  # JSON: the dict's exact meaning in any YAML reader
    loaded = load_values([path])
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for objects in render_objects(loaded, release="train", namespace="ml").values():
        seen.update({(o["kind"], o["metadata"]["name"]): o for o in objects})
    schedule = render_schedule_objects(loaded, release="train", namespace="ml")
    return list(seen.values()) + schedule


def both_engines(values: dict[str, Any], tmp_path: Path) -> dict[str, list[dict[str, Any]]]:
    return {
        "helm": helm_render(values, release="train", namespace="ml"),
        "trainctl render": python_render(values, tmp_path),
    }


def run_names(objects: list[dict[str, Any]]) -> set[str]:
    return {job["metadata"]["name"] for job in of_kind(objects, "RayJob")}


def annotations(obj: dict[str, Any]) -> dict[str, str]:
    return obj["metadata"].get("annotations") or {}


def is_kept(obj: dict[str, Any]) -> bool:
    return annotations(obj).get(KEEP[0]) == KEEP[1]


@pytest.mark.parametrize("path", VALUES_FILES, ids=lambda p: p.stem)
def test_each_run_object_is_kept_and_nothing_else_is(path: Path, tmp_path: Path) -> None:
    values = load_yaml(path)
    for engine, objects in both_engines(values, tmp_path).items():
        runs = run_names(objects)
        assert runs, f"{engine}: {path.name} renders no RayJob"
        kept = {(o["kind"], o["metadata"]["name"]) for o in objects if is_kept(o)}
        kinds = RUN_KINDS
        if (values.get("scheduler") or {}).get("name") == "scheduler-plugins":
            kinds += ("PodGroup",)  # a recreated pod of the run needs its gang
        expected = {(kind, name) for name in runs for kind in kinds}
        if not (values.get("networkPolicy") or {}).get("enabled", True):
            expected = {(kind, name) for kind, name in expected if kind != "NetworkPolicy"}
        if (values.get("storage") or {}).get("keepOnUninstall", True):
            claims = of_kind(objects, "PersistentVolumeClaim")
            expected |= {("PersistentVolumeClaim", c["metadata"]["name"]) for c in claims}
        # What every run's pods start with stays while a run restarts its pods.
        expected |= {(o["kind"], o["metadata"]["name"]) for o in objects if shared_by_runs(o)}
        assert kept == expected, f"{engine}: {path.name}"


def test_gitops_prunes_old_runs_unless_run_annotations_say_otherwise(tmp_path: Path) -> None:
    for engine, objects in both_engines(THREE_POOLS, tmp_path).items():
        for obj in objects:
            if obj["kind"] in ("PersistentVolumeClaim", "ServiceAccount", "Secret"):
                continue  # shared by every pool folder, not a run (test_render_parity.py)
            gitops = [k for k in annotations(obj) if k.startswith(GITOPS_PREFIXES)]
            assert not gitops, f"{engine}: {obj['kind']}/{obj['metadata']['name']}: {gitops}"
    before = run_names(helm_render(THREE_POOLS, release="train", namespace="ml"))

    opted = copy.deepcopy(THREE_POOLS)
    opted["runAnnotations"] = {
        "argocd.argoproj.io/sync-options": "Prune=false",
        "argocd.argoproj.io/compare-options": "IgnoreExtraneous",
        "kustomize.toolkit.fluxcd.io/prune": "disabled",
    }
    for engine, objects in both_engines(opted, tmp_path).items():
        # Metadata is outside the content hash: opting in renames nothing, so reruns nothing.
        assert run_names(objects) == before, engine
        for obj in objects:
            wanted = obj["kind"] in RUN_KINDS and obj["metadata"]["name"] in before
            present = opted["runAnnotations"].items() <= annotations(obj).items()
            assert present == wanted, f"{engine}: {obj['kind']}/{obj['metadata']['name']}"
            if wanted:
                assert is_kept(obj)

    replaced = copy.deepcopy(THREE_POOLS)
    replaced["runAnnotations"] = {KEEP[0]: ""}  # a key set there wins over the chart's
    for engine, objects in both_engines(replaced, tmp_path).items():
        for job in of_kind(objects, "RayJob"):
            assert annotations(job)[KEEP[0]] == "", engine


def test_helm_upgrade_with_a_changed_value_deletes_nothing_of_the_old_run() -> None:
    old = helm_render(THREE_POOLS, release="train", namespace="ml")
    changed = copy.deepcopy(THREE_POOLS)
    changed["nodePools"]["l4"]["train"] = {"epochs": 31}
    new = helm_render(changed, release="train", namespace="ml")
    (old_l4,) = run_names(old) - run_names(new)  # the l4 run got a new name...
    assert helm_deletes(old, new) == []  # ...and its RayJob, ConfigMap, policy all stay
    left = {(o["kind"], o["metadata"]["name"]) for o in old} - {
        (o["kind"], o["metadata"]["name"]) for o in new
    }
    assert left == {(kind, old_l4) for kind in RUN_KINDS}


def test_helm_uninstall_deletes_the_release_but_leaves_every_run() -> None:
    """A run still going keeps going, and a pod it restarts (a spot reclaim, a retry) still
    starts: Helm deleted the auth Secret and the ServiceAccount its pods start with (a red-team
    pass), while the docs said runs went on. Only the schedule goes."""
    old = helm_render(load_yaml(EXAMPLES / "values-nightly-sweep.yaml"), release="train")
    assert {"Secret", "ServiceAccount", "CronJob"} <= {o["kind"] for o in old}
    deleted = set(helm_deletes(old, []))
    runs = {(kind, name) for name in run_names(old) for kind in RUN_KINDS}
    assert runs and not runs & deleted, deleted
    assert "PersistentVolumeClaim" not in {kind for kind, _ in deleted}
    assert not {(o["kind"], o["metadata"]["name"]) for o in old if shared_by_runs(o)} & deleted
    assert "CronJob" in {kind for kind, _ in deleted}


CLEANUP = "delete rayjobs,configmaps,networkpolicies -l app.kubernetes.io/instance="
SHARED_CLEANUP = "delete secrets,serviceaccounts -l app.kubernetes.io/instance="


def test_the_documented_cleanup_selects_exactly_the_kept_runs() -> None:
    """The one command NOTES.txt and the docs give removes every kept run and nothing else."""
    kinds = {"rayjobs": "RayJob", "configmaps": "ConfigMap", "networkpolicies": "NetworkPolicy"}
    assert set(CLEANUP.split()[1].split(",")) == set(kinds) and set(kinds.values()) == {*RUN_KINDS}
    objects = helm_render(THREE_POOLS, release="train", namespace="ml")
    selected = {
        (o["kind"], o["metadata"]["name"])
        for o in objects
        if o["kind"] in RUN_KINDS
        and o["metadata"]["labels"]["app.kubernetes.io/instance"] == "train"
    }
    kept_runs = {
        (o["kind"], o["metadata"]["name"])
        for o in objects
        if is_kept(o) and o["kind"] != "PersistentVolumeClaim" and not shared_by_runs(o)
    }
    assert selected == kept_runs
    for doc in ("charts/trainctl/templates/NOTES.txt", "docs/kubernetes.md", "docs/gitops.md"):
        assert CLEANUP in (REPO / doc).read_text(), f"{doc} does not give the cleanup command"
    # After `helm uninstall`, the shared objects it keeps go with one more line.
    shared = [o for o in objects if shared_by_runs(o)]
    assert shared and all(
        o["metadata"]["labels"]["app.kubernetes.io/instance"] == "train" for o in shared
    )
    assert SHARED_CLEANUP in (REPO / "docs/kubernetes.md").read_text()


def test_gitops_never_prunes_or_deletes_the_claim(tmp_path: Path) -> None:
    """Every pool folder of `render --out` holds the claim; retiring one pool's folder (or its
    Argo CD Application, or a Flux Kustomization with prune: true) deleted the volume the other
    pools train on, since neither tool reads Helm's keep (found by a red-team pass). So did it
    with storage.keepOnUninstall=false, which is about `helm uninstall` (found by another)."""
    kept = {"helm.sh/resource-policy": "keep", **KEPT_BY_GITOPS}
    released = copy.deepcopy(THREE_POOLS)
    released.setdefault("storage", {})["keepOnUninstall"] = False
    for engine, objects in both_engines(THREE_POOLS, tmp_path).items():
        (claim,) = of_kind(objects, "PersistentVolumeClaim")
        assert annotations(claim) == kept, engine
    for engine, objects in both_engines(released, tmp_path).items():
        (claim,) = of_kind(objects, "PersistentVolumeClaim")
        assert annotations(claim) == KEPT_BY_GITOPS, engine
    for pool in ("a100", "l4", "t4"):
        claim = load_yaml(REPO / "manifests" / pool / "persistentvolumeclaim.yaml")
        assert claim["kind"] == "PersistentVolumeClaim" and annotations(claim) == kept, pool
