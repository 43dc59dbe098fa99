"""Running the real `trainctl` command the way users and the RayJob entrypoint do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def trainctl_env(**settings: str) -> dict[str, str]:
    """The current environment minus any TRAIN_* the developer has set, plus `settings`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAIN_")}
    env.update({f"TRAIN_{k.upper()}": str(v) for k, v in settings.items()})
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_trainctl(
    *args: str, env: dict[str, str], cwd: Path, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def read_summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())


def read_history(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def explain(result: subprocess.CompletedProcess[str]) -> str:
    """Assertion message: the command's own output, trimmed to what fits on a screen."""
    return (
        f"exit {result.returncode}\n--- stdout\n{result.stdout[-4000:]}"
        f"\n--- stderr\n{result.stderr[-6000:]}"
    )
