"""Every model adapts to the data's channels, size and classes."""

from __future__ import annotations

import pytest
import torch

from app.data import DatasetInfo
from app.errors import ConfigError
from app.model import build_model, model_problem


def _info(channels: int, size: int, classes: int, width: int | None = None) -> DatasetInfo:
    return DatasetInfo(
        channels=channels,
        height=size,
        width=width or size,
        num_classes=classes,
        train_rows=10,
        valid_rows=10,
        layout="tensor",
        mean=(0.5,) * channels,
        std=(0.25,) * channels,
    )


@pytest.mark.parametrize("name", ["cnn", "resnet18", "vit"])
@pytest.mark.parametrize(("channels", "size"), [(1, 8), (3, 32), (1, 28)])
def test_output_has_one_logit_per_class(name: str, channels: int, size: int) -> None:
    model = build_model(name, _info(channels, size, 7))
    logits = model(torch.randn(2, channels, size, size))
    assert logits.shape == (2, 7)


def test_large_images_keep_resnet_downsampling_stem() -> None:
    model = build_model("resnet18", _info(1, 96, 3))
    assert model.conv1.in_channels == 1 and model.conv1.stride == (2, 2)


def test_vit_refuses_images_it_cannot_patch() -> None:
    assert "square" in (model_problem("vit", _info(3, 32, 10, width=24)) or "")
    with pytest.raises(ConfigError, match="even image size"):
        build_model("vit", _info(1, 7, 10))
