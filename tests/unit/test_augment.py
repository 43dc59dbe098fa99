"""TRAIN_AUGMENT on whole batches: deterministic per (seed, epoch, rank, step), crops that move
pixels but never invent them, flips only where asked, and never on validation."""

from __future__ import annotations

import inspect

import pytest
import torch

from app.training import loop, validation
from app.training.augment import augment, augment_mode

KEY = {"seed": 5, "epoch": 2, "rank": 1, "step": 17}


def _batch(rows: int = 16, size: int = 8, channels: int = 3) -> torch.Tensor:
    torch.manual_seed(0)
    # channels_last NCHW, as epoch_batches yields them
    return torch.randn(rows, size, size, channels).permute(0, 3, 1, 2)


def test_auto_never_flips_digits() -> None:
    assert augment_mode("auto", "digits") == "crop"
    assert augment_mode("auto", "mnist") == "crop"
    assert augment_mode("auto", "cifar10") == "crop_flip"
    assert augment_mode("auto", "fashion_mnist") == "crop_flip"
    assert augment_mode("none", "cifar10") == "none"


@pytest.mark.parametrize("size", [8, 96])
def test_same_key_same_batch_other_step_other_batch(size: int) -> None:
    images = _batch(size=size)
    first = augment(images, "crop_flip", **KEY)
    assert torch.equal(first, augment(images, "crop_flip", **KEY))
    assert not torch.equal(first, augment(images, "crop_flip", **{**KEY, "step": 18}))
    assert not torch.equal(first, augment(images, "crop_flip", **{**KEY, "rank": 0}))
    assert first.shape == images.shape
    assert first.is_contiguous(memory_format=torch.channels_last)


def _match(out: torch.Tensor, image: torch.Tensor, pad: int) -> set[bool]:
    """Which of (not flipped, flipped) windows of the zero-padded image equal `out`."""
    padded = torch.nn.functional.pad(image, (pad,) * 4)
    size = image.shape[-1]
    found = set()
    for dy in range(2 * pad + 1):
        for dx in range(2 * pad + 1):
            window = padded[:, dy : dy + size, dx : dx + size]
            for flipped in (False, True):
                if torch.equal(out, window.flip(-1) if flipped else window):
                    found.add(flipped)
    return found


def test_crop_moves_pixels_and_crop_flip_also_mirrors() -> None:
    images = _batch(rows=32, size=16)
    cropped = augment(images, "crop", **KEY)
    flipped = augment(images, "crop_flip", **KEY)
    kinds_crop, kinds_flip = set(), set()
    for i in range(len(images)):
        crop_match = _match(cropped[i], images[i], pad=2)
        assert crop_match and False in crop_match  # a shifted window, never mirrored only
        kinds_crop |= crop_match
        kinds_flip |= _match(flipped[i], images[i], pad=2)
    assert not torch.equal(cropped, images)  # 32 images: some window moved
    assert kinds_flip == {False, True}  # some mirrored, some not


def test_none_returns_the_batch_itself_and_validation_is_not_augmented() -> None:
    images = _batch()
    assert augment(images, "none", **KEY) is images
    # Only the training loop calls augment; the validation pass has no such step.
    assert "augment" not in inspect.getsource(validation)
    assert "augment(" in inspect.getsource(loop.train_step)
