"""Hostile image folders (TRAIN_DATASET=folder): refused by `trainctl check` before Ray starts,
with the folder or file named, or (non-image files) skipped and counted."""

from __future__ import annotations

import json
import os
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path

import pytest

from app.data.folder_listing import list_folder
from tests.folder_support import image_bytes, image_folder, png_claiming, truncated_jpeg
from tests.hostile.stalling_store import stalling_store
from tests.hostile.support import assert_refused, files_under, trainctl

BASE = {
    "TRAIN_DATASET": "folder",
    "TRAIN_MODEL": "cnn",
    "TRAIN_IMAGE_SIZE": "16",
    "TRAIN_GLOBAL_BATCH_SIZE": "8",
}


def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **extra: str) -> None:
    env = {**BASE, "TRAIN_DATA_PATH": str(tmp_path / "data"), **extra}
    env["TRAIN_STORAGE_PATH"] = str(tmp_path / "runs")
    for key, value in env.items():
        monkeypatch.setenv(key, value)


def _empty_class(root: Path) -> None:
    image_folder(root)
    (root / "train" / "empty").mkdir()
    (root / "train" / "empty" / "notes.txt").write_text("no images here")


def _single_class(root: Path) -> None:
    image_folder(root, classes=("only",))


def _valid_only_class(root: Path) -> None:
    image_folder(root)
    (root / "valid" / "bird").mkdir()
    (root / "valid" / "bird" / "1.png").write_bytes(image_bytes(1, 0, "PNG"))


def _link_out(root: Path) -> None:
    image_folder(root)
    outside = root.parent / "secret.png"
    outside.write_bytes(image_bytes(1, 0, "PNG"))
    (root / "train" / "cat" / "evil.png").symlink_to(outside)


def _linked_class_folder(root: Path) -> None:
    image_folder(root)
    elsewhere = root.parent / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "1.png").write_bytes(image_bytes(1, 0, "PNG"))
    (root / "train" / "bird").symlink_to(elsewhere, target_is_directory=True)


def _dangling_link(root: Path) -> None:
    image_folder(root)
    (root / "train" / "cat" / "gone.png").symlink_to(root / "train" / "cat" / "nowhere.png")


def _link_to_a_fifo(root: Path) -> None:
    image_folder(root)
    os.mkfifo(root / "train" / "cat" / "pipe")
    (root / "train" / "cat" / "piped.png").symlink_to(root / "train" / "cat" / "pipe")


def _truncated(root: Path) -> None:
    image_folder(root, per_class=(6, 2))  # under SAMPLE_FILES: preflight decodes every file
    (root / "train" / "dog" / "broken.jpg").write_bytes(truncated_jpeg())


def _truncated_newline_name(root: Path) -> None:
    image_folder(root, per_class=(6, 2))
    (root / "train" / "dog" / "bad\nline.jpg").write_bytes(truncated_jpeg())


def _bomb(root: Path) -> None:
    image_folder(root, per_class=(6, 2))
    (root / "train" / "cat" / "bomb.png").write_bytes(png_claiming(40_000, 40_000))


def _newline_class(root: Path) -> None:
    image_folder(root)
    (root / "train" / "cat\nok").mkdir()
    (root / "train" / "cat\nok" / "1.png").write_bytes(image_bytes(1, 0, "PNG"))


def _unicode_twins(root: Path) -> None:
    """café twice: as macOS writes a folder name (NFD) and as most tools do (NFC)."""
    image_folder(root, classes=(unicodedata.normalize("NFC", "café"), "dog"))
    twin = root / "train" / unicodedata.normalize("NFD", "café")
    twin.mkdir()
    (twin / "1.png").write_bytes(image_bytes(1, 0, "PNG"))


def _not_utf8_name(root: Path) -> None:
    """A name a Windows or Latin-1 tool wrote: its bytes are not UTF-8 (0xFF never is)."""
    image_folder(root)
    name = os.fsdecode(b"caf\xe9-\xff.png")
    (root / "train" / "cat" / name).write_bytes(image_bytes(1, 0, "PNG"))


def _link_loop(root: Path) -> None:
    image_folder(root)
    (root / "train" / "cat" / "loop1.png").symlink_to(root / "train" / "cat" / "loop2.png")
    (root / "train" / "cat" / "loop2.png").symlink_to(root / "train" / "cat" / "loop1.png")


def _test_is_a_file(root: Path) -> None:
    image_folder(root)
    (root / "test").write_text("the held-out images are elsewhere")


def _no_valid(root: Path) -> None:
    image_folder(root)
    for path in (root / "valid").rglob("*.*"):
        path.unlink()


CASES: list[tuple[str, Callable[[Path], None], tuple[str, ...]]] = [
    ("empty-class-folder", _empty_class, ("train/empty: no image files",)),
    ("single-class", _single_class, ("needs at least 2 classes", "only")),
    ("class-only-in-valid", _valid_only_class, ("1 class(es) not in train/: bird",)),
    ("link-out-of-the-folder", _link_out, ("evil.png: is a symbolic link", "outside the data")),
    ("linked-class-folder", _linked_class_folder, ("train/bird: is a symbolic link", "folder")),
    # Both were called "a link to a folder".
    ("dangling-link", _dangling_link, ("gone.png: is a symbolic link", "a broken link")),
    # Called "a broken link: nothing is there" (a red-team pass).
    ("link-loop", _link_loop, ("loop1.png: is a symbolic link", "a loop of links")),
    ("link-to-a-fifo", _link_to_a_fifo, ("piped.png: is a symbolic link", "not a file (a FIFO")),
    ("truncated-jpeg", _truncated, ("dog/broken.jpg: not a readable image", "truncated")),
    ("newline-in-file-name", _truncated_newline_name, ("bad\\nline.jpg': not a readable",)),
    ("decompression-bomb", _bomb, ("bomb.png: 1,600,000,000 pixels: over the 89,478,485 pixels",)),
    ("newline-in-class-name", _newline_class, ("'cat\\nok' has unprintable characters",)),
    ("unicode-twins", _unicode_twins, ("'caf\\xe9'", "'cafe\\u0301'", "two Unicode norm")),
    ("no-valid-images", _no_valid, ("valid: no image files",)),
    # check passed it, and the run failed after its last epoch, writing its records.
    (
        "file-name-not-utf8",
        _not_utf8_name,
        ("train: 1 image file name(s) are not UTF-8", "caf\\udce9-\\udcff.png", "rename them"),
    ),
    # It was taken for no test split: the gate then judged on valid/, what picked the model.
    ("test-is-a-file", _test_is_a_file, ("test: is a file, not a folder",)),
    ("no-folder", lambda root: None, ("train: folder not found", "train/<class>/<image>")),
]


@pytest.mark.parametrize(("build", "needles"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_image_folder_is_refused_before_ray(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, build, needles
) -> None:
    build(tmp_path / "data")
    _env(monkeypatch, tmp_path)
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, *needles)
    # A name with a newline never splits a message line: every FAIL line is one line.
    assert "bad\nline" not in result.text and "cat\nok" not in result.text
    assert files_under(tmp_path / "runs") == []


def test_non_image_files_are_skipped_and_counted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    root = tmp_path / "data"
    image_folder(root)
    (root / "train" / "README.md").write_text("about the data")  # not in a class folder
    (root / "train" / "cat" / "labels.csv").write_text("a,b")
    (root / "valid" / "dog" / ".DS_Store").write_bytes(b"\0")
    _env(monkeypatch, tmp_path)
    result = trainctl("check", "--skip-cluster")
    assert result.code == 0, result.text
    assert "36 train / 12 valid rows, 16x16x3 images (folder), 3 classes" in result.text
    assert "3 files skipped" in result.text


def test_ten_thousand_classes_are_judged_in_seconds(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """10,000 class folders (one image each) are within MAX_CLASSES: listed and accepted fast."""
    root = tmp_path / "data"
    png = image_bytes(1, 0, "PNG", (8, 8))
    for index in range(10_000):
        folder = root / "train" / f"c{index:05d}"
        folder.mkdir(parents=True)
        (folder / "1.png").write_bytes(png)
    (root / "valid" / "c00007").mkdir(parents=True)
    (root / "valid" / "c00007" / "1.png").write_bytes(image_bytes(2, 0, "PNG", (8, 8)))
    _env(monkeypatch, tmp_path, TRAIN_NUM_WORKERS="1")
    started = time.monotonic()
    result = trainctl("check", "--skip-cluster")
    assert result.code == 0, result.text[-2000:]
    assert "10000 train / 1 valid rows" in result.text and "10000 classes" in result.text
    assert time.monotonic() - started < 20
    listing = list_folder(root)
    assert listing.valid == (("valid/c00007/1.png", 7),)  # labels are train's order


@pytest.mark.parametrize("size", ["4", "1025", "-1", "big"])
def test_image_size_out_of_bounds_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, size: str
) -> None:
    image_folder(tmp_path / "data")
    _env(monkeypatch, tmp_path, TRAIN_IMAGE_SIZE=size)
    assert_refused(trainctl("check", "--skip-cluster"), 2, f"TRAIN_IMAGE_SIZE='{size}'")


def test_rerun_with_other_class_folders_is_refused_naming_the_difference(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """classes.json recorded by an earlier run: a class added and one removed is exit 2."""
    root = tmp_path / "data"
    image_folder(root, classes=("Zebra", "cat", "emu"))
    run_dir = tmp_path / "runs" / "pets"
    run_dir.mkdir(parents=True)
    (run_dir / "classes.json").write_text(json.dumps({"class_names": ["Zebra", "cat", "dog"]}))
    _env(monkeypatch, tmp_path, TRAIN_RUN_NAME="pets")
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, "classes differ from those run pets recorded", "new: emu")
    assert "missing: dog" in result.text

    (run_dir / "classes.json").write_text(json.dumps({"class_names": ["Zebra", "cat", "emu"]}))
    assert trainctl("check", "--skip-cluster").code == 0


def test_classes_file_replaced_by_a_link_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    image_folder(tmp_path / "data")
    run_dir = tmp_path / "runs" / "pets"
    run_dir.mkdir(parents=True)
    (tmp_path / "other.json").write_text(json.dumps({"class_names": ["Zebra", "cat", "dog"]}))
    os.symlink(tmp_path / "other.json", run_dir / "classes.json")
    _env(monkeypatch, tmp_path, TRAIN_RUN_NAME="pets")
    assert_refused(trainctl("check", "--skip-cluster"), 2, "classes.json", "symbolic link")


def test_listing_a_bucket_that_stalls_ends_at_its_deadline() -> None:
    """A store that answers the first probe and then holds every request: the listing gives
    up at its limit, naming the folder and what to do, rather than waiting on the client."""
    from app.errors import ConfigError
    from app.storage.buckets import ObjectPath

    with stalling_store() as store:
        started = time.monotonic()
        with pytest.raises(ConfigError) as refused:
            list_folder(ObjectPath("s3://data/pets", store.endpoint), limit_s=1.0)
        took = time.monotonic() - started
    assert "s3://data/pets: listing train/ took over 1 s" in str(refused.value)
    assert "prepare-data --from-folder" in str(refused.value)
    # The store never answers: that the wait ended at all is the deadline at work. The bound is
    # far above the 1 s limit, for a loaded machine, and far below a client left to itself.
    assert took < 30, took


def test_a_checkpoint_that_names_other_classes_is_refused_without_classes_json(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A run folder that lost classes.json still knows its classes from its checkpoint."""
    import torch

    from app.runfolder import checkpoint_names, checkpoints

    image_folder(tmp_path / "data")  # Zebra, cat, dog
    checkpoints.write_checkpoint(
        tmp_path / "runs" / "pets" / checkpoint_names.dir_name(1),
        model_state={"w": torch.zeros(1)}, train_state={"epoch": 1, "step": 1}, epoch=1,
        metrics={"val_accuracy": 0.5}, class_names=("Zebra", "cat", "cow"),
    )  # fmt: skip
    _env(monkeypatch, tmp_path, TRAIN_RUN_NAME="pets")
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, "classes differ from those run pets recorded", "new: dog")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--dataset", "digits", "--from-folder", "src"), "exactly one of --dataset"),
        ((), "exactly one of --dataset"),
        (("--from-folder", "src", "--image-size", "4"), "--image-size=4"),
        (("--from-folder", "src", "--image-size", "2000"), "--image-size"),
        (("--from-folder", "s3:/bucket/x"), "--from-folder=s3:/bucket/x"),
        (("--from-folder", "single"), "needs at least 2 classes"),
        (("--from-folder", "broken"), "broken.jpg: not a readable image"),
    ],
)
def test_prepare_from_a_hostile_folder_is_refused_and_writes_nothing(
    tmp_path: Path, args: tuple[str, ...], needle: str
) -> None:
    image_folder(tmp_path / "src", per_class=(2, 1))
    image_folder(tmp_path / "single", per_class=(2, 1), classes=("only",))
    image_folder(tmp_path / "broken", per_class=(2, 1))
    (tmp_path / "broken" / "valid" / "cat" / "broken.jpg").write_bytes(truncated_jpeg())
    result = trainctl("prepare-data", *args, "--out", str(tmp_path / "out"))
    assert_refused(result, 2, needle)
    assert not (tmp_path / "out").exists()
    assert not any(p.name.startswith(".out.tmp") for p in tmp_path.iterdir())  # no staging left


def test_prepare_data_sizes_images_by_the_settings_as_train_reads_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """./.env's TRAIN_MODEL and TRAIN_IMAGE_SIZE were ignored (the environment alone was read):
    a .env's TRAIN_MODEL=resnet50 prepared 32-pixel images, without a word (a red-team pass)."""
    image_folder(tmp_path / "src", per_class=(2, 1))
    (tmp_path / ".env").write_text("TRAIN_MODEL=cnn\nTRAIN_IMAGE_SIZE=40\n")

    def prepared(out: str, *args: str) -> list[int]:
        result = trainctl("prepare-data", "--from-folder", "src", "--out", out, *args)
        assert result.code == 0, result.text
        return json.loads((tmp_path / out / "_trainctl_dataset.json").read_text())["image_shape"]

    assert prepared("a") == [40, 40, 3]  # the .env's size
    monkeypatch.setenv("TRAIN_IMAGE_SIZE", "48")
    assert prepared("b") == [48, 48, 3]  # the environment over the .env, as `train` reads them
    assert prepared("c", "--image-size", "36") == [36, 36, 3]  # the option over both
    (tmp_path / ".env").write_text("TRAIN_MODLE=cnn\n")
    assert_refused(trainctl("prepare-data", "--from-folder", "src", "--out", "d"), 2, "TRAIN_MODLE")
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("inside", ["train/new", "valid", "train/cat/x", "."])
def test_prepare_into_the_source_folder_is_refused_and_leaves_it_as_it_was(
    tmp_path: Path, inside: str
) -> None:
    # Written into train/ or valid/, the Parquet copy would become a class folder of its own
    # source, without images: the next `train` on the folder would stop.
    src = tmp_path / "src"
    image_folder(src, per_class=(2, 1))
    before = files_under(src)
    out = src / inside
    result = trainctl("prepare-data", "--from-folder", str(src), "--out", str(out))
    assert_refused(result, 2, f"--out={out}", "inside the image folder", "outside its train/")
    assert files_under(src) == before


@pytest.mark.parametrize("split", ["train", "valid"])
def test_a_split_given_for_the_dataset_folder_gets_its_parent_suggested(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, split: str
) -> None:
    image_folder(tmp_path / "data", per_class=(2, 1))
    _env(monkeypatch, tmp_path, TRAIN_DATA_PATH=str(tmp_path / "data" / split))
    hint = (
        f"{tmp_path / 'data' / split} is itself a split folder: did you mean {tmp_path / 'data'}?"
    )
    assert_refused(trainctl("check", "--skip-cluster"), 2, hint)
    result = trainctl("prepare-data", "--from-folder", str(tmp_path / "data" / split),
                      "--out", str(tmp_path / "out"))  # fmt: skip
    assert_refused(result, 2, hint)
    assert not (tmp_path / "out").exists()
