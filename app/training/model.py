"""The networks `TRAIN_MODEL` can name, each adapted to the data's channels and image size.

`cnn`, `resnet18` and `vit` are the tutorial's models, built here. `resnet18` keeps that meaning
although torchvision has a model of the same name: it is torchvision's ResNet-18 with a 3x3 stem
for images up to 64px and a stem for the data's channel count, which is exactly torchvision's
resnet18 (and takes its ImageNet weights) for 3-channel images over 64px. Every other
torchvision classifier name is built by app/training/zoo.py.
"""

from __future__ import annotations

from torch import nn

from app.data.schema import DatasetInfo
from app.errors import ConfigError, did_you_mean
from app.settings.model_names import TUTORIAL_MODELS, is_zoo, known_models
from app.training import zoo

# Below this size a ResNet's 7x7/stride-2 stem and max-pool would shrink the image to nothing,
# so small images get the CIFAR-style 3x3/stride-1 stem instead.
SMALL_IMAGE = 64

# The tutorial's ViT for 32x32 images: patch 4 (an 8x8 grid), 12 layers, 8 heads, hidden 384,
# MLP 768. Other sizes keep the encoder and take their patch from vit_patch_for().
VIT_LAYERS, VIT_HEADS, VIT_HIDDEN, VIT_MLP = 12, 8, 384, 768
VIT_PATCHES = (16, 8, 4, 2)
# A grid of at least 7x7 patches: 28px -> 4 (7x7), 32px -> 4 (8x8, the tutorial's),
# 64px -> 8 (8x8), 224px -> 16 (14x14, ViT-B/16's). Tiny images settle for a 4x4 grid.
VIT_MIN_GRID, VIT_TINY_GRID = 7, 4


def build_model(name: str, info: DatasetInfo, vit_patch: int = 0) -> nn.Module:
    # A torchvision model's size check is a forward pass: preflight runs it once, not each build.
    problem = None if is_zoo(name) else model_problem(name, info, vit_patch)
    if problem:
        raise ConfigError(problem)
    if name == "cnn":
        return _small_cnn(info)
    if name == "resnet18":
        return _resnet18(info)
    if name == "vit":
        return _vit(info, vit_patch)
    return zoo.build_zoo(name, info.num_classes, info.channels)


def model_problem(name: str, info: DatasetInfo, vit_patch: int = 0) -> str | None:
    """Why `name` cannot train on this data, or None. Checked before any worker starts."""
    if name not in TUTORIAL_MODELS:
        if not is_zoo(name):
            hint = did_you_mean(name, known_models(), "`trainctl env` lists the models")
            return f"TRAIN_MODEL={name!r} is not a model{hint}"
        return zoo.shape_problem(name, info.num_classes, info.channels, info.height, info.width)
    if name == "vit":
        size = info.height
        if info.height != info.width:
            return f"TRAIN_MODEL=vit needs square images; the data is {info.height}x{info.width}"
        if vit_patch and (vit_patch > size or size % vit_patch):
            return (
                f"TRAIN_VIT_PATCH={vit_patch} does not divide the {size}px images into whole "
                f"patches; use a divisor of {size}, or 0 for the default rule"
            )
        if not vit_patch and vit_patch_for(size) is None:
            return (
                f"TRAIN_MODEL=vit has no default patch for {size}px images (the rule needs an "
                f"even image size of at least 8px); set TRAIN_VIT_PATCH to a divisor of {size}"
            )
    return None


def vit_patch_for(size: int) -> int | None:
    """The default patch: the largest of 16, 8, 4, 2 that cuts the image into whole patches and
    leaves a grid of at least 7x7 (at least 4x4 for tiny images), or None."""
    for grid in (VIT_MIN_GRID, VIT_TINY_GRID):
        for patch in VIT_PATCHES:
            if size % patch == 0 and size // patch >= grid:
                return patch
    return None


def uses_channels_last(name: str) -> bool:
    """CNNs run faster on channels_last batches; the ViT (one convolution, then matrix
    products) on contiguous NCHW ones. BENCHMARKS.md has the measurements. torchvision's
    transformers (ViT, Swin, MaxViT) follow the ViT's rule (zoo.is_transformer)."""
    return not zoo.is_transformer(name)


def _small_cnn(info: DatasetInfo) -> nn.Module:
    def block(cin: int, cout: int, stride: int) -> list[nn.Module]:
        return [
            nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
        ]

    return nn.Sequential(
        *block(info.channels, 32, 1),
        *block(32, 64, 2),
        *block(64, 128, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(128, info.num_classes),
    )


def _resnet18(info: DatasetInfo) -> nn.Module:
    from torchvision.models import resnet18

    model = resnet18(num_classes=info.num_classes)
    if max(info.height, info.width) <= SMALL_IMAGE:
        model.conv1 = nn.Conv2d(info.channels, 64, 3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()
    elif info.channels != 3:
        model.conv1 = nn.Conv2d(info.channels, 64, 7, stride=2, padding=3, bias=False)
    return model


def _vit(info: DatasetInfo, vit_patch: int) -> nn.Module:
    from torchvision.models import VisionTransformer

    patch = vit_patch or vit_patch_for(info.height)
    assert patch is not None  # model_problem() ruled this out
    model = VisionTransformer(
        image_size=info.height,
        patch_size=patch,
        num_layers=VIT_LAYERS,
        num_heads=VIT_HEADS,
        hidden_dim=VIT_HIDDEN,
        mlp_dim=VIT_MLP,
        num_classes=info.num_classes,
    )
    model.conv_proj = nn.Conv2d(info.channels, VIT_HIDDEN, kernel_size=patch, stride=patch)
    return model
