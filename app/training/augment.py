"""TRAIN_AUGMENT: random crops and flips of whole training batches, on the training device.

Applied to the normalized float batches `epoch_batches` yields (so padding is 0, the data's
mean colour), as one gather or one grid_sample per batch: no per-image Python loop, no CPU
work beyond drawing 2-5 numbers per image.
- crop, images up to 64px: pad by an eighth of the side (4px at 32px, 1px at 8px) and cut a
  random window of the original size (the CIFAR recipe).
- crop, larger images: random resized crop, 25-100% of the area at aspect 3/4-4/3, resized back
  bilinearly (torchvision's RandomResizedCrop, with a larger minimum area than its 8%, which is
  tuned for 90-epoch ImageNet runs rather than short fine-tuning).
- crop_flip: the same, and half the images mirrored left-right.
The random numbers come from a generator seeded by (seed, epoch, rank, step) alone, so a step
is augmented the same way whenever it runs, including after a mid-epoch resume. Validation is
never augmented: only the training loop calls this.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from app.data.kinds import dataset_kind

SMALL_IMAGE = 64  # up to this side: crop with padding; above: random resized crop
AREA = (0.25, 1.0)
ASPECT = (3 / 4, 4 / 3)
STREAM = 0xA06  # keeps these draws apart from any other stream seeded from the same values


def augment_mode(mode: str, dataset: str) -> str:
    """What TRAIN_AUGMENT=auto means for a dataset (its kind says: app/data/kind.py); other
    values as they are."""
    return dataset_kind(dataset).augment if mode == "auto" else mode


def augment(
    images: torch.Tensor, mode: str, *, seed: int, epoch: int, rank: int, step: int
) -> torch.Tensor:
    """The augmented batch (same shape, NCHW in channels_last memory); `images` untouched."""
    if mode in ("none", "auto") or images.shape[0] == 0:
        return images
    generator = _generator(seed, epoch, rank, step)
    rows, _, height, width = images.shape
    flips = torch.zeros(rows, dtype=torch.bool)
    if mode == "crop_flip":
        flips = torch.rand(rows, generator=generator) < 0.5
    if max(height, width) <= SMALL_IMAGE:
        return _padded_crop(images, flips, generator)
    return _resized_crop(images, flips, generator)


def _generator(seed: int, epoch: int, rank: int, step: int) -> torch.Generator:
    state = np.random.SeedSequence([seed, epoch, rank, step, STREAM]).generate_state(2)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


def _padded_crop(
    images: torch.Tensor, flips: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    rows, _, height, width = images.shape
    pad = max(1, min(height, width) // 8)
    device = images.device
    padded = F.pad(images, (pad, pad, pad, pad))
    dy = torch.randint(0, 2 * pad + 1, (rows, 1), generator=generator)
    dx = torch.randint(0, 2 * pad + 1, (rows, 1), generator=generator)
    ys = (dy + torch.arange(height)).to(device)
    xs = dx + torch.arange(width)
    xs = torch.where(flips[:, None], xs.flip(1), xs).to(device)  # a flip is reversed columns
    batch = torch.arange(rows, device=device)
    # Advanced indices around a slice put the indexed axes first: (N, H, W, C), which viewed
    # as NCHW is the channels_last layout the loop asks for.
    picked = padded[batch[:, None, None], :, ys[:, :, None], xs[:, None, :]]
    return picked.permute(0, 3, 1, 2)


def _resized_crop(
    images: torch.Tensor, flips: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    rows = images.shape[0]
    area = torch.empty(rows).uniform_(*AREA, generator=generator)
    log_aspect = torch.empty(rows).uniform_(*np.log(ASPECT).tolist(), generator=generator)
    aspect = log_aspect.exp()
    # Width and height as fractions of the image (affine_grid's [-1, 1] spans the whole side).
    width = (area * aspect).sqrt().clamp(max=1.0)
    height = (area / aspect).sqrt().clamp(max=1.0)
    cx = (torch.rand(rows, generator=generator) * 2 - 1) * (1 - width)
    cy = (torch.rand(rows, generator=generator) * 2 - 1) * (1 - height)
    theta = torch.zeros(rows, 2, 3)
    theta[:, 0, 0] = torch.where(flips, -width, width)
    theta[:, 0, 2] = cx
    theta[:, 1, 1] = height
    theta[:, 1, 2] = cy
    theta = theta.to(images.device, images.dtype)
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    out = F.grid_sample(images, grid, mode="bilinear", padding_mode="border", align_corners=False)
    return out.contiguous(memory_format=torch.channels_last)
