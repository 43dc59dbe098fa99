"""`trainctl predict` prepares an image as training on an image folder did.

The export's numbers only mean what validation measured if a file reaches the model as the
folder reader (app/data/folder_images.decode_image) gave it to training: every mode made RGB,
the shorter side resized and the center cropped. Real files of each kind, both paths compared
pixel for pixel."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from app.data.folder_images import decode_image
from app.export.predict import Prediction, _pixels

SIZE = 16
SPEC = {"channels": 3, "height": SIZE, "width": SIZE}


def _photo(width: int, height: int) -> Image.Image:
    rng = np.random.default_rng(width * 1000 + height)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8), "RGB")


@pytest.mark.parametrize(
    ("name", "mode", "width", "height"),
    [
        ("square.png", "RGB", 40, 40),
        ("wide.jpg", "RGB", 120, 40),  # a plain resize would squash it; training cropped it
        ("tall.png", "RGB", 30, 70),
        ("gray.png", "L", 50, 40),
        ("alpha.png", "RGBA", 40, 40),
        ("palette.gif", "P", 40, 40),
        ("cmyk.jpg", "CMYK", 64, 48),
        ("deep.png", "I;16", 40, 40),
        ("small.png", "RGB", 7, 5),  # smaller than the model's input: scaled up alike
        ("large.jpg", "RGB", 600, 400),  # JPEG draft: decoded at a reduced scale alike
    ],
)
def test_predict_sees_what_training_saw(
    tmp_path: Path, name: str, mode: str, width: int, height: int
) -> None:
    path = tmp_path / name
    image = _photo(width, height)
    if mode == "I;16":
        wide = np.asarray(image.convert("L"), dtype=np.uint16) * 200
        image = Image.fromarray(wide)  # 16-bit grayscale
        assert image.mode.startswith("I;16")
    else:
        image = image.convert(mode)
    image.save(path)
    trained = decode_image(path.read_bytes(), SIZE, path)
    predicted = _pixels(path, SPEC)
    assert predicted.shape == trained.shape == (SIZE, SIZE, 3)
    assert np.array_equal(predicted, trained)


def test_a_file_or_class_name_with_a_newline_stays_on_one_line() -> None:
    line = Prediction("a\nb.png", [("cat", 0, 0.9)]).line()
    assert "\n" not in line
    assert line.startswith("'a\\nb.png': cat 0.9000")
    assert Prediction("with space.png", [("cat", 0, 0.9)]).line() == "with space.png: cat 0.9000"
    # A class folder's name is a file name too.
    assert Prediction("a.png", [("tab\tby", 1, 0.5)]).line() == "a.png: 'tab\\tby' 0.5000"
