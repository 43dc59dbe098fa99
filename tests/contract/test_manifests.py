"""The committed manifests/ are exactly what `trainctl render` makes of the example values."""

from __future__ import annotations

from pathlib import Path

import yaml

from app.k8s.render import load_values, write_manifests
from tests.contract.k8s_support import EXAMPLES, REPO

MANIFESTS = REPO / "manifests"
# Keep in step with the Makefile's `manifests` target.
SOURCE = EXAMPLES / "values-three-pools.yaml"
RELEASE, NAMESPACE = "train", "ml"


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def test_committed_manifests_are_current(tmp_path: Path) -> None:
    write_manifests(load_values([SOURCE]), tmp_path, release=RELEASE, namespace=NAMESPACE)
    fresh, committed = _tree(tmp_path), _tree(MANIFESTS)
    stale = sorted(set(committed) - set(fresh))
    missing = sorted(set(fresh) - set(committed))
    changed = sorted(name for name in fresh if name in committed and fresh[name] != committed[name])
    assert (stale, missing, changed) == ([], [], []), "manifests/ drifted: run `make manifests`"


def test_each_pool_folder_is_a_complete_kustomization() -> None:
    pools = sorted(p.name for p in MANIFESTS.iterdir() if p.is_dir())
    assert pools == ["a100", "l4", "t4"]
    for pool in pools:
        folder = MANIFESTS / pool
        kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
        files = sorted(p.name for p in folder.glob("*.yaml") if p.name != "kustomization.yaml")
        assert sorted(kustomization["resources"]) == files
        kinds = {yaml.safe_load((folder / f).read_text())["kind"] for f in files}
        assert "RayJob" in kinds
        assert "Secret" not in kinds  # no token in Git: the example uses rayAuth.existingSecret


def test_rerendering_keeps_the_token_already_written(tmp_path: Path) -> None:
    values = load_values([EXAMPLES / "values-cpu.yaml"])  # the chart creates the Secret here
    write_manifests(values, tmp_path, release="demo", namespace="ml")
    first = (tmp_path / "pool-a" / "secret.yaml").read_text()
    write_manifests(values, tmp_path, release="demo", namespace="ml")
    assert (tmp_path / "pool-a" / "secret.yaml").read_text() == first
    other = tmp_path / "other"
    write_manifests(values, other, release="demo", namespace="ml")
    assert (other / "pool-a" / "secret.yaml").read_text() != first  # a new folder: new token
