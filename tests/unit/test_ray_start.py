"""A local Ray cluster that cannot start is the machine's failure, said as one: exit 1 with
what Ray reported and what to do, not an "internal error" asking for a bug report."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.errors import EXIT_FAILED, TrainctlError
from app.run.ray_cluster import join_or_start


def test_a_local_cluster_that_cannot_start_is_a_clear_failure(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import ray

    assert not ray.is_initialized()
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where Ray wants its session folder")
    monkeypatch.setenv("RAY_TMPDIR", str(blocked))  # a real failure, before any process starts
    with pytest.raises(TrainctlError) as err:
        join_or_start(None, num_cpus=1)
    assert err.value.exit_code == EXIT_FAILED
    message = str(err.value)
    assert message.startswith("the local Ray cluster did not start (")
    assert "nothing was trained" in message and "TRAIN_RAY_ADDRESS" in message
    assert not ray.is_initialized()
