"""The committed manifests are exactly what `trainctl render` makes of the example values."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from app.k8s.manifests_out import write_manifests
from app.k8s.render import load_values
from tests.contract.k8s_support import EXAMPLES, REPO

MANIFESTS = REPO / "manifests"
# Keep in step with the Makefile's `manifests` target: folder -> (values file, its pools).
RENDERED = {
    MANIFESTS: (EXAMPLES / "values-three-pools.yaml", ["a100", "l4", "t4"]),
    EXAMPLES / "data-pool-manifests": (EXAMPLES / "values-data-pool.yaml", ["l4"]),
}
RELEASE, NAMESPACE = "train", "ml"


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("folder", RENDERED, ids=lambda p: str(p.relative_to(REPO)))
def test_committed_manifests_are_current(folder: Path, tmp_path: Path) -> None:
    source, _ = RENDERED[folder]
    write_manifests(load_values([source]), tmp_path, release=RELEASE, namespace=NAMESPACE)
    fresh, committed = _tree(tmp_path), _tree(folder)
    stale = sorted(set(committed) - set(fresh))
    missing = sorted(set(fresh) - set(committed))
    changed = sorted(name for name in fresh if name in committed and fresh[name] != committed[name])
    assert (stale, missing, changed) == ([], [], []), f"{folder} drifted: run `make manifests`"


@pytest.mark.parametrize("folder", RENDERED, ids=lambda p: str(p.relative_to(REPO)))
def test_each_pool_folder_is_a_complete_kustomization(folder: Path) -> None:
    pools = sorted(p.name for p in folder.iterdir() if p.is_dir())
    assert pools == RENDERED[folder][1]
    for pool in pools:
        folder_of_pool = folder / pool
        kustomization = yaml.safe_load((folder_of_pool / "kustomization.yaml").read_text())
        files = [p.name for p in folder_of_pool.glob("*.yaml") if p.name != "kustomization.yaml"]
        assert sorted(kustomization["resources"]) == sorted(files)
        kinds = {yaml.safe_load((folder_of_pool / f).read_text())["kind"] for f in files}
        assert "RayJob" in kinds
        assert "Secret" not in kinds  # no token in Git: the example uses rayAuth.existingSecret


def test_rerendering_keeps_the_token_already_written(tmp_path: Path) -> None:
    values = load_values([EXAMPLES / "values-cpu.yaml"])  # the chart creates the Secret here
    write_manifests(values, tmp_path, release="demo", namespace="ml", with_secret=True)
    first = (tmp_path / "pool-a" / "secret.yaml").read_text()
    write_manifests(values, tmp_path, release="demo", namespace="ml", with_secret=True)
    assert (tmp_path / "pool-a" / "secret.yaml").read_text() == first
    other = tmp_path / "other"
    write_manifests(values, other, release="demo", namespace="ml", with_secret=True)
    assert (other / "pool-a" / "secret.yaml").read_text() != first  # a new folder: new token
