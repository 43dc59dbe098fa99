"""`trainctl predict` prepares an image as training on an image folder did, within the same
limits.

The export's numbers only mean what validation measured if a file reaches the model as the
folder reader gave it to training: every mode made RGB, the shorter side resized and the
center cropped (app/data/image_decode.py, one module for both). Real files of each kind, both
paths compared pixel for pixel; and files at and past the limits, both paths' verdicts
compared word for word (predict used to refuse 50-89 million pixels that training took)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from app.data.folder_images import decode_image, load_images
from app.data.images import ImageError
from app.errors import ConfigError
from app.export.predict import Prediction, _pixels, per_pass
from tests.folder_support import image_bytes, png_claiming, truncated_jpeg

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
    if mode == "I;16":  # scaled by its range: Pillow's own convert made every pixel 255
        eight = tmp_path / "eight.png"
        Image.fromarray((wide >> 8).astype(np.uint8), "L").save(eight)
        assert np.array_equal(trained, decode_image(eight.read_bytes(), SIZE, eight))
        assert trained.min() < 200


def test_a_file_or_class_name_with_a_newline_stays_on_one_line() -> None:
    line = Prediction("a\nb.png", [("cat", 0, 0.9)]).line()
    assert "\n" not in line
    assert line.startswith("'a\\nb.png': cat 0.9000")
    assert Prediction("with space.png", [("cat", 0, 0.9)]).line() == "with space.png: cat 0.9000"
    # A class folder's name is a file name too.
    assert Prediction("a.png", [("tab\tby", 1, 0.5)]).line() == "a.png: 'tab\\tby' 0.5000"


def _float_tiff() -> bytes:
    import io

    out = io.BytesIO()
    Image.fromarray(np.linspace(0, 1, 64, dtype=np.float32).reshape(8, 8), "F").save(out, "TIFF")
    return out.getvalue()


@pytest.mark.parametrize(
    ("data", "verdict"),
    [
        (png_claiming(9_000, 9_000), "not a readable image"),  # under both limits: no pixels
        (png_claiming(10_000, 9_000), "over the 89,478,485 pixels allowed"),  # Pillow warns
        (png_claiming(40_000, 40_000), "over the 89,478,485 pixels allowed"),  # Pillow refuses
        (truncated_jpeg(), "not a readable image (image file is truncated"),
        (b"GIF89a not really", "a truncated or damaged GIF (it starts as one"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "a truncated or damaged PNG"),  # a cut copy
        (b"%PDF-1.7 a document", "not an image format Pillow reads"),
        (image_bytes(4, 1, "PNG"), None),  # a good image: both take it
        (_float_tiff(), "a 32-bit floating-point image (Pillow mode F)"),
    ],
)
def test_training_and_predict_take_and_refuse_the_same_files(
    tmp_path: Path, data: bytes, verdict: str | None
) -> None:
    path = tmp_path / "x.png"
    path.write_bytes(data)
    trained: str | None = None
    predicted: str | None = None
    try:
        load_images(tmp_path, ["x.png"], SIZE)  # what a Ray read task runs
    except ImageError as err:
        trained = str(err)
    try:
        _pixels(path, SPEC)
    except ConfigError as err:
        predicted = str(err)
    assert trained == predicted
    assert (verdict is None and trained is None) or (verdict and verdict in str(trained))


@pytest.mark.parametrize("mode", ["1", "L", "LA"])
def test_a_one_channel_model_takes_every_grayscale_mode(tmp_path: Path, mode: str) -> None:
    """As training from Parquet's encoded images does (app/data/images.py: made L)."""
    path = tmp_path / "gray.png"
    _photo(8, 8).convert(mode).save(path)
    pixels = _pixels(path, {"channels": 1, "height": 8, "width": 8})
    assert pixels.shape == (8, 8, 1)
    assert np.array_equal(pixels[..., 0], np.asarray(Image.open(path).convert("L")))


@pytest.mark.parametrize("mode", ["I;16", "I"])
def test_a_16_bit_image_is_scaled_in_little_more_memory_than_its_own(
    tmp_path: Path, mode: str
) -> None:
    """The 16-bit scaling went through int64 copies: about 26 bytes a pixel at its peak, so a
    folder of large 16-bit scans took nearly three times the memory of RGB ones (a red-team
    pass: 2.07 GB against 1.20 GB for 81 megapixels). numpy reports its buffers to tracemalloc."""
    import tracemalloc

    from app.data.image_decode import _eight_bit

    side = 1000
    wide = np.arange(side * side, dtype=np.uint32).reshape(side, side) % 65536
    image = Image.fromarray(wide.astype(np.uint16 if mode == "I;16" else np.int32))
    assert image.mode.startswith(mode)
    image.load()
    tracemalloc.start()
    try:
        eight = _eight_bit(image, "scan.png")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert np.array_equal(np.asarray(eight), (wide >> 8).astype(np.uint8))
    own = 2 if mode == "I;16" else 4  # the image's bytes a pixel, which its array copies
    assert peak < (2 * own + 2) * side * side, peak / (side * side)


@pytest.mark.parametrize(
    ("side", "images"),
    [(8, 64), (32, 64), (224, 64), (225, 63), (512, 12), (1024, 3), (8192, 1)],
)
def test_a_forward_pass_holds_at_most_64_images_of_224x224s_pixels(side: int, images: int) -> None:
    """Predict ran 64 images at once at any card size: 64 inputs of 1024x1024 are 768 MiB
    before the first layer, and a Parquet run trains (and exports) at its images' stored size.
    The pass shrinks with the input, never below one image."""
    assert per_pass({"input": {"channels": 3, "height": side, "width": side}}) == images
