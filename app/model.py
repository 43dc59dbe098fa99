"""The networks `TRAIN_MODEL` can name, each adapted to the data's channels and image size."""

from __future__ import annotations

from torch import nn

from app.data import DatasetInfo
from app.errors import ConfigError

# Below this size a ResNet's 7x7/stride-2 stem and max-pool would shrink the image to nothing,
# so small images get the CIFAR-style 3x3/stride-1 stem instead.
SMALL_IMAGE = 64

# The reference ViT for 32x32 images (patch 4, 12 layers, 8 heads, hidden 384, MLP 768).
VIT_LAYERS, VIT_HEADS, VIT_HIDDEN, VIT_MLP = 12, 8, 384, 768


def build_model(name: str, info: DatasetInfo) -> nn.Module:
    problem = model_problem(name, info)
    if problem:
        raise ConfigError(problem)
    if name == "cnn":
        return _small_cnn(info)
    if name == "resnet18":
        return _resnet18(info)
    return _vit(info)


def model_problem(name: str, info: DatasetInfo) -> str | None:
    """Why `name` cannot train on this data, or None. Checked before any worker starts."""
    if name == "vit":
        if info.height != info.width:
            return f"TRAIN_MODEL=vit needs square images; the data is {info.height}x{info.width}"
        if _vit_patch(info.height) is None:
            return f"TRAIN_MODEL=vit needs an even image size; the data is {info.height}px"
    return None


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


def _vit_patch(size: int) -> int | None:
    # Aim for at least a 4x4 grid of patches; tiny images get 2-pixel patches.
    for patch in (16, 8, 4, 2):
        if size % patch == 0 and size // patch >= 4:
            return patch
    return None


def _vit(info: DatasetInfo) -> nn.Module:
    from torchvision.models import VisionTransformer

    patch = _vit_patch(info.height)
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
