"""TRAIN_WEIGHTS: pretrained weights by torchvision name or from a state-dict file.

- A name (`ResNet50_Weights.IMAGENET1K_V2`, or `DEFAULT` for the model's default weights) is
  resolved by torchvision (`get_weight`) and must belong to TRAIN_MODEL. Its file is
  torchvision's own download, cached in `<TRAIN_TORCH_HOME or TORCH_HOME>/hub/checkpoints/`.
  The driver's preflight downloads it once, before Ray starts, within a per-read deadline;
  without internet it says which file to place where. Workers read the same folder (a
  setting, so that every worker sees it: on Kubernetes point it at the shared volume).
- A file is a state dict, local or in a bucket, of at most MAX_WEIGHTS_BYTES, loaded with
  `torch.load(weights_only=True)`: nothing in it can run code. On a volume it is opened as a
  regular file without following a link (a link, FIFO or device is refused, exit 2, naming
  it: a FIFO used to hang preflight), and its size bound is read from the open file. Every
  tensor must hold real, finite data (app/runfolder/state_dicts.tensor_problem): weights saved from
  the meta device have shapes and no data, and would pass a shape check to fail in training.
- Weights load into the model built for the data, whose head has the data's class count:
  head keys are taken only where their shapes fit (so a 1000-class ImageNet head is left
  fresh), every other key must be present with its shape, or preflight stops with exit 2
  naming the mismatched keys. The same check covers TRAIN_WARM_START (the whole model).
- With a weights name, images are normalized with the weights' own mean and std (averaged for
  1-channel data); a state-dict file keeps the data's measured statistics.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import socket
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard
from urllib.parse import urlparse

import torch
from torch import nn

from app.errors import ConfigError
from app.redact import redact_uri
from app.runfolder.state_dicts import (
    MAX_WEIGHTS_BYTES,
    fit_problem,
    load_tensors,
    plain_keys,
    tensor_problem,
)
from app.settings.model_names import (
    DEFAULT_WEIGHTS,
    is_weights_name,
    weights_location,
    weights_name_problem,
    weights_pairing_problem,
)
from app.storage.location import RunPath, with_endpoint
from app.storage.reading import open_below

if TYPE_CHECKING:
    from torchvision.models import WeightsEnum

    from app.data.schema import DatasetInfo
    from app.settings import TrainSettings

DOWNLOAD_READ_TIMEOUT_S = 60.0
# googlenet's and inception_v3's auxiliary heads are off in trainctl (zoo.EXTRA_ARGS).
IGNORED_PREFIXES = ("AuxLogits.", "aux1.", "aux2.")


def _weights_by_name(value: str) -> WeightsEnum:
    from torchvision.models import get_weight

    try:
        return get_weight(value)
    except (ValueError, KeyError, AttributeError):
        raise ValueError(weights_name_problem(value) or f"{value!r} is not found") from None


def weights_source(settings: TrainSettings) -> WeightsEnum | RunPath | None:
    """What TRAIN_WEIGHTS names: torchvision weights for TRAIN_MODEL, or a file location."""
    value = settings.weights
    if value is None:
        return None
    if not is_weights_name(value):
        return with_endpoint(weights_location(value), settings.storage_endpoint)
    from torchvision.models import get_model_weights

    if problem := weights_pairing_problem(settings.model, value):
        raise ConfigError(problem)
    family = get_model_weights(settings.model)
    return family.DEFAULT if value == DEFAULT_WEIGHTS else _weights_by_name(value)


def by_name(source: WeightsEnum | RunPath | None) -> TypeGuard[WeightsEnum]:
    """`source` names torchvision weights. torchvision's WeightsEnum is an Enum, and neither
    location kind is one: tested as such, a run without weights never imports torchvision (a
    second of every driver start and `trainctl check`)."""
    return isinstance(source, Enum)


def cache_file(weights: WeightsEnum, torch_home: Path | None) -> Path:
    """Where torchvision keeps (and looks for) the weights' file."""
    hub = torch_home / "hub" if torch_home is not None else Path(torch.hub.get_dir())
    return hub / "checkpoints" / os.path.basename(urlparse(weights.url).path)


def fetch(weights: WeightsEnum, torch_home: Path | None) -> Path:
    """The cached file, downloaded first if missing; ConfigError saying where to place it."""
    file = cache_file(weights, torch_home)
    if file.is_file():
        return file
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        with _read_timeout(DOWNLOAD_READ_TIMEOUT_S):  # torch.hub takes no timeout itself
            torch.hub.download_url_to_file(
                weights.url, str(file), hash_prefix=_hash_prefix(file), progress=False
            )
    except Exception as err:  # no network, a proxy, a full disk: all mean "place it by hand"
        raise ConfigError(
            f"TRAIN_WEIGHTS={_name(weights)}: {file.name} is not in the cache and could not be "
            f"downloaded from {weights.url} ({type(err).__name__}: {str(err)[:120]}); place "
            f"that file at {file} (TRAIN_TORCH_HOME or TORCH_HOME sets the folder)"
        ) from None
    return file


@contextlib.contextmanager
def _read_timeout(seconds: float) -> Iterator[None]:
    saved = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(saved)


def _hash_prefix(file: Path) -> str | None:
    """The start of the file's SHA-256 that torchvision's file names carry, as torch.hub
    checks it on download; None for a name without one."""
    found = torch.hub.HASH_REGEX.search(file.name)
    return found.group(1) if found else None


def _name(weights: WeightsEnum) -> str:
    return f"{type(weights).__name__}.{weights.name}"


def load_state(
    source: WeightsEnum | RunPath, torch_home: Path | None, sha256: str | None = None
) -> dict[str, Any]:
    """The state dict, on CPU, from a bounded file loaded without running code; held to
    `sha256` (TRAIN_WEIGHTS_SHA256) where it is set."""
    prefix = None
    if by_name(source):
        file, label = fetch(source, torch_home), f"TRAIN_WEIGHTS={_name(source)} ({source.url})"
        # A cached file (a shared TORCH_HOME anyone may write) is held to the hash in its name
        # each time it is loaded, not only when downloaded.
        prefix = _hash_prefix(file)
    else:
        file, label = source, f"TRAIN_WEIGHTS={redact_uri(str(source))}"
    try:
        with open_below(file, None, MAX_WEIGHTS_BYTES) as handle:
            data = handle.read()  # loaded from these bytes: the ones checked
    except ConfigError as err:  # a link, refused
        raise ConfigError([f"{label}: {problem}" for problem in err.problems]) from None
    except FileNotFoundError:
        raise ConfigError(f"{label}: no such file") from None
    except (OSError, ValueError) as err:  # a FIFO or device, a folder; over the size bound
        raise ConfigError(f"{label}: cannot be read ({_why(err)})") from None
    digest = hashlib.sha256(data).hexdigest()
    if sha256 is not None and digest != sha256:
        raise ConfigError(
            f"{label}: {redact_uri(str(file))} has sha256 {digest}, not the {sha256} "
            "TRAIN_WEIGHTS_SHA256 pins: changed since it was pinned, and not loaded; place the "
            "pinned file there, or pin the one you mean to train from"
        )
    # By name only: a user's own file has no hash in its name to meet.
    if prefix is not None and not digest.startswith(prefix):
        raise ConfigError(
            f"{label}: {file} has sha256 {digest[:16]}..., not the {prefix}... its name "
            "promises: not the published weights, and not loaded; delete it to download "
            f"them again, or place the file from {source.url} there"
        )
    try:
        state = load_tensors(data)
    except Exception as err:  # not a torch file, or one that needs code to unpickle
        raise ConfigError(
            f"{label}: cannot be loaded as a state dict ({type(err).__name__}): not a file "
            "torch.save wrote, or one holding more than tensors (a whole pickled model needs "
            "code to load); save model.state_dict() with torch.save"
        ) from None
    if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
        raise ConfigError(f"{label}: holds a {type(state).__name__}, not a state dict")
    if problem := tensor_problem(state):
        raise ConfigError(f"{label}: {problem}")
    return plain_keys(state)


def _held_to(source: WeightsEnum | RunPath, settings: TrainSettings) -> str:
    """What the file's bytes are checked against, as `check` says it."""
    if settings.weights_sha256 is not None:
        return "sha256 pinned by TRAIN_WEIGHTS_SHA256"
    if by_name(source) and (prefix := _hash_prefix(cache_file(source, settings.torch_home))):
        return (
            f"held to the sha256 prefix {prefix} in its name; TRAIN_WEIGHTS_SHA256 pins all of it"
        )
    return "no checksum: TRAIN_WEIGHTS_SHA256 pins one"


def _why(err: OSError | ValueError) -> str:
    return (err.strerror if isinstance(err, OSError) else None) or str(err)


def fitted(
    state: dict[str, Any], expected: dict[str, Any], head: set[str]
) -> tuple[dict[str, Any], str | None]:
    """The part of `state` to load into a model of `expected` {name: shape}, and the problem.

    Head keys are kept only where their shapes fit; every other key must fit exactly.
    """
    keep = {}
    for key, value in state.items():
        if key.startswith(IGNORED_PREFIXES) and key not in expected:
            continue
        if key in head and tuple(getattr(value, "shape", ())) != tuple(expected.get(key, ())):
            continue
        keep[key] = value
    body = {key: shape for key, shape in expected.items() if key not in head or key in keep}
    return keep, fit_problem(keep, body)


def apply_weights(model: nn.Module, settings: TrainSettings) -> None:
    """Load TRAIN_WEIGHTS into the freshly built model (in each worker)."""
    from app.training.zoo import head_keys

    source = weights_source(settings)
    if source is None:
        return
    expected = {key: value.shape for key, value in model.state_dict().items()}
    keep, problem = fitted(
        load_state(source, settings.torch_home, settings.weights_sha256), expected, head_keys(model)
    )
    if problem:
        raise ConfigError(f"TRAIN_WEIGHTS does not fit TRAIN_MODEL={settings.model}: {problem}")
    model.load_state_dict(keep, strict=False)


def shapes_and_head(settings: TrainSettings, info: DatasetInfo) -> tuple[dict[str, Any], set[str]]:
    """The model's {name: shape} and head keys, from a weightless (meta) copy where possible."""
    from app.training.model import build_model
    from app.training.zoo import head_keys

    try:
        with torch.device("meta"):
            model = build_model(settings.model, info, settings.vit_patch)
    except ConfigError:
        raise
    except Exception:  # a few builders compute widths with real tensors
        model = build_model(settings.model, info, settings.vit_patch)
    return {k: v.shape for k, v in model.state_dict().items()}, head_keys(model)


def check_weights(settings: TrainSettings, info: DatasetInfo | None) -> str:
    """Preflight: the weights resolve, load, and fit the model (when the data is known)."""
    source = weights_source(settings)
    if source is None:
        return "none (TRAIN_WEIGHTS is not set)"
    state = load_state(source, settings.torch_home, settings.weights_sha256)
    label = _name(source) if by_name(source) else str(source)
    held = _held_to(source, settings)
    if info is None:
        return (
            f"{label} loads ({len(state)} tensors, {held}); fit checked once the data is prepared"
        )
    expected, head = shapes_and_head(settings, info)
    keep, problem = fitted(state, expected, head)
    if problem:
        raise ConfigError(
            f"TRAIN_WEIGHTS={redact_uri(label)} does not fit TRAIN_MODEL={settings.model} "
            f"on this data: {problem}"
        )
    fresh = "head kept" if head and head <= set(keep) else "new head"
    return f"{redact_uri(label)} fits {settings.model} ({len(keep)} tensors, {fresh}; {held})"


def pretrained_info(settings: TrainSettings, info: DatasetInfo) -> DatasetInfo:
    """The dataset description the workers normalize with: the weights' mean and std for a
    weights name, the data's measured ones otherwise."""
    source = weights_source(settings)
    if not by_name(source):  # none, or a state-dict file
        return info
    transforms = source.transforms()
    mean, std = tuple(map(float, transforms.mean)), tuple(map(float, transforms.std))
    if info.channels == 1:  # the channel is repeated into the RGB stem (app/training/zoo.py)
        mean, std = (sum(mean) / len(mean),), (sum(std) / len(std),)
    return dataclasses.replace(info, mean=mean, std=std)
