"""TRAIN_WEIGHTS by torchvision name, from a pre-filled TORCH_HOME cache with downloads made
impossible (a proxy that refuses connections), and the fit rule for heads. Real torch files."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torchvision.models import MobileNet_V3_Small_Weights, get_model

from app.data.image_size import image_size_for, weights_crop_size
from app.data.schema import DatasetInfo
from app.errors import ConfigError
from app.settings import TrainSettings
from app.training import weights as weights_module
from app.training.model import build_model
from app.training.weights import (
    apply_weights,
    cache_file,
    check_weights,
    fitted,
    pretrained_info,
    weights_source,
)
from tests.s3_support import S3Server
from tests.support import trainctl_env

NAME = "MobileNet_V3_Small_Weights.IMAGENET1K_V1"
WEIGHTS = MobileNet_V3_Small_Weights.IMAGENET1K_V1


@pytest.fixture
def no_downloads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every download goes to a proxy on a closed local port: refused at once."""
    for key in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.setenv(key, "http://127.0.0.1:9")
    for key in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(key, raising=False)
    # urlopen keeps the opener (and the proxies) it built first: rebuild it now and after.
    urllib.request.install_opener(None)  # type: ignore[arg-type]
    yield
    urllib.request.install_opener(None)  # type: ignore[arg-type]


def _info(channels: int = 3) -> DatasetInfo:
    return DatasetInfo(
        channels=channels,
        height=32,
        width=32,
        num_classes=4,
        train_rows=10,
        valid_rows=10,
        layout="raw",
        mean=(0.5,) * channels,
        std=(0.25,) * channels,
    )


def _cached(torch_home: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, torch.Tensor]:
    """An untrained torchvision model's state dict (1000 classes) in the cache, as a download
    would have left it. The published weights cannot be downloaded here, so the weights' URL
    is made to carry this file's own hash prefix, as torchvision's URLs carry theirs."""
    torch.manual_seed(3)
    state = get_model("mobilenet_v3_small", weights=None).state_dict()
    saved = io.BytesIO()
    torch.save(state, saved)
    prefix = hashlib.sha256(saved.getvalue()).hexdigest()[:8]
    monkeypatch.setattr(WEIGHTS.value, "url", WEIGHTS.url.replace("047dcff4", prefix))
    file = torch_home / "hub" / "checkpoints" / os.path.basename(WEIGHTS.url)
    file.parent.mkdir(parents=True)
    file.write_bytes(saved.getvalue())
    return state


def _settings(tmp_path: Path, weights: str = NAME) -> TrainSettings:
    return TrainSettings(model="mobilenet_v3_small", weights=weights, torch_home=tmp_path / "torch")  # type: ignore[call-arg]


def test_weights_name_resolves_from_the_cache_and_loads_with_a_new_head(
    tmp_path: Path, no_downloads: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = _cached(tmp_path / "torch", monkeypatch)
    settings = _settings(tmp_path)
    assert cache_file(WEIGHTS, settings.torch_home) == (
        tmp_path / "torch" / "hub" / "checkpoints" / os.path.basename(WEIGHTS.url)
    )
    assert "fits mobilenet_v3_small" in check_weights(settings, _info())
    model = build_model("mobilenet_v3_small", _info())
    fresh_head = model.classifier[3].weight.detach().clone()
    apply_weights(model, settings)
    loaded = model.state_dict()
    body = [key for key in state if not key.startswith("classifier.3.")]
    assert body and all(torch.equal(loaded[key], state[key]) for key in body)
    assert loaded["classifier.3.weight"].shape == (4, 1024)  # the 1000-class head was left
    assert torch.equal(loaded["classifier.3.weight"], fresh_head)


def test_a_cached_file_that_is_not_the_published_one_is_refused(
    tmp_path: Path, no_downloads: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shared TORCH_HOME (README: /mnt/shared/torch) is written by many hands: any file under
    the expected name was taken as the published weights, and only a download was held to the
    hash prefix in that name (found by a red-team pass)."""
    _cached(tmp_path / "torch", monkeypatch)
    published = WEIGHTS.url
    monkeypatch.setattr(WEIGHTS.value, "url", published.replace(published[-12:-4], "00000000"))
    planted = cache_file(WEIGHTS, tmp_path / "torch")
    (tmp_path / "torch" / "hub" / "checkpoints" / os.path.basename(published)).rename(planted)
    settings = _settings(tmp_path)
    with pytest.raises(ConfigError) as caught:
        check_weights(settings, _info())
    message = str(caught.value)
    assert f"{planted} has sha256 " in message and ", not the 00000000... its name" in message
    assert "delete it to download them again" in message
    with pytest.raises(ConfigError, match="not the published weights"):
        apply_weights(build_model("mobilenet_v3_small", _info()), settings)


def test_a_cached_file_that_meets_its_names_prefix_but_not_the_pin_is_refused(
    tmp_path: Path, no_downloads: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 8 hex digits in torchvision's file name are 32 bits: a writer of a shared TORCH_HOME
    can make a file that meets them (appended bytes do not change what torch.load reads).
    TRAIN_WEIGHTS_SHA256 holds the cached file to all 256, in the driver and every worker."""
    state = _cached(tmp_path / "torch", monkeypatch)
    genuine = hashlib.sha256(cache_file(WEIGHTS, tmp_path / "torch").read_bytes()).hexdigest()
    # Bytes after the archive change the hash and not what torch.load reads: the planted file
    # loads as the genuine one would, and here its name is made to carry its own prefix.
    planted = cache_file(WEIGHTS, tmp_path / "torch").read_bytes() + b"\0" * 64
    other = hashlib.sha256(planted).hexdigest()
    monkeypatch.setattr(WEIGHTS.value, "url", WEIGHTS.url.replace(genuine[:8], other[:8]))
    cache_file(WEIGHTS, tmp_path / "torch").write_bytes(planted)
    unpinned = _settings(tmp_path)
    assert f"held to the sha256 prefix {other[:8]} in its name" in check_weights(unpinned, _info())
    pinned = unpinned.model_copy(update={"weights_sha256": genuine})
    for load in (
        lambda: check_weights(pinned, _info()),
        lambda: apply_weights(build_model("mobilenet_v3_small", _info()), pinned),
    ):
        with pytest.raises(ConfigError) as caught:
            load()
        message = str(caught.value)
        assert f"has sha256 {other}, not the {genuine} TRAIN_WEIGHTS_SHA256 pins" in message
        assert "not loaded" in message
    # The file the pin names passes, in check and in the worker's load.
    trusted = unpinned.model_copy(update={"weights_sha256": other})
    assert "sha256 pinned by TRAIN_WEIGHTS_SHA256" in check_weights(trusted, _info())
    model = build_model("mobilenet_v3_small", _info())
    apply_weights(model, trusted)
    assert torch.equal(model.state_dict()["features.0.0.weight"], state["features.0.0.weight"])


def test_default_names_the_models_default_weights(tmp_path: Path) -> None:
    assert weights_source(_settings(tmp_path, "DEFAULT")) is WEIGHTS


def test_missing_cache_file_says_which_file_to_place_where(
    tmp_path: Path, no_downloads: None
) -> None:
    settings = _settings(tmp_path)
    with pytest.raises(ConfigError) as caught:
        check_weights(settings, _info())
    message = str(caught.value)
    expected = tmp_path / "torch" / "hub" / "checkpoints" / os.path.basename(WEIGHTS.url)
    assert f"place that file at {expected}" in message and WEIGHTS.url in message
    assert not expected.exists()  # nothing half-written


def test_weights_of_another_model_are_refused(tmp_path: Path) -> None:
    settings = _settings(tmp_path, "ResNet50_Weights.IMAGENET1K_V2")
    with pytest.raises(ConfigError, match="not weights for TRAIN_MODEL=mobilenet_v3_small"):
        weights_source(settings)


def test_preprocessing_follows_the_weights(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    info = pretrained_info(settings, _info())
    assert info.mean == pytest.approx((0.485, 0.456, 0.406))
    assert info.std == pytest.approx((0.229, 0.224, 0.225))
    gray = pretrained_info(settings, _info(channels=1))
    assert gray.mean == pytest.approx((sum((0.485, 0.456, 0.406)) / 3,))
    # TRAIN_IMAGE_SIZE's default follows the weights' own transforms; a set value wins.
    assert (
        weights_crop_size("mobilenet_v3_small", "MobileNet_V3_Small_Weights.IMAGENET1K_V1") == 224
    )
    assert image_size_for("efficientnet_b1", 0, "DEFAULT") == 240
    assert image_size_for("efficientnet_b1", 64, "DEFAULT") == 64
    assert image_size_for("efficientnet_b1", 0, str(tmp_path / "w.pt")) == 224
    # A state-dict file has no transforms: the data's own statistics stay.
    file_settings = _settings(tmp_path, str(tmp_path / "w.pt"))
    assert pretrained_info(file_settings, _info()).mean == (0.5, 0.5, 0.5)


def test_fit_rule_skips_a_mismatched_head_and_names_other_keys() -> None:
    expected = {"body.weight": (8, 3), "head.weight": (4, 8), "head.bias": (4,)}
    head = {"head.weight", "head.bias"}
    state = {
        "body.weight": torch.zeros(8, 3),
        "head.weight": torch.zeros(1000, 8),
        "head.bias": torch.zeros(1000),
    }
    keep, problem = fitted(state, expected, head)
    assert problem is None and set(keep) == {"body.weight"}
    state["body.weight"] = torch.zeros(8, 1)
    state["stray.weight"] = torch.zeros(2)
    _, problem = fitted(state, expected, head)
    assert problem and "body.weight is (8, 1) not (8, 3)" in problem
    assert "unexpected ['stray.weight']" in problem


def test_state_dict_file_in_a_bucket_loads_and_is_bounded(
    s3_server: S3Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bucket = s3_server.bucket("unit-weights")
    torch.manual_seed(4)
    state = get_model("mobilenet_v3_small", weights=None, num_classes=4).state_dict()
    local = tmp_path / "w.pt"
    torch.save(state, local)
    bucket.write("pretrained/w.pt", local.read_bytes())
    settings = TrainSettings(
        model="mobilenet_v3_small",
        weights=bucket.uri("pretrained/w.pt"),
        storage_endpoint=s3_server.endpoint,
    )  # type: ignore[call-arg]
    assert "head kept" in check_weights(settings, _info())  # 4 classes: the head fits too
    model = build_model("mobilenet_v3_small", _info())
    apply_weights(model, settings)
    loaded = model.state_dict()
    assert all(torch.equal(loaded[key], value) for key, value in state.items())
    monkeypatch.setattr(weights_module, "MAX_WEIGHTS_BYTES", 1000)
    with pytest.raises(ConfigError, match=r"bytes, over the 1,000 allowed"):
        check_weights(settings, _info())


@pytest.mark.parametrize(("weights", "imported"), [(None, False), (NAME, True)])
def test_torchvision_is_imported_only_for_weights_by_name(
    tmp_path: Path, no_downloads: None, weights: str | None, imported: bool
) -> None:
    """`trainctl check` (and every driver start) of a run without TRAIN_WEIGHTS never imports
    torchvision, a second of each start; a weights name does (the control: the import is seen)."""
    more = {"weights": weights, "torch_home": str(tmp_path / "hub")} if weights else {}
    env = trainctl_env(
        dataset="digits", model="cnn", data_path=str(tmp_path / "data"),
        storage_path=str(tmp_path / "runs"), **more,
    )  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "app", "check", "--skip-cluster"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    modules = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()}
    assert ("torchvision" in modules) is imported, result.stdout[-2000:]
    if not imported:
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        assert "ok    weights: none (TRAIN_WEIGHTS is not set)" in result.stdout
