"""The side, in pixels, that image-folder datasets are resized to when TRAIN_IMAGE_SIZE=0.

One function decides it, so that the rule can be refined in one place (for example from a
pretrained model's own transforms). The rule's words and bounds are the setting's
(app/settings/image_size.py); this module applies them, asking torchvision where it must.
"""

from __future__ import annotations

from app.settings.image_size import TUTORIAL_MODELS, TUTORIAL_SIZE, ZOO_SIZE


def image_size_for(model_name: str, requested: int = 0, weights: str | None = None) -> int:
    """`requested` when set (TRAIN_IMAGE_SIZE), else the size the pretrained weights were
    trained at, else the model's size (IMAGE_SIZE_RULE)."""
    if requested:
        return requested
    pretrained = weights_crop_size(model_name, weights)
    if pretrained:
        return pretrained
    return TUTORIAL_SIZE if model_name in TUTORIAL_MODELS else ZOO_SIZE


def weights_crop_size(model_name: str, weights: str | None) -> int | None:
    """The crop size of torchvision weights' own transforms (224 for most ImageNet weights),
    for a TRAIN_WEIGHTS that names them (`X_Weights.Y` or `DEFAULT`); None for a file or none.
    The name was validated with the settings, so torchvision resolves it here."""
    if not weights or model_name in ("cnn", "vit"):  # no torchvision weights exist for these
        return None
    if weights != "DEFAULT" and "_Weights." not in weights:
        return None  # a state-dict file: its size is whatever the data is resized to
    from torchvision.models import get_model_weights, get_weight

    enum = get_model_weights(model_name).DEFAULT if weights == "DEFAULT" else get_weight(weights)
    crop = getattr(enum.transforms(), "crop_size", None)
    return int(crop[0]) if crop else None
