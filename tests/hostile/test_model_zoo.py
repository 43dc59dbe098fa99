"""Hostile model, weights and fine-tuning settings: refused with exit 2 before Ray starts.

Every case runs the real CLI in-process on a small real Parquet dataset; Ray's start is
replaced by a failure, so a case that wrongly passes preflight fails loudly instead of starting
a cluster. Downloads go to a proxy on a closed local port, so they fail at once.
"""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torchvision.models import get_model

from app import preflight
from tests import parquet_support as data
from tests.hostile.support import assert_refused, trainctl

BASE = {"TRAIN_DATASET": "parquet", "TRAIN_GLOBAL_BATCH_SIZE": "8", "TRAIN_RUN_NAME": "m"}


@pytest.fixture(autouse=True)
def setup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    def refuse(settings: object) -> None:
        raise AssertionError("preflight let this through: Ray would start")

    monkeypatch.setattr(preflight, "connect_ray", refuse)
    for key in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.setenv(key, "http://127.0.0.1:9")
    for key in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(key, raising=False)
    # urlopen keeps the opener (and the proxies) it built first: rebuild it now and after.
    urllib.request.install_opener(None)  # type: ignore[arg-type]
    data.good(tmp_path / "data")  # 8x8 grayscale, 4 classes
    env = {**BASE, "TRAIN_DATA_PATH": str(tmp_path / "data")}
    env["TRAIN_STORAGE_PATH"] = str(tmp_path / "runs")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    yield
    urllib.request.install_opener(None)  # type: ignore[arg-type]


def _refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *needles: str, **env: str) -> None:
    for key, value in env.items():
        monkeypatch.setenv(f"TRAIN_{key.upper()}", value)
    for command in (("train",), ("check", "--skip-cluster")):
        assert_refused(trainctl(*command), 2, *needles)
    assert not (tmp_path / "runs" / "m").exists()


@pytest.mark.parametrize(
    ("env", "needles"),
    [
        ({"model": "resnet5"}, ("TRAIN_MODEL='resnet5'", "did you mean resnet50?")),
        ({"model": "mobilenet_v3"}, ("TRAIN_MODEL='mobilenet_v3'", "did you mean mobilenet_v")),
        ({"model": "Resnet50\n"}, ("TRAIN_MODEL=", "torchvision classifier name")),
        (
            {"model": "resnet50", "weights": "ResNet50_Weights.IMAGENET1K_V9"},
            ("TRAIN_WEIGHTS=", "is not a torchvision weights name", "did you mean ResNet50_"),
        ),
        (
            {"model": "mobilenet_v3_small", "weights": "ResNet50_Weights.IMAGENET1K_V2"},
            ("not weights for TRAIN_MODEL=mobilenet_v3_small", "MobileNet_V3_Small_Weights"),
        ),
        ({"model": "vit", "weights": "DEFAULT"}, ("TRAIN_MODEL=vit is the tutorial's model",)),
        # A weights name in the wrong case is not read as a missing file without a hint.
        (
            {"model": "resnet18", "weights": "resnet18_weights.imagenet1k_v1"},
            ("TRAIN_WEIGHTS=", "case-sensitive", "did you mean ResNet18_Weights.IMAGENET1K_V1?"),
        ),
        (
            {"model": "resnet18", "weights": "RESNET18_WEIGHTS.IMAGENET_V1"},
            ("TRAIN_WEIGHTS=", "case-sensitive", "did you mean ResNet18_Weights.IMAGENET1K_V1?"),
        ),
        ({"model": "resnet18", "weights": "default"}, ("case-sensitive", "did you mean DEFAULT?")),
        ({"model": "cnn", "backbone_lr_scale": "2"}, ("TRAIN_BACKBONE_LR_SCALE='2'",)),
        ({"model": "cnn", "backbone_lr_scale": "nan"}, ("TRAIN_BACKBONE_LR_SCALE='nan'",)),
        ({"model": "cnn", "augment": "rotate"}, ("TRAIN_AUGMENT='rotate'", "crop_flip")),
        ({"model": "cnn", "freeze": "all"}, ("TRAIN_FREEZE='all'", "backbone")),
        (
            {"model": "cnn", "weights": "/w.pt", "warm_start": "/c"},
            ("TRAIN_WEIGHTS and TRAIN_WARM_START are both set",),
        ),
    ],
)
def test_bad_model_and_fine_tuning_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env: dict[str, str], needles: tuple[str, ...]
) -> None:
    _refused(monkeypatch, tmp_path, *needles, **env)


def test_existing_file_with_a_weights_like_name_is_still_a_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The case hint is only for a value that is no file: a real file of that name is read.
    monkeypatch.chdir(tmp_path)
    torch.save(get_model("resnet18", weights=None).state_dict(), "default")
    needles = ("TRAIN_WEIGHTS=", "does not fit TRAIN_MODEL=mobilenet_v3_small")
    _refused(monkeypatch, tmp_path, *needles, model="mobilenet_v3_small", weights="default")


def test_model_that_cannot_take_the_data_size_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _refused(monkeypatch, tmp_path, "vit_b_16 cannot take 8x8 images", model="vit_b_16")


def test_weights_file_of_another_model_names_the_mismatched_keys(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "resnet.pt"
    torch.save(get_model("resnet18", weights=None).state_dict(), path)
    needles = ("TRAIN_WEIGHTS=", "does not fit TRAIN_MODEL=mobilenet_v3_small", "missing [")
    # Three keys are named, and how many more: three of 240 must not read as all of them.
    counted = ("'] and 239 more; unexpected [", "'] and 119 more")
    _refused(monkeypatch, tmp_path, *needles, *counted, model="mobilenet_v3_small",
             weights=str(path))  # fmt: skip


def test_weights_file_that_needs_code_or_is_missing_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "code.pt"
    torch.save({"features.0.0.weight": Path("needs unpickling code")}, path)
    needle = "cannot be loaded as a state dict"
    _refused(monkeypatch, tmp_path, needle, model="mobilenet_v3_small", weights=str(path))
    # A file that is no torch file at all: the message says what to write instead.
    text = tmp_path / "notes.pt"
    text.write_text("hello")
    needles = (f"TRAIN_WEIGHTS={text}", "not a file torch.save wrote", "model.state_dict()")
    _refused(monkeypatch, tmp_path, *needles, model="mobilenet_v3_small", weights=str(text))
    missing = tmp_path / "nothing.pt"
    needle = "no such file"
    _refused(monkeypatch, tmp_path, needle, model="mobilenet_v3_small", weights=str(missing))


def test_weights_name_without_cache_or_network_says_where_to_place_the_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from torchvision.models import MobileNet_V3_Small_Weights

    url = MobileNet_V3_Small_Weights.IMAGENET1K_V1.url
    place = tmp_path / "th" / "hub" / "checkpoints" / os.path.basename(url)
    needles = (f"place that file at {place}", url)
    _refused(monkeypatch, tmp_path, *needles, model="mobilenet_v3_small", weights="DEFAULT",
             torch_home=str(tmp_path / "th"))  # fmt: skip


def test_warm_start_that_does_not_fit_names_the_keys_before_ray(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """It used to fail in every worker, on every retry; now preflight names the keys."""
    path = tmp_path / "wrong.pt"
    torch.save({"unrelated.weight": torch.zeros(1)}, path)
    needles = (f"TRAIN_WARM_START={path} does not fit TRAIN_MODEL=cnn", "'unrelated.weight'")
    _refused(monkeypatch, tmp_path, *needles, "missing [", model="cnn", warm_start=str(path))
