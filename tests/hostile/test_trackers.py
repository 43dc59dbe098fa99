"""Trackers that cannot work stop `check` and `train` with exit 2 before Ray starts, naming the
variable (credentials hidden) and what to do; a server that accepts and never answers costs
the probe's deadline, not the client's minutes of retries. Real sockets, the real CLI."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hostile.support import assert_refused, trainctl

OPT_OUT = "TRAIN_TRACKING_REQUIRED=false"


@pytest.fixture(autouse=True)
def no_trackers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the tracker each case configures: none of the developer's."""
    for key in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "WANDB_API_KEY", "WANDB_MODE"):
        monkeypatch.delenv(key, raising=False)


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the block ends


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port whose kernel completes the TCP handshake, and nothing ever answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


@pytest.mark.parametrize(
    ("uri", "needles"),
    [
        ("sqlite:///x.db", ("sqlite:// is a database store", "full mlflow package", "SQLAlchemy")),
        ("file:///x", ("file:// and plain paths are MLflow's local file store",)),
        ("mlruns", ("local file store",)),
        ("ftp://host/x", ("ftp:// is not a tracking store",)),
    ],
)
@pytest.mark.parametrize("command", [("check", "--skip-cluster"), ("train",)])
def test_a_uri_the_client_cannot_use_is_refused_with_what_to_do(
    uri: str, needles: tuple[str, ...], command: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    result = trainctl(*command)
    assert_refused(
        result,
        2,
        f"MLFLOW_TRACKING_URI={uri}",
        *needles,
        "mlflow server",
        "http://, https://",  # what the installed client supports, from its own registry
        OPT_OUT,
    )
    # Refused before anything was written: no run folder, no dataset prepared.
    assert not Path("runs/digits-resnet18").exists() and not Path("data").exists()
    if command[0] == "check":
        assert "FAIL  tracking: MLFLOW_TRACKING_URI=" in result.out
    # The server's backend store is a database, never the URI refused (`ftp://host/x`).
    assert f"--backend-store-uri {uri}" not in result.text or uri.startswith("sqlite")


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("   ", "blank: give the experiment a name"),
        ("nightly\nrun", "it holds a control character"),
        ("e" * 600, "600 characters, over the 256 MLflow's stores hold"),
    ],
    ids=["blank", "line-break", "too-long"],
)
def test_an_experiment_name_mlflow_cannot_hold_is_named_before_any_request(
    name: str, said: str, closed_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A blank or multi-line name was created on the server as it was; a 600-character one was
    blamed on the server's address (`HTTP 400 ... check the address`): a red-team pass."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{closed_port}")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", name)
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, "MLFLOW_EXPERIMENT_NAME=", said)
    assert "connection refused" not in result.text.lower()  # judged before any request


def test_a_server_that_never_answers_costs_the_deadline_not_minutes(
    silent_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{silent_port}")
    monkeypatch.setenv("TRAIN_TRACKING_TIMEOUT_S", "1")
    started = time.monotonic()
    result = trainctl("check", "--skip-cluster")
    took = time.monotonic() - started
    assert_refused(result, 2, f"MLFLOW_TRACKING_URI=http://127.0.0.1:{silent_port}", "within 1 s")
    assert took < 4, took


def test_credentials_are_hidden_in_the_refusal(
    closed_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://alice:s3cr3t-pw@127.0.0.1:{closed_port}")
    result = trainctl("train")
    assert_refused(
        result, 2, f"MLFLOW_TRACKING_URI=http://***@127.0.0.1:{closed_port}", "connection refused"
    )
    assert "s3cr3t" not in result.text and "alice" not in result.text


def test_not_required_warns_and_goes_on(closed_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{closed_port}")
    monkeypatch.setenv("TRAIN_TRACKING_REQUIRED", "false")
    result = trainctl("check", "--skip-cluster")
    assert result.code == 0, result.text
    assert f"WARN  tracking: mlflow: MLFLOW_TRACKING_URI=http://127.0.0.1:{closed_port}" in (
        result.out
    )
    assert "training goes on without it" in result.out
    # It is set already: the refusal does not advise setting it (a red-team pass).
    assert "or set TRAIN_TRACKING_REQUIRED=false" not in result.out


@pytest.mark.parametrize("switch", [("WANDB_MODE", "offline"), ("WANDB_API_KEY", "k" * 40)])
def test_wandb_without_its_package_is_named(
    switch: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An image built without it (the package installs it)."""
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed
    monkeypatch.setenv(*switch)
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, "W&B is configured", "wandb package is not installed", OPT_OUT)
    assert "k" * 40 not in result.text  # an API key is named, never printed


@pytest.mark.parametrize("key", [None, "k" * 40])
def test_wandb_disabled_is_off_and_asks_for_nothing(
    key: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """WANDB_MODE=disabled, W&B's own off switch, stopped train with exit 2 asking for the
    wandb package (a red-team pass)."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    if key:
        monkeypatch.setenv("WANDB_API_KEY", key)
    result = trainctl("check", "--skip-cluster")
    assert result.code == 0 and "W&B is configured" not in result.text, result.text
    assert "tracking: none configured" in result.out, result.out


def test_an_unknown_wandb_mode_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offlne")
    assert_refused(trainctl("check", "--skip-cluster"), 2, "WANDB_MODE='offlne'", "offline")


def test_a_tensorboard_folder_that_cannot_be_written_stops_train(tmp_path: Path) -> None:
    (tmp_path / "runs" / "digits-resnet18").mkdir(parents=True)
    (tmp_path / "runs" / "digits-resnet18" / "tensorboard").write_text("a file, not a folder")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TRAIN_TENSORBOARD", "true")
        result = trainctl("train")
    assert_refused(result, 2, "TRAIN_TENSORBOARD=true", "cannot be written", OPT_OUT)
    assert not Path("data").exists()


@pytest.mark.parametrize("value", ["0", "-1", "121", "soon"])
def test_the_probe_deadline_is_bounded(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAIN_TRACKING_TIMEOUT_S", value)
    assert_refused(trainctl("check", "--skip-cluster"), 2, f"TRAIN_TRACKING_TIMEOUT_S='{value}'")


def test_nothing_configured_is_said(tmp_path: Path) -> None:
    result = trainctl("check", "--skip-cluster")
    assert "ok    tracking: none configured" in result.out, result.text
