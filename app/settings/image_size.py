"""TRAIN_IMAGE_SIZE's rule: its bounds and, in words, what 0 means (app/data/image_size.py
applies it, asking torchvision for a pretrained model's own crop size)."""

from __future__ import annotations

from app.settings.model_names import TUTORIAL_MODELS

IMAGE_SIZE_MIN = 8  # below this a 3x3-convolution network has nothing left to see
IMAGE_SIZE_MAX = 1024  # 1024x1024x3 uint8 is 3 MiB a row: larger would not batch on a GPU
TUTORIAL_SIZE = 32  # the tutorial's data (CIFAR-10, synthetic) is 32x32
ZOO_SIZE = 224  # what torchvision's ImageNet classifiers are built and trained for
IMAGE_SIZE_RULE = (
    f"{TUTORIAL_SIZE} for the tutorial models ({', '.join(TUTORIAL_MODELS)}), "
    f"{ZOO_SIZE} for other torchvision models, or the crop size of TRAIN_WEIGHTS' own "
    "transforms when it names torchvision weights"
)
