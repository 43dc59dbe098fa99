"""TRAIN_FREEZE and TRAIN_BACKBONE_LR_SCALE: which parameters train, and at what rate.

The head is the classifier's last layer (app/training/zoo.py `head_prefix`); the backbone is
every other parameter.
- freeze=backbone: backbone parameters get requires_grad False before DDP wraps the model (DDP
  then never syncs them) and are left out of the optimizer. The backbone's BatchNorm layers stay
  in eval mode even when the loop calls model.train(): their running statistics belong to the
  pretrained features too, and updating them from small fine-tuning batches would change what
  "frozen" means. So after training, the backbone's whole state (weights and statistics) is
  unchanged.
- backbone_lr_scale: below 1 the backbone gets its own optimizer param group carrying
  `lr_scale`; the loop's schedule sets each group's lr to schedule(step) * lr_scale, so the
  ratio holds at every step and is saved with the optimizer state for resume. At 1 (and with
  nothing frozen) there is one group, as before. A rerun must keep TRAIN_FREEZE and whether the
  scale is 1, since the optimizer state it resumes is laid out by these groups.
"""

from __future__ import annotations

import types
from typing import Any

from torch import nn

from app.settings import TrainSettings
from app.training.zoo import head_prefix


def param_groups(model: nn.Module, settings: TrainSettings) -> list[dict[str, Any]]:
    """Freeze what TRAIN_FREEZE says and return the optimizer's param groups (non-empty ones)."""
    prefix = head_prefix(model)
    head, backbone = [], []
    for name, param in model.named_parameters():
        is_head = prefix is not None and name.startswith(prefix + ".")
        (head if is_head else backbone).append(param)
    if settings.freeze == "backbone":
        if not head:
            raise ValueError(
                f"TRAIN_FREEZE=backbone: {settings.model} has no classifier head to train"
            )
        for param in backbone:
            param.requires_grad_(False)
        _pin_eval_batchnorm(model, prefix)
        return [{"params": head, "lr_scale": 1.0}]
    if settings.backbone_lr_scale == 1.0:
        # One group in the model's own order: the optimizer state of runs from before param
        # groups existed still resumes.
        return [{"params": list(model.parameters())}]
    groups = [
        {"params": backbone, "lr_scale": settings.backbone_lr_scale},
        {"params": head, "lr_scale": 1.0},
    ]
    return [group for group in groups if group["params"]]


def _pin_eval_batchnorm(model: nn.Module, head: str | None) -> None:
    for name, module in model.named_modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and not (
            head and name.startswith(head)
        ):
            module.eval()
            # nn.Module.train(mode) recurses through children's own .train: this one stays off.
            module.train = types.MethodType(_stay_in_eval, module)  # type: ignore[method-assign]


def _stay_in_eval(module: nn.Module, mode: bool = True) -> nn.Module:
    return nn.Module.train(module, False)


def scaled_lr(group: dict[str, Any], lr: float) -> float:
    """The lr of one param group at a step whose schedule gives `lr`."""
    return lr * float(group.get("lr_scale", 1.0))
