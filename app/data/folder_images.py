"""Image files decoded to fixed-size uint8 RGB arrays, in Ray Data's read tasks or in-process.

Every image becomes RGB, grayscale ones included (their one channel repeated): the channel
count then never depends on which files a folder happens to hold, and torchvision's models and
pretrained weights expect three. Each is resized so that its shorter side is `size`, with
Pillow's bilinear filter, and center-cropped to size x size, as torchvision's classification
transforms do for evaluation; a JPEG is decoded at a reduced DCT scale first when it is much
larger (Pillow's `draft`), which keeps large photographs cheap.

A file is refused, naming its path, when it is larger than MAX_FILE_BYTES, declares more than
MAX_PIXELS pixels (a decompression bomb: Pillow's own MAX_IMAGE_PIXELS default), or does not
decode (a truncated JPEG fails here, not at open). Like app/data/images.py this module needs
no torch, so Ray's short-lived read tasks do not import it.
"""

from __future__ import annotations

import io
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
from PIL import Image, ImageOps, UnidentifiedImageError

from app.data.folder_listing import shown
from app.data.images import ImageError
from app.storage import safe_fs
from app.storage.location import RunPath, local_path
from app.storage.reading import read_bounded

MAX_PIXELS = 89_478_485  # PIL.Image.MAX_IMAGE_PIXELS's default: 0.25 GiB as 24-bit RGB
MAX_FILE_BYTES = 64 << 20
READ_THREADS = 8  # files in a bucket are fetched in parallel; decoding releases the GIL too


def read_file(root: RunPath, relative: str) -> bytes:
    """One file's bytes; on a volume opened below `root` without following a link."""
    path = root / relative
    try:
        return read_bounded(path, local_path(root), MAX_FILE_BYTES)
    except safe_fs.LinkRefused:  # replaced by a link after the listing
        raise ImageError(f"{shown(path)}: cannot be read (a symbolic link, not followed)") from None
    except (OSError, ValueError, pa.ArrowException) as err:
        raise ImageError(f"{shown(path)}: cannot be read ({err})") from None


def decode_image(data: bytes, size: int, where: object) -> np.ndarray:
    """`data` as a (size, size, 3) uint8 array, or ImageError naming `where`."""
    try:
        with warnings.catch_warnings():
            # Pillow only warns between MAX_IMAGE_PIXELS and twice that: refuse it all.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            width, height = image.size
            if width * height > MAX_PIXELS:
                raise ImageError(
                    f"{shown(where)}: {width}x{height} pixels, over the {MAX_PIXELS:,} allowed "
                    "for one image (a decompression bomb, or a photograph to downscale first)"
                )
            image.draft("RGB", (size, size))  # JPEG: a reduced scale that still covers size
            image = ImageOps.fit(image.convert("RGB"), (size, size), Image.Resampling.BILINEAR)
            return np.asarray(image, dtype=np.uint8)
    except ImageError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as err:
        raise ImageError(
            f"{shown(where)}: over the {MAX_PIXELS:,} pixels allowed for one image ({err})"
        ) from None
    except UnidentifiedImageError:
        raise ImageError(
            f"{shown(where)}: not an image format Pillow reads (JPEG, PNG, BMP, TIFF, WebP...)"
        ) from None
    except (OSError, ValueError, SyntaxError, Warning) as err:
        # OSError: "image file is truncated"; SyntaxError: Pillow's word for a broken header.
        raise ImageError(f"{shown(where)}: not a readable image ({err})") from None


def load_images(root: RunPath, paths: list[str], size: int) -> np.ndarray:
    """The files at `paths` (relative to root), decoded, as one (N, size, size, 3) array."""
    out = np.empty((len(paths), size, size, 3), np.uint8)

    def one(index: int) -> None:
        relative = paths[index]
        out[index] = decode_image(read_file(root, relative), size, root / relative)

    with ThreadPoolExecutor(min(READ_THREADS, max(1, len(paths)))) as pool:
        list(pool.map(one, range(len(paths))))  # list(): the first error is raised here
    return out


def to_folder_rows(table: pa.Table, root: RunPath, size: int) -> dict[str, np.ndarray]:
    """One block of (path, label) rows as the rows Ray Data hands to training."""
    paths = table.column("path").to_pylist()
    labels = table.column("label").to_numpy().astype(np.int64, copy=False)
    return {"image": load_images(root, paths, size), "label": labels}
