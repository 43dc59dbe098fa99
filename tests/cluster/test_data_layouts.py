"""The three Parquet layouts users have, written the way they write them, read the same way.

Ray tensor columns (ray.data from numpy arrays), nested lists (pandas, as in the MNIST
tutorial) and PNG bytes (PIL) must inspect to the same DatasetInfo and come out of
build_datasets + epoch_batches as the very same pixels.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from app.data.kinds import build_datasets, dataset_kind
from app.data.pipeline import epoch_batches
from app.data.schema import DatasetInfo, inspect_dataset
from app.settings import TrainSettings

pytestmark = [pytest.mark.cluster]

RNG = np.random.default_rng(3)
COLOR = RNG.integers(0, 256, (60, 6, 5, 3), dtype=np.uint8)  # non-square: catches H/W swaps
LABELS = np.arange(60, dtype=np.int64) % 3
SPLITS = {"train": slice(0, 45), "valid": slice(45, 60)}


def ray_tensors(folder: Path, images: np.ndarray, labels: np.ndarray) -> None:
    import ray.data

    pairs = zip(images, labels, strict=True)
    rows = [{"image": image, "label": int(label)} for image, label in pairs]
    ray.data.from_items(rows).repartition(2).write_parquet(str(folder))


def pandas_lists(folder: Path, images: np.ndarray, labels: np.ndarray) -> None:
    folder.mkdir(parents=True)
    frame = pd.DataFrame({"image": [image.tolist() for image in images], "label": labels})
    frame.to_parquet(folder / "part-0.parquet")


def png_bytes(folder: Path, images: np.ndarray, labels: np.ndarray) -> None:
    blobs = []
    for image in images:
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, "PNG")
        blobs.append(buffer.getvalue())
    folder.mkdir(parents=True)
    pd.DataFrame({"image": blobs, "label": labels}).to_parquet(folder / "part-0.parquet")


WRITERS: dict[str, Callable[[Path, np.ndarray, np.ndarray], None]] = {
    "tensor": ray_tensors,
    "list": pandas_lists,
    "encoded": png_bytes,
}


@pytest.fixture(scope="module")
def written(
    ray_session: None, tmp_path_factory: pytest.TempPathFactory
) -> tuple[np.ndarray, dict[str, Path]]:
    # RGB only: grayscale in each layout is covered by the unit tests' inspect cases and by
    # the digits pipeline test; every Ray execution here costs a second or more.
    roots = {}
    for layout, write in WRITERS.items():
        roots[layout] = tmp_path_factory.mktemp(layout)
        for split, rows in SPLITS.items():
            write(roots[layout] / split, COLOR[rows], LABELS[rows])
    return COLOR, roots


def _pixels(rows: object, info: DatasetInfo) -> torch.Tensor:
    """Every image through the app's ingest path (shuffled), undone back to uint8 HxWxC."""
    batches = list(
        epoch_batches(
            rows, batch_size=4, info=info, device=torch.device("cpu"), epoch=1, seed=0,
            shuffle=True,
        )
    )  # fmt: skip
    x = torch.cat([b[0] for b in batches])
    std = torch.tensor(info.std).view(1, -1, 1, 1) * 255
    mean = torch.tensor(info.mean).view(1, -1, 1, 1) * 255
    return (x * std + mean).round().to(torch.uint8).permute(0, 2, 3, 1)


def _sorted_rows(images: np.ndarray) -> np.ndarray:
    flat = images.reshape(len(images), -1)
    return flat[np.lexsort(flat.T[::-1])]


def test_every_layout_inspects_to_the_same_info(written: tuple[np.ndarray, dict]) -> None:
    images, roots = written
    infos = {layout: inspect_dataset(root) for layout, root in roots.items()}
    assert {layout: info.layout for layout, info in infos.items()} == {k: k for k in WRITERS}
    shapes = {
        (i.channels, i.height, i.width, i.num_classes, i.train_rows, i.valid_rows, i.mean, i.std)
        for i in infos.values()
    }
    assert len(shapes) == 1
    channels, height, width, classes, train_rows, valid_rows, mean, std = shapes.pop()
    assert (channels, height, width, classes) == (images.shape[-1], 6, 5, 3)
    assert (train_rows, valid_rows) == (45, 15)
    expected = images[SPLITS["train"]].reshape(-1, channels) / 255.0
    np.testing.assert_allclose(mean, expected.mean(axis=0), atol=1e-6)
    np.testing.assert_allclose(std, expected.std(axis=0), atol=1e-6)


def test_every_layout_yields_the_same_uint8_pixels(written: tuple[np.ndarray, dict]) -> None:
    images, roots = written
    expected = _sorted_rows(images[SPLITS["valid"]])
    for layout, root in roots.items():
        info = inspect_dataset(root)
        rows = build_datasets(TrainSettings(dataset="parquet", data_path=root), info)["valid"]
        batch = rows.take_batch(3)
        assert batch["image"].dtype == np.uint8, layout
        assert batch["image"].shape == (3, 6, 5, images.shape[-1]), layout
        assert batch["label"].dtype == np.int64, layout
        got = _pixels(rows, info).numpy()
        np.testing.assert_array_equal(_sorted_rows(got), expected, err_msg=layout)


def test_an_image_folder_yields_its_pixels_and_labels_through_ray_data(
    ray_session: None, tmp_path: Path
) -> None:
    """TRAIN_DATASET=folder: PNG files already at TRAIN_IMAGE_SIZE come out of the Ray Data
    read tasks (app/data/folder_images.py) and epoch_batches as the very same pixels, each
    with its class folder's label in code-point order."""
    from app.data.kinds.image_folder import inspect_folder

    names = ("cat", "Dog")  # code-point order: Dog (0), cat (1)
    images = RNG.integers(0, 256, (12, 16, 16, 3), dtype=np.uint8)
    for index, image in enumerate(images):
        split = "train" if index < 8 else "valid"
        folder = tmp_path / split / names[index % 2]
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image).save(folder / f"{index}.png")  # lossless
    info, _ = inspect_folder(tmp_path, 16)
    assert info.class_names == ("Dog", "cat")
    settings = TrainSettings(dataset="folder", data_path=tmp_path, image_size=16, model="cnn")
    rows = build_datasets(settings, info)["valid"]
    batch = rows.take_batch(4)
    assert batch["image"].dtype == np.uint8 and batch["image"].shape == (4, 16, 16, 3)
    # valid holds images 8..11: even ones in cat/ (label 1), odd ones in Dog/ (label 0).
    assert sorted(batch["label"].tolist()) == [0, 0, 1, 1]
    got = _pixels(rows, info).numpy()
    np.testing.assert_array_equal(_sorted_rows(got), _sorted_rows(images[8:]))

    # A file truncated after the checks: the driver's reading of the failure (app/run/driver.py)
    # knows it for a bad image, and its search names the file.
    from app.run.decisions import is_bad_image, root_cause

    broken = tmp_path / "valid" / "cat" / "10.png"
    broken.write_bytes(broken.read_bytes()[:100])
    with pytest.raises(Exception) as failed:  # Ray's wrapping of the worker's ImageError
        build_datasets(settings, info)["valid"].take_all()
    assert f"{broken}: not a readable image" in str(failed.value)
    assert is_bad_image(root_cause(failed.value), failed.value)
    where = dataset_kind("folder").locate_bad_image(info)
    assert where is not None and where.startswith(f"{broken}: not a readable image"), where
