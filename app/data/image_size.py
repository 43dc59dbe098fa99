"""The side, in pixels, that image-folder datasets are resized to when TRAIN_IMAGE_SIZE=0.

One function decides it, so that the rule can be refined in one place (for example from a
pretrained model's own transforms).
"""

from __future__ import annotations

IMAGE_SIZE_MIN = 8  # below this a 3x3-convolution network has nothing left to see
IMAGE_SIZE_MAX = 1024  # 1024x1024x3 uint8 is 3 MiB a row: larger would not batch on a GPU
TUTORIAL_MODELS = ("cnn", "resnet18", "vit")
TUTORIAL_SIZE = 32  # the tutorial's data (CIFAR-10, synthetic) is 32x32
ZOO_SIZE = 224  # what torchvision's ImageNet classifiers are built and trained for
IMAGE_SIZE_RULE = (
    f"{TUTORIAL_SIZE} for the tutorial models ({', '.join(TUTORIAL_MODELS)}), "
    f"{ZOO_SIZE} for other torchvision models"
)


def image_size_for(model_name: str, requested: int = 0) -> int:
    """`requested` when set (TRAIN_IMAGE_SIZE), else the model's size (IMAGE_SIZE_RULE)."""
    if requested:
        return requested
    return TUTORIAL_SIZE if model_name in TUTORIAL_MODELS else ZOO_SIZE
