"""torchvision's classifiers as `TRAIN_MODEL` values: names, kinds, building, the head.

Any name in `torchvision.models.list_models(module=torchvision.models)` trains, except the three
tutorial names (`cnn`, `resnet18`, `vit`), which keep their meaning (app/training/model.py).
The settings check names against app/settings/torchvision_names.py, which `python -m
app.training.zoo --write` generates from the installed torchvision (so they need no torch).

Rules, and why:
- The model is built by torchvision itself (`get_model(name, weights=None, num_classes=K)`), so
  its head already has K outputs and torchvision's own initialisation. Pretrained weights are
  loaded afterwards with the head's keys left out when their shapes differ (weights.py).
- The head is found generically: the last Linear or Conv2d (squeezenet's head is a 1x1
  convolution) under the first of `fc`, `classifier`, `heads`, `head` the model has, else the
  model's last Linear (the tutorial's cnn). It is what
  TRAIN_FREEZE=backbone leaves trainable and TRAIN_BACKBONE_LR_SCALE does not scale.
- 1-channel data into a 3-channel stem: the channel is repeated on the device by a forward
  pre-hook, not by changing the first convolution, so pretrained stems load unchanged and the
  state dict keeps torchvision's names. It costs one expand (a view, no copy) per batch.
- Kind: transformers (ViT, Swin, MaxViT) take contiguous NCHW batches like the tutorial ViT;
  every other family is a CNN and takes channels_last batches (app/training/accel.py).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

TRANSFORMER_FAMILIES = ("vit_", "swin_", "maxvit_")
HEAD_CONTAINERS = ("fc", "classifier", "heads", "head")
# googlenet and inception_v3 return (logits, aux logits) in training mode when their auxiliary
# heads are on; trainctl trains the main head only.
EXTRA_ARGS: dict[str, dict[str, Any]] = {
    "googlenet": {"aux_logits": False, "init_weights": False},
    "inception_v3": {"aux_logits": False, "init_weights": False},
}
RGB = 3


def is_transformer(name: str) -> bool:
    return name == "vit" or name.startswith(TRANSFORMER_FAMILIES)


def build_zoo(name: str, num_classes: int, channels: int) -> nn.Module:
    from torchvision.models import get_model

    model = get_model(name, weights=None, num_classes=num_classes, **EXTRA_ARGS.get(name, {}))
    if channels != RGB:
        model.register_forward_pre_hook(_repeat_channel)
    return model


def _repeat_channel(module: nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    images = args[0]
    return (images.expand(-1, RGB, -1, -1), *args[1:])


def head_prefix(model: nn.Module) -> str | None:
    """The qualified name of the classifier head's last layer (`fc`, `classifier.3`,
    `heads.head`, ...), or None for a model without one of the usual head containers."""
    for container in HEAD_CONTAINERS:
        module = getattr(model, container, None)
        if not isinstance(module, nn.Module):
            continue
        if isinstance(module, nn.Linear | nn.Conv2d):
            return container
        last = None
        for child_name, child in module.named_modules():
            if isinstance(child, nn.Linear | nn.Conv2d):
                last = child_name
        if last is not None:
            return f"{container}.{last}"
    # A plain stack (the tutorial's cnn): its last Linear, if nothing follows it but shapes.
    linears = [name for name, child in model.named_modules() if isinstance(child, nn.Linear)]
    return linears[-1] if linears else None


def head_keys(model: nn.Module) -> set[str]:
    """State-dict keys of the head's last layer (weight, bias)."""
    prefix = head_prefix(model)
    if prefix is None:
        return set()
    return {key for key in model.state_dict() if key.startswith(prefix + ".")}


def shape_problem(
    name: str, num_classes: int, channels: int, height: int, width: int
) -> str | None:
    """Why torchvision's `name` cannot take HxW images, found by one forward pass of a
    weightless copy (on the meta device, which allocates nothing), or None."""
    try:
        with torch.device("meta"):
            model = build_zoo(name, num_classes, channels)
        device = torch.device("meta")
    except Exception:  # a few builders (regnet) compute widths with real tensors
        model, device = build_zoo(name, num_classes, channels), torch.device("cpu")
    try:
        with torch.no_grad():
            model.eval()(torch.zeros(1, channels, height, width, device=device))
    except Exception as err:  # the model's own complaint about the size
        first = (str(err).strip().splitlines() or [""])[0][:160]
        return (
            f"TRAIN_MODEL={name} cannot take {height}x{width} images ({first}); "
            "use images of the size it was designed for (TRAIN_IMAGE_SIZE) or another model"
        )
    return None


def torchvision_names() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The installed torchvision's classifier names and their weights names
    (`ResNet50_Weights.IMAGENET1K_V2`, `ResNet50_Weights.DEFAULT`, ...)."""
    import torchvision
    from torchvision.models import get_model_weights

    classifiers = tuple(torchvision.models.list_models(module=torchvision.models))
    weights = []
    for name in classifiers:
        enum = get_model_weights(name)
        weights += [f"{enum.__name__}.{member}" for member in enum.__members__]
    return classifiers, tuple(weights)


def weights_families() -> dict[str, str]:
    """Each classifier's weights enum (`resnet50` -> `ResNet50_Weights`)."""
    import torchvision
    from torchvision.models import get_model_weights

    names = torchvision.models.list_models(module=torchvision.models)
    return {name: get_model_weights(name).__name__ for name in names}


NAMES_FILE = Path(__file__).resolve().parents[1] / "settings" / "torchvision_names.py"


_NAMES_HEADER = '''"""torchvision's classifier and weights names, for the settings checks that
must not import torch: `trainctl render` and `submit` check TRAIN_MODEL and TRAIN_WEIGHTS too.

Generated from torchvision {version} by `python -m app.training.zoo --write`;
tests/unit/test_settings_pure.py fails when the installed torchvision lists others.
"""

TORCHVISION_VERSION = "{version}"
'''


def names_module() -> str:
    """The text of app/settings/torchvision_names.py for the installed torchvision."""
    import torchvision

    classifiers, weights = torchvision_names()

    def listed(names: tuple[str, ...]) -> str:
        return "".join(f'    "{name}",\n' for name in names)

    version = torchvision.__version__.split("+")[0]  # the release, not the local build tag
    return (
        _NAMES_HEADER.format(version=version)
        + f"CLASSIFIERS = (\n{listed(classifiers)})\n"
        + f"WEIGHTS = (\n{listed(weights)})\n"
        + "# Each classifier's weights enum: TRAIN_WEIGHTS names one of its members.\n"
        + "WEIGHTS_OF = {\n"
        + "".join(f'    "{model}": "{family}",\n' for model, family in weights_families().items())
        + "}\n"
    )


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        print(names_module(), end="")
    else:
        NAMES_FILE.write_text(names_module())
