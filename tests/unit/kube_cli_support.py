"""What the `trainctl submit`/`status`/`logs` tests share: a values file with one CPU pool, the
RayJob name it renders to, a fake Kubernetes API server (tests/unit/fake_kube_api.py) behind a
kubeconfig, and the CLI run in-process with its exit code."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cli import main
from app.errors import EXIT_OK
from app.k8s.render import load_values, render_objects
from tests.unit.fake_kube_api import FakeKubeApi, serve

VALUES = """\
nodePools:
  cpu-a:
    gpusPerWorker: 0
    cpusPerWorker: "2"  # one for the training worker, one for Ray Data's tasks
    memoryPerWorker: 2Gi
    replicas: 2
train:
  dataset: digits
  model: cnn
  epochs: 2
"""
RUNNING = {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}
SUCCEEDED = {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}


@pytest.fixture
def values_file(tmp_path: Path) -> Path:
    path = tmp_path / "values.yaml"
    path.write_text(VALUES)
    return path


@pytest.fixture
def rayjob_name(values_file: Path) -> str:
    objects = render_objects(load_values([values_file]), release="demo", namespace="ml")["cpu-a"]
    return next(o["metadata"]["name"] for o in objects if o["kind"] == "RayJob")


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeKubeApi]:
    kubeconfig = tmp_path / "kubeconfig"
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with serve(FakeKubeApi(), kubeconfig) as fake:
        yield fake


def trainctl(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    argv = sys.argv
    sys.argv = ["trainctl", *args]
    try:
        main()
        code = EXIT_OK
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    finally:
        sys.argv = argv
    out, err = capsys.readouterr()
    return code, out, err


def submit(capsys: pytest.CaptureFixture[str], values: Path, *extra: str) -> tuple[int, str, str]:
    args = ("submit", "--values", str(values), "--pool", "cpu-a", "--release", "demo")
    return trainctl(capsys, *args, "--poll-interval", "0.05", *extra)
