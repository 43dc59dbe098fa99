"""Promotion and prediction inputs that must be refused: a gate that does not parse or names
an unknown metric (exit 2 before training), an unsafe model name, an exit code that collides
with trainctl's own; an export that was altered after its card was written (refused naming the
checksum, nothing loaded: its pickle would run code), an image of the wrong channel count, an
unreadable image, a decompression bomb, a folder given as an image. No Ray, no torch.export:
the export folders here are made by hand (tests/hostile/test_export_loading.py has exports
whose card vouches for a malicious file)."""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.hostile.support import assert_refused, malicious_torch_file, trainctl


@pytest.mark.parametrize(
    ("variable", "value", "needles"),
    [
        ("TRAIN_PROMOTE_IF", "val_acc>=0.9", ("unknown metric 'val_acc'", "val_accuracy", ">=")),
        ("TRAIN_PROMOTE_IF", "val_accuracy => 0.9", ("the operator is >=, not =>",)),
        ("TRAIN_PROMOTE_IF", "val_accuracy>=90", ("a fraction from 0 to 1", ">=0.9?")),
        ("TRAIN_PROMOTE_IF", "val_acc>0.9", ("did you mean val_accuracy?",)),
        ("TRAIN_PROMOTE_IF", "beats_champion or val_loss<1", ("cannot read",)),
        # A term misspelt got the whole grammar and no hint (found by a red-team pass).
        ("TRAIN_PROMOTE_IF", "beats_champoin", ("(did you mean beats_champion?)",)),
        ("TRAIN_MODEL_NAME", "../../etc/passwd", ("TRAIN_MODEL_NAME", "letters, digits")),
        ("TRAIN_MODEL_NAME", "a" * 65, ("TRAIN_MODEL_NAME", "1-64")),
        ("TRAIN_NOT_PROMOTED_EXIT", "2", ("TRAIN_NOT_PROMOTED_EXIT", "5-125")),
        ("TRAIN_NOT_PROMOTED_EXIT", "256", ("TRAIN_NOT_PROMOTED_EXIT", "125")),
    ],
)
def test_bad_promotion_settings_stop_train_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str, value: str, needles: tuple
) -> None:
    monkeypatch.setenv("TRAIN_STORAGE_PATH", str(tmp_path / "runs"))
    monkeypatch.setenv(variable, value)
    result = trainctl("train")
    assert_refused(result, 2, variable, *needles)
    assert not (tmp_path / "runs").exists()  # nothing created, nothing trained


def _export(folder: Path, marker: Path, channels: int = 1) -> Path:
    """An export folder whose weights.pt carries a code-running pickle, and a card that
    vouches for it: what someone with write access to the bucket could leave."""
    folder.mkdir(parents=True)
    weights = folder / "weights.pt"
    weights.write_bytes(malicious_torch_file(marker))
    card = {
        "format": "state_dict",
        "file": "weights.pt",
        "files": {"weights.pt": hashlib.sha256(weights.read_bytes()).hexdigest()},
        "architecture": "cnn",
        "class_names": ["cat", "dog"],
        "input": {"channels": channels, "height": 8, "width": 8,
                  "mean": [0.5] * channels, "std": [0.25] * channels},
    }  # fmt: skip
    (folder / "model_card.json").write_text(json.dumps(card))
    return folder


def _image(path: Path, mode: str) -> Path:
    shape = {"L": (8, 8), "RGB": (8, 8, 3), "RGBA": (8, 8, 4)}[mode]
    Image.fromarray(np.zeros(shape, dtype=np.uint8), mode).save(path)
    return path


def test_a_tampered_export_is_refused_naming_the_file_and_checksum(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    folder = _export(tmp_path / "run" / "export", marker)
    model = folder / "weights.pt"
    model.write_bytes(model.read_bytes() + b"\0")  # altered after the card was written
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    result = trainctl("predict", str(tmp_path / "run"), str(_image(tmp_path / "a.png", "L")))
    assert_refused(result, 2, str(model), f"sha256 {digest}", "does not match the model card")
    assert not marker.exists()


def test_an_export_file_that_is_a_link_is_refused_not_followed(tmp_path: Path) -> None:
    """The card's checksum matches what the link leads to, but a link in the export folder is
    never read through (the file hashed must be the file loaded)."""
    marker = tmp_path / "pwned"
    folder = _export(tmp_path / "run" / "export", marker)
    model = folder / "weights.pt"
    model.rename(tmp_path / "elsewhere.pt")
    model.symlink_to(tmp_path / "elsewhere.pt")
    result = trainctl("predict", str(tmp_path / "run"), str(_image(tmp_path / "a.png", "L")))
    assert_refused(result, 2, str(model), "is a symbolic link", "remove it")
    assert not marker.exists()


def test_a_card_naming_a_file_outside_the_export_is_refused(tmp_path: Path) -> None:
    folder = _export(tmp_path / "export", tmp_path / "pwned")
    card = json.loads((folder / "model_card.json").read_text())
    card["file"] = "../../etc/passwd"
    card["files"] = {"../../etc/passwd": "0" * 64}
    (folder / "model_card.json").write_text(json.dumps(card))
    result = trainctl("predict", str(folder), str(_image(tmp_path / "a.png", "L")))
    assert_refused(result, 2, "model_card.json", "may name only weights.pt, model.pt2")


@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
def test_an_image_of_the_wrong_channel_count_is_refused(tmp_path: Path, mode: str) -> None:
    marker = tmp_path / "pwned"
    folder = _export(tmp_path / "export", marker, channels=1)
    image = _image(tmp_path / "colour.png", mode)
    result = trainctl("predict", str(folder), str(image))
    assert_refused(result, 2, str(image), f"({mode}), but the model takes 1 (L)")
    assert not marker.exists()  # images are checked before the model is loaded


def test_an_unreadable_image_is_refused_naming_it(tmp_path: Path) -> None:
    folder = _export(tmp_path / "export", tmp_path / "pwned")
    bad = tmp_path / "photo.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 20)
    result = trainctl("predict", str(folder), str(bad))
    assert_refused(result, 2, str(bad), "a truncated or damaged PNG")  # as training says
    missing = tmp_path / "nowhere.png"
    assert_refused(trainctl("predict", str(folder), str(missing)), 2, str(missing))


def test_a_folder_without_an_export_is_refused(tmp_path: Path) -> None:
    result = trainctl("predict", str(tmp_path), str(_image(tmp_path / "a.png", "L")))
    assert_refused(result, 2, "no model_card.json", "successful `trainctl train`")


def _png_header(path: Path, width: int, height: int) -> Path:
    """A PNG that declares width x height and holds no pixels: Pillow's open reads only this."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b""))
    return path


@pytest.mark.parametrize(("width", "height"), [(10000, 9000), (20000, 20000)])
def test_a_decompression_bomb_is_refused_not_warned_about(
    tmp_path: Path, width: int, height: int
) -> None:
    # Pillow only warns between its limit and twice that; predict refuses both, before loading,
    # at training's own limit (app/data/image_decode.py).
    marker = tmp_path / "pwned"
    folder = _export(tmp_path / "export", marker, channels=3)
    bomb = _png_header(tmp_path / "bomb.png", width, height)
    result = trainctl("predict", str(folder), str(bomb))
    assert_refused(result, 2, str(bomb), "over the 89,478,485 pixels allowed")
    assert "DecompressionBombWarning" not in result.text
    assert not marker.exists()


def test_a_folder_without_images_or_a_missing_file_is_named(tmp_path: Path) -> None:
    # A folder is classified with Ray Data since issue 34 (app/evaluation/batch_predict.py);
    # one without images is refused before Ray starts.
    marker = tmp_path / "pwned"
    folder = _export(tmp_path / "export", marker, channels=3)
    images = tmp_path / "valid images"
    images.mkdir()
    (images / "a.txt").write_text("not an image")
    result = trainctl("predict", str(folder), str(images))
    assert_refused(result, 2, f"no image files in {images}")
    missing = tmp_path / "cat.png"
    assert_refused(trainctl("predict", str(folder), str(missing)), 2, f"{missing}: no such file")
    assert not marker.exists()
