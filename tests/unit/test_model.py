"""Every model adapts to the data's channels, size and classes."""

from __future__ import annotations

import pytest
import torch

from app.data.schema import DatasetInfo
from app.errors import ConfigError
from app.training.model import build_model, model_problem, vit_patch_for


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


def test_vit_on_32px_is_the_tutorials_vit() -> None:
    model = build_model("vit", _info(3, 32, 10))
    assert model.patch_size == 4 and model.conv_proj.kernel_size == (4, 4)
    assert model.seq_length == 8 * 8 + 1  # an 8x8 grid of patches and the class token
    assert len(model.encoder.layers) == 12 and model.hidden_dim == 384 and model.mlp_dim == 768
    assert model.encoder.layers[0].self_attention.num_heads == 8


@pytest.mark.parametrize(("size", "patch"), [(28, 4), (32, 4), (64, 8), (224, 16), (8, 2)])
def test_default_vit_patch_rule(size: int, patch: int) -> None:
    assert vit_patch_for(size) == patch
    assert build_model("vit", _info(1, size, 3)).patch_size == patch


def test_explicit_vit_patch_wins_and_a_bad_one_names_the_variable() -> None:
    assert build_model("vit", _info(3, 32, 10), vit_patch=8).patch_size == 8
    problem = model_problem("vit", _info(3, 32, 10), vit_patch=5) or ""
    assert problem.startswith("TRAIN_VIT_PATCH=5 does not divide the 32px images")
    assert model_problem("cnn", _info(3, 32, 10), vit_patch=5) is None  # only the ViT has patches
