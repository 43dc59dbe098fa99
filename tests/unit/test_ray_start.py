"""A local Ray cluster that cannot start is the machine's failure, said as one: exit 1 with
what Ray reported and what to do, not an "internal error" asking for a bug report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from app.errors import EXIT_FAILED

REPO = Path(__file__).resolve().parents[2]
# In a fresh interpreter: the test process may already hold a Ray session of its own (the
# cluster tests' shared one), and joining or starting Ray is a once-per-process decision.
START = """
import json, ray
from app.errors import TrainctlError
from app.run.ray_cluster import join_or_start
before = ray.is_initialized()
try:
    join_or_start(None, num_cpus=1)
    outcome = {"raised": False}
except TrainctlError as err:
    outcome = {"raised": True, "code": err.exit_code, "message": str(err)}
print(json.dumps({**outcome, "before": before, "after": ray.is_initialized()}))
"""


def test_a_local_cluster_that_cannot_start_is_a_clear_failure(tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where Ray wants its session folder")
    env = {**os.environ, "RAY_TMPDIR": str(blocked)}  # a real failure, before any process
    env.pop("RAY_ADDRESS", None)
    result = subprocess.run(
        [sys.executable, "-c", START], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["before"] is False and outcome["raised"] is True, outcome
    assert outcome["code"] == EXIT_FAILED
    message = outcome["message"]
    assert message.startswith("the local Ray cluster did not start ("), message
    assert "nothing was trained" in message and "TRAIN_RAY_ADDRESS" in message
    assert outcome["after"] is False
