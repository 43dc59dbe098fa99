"""torchvision classifiers as TRAIN_MODEL: the head fits the classes, channels and kinds follow
the rules in app/training/zoo.py, and fine-tuning freezes and scales what it says. Real torch."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from app.data.schema import DatasetInfo
from app.settings import TrainSettings
from app.training import finetune, zoo
from app.training.model import build_model, model_problem, uses_channels_last

# One small member per family (build + one forward at 32px on CPU, well under a second each).
FAMILIES = {
    "mobilenet_v3_small": "classifier.3",
    "squeezenet1_1": "classifier.1",  # a 1x1 convolution, not a Linear
    "efficientnet_b0": "classifier.1",
    "regnet_x_400mf": "fc",
    "shufflenet_v2_x0_5": "fc",
    "densenet121": "classifier",
    "resnet50": "fc",
    "convnext_tiny": "classifier.2",
}


def _info(channels: int, size: int, classes: int) -> DatasetInfo:
    return DatasetInfo(
        channels=channels,
        height=size,
        width=size,
        num_classes=classes,
        train_rows=10,
        valid_rows=10,
        layout="raw",
        mean=(0.5,) * channels,
        std=(0.25,) * channels,
    )


def _out_size(layer: nn.Module) -> int:
    return layer.out_features if isinstance(layer, nn.Linear) else layer.out_channels


@pytest.mark.parametrize("name", list(FAMILIES))
def test_zoo_model_head_fits_the_classes_and_a_batch_passes(name: str) -> None:
    model = build_model(name, _info(3, 32, 7)).eval()
    prefix = zoo.head_prefix(model)
    assert prefix == FAMILIES[name]
    assert _out_size(model.get_submodule(prefix)) == 7
    with torch.no_grad():
        assert model(torch.randn(2, 3, 32, 32)).shape == (2, 7)


@pytest.mark.parametrize(("name", "prefix"), [("vit_b_16", "heads.head"), ("swin_t", "head")])
def test_transformer_heads_are_found_and_take_nchw_batches(name: str, prefix: str) -> None:
    with torch.device("meta"):  # ViT-B/16's 86M weights are never allocated
        model = build_model(name, _info(3, 224, 5))
    assert zoo.head_prefix(model) == prefix
    assert model.get_submodule(prefix).out_features == 5
    assert not uses_channels_last(name) and not uses_channels_last("vit")
    assert uses_channels_last("convnext_tiny") and uses_channels_last("cnn")


def test_one_channel_data_is_repeated_into_the_rgb_stem() -> None:
    model = build_model("mobilenet_v3_small", _info(1, 32, 3)).eval()
    assert model.features[0][0].in_channels == 3  # torchvision's stem, pretrained weights fit
    gray = torch.rand(2, 1, 32, 32)
    with torch.no_grad():
        assert torch.equal(model(gray), model(gray.expand(-1, 3, -1, -1)))


def test_model_that_cannot_take_the_image_size_is_a_preflight_problem() -> None:
    problem = model_problem("vit_b_16", _info(3, 32, 10)) or ""
    assert "TRAIN_MODEL=vit_b_16 cannot take 32x32 images" in problem and "224" in problem
    assert model_problem("vit_b_16", _info(3, 224, 10)) is None
    assert "did you mean resnet50?" in (model_problem("resnet5", _info(3, 32, 10)) or "")


def test_tutorial_names_keep_their_meaning() -> None:
    # resnet18 stays the tutorial's: a 3x3 stem for small images, not torchvision's 7x7 one.
    assert build_model("resnet18", _info(3, 32, 10)).conv1.kernel_size == (3, 3)
    assert build_model("resnet18", _info(3, 96, 10)).conv1.kernel_size == (7, 7)
    assert zoo.head_prefix(build_model("cnn", _info(1, 8, 10))) == "11"  # its last Linear


def _settings(**values: object) -> TrainSettings:
    return TrainSettings(model="mobilenet_v3_small", **values)  # type: ignore[arg-type]


def test_freeze_backbone_trains_only_the_head_and_keeps_batchnorm_statistics() -> None:
    model = build_model("mobilenet_v3_small", _info(3, 32, 4))
    groups = finetune.param_groups(model, _settings(freeze="backbone"))
    head = set(map(id, model.classifier[3].parameters()))
    assert [set(map(id, g["params"])) for g in groups] == [head]
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {"classifier.3.weight", "classifier.3.bias"}
    model.train()  # what the loop does every epoch
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert norms and not any(m.training for m in norms)
    before = {k: v.clone() for k, v in model.state_dict().items() if "classifier.3" not in k}
    model(torch.randn(4, 3, 32, 32)).sum().backward()
    after = model.state_dict()
    assert all(torch.equal(value, after[key]) for key, value in before.items())
    assert model.classifier[0].training  # the head's own layers still train


def test_backbone_lr_scale_is_a_param_group_multiplier() -> None:
    model = build_model("mobilenet_v3_small", _info(3, 32, 4))
    one = finetune.param_groups(model, _settings())
    assert len(one) == 1 and len(one[0]["params"]) == len(list(model.parameters()))
    groups = finetune.param_groups(model, _settings(backbone_lr_scale=0.1))
    optimizer = torch.optim.AdamW(groups, lr=1.0)
    for group in optimizer.param_groups:  # as the loop sets them every step
        group["lr"] = finetune.scaled_lr(group, 0.5)
    assert [g["lr"] for g in optimizer.param_groups] == [pytest.approx(0.05), 0.5]
    # The multiplier travels with the optimizer state, so a resumed run keeps it.
    assert [g["lr_scale"] for g in optimizer.state_dict()["param_groups"]] == [0.1, 1.0]


def test_freeze_without_a_head_is_refused() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
    with pytest.raises(ValueError, match="no classifier head"):
        finetune.param_groups(model, TrainSettings(model="cnn", freeze="backbone"))
