"""Image columns as users store them in Parquet, turned into uint8 arrays shaped (N, H, W, C).

Four physical layouts are understood; all are decoded with whole-column (vectorized) numpy and
pyarrow operations except `encoded`, where each PNG/JPEG needs its own decode call:

- `raw`: fixed-size binary holding the H*W*C pixel bytes of each image, row-major (H, W, C), with
  the shape in the column's Parquet field metadata. What `trainctl prepare-data` writes: Parquet
  stores it as one byte per pixel with no per-value list levels, so it reads several times faster
  than the other layouts.
- `tensor`: Ray Data's fixed-shape tensor extension (what `ray.data` writes from numpy arrays),
  or Arrow's canonical fixed_shape_tensor.
- `list`: nested lists, HxW or HxWxC (what pandas writes from `array.tolist()`); flat lists are
  accepted for square grayscale images only, since a flat color image has no known pixel order.
- `encoded`: PNG or JPEG bytes, in a binary column or a struct with a `bytes` field (the layout
  Hugging Face datasets export).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from PIL import Image

# ImageError is every image reader's error; it is re-exported from here.
from app.data.image_decode import (
    COLOR_MODES,
    GRAY_MODES,
    ImageError,
    TooManyPixelsError,
    open_image,
)

SHAPE_KEY = b"trainctl.image_shape"
TENSOR_EXTENSIONS = (
    "ray.data.arrow_tensor",
    "ray.data.arrow_tensor_v2",
    "arrow.fixed_shape_tensor",
)
VARIABLE_TENSOR_EXTENSIONS = ("ray.data.arrow_variable_shaped_tensor",)
ENCODED_MAGIC = (b"\x89PNG", b"\xff\xd8\xff")
ALLOWED = (
    "allowed: Ray tensor column (ray.data from numpy arrays), nested integer lists HxW or "
    "HxWxC, PNG/JPEG bytes, or fixed-size raw bytes with trainctl.image_shape metadata"
)


@dataclass(frozen=True)
class ImageFormat:
    layout: str  # raw | tensor | list | encoded
    stored_shape: tuple[int, ...]  # one image as stored; () for encoded
    height: int
    width: int
    channels: int


def describe_type(field: pa.Field) -> tuple[str, tuple[int, ...] | None]:
    """The layout of an image column, and the per-image shape when the schema alone tells it."""
    kind = field.type
    if isinstance(kind, pa.BaseExtensionType):
        if kind.extension_name in VARIABLE_TENSOR_EXTENSIONS:
            raise ImageError("images have mixed shapes (a variable-shaped tensor column)")
        if kind.extension_name in TENSOR_EXTENSIONS:
            _check_value_type(getattr(kind, "scalar_type", None) or kind.value_type)
            shape = tuple(int(d) for d in kind.shape)
            identity = list(range(len(shape)))
            if list(getattr(kind, "permutation", None) or identity) != identity:
                raise ImageError("tensors with a dimension permutation are not supported")
            return "tensor", shape
        raise ImageError(f"type {kind.extension_name} is not an image layout; {ALLOWED}")
    metadata = field.metadata or {}
    if (
        pa.types.is_fixed_size_binary(kind)
        or pa.types.is_binary(kind)
        or (pa.types.is_large_binary(kind))
    ):
        if SHAPE_KEY in metadata:
            return "raw", _parse_shape(metadata[SHAPE_KEY])
        return "encoded", None
    if pa.types.is_struct(kind):
        index = kind.get_field_index("bytes")
        if index >= 0 and pa.types.is_binary(kind.field(index).type):
            return "encoded", None
    if _is_list(kind):
        while _is_list(kind):
            kind = kind.value_type
        _check_value_type(kind)
        return "list", None
    raise ImageError(f"type {field.type}; {ALLOWED}")


def infer_format(field: pa.Field, sample: pa.ChunkedArray | pa.Array) -> ImageFormat:
    """Work out one image's shape and channels from the schema and, if needed, a data sample."""
    layout, shape = describe_type(field)
    column = _single(sample)
    if len(column) == 0:
        raise ImageError("no images to look at")
    if layout == "encoded":
        return _encoded_format(column)
    if shape is None:  # nested lists: the first image's lengths, level by level
        shape = _first_list_shape(column)
    height, width, channels = geometry(shape)
    return ImageFormat(layout, shape, height, width, channels)


def geometry(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(height, width, channels) for a stored image shape: HxW, HxWxC, CxHxW or flat square."""
    if not shape or min(shape) < 1:
        raise ImageError(f"image shape {shape} has an empty dimension")
    if len(shape) == 1:
        side = math.isqrt(shape[0])
        if side * side != shape[0]:
            raise ImageError(
                f"flat images of {shape[0]} values: only square grayscale images may be flat; "
                "store nested lists HxW or HxWxC"
            )
        return side, side, 1
    if len(shape) == 2:
        return shape[0], shape[1], 1
    if len(shape) == 3 and shape[2] in (1, 3):
        return shape[0], shape[1], shape[2]
    if len(shape) == 3 and shape[0] in (1, 3):
        return shape[1], shape[2], shape[0]
    raise ImageError(
        f"image shape {shape}: need HxW, HxWxC or CxHxW with 1 (grayscale) or 3 (RGB) channels"
    )


def to_uint8_rows(table: pa.Table, fmt: ImageFormat) -> dict[str, np.ndarray]:
    """One Parquet block as the rows Ray Data hands to training: uint8 NHWC images and labels.

    It lives here, not in app.data.pipeline, because Ray's read tasks import the module of the
    function they run: this one needs numpy and pyarrow only, so those short-lived processes
    skip importing torch (about 2 s each on a small machine; BENCHMARKS.md, startup).
    """
    images = to_images(table.column("image"), fmt)
    labels = table.column("label").to_numpy().astype(np.int64, copy=False)
    return {"image": images, "label": labels}


def to_images(column: pa.ChunkedArray | pa.Array, fmt: ImageFormat) -> np.ndarray:
    """All images of a column as one C-contiguous uint8 array shaped (N, H, W, C)."""
    array = _single(column)
    if array.null_count:
        raise ImageError(f"{array.null_count} images are missing (null)")
    if fmt.layout == "encoded":
        return _decode_encoded(array, fmt)
    if fmt.layout == "raw":
        pixels = _raw_pixels(array, math.prod(fmt.stored_shape))
    elif fmt.layout == "tensor":
        if tuple(array.type.shape) != fmt.stored_shape:
            raise ImageError(
                f"images have mixed shapes: {tuple(array.type.shape)} and {fmt.stored_shape}"
            )
        # The extension's storage is one flat list of every pixel per image.
        pixels = _as_uint8(_flat_values(array.storage, 0, None))
    else:
        pixels = _as_uint8(_flat_values(array, len(fmt.stored_shape) - 1, fmt.stored_shape))
    images = pixels.reshape(len(array), *fmt.stored_shape)
    if len(fmt.stored_shape) == 3 and fmt.stored_shape[0] == fmt.channels != fmt.stored_shape[2]:
        images = np.ascontiguousarray(images.transpose(0, 2, 3, 1))  # CxHxW -> HxWxC
    return images.reshape(len(array), fmt.height, fmt.width, fmt.channels)


# --- helpers -----------------------------------------------------------------------------------
def _is_list(kind: pa.DataType) -> bool:
    return (
        pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    )


def _check_value_type(kind: pa.DataType) -> None:
    if not pa.types.is_integer(kind):
        raise ImageError(f"pixels are {kind}; images must be uint8 (integers 0..255)")


def _parse_shape(text: bytes) -> tuple[int, ...]:
    try:
        shape = tuple(int(part) for part in text.decode().split(","))
    except ValueError:
        raise ImageError(f"metadata {SHAPE_KEY.decode()}={text!r} is not like 32,32,3") from None
    geometry(shape)
    return shape


def _single(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        # One chunk is used as is: combining would copy every image.
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return column


def _first_list_shape(column: pa.Array) -> tuple[int, ...]:
    shape = []
    value = column[0].as_py()
    while isinstance(value, list):
        if not value:
            raise ImageError("the first image is an empty list")
        shape.append(len(value))
        value = value[0]
    return tuple(shape)


def _flat_values(array: pa.Array, levels: int, shape: tuple[int, ...] | None) -> np.ndarray:
    """Every pixel of nested lists, in order; checks each level's lengths when shape is given."""
    for depth in range(levels + 1):
        if shape is not None:
            lengths = pc.min_max(pc.list_value_length(array))
            low, high = lengths["min"].as_py(), lengths["max"].as_py()
            if array.null_count or low != shape[depth] or high != shape[depth]:
                raise ImageError(
                    f"images have mixed shapes: dimension {depth} has lengths {low}..{high}, "
                    f"expected {shape[depth]} (shape {shape})"
                )
        array = array.flatten()
    return array.to_numpy(zero_copy_only=False)


def _as_uint8(values: np.ndarray) -> np.ndarray:
    if values.dtype == np.uint8:
        return values
    if values.dtype.kind not in "iu":
        raise ImageError(f"pixels are {values.dtype}; images must be uint8 (integers 0..255)")
    low, high = (int(values.min()), int(values.max())) if values.size else (0, 0)
    if low < 0 or high > 255:
        raise ImageError(f"pixel values span {low}..{high}; uint8 images need 0..255")
    return values.astype(np.uint8)


def _raw_pixels(array: pa.Array, per_image: int) -> np.ndarray:
    if pa.types.is_fixed_size_binary(array.type):
        if array.type.byte_width != per_image:
            raise ImageError(f"raw images of {array.type.byte_width} bytes, expected {per_image}")
        start = array.offset * per_image
        return np.frombuffer(array.buffers()[1], np.uint8, len(array) * per_image, start)
    offset_type = np.int64 if pa.types.is_large_binary(array.type) else np.int32
    offsets = np.frombuffer(array.buffers()[1], offset_type)
    offsets = offsets[array.offset : array.offset + len(array) + 1]
    sizes = np.diff(offsets)
    if len(sizes) and (sizes.min() != per_image or sizes.max() != per_image):
        raise ImageError(f"raw images of {sizes.min()}..{sizes.max()} bytes, expected {per_image}")
    data = np.frombuffer(array.buffers()[2], np.uint8)
    return data[offsets[0] : offsets[-1]]


def _encoded_values(array: pa.Array) -> list[bytes]:
    if pa.types.is_struct(array.type):
        array = array.field("bytes")
    return array.to_pylist()


def _encoded_format(column: pa.Array) -> ImageFormat:
    sizes, color = set(), False
    for row, data in enumerate(_encoded_values(column)):
        image = _open(data, row)  # reads the header only
        if image.mode not in GRAY_MODES | COLOR_MODES:
            raise ImageError(f"row {row}: {image.mode} images are not 8-bit; images must be uint8")
        sizes.add(image.size)
        color = color or image.mode in COLOR_MODES
        image.close()
    if len(sizes) > 1:
        raise ImageError(f"images have mixed sizes {sorted(sizes)[:3]} (width, height)")
    width, height = sizes.pop()
    return ImageFormat("encoded", (), height, width, 3 if color else 1)


def _open(data: bytes | None, row: int) -> Image.Image:
    """The row's image, its header read: under the pixel limit image folders and `predict`
    have too (app/data/image_decode.py)."""
    if not data or not data.startswith(ENCODED_MAGIC):
        raise ImageError(f"row {row}: not PNG or JPEG bytes")
    try:
        return open_image(data, f"row {row}")
    except TooManyPixelsError:
        raise
    except ImageError as err:
        why = str(err).removeprefix(f"row {row}: ")
        raise ImageError(f"row {row}: not a decodable PNG/JPEG image ({why})") from None


def _decode_encoded(array: pa.Array, fmt: ImageFormat) -> np.ndarray:
    mode = "L" if fmt.channels == 1 else "RGB"
    out = np.empty((len(array), fmt.height, fmt.width, fmt.channels), np.uint8)
    for row, data in enumerate(_encoded_values(array)):
        image = _open(data, row)
        if image.mode not in GRAY_MODES | COLOR_MODES:
            raise ImageError(f"row {row}: {image.mode} images are not 8-bit; images must be uint8")
        if image.size != (fmt.width, fmt.height):
            raise ImageError(
                f"row {row}: {image.size[0]}x{image.size[1]} (width x height) where the other "
                f"images are {fmt.width}x{fmt.height}; images must all be one size"
            )
        try:
            pixels = np.asarray(image.convert(mode))
        except OSError as err:  # a truncated or corrupt file fails only when decoded
            raise ImageError(f"row {row}: not a decodable PNG/JPEG image ({err})") from None
        out[row] = pixels.reshape(fmt.height, fmt.width, fmt.channels)
    return out
