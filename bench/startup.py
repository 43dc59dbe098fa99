"""Startup: from `trainctl train` being launched to its first optimizer step and first checkpoint.

Runs the real, unmodified `python -m app train` on a local Ray cluster it starts itself, several
times, each a fresh run. Time points come from what the run leaves anyway (summary.json, the
attempts record, Ray's checkpoint snapshot) plus bench/probe/sitecustomize.py, which notes the
interpreter start, the imports and the first optimizer step of every process. Usage:
    python -m bench.startup [--reps 3] [--smoke] [--address RAY_ADDRESS]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import median, result_line, say

REPO = Path(__file__).resolve().parent.parent
PROBE_DIR = Path(__file__).resolve().parent / "probe"
# The job a new user starts first (`make run` trains digits on 2 CPU workers), one epoch, with the
# small CNN so that "first checkpoint" measures start-up and not a long epoch.
SETTINGS = {"dataset": "digits", "model": "cnn", "num_workers": "2", "epochs": "1"}
# Phases in the order they happen; each is the time from the previous mark.
MARKS = (
    ("python_start", "interpreter up"),
    ("app_imported", "CLI + app imports"),
    ("cluster_ready", "data check, Ray import + local cluster start, capacity check"),
    ("workers_ready", "TorchTrainer: controller, worker group, process group, model"),
    ("first_step", "Ray Data pipeline to the first batch, first step"),
    ("checkpoint", "rest of epoch 1, validation, checkpoint save and commit"),
    ("exit", "summary, curves, Ray shutdown"),
)


def _probe_events(path: Path, pid: int) -> dict[str, float]:
    """First time of each probe event: the driver's own, plus the first step of any process."""
    found: dict[str, float] = {}
    if not path.exists():
        return found
    for line in path.read_text().splitlines():
        record = json.loads(line)
        event = record["event"]
        if event != "first_step" and record["pid"] != pid:
            continue
        found.setdefault(event, record["time"])
    return found


def _file_marks(run_dir: Path, marks: dict[str, float]) -> None:
    """Note each run-folder milestone the first time it is seen, at its file's own write time."""
    summary, attempts = run_dir / "summary.json", run_dir / "attempts.jsonl"
    snapshot = run_dir / "checkpoint_manager_snapshot.json"
    if "cluster_ready" not in marks and summary.exists():
        # Written as "running" right after the cluster is joined and checked.
        marks["cluster_ready"] = summary.stat().st_mtime
    if "workers_ready" not in marks and attempts.exists():
        lines = attempts.read_text().splitlines()
        if lines:
            marks["workers_ready"] = json.loads(lines[0])["time"]
    if "checkpoint" not in marks and snapshot.exists():
        stamp = snapshot.stat().st_mtime
        if "checkpoint_epoch_0001" in snapshot.read_text():
            marks["checkpoint"] = stamp


def one_start(
    work: Path,
    rep: int,
    address: str | None = None,
    settings: dict[str, str] | None = None,
    data_path: Path | None = None,
) -> dict[str, float]:
    """Time points of one `trainctl train` (SETTINGS unless `settings` says otherwise), in
    seconds since launch; the run folder is <work>/runs/startup-<rep>."""
    storage = work / "runs"
    run_name = f"startup-{rep}"
    probe = work / f"probe-{rep}.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAIN_")}
    env.pop("RAY_ADDRESS", None)  # the local cluster `trainctl train` starts itself, unless:
    if address:
        # Joining a running cluster (the smoke test's), whose workers do not inherit this
        # environment: hand them the probe through the job's runtime environment, the way
        # `ray job submit` hands its runtime environment to an entrypoint.
        probe_env = {"PYTHONPATH": str(PROBE_DIR), "TRAINCTL_BENCH_PROBE": str(probe)}
        env["RAY_JOB_CONFIG_JSON_ENV_VAR"] = json.dumps({"runtime_env": {"env_vars": probe_env}})
        env["TRAIN_RAY_ADDRESS"] = address
    env.update({f"TRAIN_{k.upper()}": v for k, v in (settings or SETTINGS).items()})
    env.update(
        TRAIN_DATA_PATH=str(data_path or work / "data"),
        TRAIN_STORAGE_PATH=str(storage),
        TRAIN_RUN_NAME=run_name,
        TRAINCTL_BENCH_PROBE=str(probe),
        PYTHONPATH=os.pathsep.join(filter(None, [str(PROBE_DIR), env.get("PYTHONPATH")])),
        RAY_USAGE_STATS_ENABLED="0",
        PYTHONUNBUFFERED="1",
    )
    marks: dict[str, float] = {}
    with (work / f"driver-{rep}.log").open("w") as log:
        launched = time.time()
        proc = subprocess.Popen(
            [sys.executable, "-m", "app", "train"], env=env, cwd=work, stdout=log, stderr=log
        )
        while proc.poll() is None:
            _file_marks(storage / run_name, marks)
            time.sleep(0.05)
        marks["exit"] = time.time()
    _file_marks(storage / run_name, marks)
    marks.update(_probe_events(probe, proc.pid))
    if proc.returncode != 0:
        tail = (work / f"driver-{rep}.log").read_text()[-3000:]
        raise SystemExit(f"trainctl train exited {proc.returncode}:\n{tail}")
    return {name: marks[name] - launched for name, _ in MARKS if name in marks}


def prepare_data(work: Path) -> None:
    """Data preparation is a one-off on first use; it is done here, before the clock runs."""
    from app.data.kinds import prepare_dataset

    prepare_dataset(SETTINGS["dataset"], work / "data" / SETTINGS["dataset"], force=False, seed=0)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="one start")
    parser.add_argument("--keep", action="store_true", help="keep the work folder and logs")
    parser.add_argument("--address", help="join this Ray cluster instead (smoke test only)")
    args = parser.parse_args(argv)
    reps = 1 if args.smoke else args.reps

    work = Path(tempfile.mkdtemp(prefix="trainctl-startup-"))
    prepare_data(work)
    settings = ", ".join(f"{k}={v}" for k, v in SETTINGS.items())
    cluster = f"Ray cluster at {args.address}" if args.address else "local Ray cluster"
    say(f"startup: `trainctl train` ({settings}), {cluster}, {reps} start(s), in {work}")
    starts = []
    for rep in range(reps):
        times = one_start(work, rep, args.address)
        starts.append(times)
        say(
            f"  start {rep + 1}/{reps}  first step {times['first_step']:.1f}s  "
            f"first checkpoint {times['checkpoint']:.1f}s  exit {times['exit']:.1f}s"
        )
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)

    at = {name: round(median(s[name] for s in starts), 2) for name, _ in MARKS}
    say("median time since launch, and what each phase does:")
    previous = 0.0
    phases = {}
    for name, meaning in MARKS:
        phases[name] = round(at[name] - previous, 2)
        say(f"  {at[name]:6.1f}s  (+{phases[name]:5.1f}s)  {name:<14} {meaning}")
        previous = at[name]
    result = {
        "reps": reps,
        "first_step_s": at["first_step"],
        "first_checkpoint_s": at["checkpoint"],
        "phases_s": phases,
    }
    print(result_line("startup", result), flush=True)
    return result


if __name__ == "__main__":
    main()
