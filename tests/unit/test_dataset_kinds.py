"""The dataset kinds' registry: every TRAIN_DATASET value has its kind and nothing else asks
which one a run has; where each kind's data is; `check` on a built-in dataset not written yet."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import pytest

from app.data.kind import DatasetKind
from app.data.kinds import KINDS, dataset_kind, prepare_dataset
from app.data.prepare import BuiltIn
from app.errors import ConfigError
from app.settings.data import NAMED_DATASETS, DatasetName
from app.storage.buckets import ObjectPath
from tests.hostile.support import trainctl

APP = Path(__file__).resolve().parents[2] / "app"
REGISTRY = APP / "data" / "kinds" / "__init__.py"


def test_the_registry_has_a_kind_for_every_setting_value_and_no_other() -> None:
    # Settings hold the names (the docs and the chart schema are generated from them alone);
    # the registry must cover them exactly, built-in ones as kinds trainctl writes.
    # As sets: a new kind's line may go anywhere in KINDS.
    assert set(KINDS) == set(get_args(DatasetName))
    assert {n for n, k in KINDS.items() if isinstance(k, BuiltIn)} == set(NAMED_DATASETS)
    for name, kind in KINDS.items():
        assert isinstance(kind, DatasetKind) and kind.name == name
        assert kind.augment in ("crop", "crop_flip")


@pytest.mark.parametrize(
    "data_path", [Path("/data"), ObjectPath("s3://bucket/data", "http://127.0.0.1:9000")]
)
def test_a_built_in_dataset_lives_under_its_name_and_yours_at_the_data_path(
    data_path: Path | ObjectPath,
) -> None:
    assert dataset_kind("digits").location(data_path) == data_path / "digits"
    assert dataset_kind("cifar10").location(data_path) == data_path / "cifar10"
    assert dataset_kind("parquet").location(data_path) == data_path
    assert dataset_kind("folder").location(data_path) == data_path
    if isinstance(data_path, ObjectPath):  # the parsed location travels on, endpoint and all
        assert dataset_kind("mnist").location(data_path).endpoint == "http://127.0.0.1:9000"


def test_what_auto_augmentation_means_is_the_kinds_own() -> None:
    crops_only = {name for name, kind in KINDS.items() if kind.augment == "crop"}
    assert crops_only == {"digits", "mnist"}  # a mirrored digit is another digit, or none


@pytest.mark.parametrize("name", ["parquet", "folder"])
def test_data_users_bring_is_never_prepared(name: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not built in"):
        prepare_dataset(name, tmp_path / "x")
    assert not dataset_kind(name).to_prepare(tmp_path / "x")
    assert list(tmp_path.iterdir()) == []


def _name_comparisons(tree: ast.AST, names: set[str]) -> list[int]:
    """Lines comparing something with a dataset name, or comparing a `dataset` variable or
    attribute."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare) or all(
            isinstance(op, ast.Is | ast.IsNot)
            for op in node.ops  # `dataset is None`: unset
        ):
            continue
        sides = [node.left, *node.comparators]
        values = [n for side in sides for n in ast.walk(side) if isinstance(n, ast.Constant)]
        named = [getattr(side, "attr", getattr(side, "id", None)) for side in sides]
        if any(v.value in names for v in values) or "dataset" in named:
            found.append(node.lineno)
    return found


def test_no_module_but_the_registry_compares_the_dataset_name() -> None:
    """What differs between kinds is said by each kind (app/data/kinds/), not by a switch on
    TRAIN_DATASET's value (or on the layout "folder" standing in for it) anywhere else."""
    names = set(KINDS)
    found = {}
    for path in sorted(APP.rglob("*.py")):
        lines = _name_comparisons(ast.parse(path.read_text(), str(path)), names)
        if lines and path != REGISTRY:
            found[str(path.relative_to(APP.parent))] = lines
    assert found == {}


def test_check_says_a_built_in_dataset_is_written_by_train_and_writes_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRAIN_DATASET", "digits")
    monkeypatch.setenv("TRAIN_DATA_PATH", str(tmp_path / "data"))
    monkeypatch.setenv("TRAIN_STORAGE_PATH", str(tmp_path / "runs"))
    result = trainctl("check", "--skip-cluster")
    expected = f"digits not prepared yet; `trainctl train` will write it to {tmp_path}/data/digits"
    assert f"ok    dataset: {expected}\n" in result.out, result.text
    assert not (tmp_path / "data").exists()
