"""Image folders without Ray: the listing's rules, the decode function the Ray workers run,
class names in checkpoints and in Parquet written by `prepare-data --from-folder`."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

from app.data import folder_images
from app.data.folder_images import decode_image, load_images, to_folder_rows
from app.data.folder_listing import list_folder
from app.data.image_size import image_size_for
from app.data.images import ImageError
from app.data.kinds import dataset_kind
from app.data.kinds.image_folder import inspect_folder
from app.data.prepare_folder import prepare_from_folder
from app.data.schema import inspect_dataset
from app.run.decisions import is_bad_image
from app.runfolder import checkpoint_names, checkpoints
from app.runfolder.class_names import describe_difference
from tests.folder_support import image_bytes, image_folder, png_claiming, truncated_jpeg


def test_image_size_rule_is_one_function() -> None:
    assert [image_size_for(m) for m in ("cnn", "resnet18", "vit")] == [32, 32, 32]
    assert image_size_for("efficientnet_b0") == 224
    assert image_size_for("cnn", 64) == 64  # TRAIN_IMAGE_SIZE wins


def test_classes_are_in_code_point_order_and_valid_uses_trains_labels(tmp_path: Path) -> None:
    image_folder(tmp_path, per_class=(2, 1), classes=("cat", "dog", "Zebra"))
    listing = list_folder(tmp_path)
    assert listing.class_names == ("Zebra", "cat", "dog")  # uppercase sorts first
    assert dict(listing.valid) == {
        "valid/Zebra/000.jpg": 0,
        "valid/cat/000.jpg": 1,
        "valid/dog/000.jpg": 2,
    }
    assert [label for _, label in listing.train] == [0, 0, 1, 1, 2, 2]


def test_a_link_to_an_image_inside_the_folder_is_read_as_its_target(tmp_path: Path) -> None:
    image_folder(tmp_path, per_class=(1, 1), classes=("a", "b"))
    os.symlink(tmp_path / "train" / "a" / "000.jpg", tmp_path / "train" / "b" / "link.jpg")
    listing = list_folder(tmp_path)
    assert ("train/a/000.jpg", 1) in listing.train  # the target, labelled by the link's class


def test_decoding_gives_rgb_of_the_asked_size(tmp_path: Path) -> None:
    gray = decode_image(image_bytes(3, 1, "PNG", (40, 30)), 16, "x.png")  # seed 3: grayscale
    assert gray.shape == (16, 16, 3) and gray.dtype == np.uint8
    assert np.array_equal(gray[..., 0], gray[..., 2])
    pixels = np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "exact.png")
    same = decode_image((tmp_path / "exact.png").read_bytes(), 16, "exact.png")
    assert np.array_equal(same, pixels)  # already the size: untouched


def test_files_are_fetched_eight_at_a_time_and_decoded_as_many_as_the_cpus_allow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decoding releases the GIL: more files decoding at once than the CPUs a Ray task was
    given would take CPUs Ray counts as training's."""
    files = image_folder(tmp_path)
    paths = sorted(files)
    now, most, lock = 0, 0, threading.Lock()
    real_decode = folder_images.decode_image

    def counted(*args: object) -> np.ndarray:
        nonlocal now, most
        with lock:
            now += 1
            most = max(most, now)
        time.sleep(0.02)  # long enough for the other threads to arrive
        try:
            return real_decode(*args)  # type: ignore[arg-type]
        finally:
            with lock:
                now -= 1

    monkeypatch.setattr(folder_images, "decode_image", counted)
    monkeypatch.setattr(folder_images, "decode_slots", lambda: 2)
    images = load_images(tmp_path, paths, 16)
    assert 1 <= most <= 2, most
    monkeypatch.setattr(folder_images, "decode_image", real_decode)
    assert np.array_equal(images, load_images(tmp_path, paths, 16))  # same pixels, any order


def test_outside_ray_the_decode_slots_are_the_usable_cpus() -> None:
    from app.cpus import usable_cpus

    assert folder_images.decode_slots() == usable_cpus().usable


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (truncated_jpeg(), "not a readable image (image file is truncated"),
        # One limit named, with the image's own count (Pillow's text quoted twice ours).
        (png_claiming(40_000, 40_000), "1,600,000,000 pixels: over the 89,478,485 pixels allowed"),
        (png_claiming(10_000, 9_000), "90,000,000 pixels: over the 89,478,485 pixels allowed"),
        (b"GIF89a not really", "a truncated or damaged GIF (it starts as one"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "a truncated or damaged PNG"),  # a cut copy
        (b"%PDF-1.7 a document", "not an image format Pillow reads"),
        # A Parquet file given to `predict` (a red-team pass): said as one, with where its
        # rows are scored.
        (b"PAR1\x15\x04 some pages", "a Parquet file, not an image: `trainctl evaluate`"),
        (b"", "an empty file (0 bytes), not an image"),  # an interrupted copy
    ],
)
def test_the_workers_decode_names_the_file_of_a_bad_image(
    tmp_path: Path, data: bytes, needle: str
) -> None:
    """What a Ray read task runs (to_folder_rows), on a block holding one bad file: the error
    names that file's path, and the driver knows it for a bad image without searching."""
    image_folder(tmp_path, per_class=(2, 1), classes=("a", "b"))
    bad = tmp_path / "train" / "b" / "bad\nname.png"
    bad.write_bytes(data)
    block = pa.table({"path": ["train/a/000.jpg", "train/b/bad\nname.png"], "label": [0, 1]})
    with pytest.raises(ImageError) as caught:
        to_folder_rows(block, tmp_path, 16)
    message = str(caught.value)
    assert repr(str(bad)) in message and needle in message, message
    assert "\n" not in message and "178956970" not in message
    cause = f"ImageError: {message}"
    assert is_bad_image(cause, caught.value)


def test_a_missing_file_is_named_and_a_planted_link_refused(tmp_path: Path) -> None:
    image_folder(tmp_path, per_class=(1, 1), classes=("a", "b"))
    with pytest.raises(ImageError, match=r"train/a/gone\.png: cannot be read"):
        load_images(tmp_path, ["train/a/gone.png"], 16)
    (tmp_path / "train" / "a" / "000.jpg").unlink()
    os.symlink("/etc/hostname", tmp_path / "train" / "a" / "000.jpg")  # swapped in after listing
    with pytest.raises(ImageError, match="symbolic link"):
        load_images(tmp_path, ["train/a/000.jpg"], 16)


def test_inspect_folder_and_the_bad_image_search(tmp_path: Path) -> None:
    image_folder(tmp_path)
    info, note = inspect_folder(tmp_path, 16)
    assert (info.layout, info.height, info.width, info.channels) == ("folder", 16, 16, 3)
    assert info.class_names == ("Zebra", "cat", "dog") and info.num_classes == 3
    assert (info.train_rows, info.valid_rows, note) == (36, 12, "")
    assert (info.train_class_counts, info.valid_class_counts) == ((12, 12, 12), (4, 4, 4))
    assert dataset_kind("folder").locate_bad_image(info) is None  # every file decodes
    broken = tmp_path / "valid" / "dog" / "003.png"
    broken.write_bytes(truncated_jpeg())
    where = dataset_kind("folder").locate_bad_image(info)
    assert where is not None and where.startswith(f"{broken}: not a readable image (image file")


def test_checkpoint_meta_carries_class_names_under_its_checksum(tmp_path: Path) -> None:
    import torch

    folder = tmp_path / checkpoint_names.dir_name(1)
    checkpoints.write_checkpoint(
        folder,
        model_state={"w": torch.zeros(2)},
        train_state={"epoch": 1, "step": 1},
        epoch=1,
        metrics={"val_accuracy": 0.5},
        class_names=("Zebra", "cat"),
    )
    assert checkpoints.verify(folder).epoch == 1
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["class_names"] == ["Zebra", "cat"]
    meta["class_names"] = ["cat", "Zebra"]  # swapped: label 0 would change meaning
    (folder / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="does not match its recorded checksum"):
        checkpoints.verify(folder)


def test_class_name_differences_are_put_in_words() -> None:
    assert describe_difference(("a", "b"), ("a", "c")) == "new: c; missing: b"
    assert describe_difference(("a", "b"), ("b", "a")) == "same names in another order from label 0"
    assert "only label numbers" in describe_difference(("a", "b"), ())


def test_prepare_from_folder_keeps_the_class_names_and_pixels(tmp_path: Path) -> None:
    files = image_folder(tmp_path / "src")
    summary = prepare_from_folder(str(tmp_path / "src"), tmp_path / "out", size=16)
    assert "36 train + 12 valid rows, 16x16x3 uint8 images, 3 classes, layout raw" in summary
    info = inspect_dataset(tmp_path / "out")
    assert info.class_names == ("Zebra", "cat", "dog") and info.num_classes == 3
    marker = json.loads((tmp_path / "out" / "_trainctl_dataset.json").read_text())
    assert marker["class_names"] == ["Zebra", "cat", "dog"]
    import pyarrow.parquet as pq

    table = pq.read_table(tmp_path / "out" / "valid")
    valid = sorted(path for path in files if path.startswith("valid/"))
    expected = load_images(tmp_path / "src", valid, 16)
    got = np.frombuffer(b"".join(table.column("image").to_pylist()), np.uint8)
    assert np.array_equal(got.reshape(expected.shape), expected)
    assert table.column("label").to_pylist() == [0] * 4 + [1] * 4 + [2] * 4


def test_prepare_from_folder_over_another_preparation_is_refused(tmp_path: Path) -> None:
    """`--image-size 48` over a folder prepared at 32 said "already holds a dataset", exit 0,
    and a `prepare-data ... && train` trained on the 32-pixel one (a red-team pass)."""
    from app.errors import ConfigError

    image_folder(tmp_path / "src")
    image_folder(tmp_path / "other")
    prepare_from_folder(str(tmp_path / "src"), tmp_path / "out", size=16)
    same = prepare_from_folder(str(tmp_path / "src"), tmp_path / "out", size=16)
    assert same == (
        f"{tmp_path / 'out'} already holds this dataset (16x16 from {tmp_path / 'src'}); "
        "--force rewrites it"
    )
    for source, size in (("src", 24), ("other", 16)):
        with pytest.raises(ConfigError) as refused:
            prepare_from_folder(str(tmp_path / source), tmp_path / "out", size=size)
        assert str(refused.value).endswith(
            f"already holds 16x16 images from {tmp_path / 'src'}, not the {size}x{size} from "
            f"{tmp_path / source} asked for; give another --out, or --force to replace it"
        ), refused.value
    again = prepare_from_folder(str(tmp_path / "src"), tmp_path / "out", size=24, force=True)
    assert "24x24x3 uint8 images" in again


def test_prepare_from_folder_keeps_the_held_out_test_split(tmp_path: Path) -> None:
    """Its test/ was dropped (found by a red-team pass): after the conversion the README
    suggests for speed, the promotion gate was judged on valid/, the data the checkpoint was
    selected on, and nothing said so."""
    import pyarrow.parquet as pq

    from tests.folder_support import CLASSES

    image_folder(tmp_path / "src")
    test = []
    for label, name in enumerate(CLASSES):
        for index in range(2):
            relative = f"test/{name}/{index:03d}.png"
            (tmp_path / "src" / relative).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "src" / relative).write_bytes(
                image_bytes(50_000 + index * 7 + label, label % 3, "PNG")
            )
            test.append(relative)
    summary = prepare_from_folder(str(tmp_path / "src"), tmp_path / "out", size=16)
    assert "36 train + 12 valid + 6 test rows" in summary, summary
    info = inspect_dataset(tmp_path / "out")
    assert info.test_rows == 6 and info.test_class_counts == (2, 2, 2)
    table = pq.read_table(tmp_path / "out" / "test")
    expected = load_images(tmp_path / "src", sorted(test), 16)
    got = np.frombuffer(b"".join(table.column("image").to_pylist()), np.uint8)
    assert np.array_equal(got.reshape(expected.shape), expected)
    # Prepared again over itself (--force): a dataset with test/ is one it may replace.
    again = prepare_from_folder(str(tmp_path / "src"), tmp_path / "out", size=16, force=True)
    assert "+ 6 test rows" in again


def test_class_folders_with_no_split_are_recognised_and_the_split_asked_for(
    tmp_path: Path,
) -> None:
    """The layout most image sets come in (`cats/`, `dogs/` and nothing else) was refused as
    `train: folder not found` with no word of the classes right there (a red-team pass)."""
    from app.errors import ConfigError
    from tests.folder_support import image_folder

    image_folder(tmp_path / "made", per_class=(2, 1), classes=("cat", "dog"))
    (tmp_path / "made" / "train").rename(tmp_path / "flat")
    (tmp_path / "flat" / "empty").mkdir()  # a folder without images is no class to name
    with pytest.raises(ConfigError) as err:
        list_folder(tmp_path / "flat")
    assert (
        f"{tmp_path / 'flat'} holds class folders with images directly (cat, dog): put them in "
        "train/ and move a share of each class's images (one in five, say) into valid/<class>/"
    ) in str(err.value), err.value
    # An empty folder, or one with a split, is not told so.
    (tmp_path / "none").mkdir()
    with pytest.raises(ConfigError) as err:
        list_folder(tmp_path / "none")
    assert "class folders" not in str(err.value)
    (tmp_path / "made" / "valid").rename(tmp_path / "none" / "valid")  # valid/ alone
    (tmp_path / "none" / "stray").mkdir()
    image = next((tmp_path / "flat" / "cat").glob("*.png"))
    (tmp_path / "none" / "stray" / "a.png").write_bytes(image.read_bytes())
    with pytest.raises(ConfigError) as err:
        list_folder(tmp_path / "none")
    assert "train: folder not found" in str(err.value)
    assert "class folders" not in str(err.value)
