"""Class lists that name a class twice, or one name in two Unicode normalisations: exit 2 naming
the names, wherever the list comes from (Parquet metadata, the run's classes.json, a
checkpoint's meta.json, a model card, image folders), never an internal error; and letter case
is not a duplicate (`A` and `a` are two classes of a letters dataset)."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from app import preflight
from app.data.class_meta import CLASS_NAMES_KEY
from app.data.folder_listing import list_folder
from app.data.schema import inspect_dataset
from app.export.card import CARD_FILE, card_json
from app.runfolder import checkpoint_names, checkpoints
from app.training.model import build_model
from tests import parquet_support as data
from tests.folder_support import image_folder
from tests.hostile.support import assert_refused, trainctl
from tests.promotion_support import exported_run

NFC = unicodedata.normalize("NFC", "café")
NFD = unicodedata.normalize("NFD", "café")


def _named_parquet(root: Path, names: list[str], raw: bytes | None = None) -> None:
    """The test data (4 classes) with `names` in the schema metadata, as prepare-data writes
    (or `raw`, these bytes there instead)."""
    metadata = {CLASS_NAMES_KEY: json.dumps(names).encode() if raw is None else raw}
    for split, rows in data.ROWS.items():
        images = data.images(rows)
        column = pa.FixedShapeTensorArray.from_numpy_ndarray(np.ascontiguousarray(images))
        table = pa.table({"image": column, "label": pa.array(data.labels(rows))})
        (root / split).mkdir(parents=True)
        pq.write_table(table.replace_schema_metadata(metadata), root / split / "part-0.parquet")


def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    def refuse(settings: object) -> None:
        raise AssertionError("the class names were not refused before Ray")

    monkeypatch.setattr(preflight, "connect_ray", refuse)
    env = {
        "TRAIN_DATASET": "parquet", "TRAIN_MODEL": "cnn", "TRAIN_GLOBAL_BATCH_SIZE": "8",
        "TRAIN_DATA_PATH": str(tmp_path / "data"), "TRAIN_STORAGE_PATH": str(tmp_path / "runs"),
        "TRAIN_RUN_NAME": "r", "TRAIN_EPOCHS": "1",
    }  # fmt: skip
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return tmp_path / "runs" / "r"


@pytest.mark.parametrize(
    ("names", "needles"),
    [
        (["a", "b", "a", "c"], ("class 'a' is named twice (labels 0 and 2)",)),
        (
            [NFC, "b", NFD, "c"],
            ("'caf\\xe9' (label 0)", "'cafe\\u0301' (label 2)", "shown as café"),
        ),
    ],
    ids=["twice", "nfc-and-nfd"],
)
def test_parquet_class_names_naming_a_class_twice(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, names: list[str], needles: tuple[str, ...]
) -> None:
    _named_parquet(tmp_path / "data", names)
    _env(monkeypatch, tmp_path)
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, "trainctl.class_names", *needles)


def test_a_classes_json_naming_a_class_twice(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _named_parquet(tmp_path / "data", ["a", "b", "c", "d"])
    run_dir = _env(monkeypatch, tmp_path)
    run_dir.mkdir(parents=True)
    (run_dir / "classes.json").write_text(json.dumps({"class_names": ["a", "b", "a", "d"]}))
    result = trainctl("train")
    assert_refused(result, 2, "classes.json is damaged", "class 'a' is named twice")


def test_a_checkpoint_naming_a_class_twice(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A run folder that lost classes.json: the newest checkpoint's names are compared. Its list
    has every name the data has, one twice: the comparison used to crash (zip of unequal
    lengths), an internal error on every rerun."""
    _named_parquet(tmp_path / "data", ["a", "b", "c", "d"])
    run_dir = _env(monkeypatch, tmp_path)
    checkpoints.write_checkpoint(
        run_dir / checkpoint_names.dir_name(1),
        model_state=build_model("cnn", inspect_dataset(tmp_path / "data")).state_dict(),
        train_state={"epoch": 1}, epoch=1, metrics={"val_accuracy": 0.5, "val_loss": 1.0},
        class_names=("a", "b", "b", "c", "d"),
    )  # fmt: skip
    result = trainctl("train")
    assert_refused(result, 2, "the classes differ", "5 names before, 4 now")


def test_a_model_card_naming_a_class_twice(tmp_path: Path) -> None:
    exported_run(tmp_path / "runs")
    card_path = tmp_path / "runs" / "r" / "export" / CARD_FILE
    card = json.loads(card_path.read_text())
    card["class_names"][3] = card["class_names"][1]
    card_path.write_bytes(card_json(card))
    image = tmp_path / "a.png"
    Image.new("L", (8, 8)).save(image)
    result = trainctl("predict", str(tmp_path / "runs" / "r"), str(image))
    assert_refused(result, 2, str(card_path), "class '1' is named twice (labels 1 and 3)")


def test_folders_differing_only_in_case_are_two_classes(tmp_path: Path) -> None:
    image_folder(tmp_path, per_class=(1, 1), classes=("A", "a"))
    assert list_folder(tmp_path).class_names == ("A", "a")


def test_parquet_class_names_that_are_not_json_are_named_as_such(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """It said only json's words ("Expecting property name enclosed in double quotes"), not
    which metadata they were about (a red-team pass)."""
    _named_parquet(tmp_path / "data", [], raw=b"{not json")
    _env(monkeypatch, tmp_path)
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, "trainctl.class_names in its schema is not JSON (Expecting")
