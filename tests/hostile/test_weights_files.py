"""TRAIN_WEIGHTS and TRAIN_WARM_START files that pass a glance and fail later (or never return):
`trainctl check` and `train` refuse them with exit 2, naming the file or the tensor's key,
before Ray starts. Through the CLI's entry point, in this process; real torch files.

- a FIFO, a device, a link: opened as a regular file without following a link, never read
  from a pipe (preflight used to hang on a FIFO);
- tensors with a shape and no data (a state dict saved from the meta device: it passed the
  shape check and failed in every worker), sparse tensors, NaN: named by key;
- a file whose storage is shorter than its tensors need: refused as unloadable;
- a tensor whose zero strides declare 4*10**10 values over one stored number (a 400 KB file):
  the NaN scan walked every declared value, for minutes to days; refused by key at once.
"""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from app import preflight
from app.data.schema import inspect_dataset
from app.training.model import build_model
from tests import parquet_support as data
from tests.hostile.support import assert_refused, files_under, trainctl

VARIABLES = ("TRAIN_WEIGHTS", "TRAIN_WARM_START")


def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **extra: str) -> None:
    def refuse(settings: object) -> None:
        raise AssertionError("the weights were not refused before Ray")

    monkeypatch.setattr(preflight, "connect_ray", refuse)
    data.good(tmp_path / "data")
    env = {
        "TRAIN_DATASET": "parquet", "TRAIN_MODEL": "cnn", "TRAIN_GLOBAL_BATCH_SIZE": "8",
        "TRAIN_DATA_PATH": str(tmp_path / "data"), "TRAIN_STORAGE_PATH": str(tmp_path / "runs"),
        "TRAIN_RUN_NAME": "r", "TRAIN_EPOCHS": "1", **extra,
    }  # fmt: skip
    for key, value in env.items():
        monkeypatch.setenv(key, value)


def _state(tmp_path: Path) -> dict[str, torch.Tensor]:
    """A state dict that fits the cnn on the test data: each case spoils one thing in it."""
    torch.manual_seed(0)
    return build_model("cnn", inspect_dataset(tmp_path / "data")).state_dict()


def _meta(tmp_path: Path, path: Path) -> str:
    torch.save({k: v.to("meta") for k, v in _state(tmp_path).items()}, path)
    first = next(iter(_state(tmp_path)))
    return f"{first} has shape"


def _nan(tmp_path: Path, path: Path) -> str:
    state = _state(tmp_path)
    key = [k for k, v in state.items() if v.is_floating_point()][-1]
    state[key] = torch.full_like(state[key], float("nan"))
    torch.save(state, path)
    return f"{key} holds NaN or infinite values"


def _sparse(tmp_path: Path, path: Path) -> str:
    state = _state(tmp_path)
    key = next(k for k, v in state.items() if v.dim() == 2)
    state[key] = state[key].to_sparse()
    torch.save(state, path)
    return f"{key} is a sparse_coo tensor"


def _short_storage(tmp_path: Path, path: Path) -> str:
    """The archive's data record for the first tensor cut short: it has a shape, not its bytes."""
    buffer = io.BytesIO()
    torch.save(_state(tmp_path), buffer)
    source, out = zipfile.ZipFile(buffer), io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name in source.namelist():
            content = source.read(name)
            archive.writestr(name, content[:4] if name.endswith("/data/0") else content)
    path.write_bytes(out.getvalue())
    return "cannot be loaded"


def _repeated_view(tmp_path: Path, path: Path) -> str:
    state = _state(tmp_path)
    key = next(k for k, v in state.items() if v.dim() == 2)
    state[key] = torch.zeros(1).as_strided((200_000, 200_000), (0, 0))
    torch.save(state, path)
    return f"{key} declares 40,000,000,000 values (200000, 200000) over a storage of 1:"


def _fifo(tmp_path: Path, path: Path) -> str:
    os.mkfifo(path)
    return "a FIFO (named pipe), not a regular file"


def _link(tmp_path: Path, path: Path) -> str:
    real = tmp_path / "real.pt"
    torch.save(_state(tmp_path), real)
    path.symlink_to(real)
    return f"is a symbolic link (to {real})"


CASES: list[tuple[str, Callable[[Path, Path], str]]] = [
    ("meta-tensors", _meta),
    ("nan", _nan),
    ("sparse", _sparse),
    ("short-storage", _short_storage),
    ("repeated-view", _repeated_view),
    ("fifo", _fifo),
    ("link", _link),
]


@pytest.mark.timeout(120)  # a FIFO used to block check forever; refused at once now
@pytest.mark.parametrize("variable", VARIABLES)
@pytest.mark.parametrize("plant", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_check_refuses_weights_that_fail_later(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str, plant
) -> None:
    path = tmp_path / "weights.pt"
    _env(monkeypatch, tmp_path)
    needle = plant(tmp_path, path)
    monkeypatch.setenv(variable, str(path))
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, f"{variable}={path}", needle)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("variable", VARIABLES)
def test_a_device_is_not_read_as_weights(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str
) -> None:
    _env(monkeypatch, tmp_path, **{variable: "/dev/zero"})
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, f"{variable}=/dev/zero", "a device, not a regular file")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("variable", VARIABLES)
def test_train_stops_before_ray(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str
) -> None:
    path = tmp_path / "weights.pt"
    _env(monkeypatch, tmp_path)
    needle = _meta(tmp_path, path)
    monkeypatch.setenv(variable, str(path))
    result = trainctl("train")
    assert_refused(result, 2, needle, "no data (saved from the meta device)")
    assert files_under(tmp_path / "runs" / "r") in ([], ["summary.json"])


def test_real_weights_still_pass(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "weights.pt"
    _env(monkeypatch, tmp_path)
    torch.save(_state(tmp_path), path)
    for variable in VARIABLES:
        monkeypatch.setenv(variable, str(path))
        result = trainctl("check", "--skip-cluster")
        assert result.code == 0, result.text
        monkeypatch.delenv(variable)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("pin", "said"),
    [
        ("abc123", "must be a SHA-256: 64 hex digits, as `sha256sum FILE` prints them"),
        ("g" * 64, "must be a SHA-256: 64 hex digits"),
        ("0" * 64, f"not the {'0' * 64} TRAIN_WEIGHTS_SHA256 pins"),
    ],
)
def test_a_weights_file_is_held_to_its_pin_before_ray(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pin: str, said: str
) -> None:
    """TRAIN_WEIGHTS_SHA256, kept in a values file or GitOps repository, is what a writer of the
    volume holding a weights file cannot change: a file that is not the pinned one (or a pin
    that is not a SHA-256) stops check and train with exit 2, before Ray."""
    path = tmp_path / "weights.pt"
    _env(monkeypatch, tmp_path, TRAIN_WEIGHTS=str(path), TRAIN_WEIGHTS_SHA256=pin)
    torch.save(_state(tmp_path), path)
    for command in (("check", "--skip-cluster"), ("train",)):
        assert_refused(trainctl(*command), 2, "TRAIN_WEIGHTS", said)
    assert files_under(tmp_path / "runs" / "r") in ([], ["summary.json"])


def test_the_pinned_file_passes_and_a_pin_needs_weights(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import hashlib

    path = tmp_path / "weights.pt"
    _env(monkeypatch, tmp_path)
    torch.save(_state(tmp_path), path)
    pin = hashlib.sha256(path.read_bytes()).hexdigest().upper()  # as some tools print it
    _env(monkeypatch, tmp_path, TRAIN_WEIGHTS=str(path), TRAIN_WEIGHTS_SHA256=pin)
    result = trainctl("check", "--skip-cluster")
    assert result.code == 0 and "sha256 pinned by TRAIN_WEIGHTS_SHA256" in result.out, result.text
    monkeypatch.delenv("TRAIN_WEIGHTS")
    assert_refused(
        trainctl("check", "--skip-cluster"),
        2,
        "TRAIN_WEIGHTS_SHA256 is set but TRAIN_WEIGHTS is not",
    )


def test_with_a_verify_key_a_weights_file_must_be_pinned(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The same plain file refused as TRAIN_WARM_START under TRAIN_VERIFY_KEY was taken as
    TRAIN_WEIGHTS, and the run's signed export vouched for what a writer of the storage had
    planted there (a red-team pass). Pinned by its SHA-256, it is what the operator chose."""
    import hashlib

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    public = tmp_path / "team.pub.pem"
    public.write_bytes(
        ed25519.Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    path = tmp_path / "weights.pt"
    _env(monkeypatch, tmp_path)
    torch.save(_state(tmp_path), path)
    _env(monkeypatch, tmp_path, TRAIN_WEIGHTS=str(path), TRAIN_VERIFY_KEY=str(public))
    for command in (("check", "--skip-cluster"), ("train",)):
        assert_refused(
            trainctl(*command), 2, f"TRAIN_WEIGHTS={path} is a file, and TRAIN_VERIFY_KEY is set",
            "pinned by TRAIN_WEIGHTS_SHA256",
        )  # fmt: skip
    # A weights name too: its cached file is held to 8 hex digits of its name (a review).
    monkeypatch.setenv("TRAIN_WEIGHTS", "ResNet18_Weights.IMAGENET1K_V1")
    monkeypatch.setenv("TRAIN_MODEL", "resnet18")
    assert_refused(
        trainctl("check", "--skip-cluster"), 2,
        "TRAIN_WEIGHTS=ResNet18_Weights.IMAGENET1K_V1 is a torchvision weights name, whose "
        "cached file is held only to the 8 hex digits in its name",
    )  # fmt: skip
    monkeypatch.setenv("TRAIN_WEIGHTS", str(path))
    monkeypatch.setenv("TRAIN_MODEL", "cnn")
    assert not files_under(tmp_path / "runs")
    pin = hashlib.sha256(path.read_bytes()).hexdigest()
    monkeypatch.setenv("TRAIN_WEIGHTS_SHA256", pin)
    result = trainctl("check", "--skip-cluster")
    assert "sha256 pinned by TRAIN_WEIGHTS_SHA256" in result.out, result.text
