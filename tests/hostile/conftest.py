"""Every hostile case starts from a clean slate: no TRAIN_* or cluster variables, an empty cwd."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CLEARED_PREFIXES = ("TRAIN_", "TRAINCTL_")
CLEARED = ("RAY_ADDRESS", "KUBECONFIG")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in list(os.environ):
        if key.startswith(CLEARED_PREFIXES) or key in CLEARED:
            monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.kube/config of the developer's
    monkeypatch.chdir(tmp_path)
