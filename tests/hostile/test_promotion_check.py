"""`trainctl check` on a champion pointer other hands damaged: the promotion check fails with
exit 2, naming the file and what is wrong, and every other check still reports; a missing
pointer is no champion yet. Real CLI in-process, real files, no Ray (--skip-cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import parquet_support as data
from tests.hostile.support import assert_refused, trainctl

BASE = {"TRAIN_DATASET": "parquet", "TRAIN_MODEL": "cnn", "TRAIN_GLOBAL_BATCH_SIZE": "64"}


def _setup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    data.good(tmp_path / "data")
    env = {**BASE, "TRAIN_DATA_PATH": str(tmp_path / "data")}
    env["TRAIN_STORAGE_PATH"] = str(tmp_path / "runs")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return tmp_path / "runs" / "champions" / "parquet-cnn.json"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"\x1b[2J{torn", "unreadable champion pointer"),
        # JSON's escapes: the parsed strings hold the control characters.
        (b'{"version": 1, "metrics": ["\\u001b]0;owned\\u0007"]}', "`metrics` is not an object"),
        (b'{"version": "\\u001b[2J"}', "no whole-number `version`"),
    ],
    ids=["torn", "metrics-list", "version-text"],
)
def test_a_damaged_pointer_fails_the_check_and_hides_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, content: bytes, problem: str
) -> None:
    pointer = _setup(monkeypatch, tmp_path)
    pointer.parent.mkdir(parents=True)
    pointer.write_bytes(content)
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, f"FAIL  promotion: {pointer}: ", problem, "until the file is fixed")
    assert "\x1b" not in result.text and "\x07" not in result.text
    for name in ("settings", "storage", "dataset", "versions"):
        assert f"ok    {name}: " in result.out, result.out
    assert pointer.read_bytes() == content  # check reads, never repairs


def test_no_pointer_is_no_champion_yet(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pointer = _setup(monkeypatch, tmp_path)
    monkeypatch.setenv("TRAIN_PROMOTE_IF", "val_accuracy>=0.95")
    result = trainctl("check", "--skip-cluster")
    assert result.code == 0, result.text
    assert (
        "ok    promotion: gate val_accuracy>=0.95; no champion yet (the first run to pass the "
        f"gate becomes v1 at {pointer})"
    ) in result.out
    assert not pointer.parent.exists()
