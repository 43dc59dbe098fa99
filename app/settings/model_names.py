"""TRAIN_MODEL and TRAIN_WEIGHTS: which names exist, checked without importing torch.

The names torchvision knows come from torchvision_names.py, generated from the pinned
torchvision, so these checks give the same "did you mean" wherever the settings are read:
`trainctl train`, and `render`/`submit` before anything reaches a cluster. What needs torch
(whether a file's tensors fit the model, downloading named weights) is preflight's, in
app/training/weights.py; whether named weights belong to TRAIN_MODEL is told by their names.
"""

from __future__ import annotations

import difflib
import re

from app.errors import did_you_mean
from app.settings.torchvision_names import CLASSIFIERS, WEIGHTS, WEIGHTS_OF
from app.storage.location import RunPath, location_setting, parse_location

# The tutorial's models keep their meaning even where torchvision has the same name (resnet18).
TUTORIAL_MODELS = ("cnn", "resnet18", "vit")
DEFAULT_WEIGHTS = "DEFAULT"
WEIGHTS_NAME = re.compile(r"\A[A-Za-z0-9_]+_Weights\.[A-Za-z0-9_]+\Z")
# What a weights name typed in the wrong case looks like (`resnet18_weights.imagenet1k_v1`):
# not a name, so it would be read as a file path and refused as "no such file" without a hint.
CASELESS_NAME = re.compile(r"\A[A-Za-z0-9_]+_weights\.[A-Za-z0-9_]+\Z", re.IGNORECASE)


def is_zoo(name: str) -> bool:
    """A torchvision classifier that is not one of the tutorial's names."""
    return name not in TUTORIAL_MODELS and name in CLASSIFIERS


def known_models() -> tuple[str, ...]:
    return tuple(sorted(set(TUTORIAL_MODELS) | set(CLASSIFIERS)))


def check_model(value: str) -> str:
    if value in TUTORIAL_MODELS or is_zoo(value):
        return value
    hint = did_you_mean(value, known_models(), "`trainctl env` describes TRAIN_MODEL")
    raise ValueError(f"must be cnn, resnet18, vit or a torchvision classifier name{hint}")


def is_weights_name(value: str) -> bool:
    return value == DEFAULT_WEIGHTS or bool(WEIGHTS_NAME.match(value))


def weights_name_problem(value: str) -> str | None:
    """Why `value`, written as a weights name, names no torchvision classifier's weights."""
    if value == DEFAULT_WEIGHTS or value in WEIGHTS:
        return None
    hint = did_you_mean(value, WEIGHTS, "see torchvision's model documentation")
    return f"{value!r} is not a torchvision weights name{hint}"


def weights_pairing_problem(model: str, value: str) -> str | None:
    """Why the torchvision weights named `value` are not TRAIN_MODEL's, or None: by their
    names alone, so that `render` and `submit` refuse what the pods' `check` would."""
    if model in ("cnn", "vit"):
        return (
            f"TRAIN_WEIGHTS={value}: TRAIN_MODEL={model} is the tutorial's model, which has no "
            "torchvision weights; use a torchvision model (vit_b_16 for a ViT) or a file"
        )
    family = WEIGHTS_OF.get(model)
    if family is None or value == DEFAULT_WEIGHTS or value.split(".", 1)[0] == family:
        return None
    members = [name.split(".", 1)[1] for name in WEIGHTS if name.startswith(family + ".")]
    return (
        f"TRAIN_WEIGHTS={value} are not weights for TRAIN_MODEL={model}; its weights are "
        f"{family}.<{'|'.join(members)}>"
    )


def check_weights(value: str) -> str:
    """The setting as stored: a known weights name, or an absolute path / bucket URI."""
    value = value.strip()
    if is_weights_name(value):
        problem = weights_name_problem(value)
        if problem:
            raise ValueError(problem)
        return value
    location = weights_location(value)
    # Only a bare name can be a miscased weights name (a URI never is): checked first.
    looks_named = value.casefold() == DEFAULT_WEIGHTS.casefold() or CASELESS_NAME.match(value)
    if looks_named and not location.exists():
        _refuse_miscased_name(value)
    return str(location)


def weights_location(value: str) -> RunPath:
    location_setting(value)  # refuses what only looks like a URI, as every storage setting does
    return parse_location(value)


def _refuse_miscased_name(value: str) -> None:
    """ValueError with the right spelling when `value`, not a file, is a weights name in
    another case; nothing otherwise (the missing file is reported by preflight)."""
    if value.casefold() == DEFAULT_WEIGHTS.casefold():
        raise ValueError(
            f"no such file; weights names are case-sensitive: did you mean {DEFAULT_WEIGHTS}?"
        )
    if not CASELESS_NAME.match(value):
        return
    folded = {name.casefold(): name for name in WEIGHTS}
    close = difflib.get_close_matches(value.casefold(), list(folded), n=1)
    hint = f"; did you mean {folded[close[0]]}?" if close else ""
    raise ValueError(
        "no such file, nor a torchvision weights name (they are case-sensitive, as in "
        f"ResNet50_Weights.IMAGENET1K_V2){hint}"
    )
