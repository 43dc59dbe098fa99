"""One image file made model input: the limits and the preparation training and serving share.

Training on an image folder (app/data/folder_images.py, in Ray Data's read tasks) and
`trainctl predict` (app/export/predict.py) both call `decode_image`, so that a file predicted
gets the pixels it got in validation, and both refuse the same files: one larger than
MAX_FILE_BYTES, one declaring more than MAX_PIXELS pixels (a decompression bomb: Pillow's own
MAX_IMAGE_PIXELS default, and Pillow's warning range above it refused too), one that does not
decode (a truncated JPEG fails here, not at open). Parquet's encoded images
(app/data/images.py) are opened through `open_image` under the same pixel limit.

The preparation: Pillow decodes the image; 16-bit grayscale is scaled to 8 bits by its full
range; for a 3-channel model every mode (grayscale, RGBA, CMYK, palette) is made RGB; for a
1-channel model a grayscale mode is made 8-bit L and
a colour image is refused (which grey a colour photo should become is not the model's to
guess). It is resized so that it covers height x width and center-cropped, with Pillow's
bilinear filter, as torchvision's classification transforms do for evaluation (a plain resize
would squash an image of another aspect ratio); a JPEG is decoded at a reduced DCT scale first
when it is much larger (Pillow's `draft`), which keeps large photographs cheap.

No torch here: Ray's short-lived read tasks import this module.
"""

from __future__ import annotations

import io
import re
import warnings

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from app.formatting import shown

MAX_PIXELS = 89_478_485  # PIL.Image.MAX_IMAGE_PIXELS's default: 0.25 GiB as 24-bit RGB
MAX_FILE_BYTES = 64 << 20
GRAY_MODES = {"1", "L", "LA"}
COLOR_MODES = {"RGB", "RGBA", "P", "PA", "CMYK", "YCbCr", "LAB", "HSV", "RGBX"}


class ImageError(ValueError):
    """An image cannot be read or used; the message names it and says why."""


class TooManyPixelsError(ImageError):
    """An image declaring more than MAX_PIXELS pixels."""


def open_image(data: bytes, where: object) -> Image.Image:
    """`data` opened (its header read, nothing decoded yet), or ImageError naming `where`
    when it is not an image or declares more than MAX_PIXELS pixels."""
    if not data:  # an interrupted copy or upload: say so, not "a format Pillow cannot read"
        raise ImageError(f"{shown(where)}: an empty file (0 bytes), not an image")
    try:
        with warnings.catch_warnings():
            # Pillow only warns between MAX_IMAGE_PIXELS and twice that: refuse it all.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as err:
        # Pillow's own text quotes its limit (twice ours, for the error): only its count here.
        counted = re.search(r"\((\d+) pixels\)", str(err))
        size = f"{int(counted.group(1)):,} pixels: " if counted else ""
        raise TooManyPixelsError(
            f"{shown(where)}: {size}over the {MAX_PIXELS:,} pixels allowed for one image (a "
            "decompression bomb, or a photograph to downscale first)"
        ) from None
    except (OSError, ValueError, SyntaxError) as err:  # UnidentifiedImageError is an OSError
        if kind := _signed_as(data):  # the format's signature, then too little to identify
            raise ImageError(
                f"{shown(where)}: a truncated or damaged {kind} (it starts as one, but its "
                f"header is incomplete: {len(data):,} bytes); copy or upload it again"
            ) from None
        if isinstance(err, UnidentifiedImageError) and data.startswith(b"PAR1"):
            raise ImageError(
                f"{shown(where)}: a Parquet file, not an image: `trainctl evaluate` scores a "
                "Parquet dataset's rows"
            ) from None
        if isinstance(err, UnidentifiedImageError):
            raise ImageError(
                f"{shown(where)}: not an image format Pillow reads (JPEG, PNG, BMP, TIFF, WebP...)"
            ) from None
        raise ImageError(f"{shown(where)}: not a readable image ({err})") from None
    width, height = image.size
    if width * height > MAX_PIXELS:
        image.close()
        raise TooManyPixelsError(
            f"{shown(where)}: {width}x{height} pixels, over the {MAX_PIXELS:,} allowed for one "
            "image (a decompression bomb, or a photograph to downscale first)"
        )
    return image


# The first bytes of the formats people store images in: a file that starts as one but that
# Pillow cannot identify was cut short (an interrupted copy), not of an unknown format.
_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"\xff\xd8\xff", "JPEG"),
    (b"GIF8", "GIF"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
    (b"BM", "BMP"),
)


def _signed_as(data: bytes) -> str | None:
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WebP"
    return next((kind for start, kind in _SIGNATURES if data.startswith(start)), None)


def decode_image(
    data: bytes, size: int | tuple[int, int], where: object, channels: int = 3
) -> np.ndarray:
    """`data` as a uint8 (height, width, channels) array, prepared as the module says;
    `size` is the side of a square or (height, width). ImageError naming `where` otherwise."""
    height, width = (size, size) if isinstance(size, int) else size
    image = open_image(data, where)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = _eight_bit(image, where)
            if channels == 3:
                image.draft("RGB", (width, height))  # JPEG: a reduced scale that still covers
                image = image.convert("RGB")
            else:
                image = image.convert("L") if _gray(image, where) else image
            if image.size != (width, height):
                image = ImageOps.fit(image, (width, height), Image.Resampling.BILINEAR)
            pixels = np.asarray(image, dtype=np.uint8)
    except ImageError:
        raise
    except (OSError, ValueError, SyntaxError, Warning) as err:
        # OSError: "image file is truncated"; SyntaxError: Pillow's word for a broken header.
        raise ImageError(f"{shown(where)}: not a readable image ({err})") from None
    return pixels.reshape(height, width, channels)


def _eight_bit(image: Image.Image, where: object) -> Image.Image:
    """A 16-bit grayscale image (PNG, TIFF: Pillow's I;16 modes, or I) as 8-bit L, scaled by its
    full range (the top 8 bits): Pillow's own convert() clips every value above 255 to white,
    so a 16-bit scan became a blank white image. A 32-bit float image has no range to scale
    by: refused."""
    if image.mode.startswith("I;16") or image.mode == "I":
        image.load()
        # In the image's own width: as int64, clipped, a 16-bit image held about 26 bytes a
        # pixel at its peak, nearly three times an RGB image of as many pixels, past what the
        # pixel limit (MAX_PIXELS) is sized for.
        wide = np.asarray(image)
        if wide.dtype != np.uint16:  # mode I (32-bit), or signed: may hold values past 0..65535
            wide = np.clip(wide.astype(np.int32, copy=False), 0, 65535)
        return Image.fromarray((wide >> 8).astype(np.uint8), "L")
    if image.mode == "F":
        raise ImageError(
            f"{shown(where)}: a 32-bit floating-point image (Pillow mode F), whose range is not "
            "known; give 8- or 16-bit images"
        )
    return image


def _gray(image: Image.Image, where: object) -> bool:
    """True for a grayscale mode a 1-channel model takes; ImageError for any other."""
    if image.mode in GRAY_MODES:
        return True
    if image.mode in COLOR_MODES:
        bands = {"P": 3, "PA": 4}.get(image.mode, len(image.getbands()))
        raise ImageError(
            f"{shown(where)}: {bands} channel(s) ({image.mode}), but the model takes 1 (L); "
            "give grayscale images"
        )
    raise ImageError(
        f"{shown(where)}: Pillow mode {image.mode} is not supported by a 1-channel model; use "
        "8-bit grayscale (L) images"
    )
