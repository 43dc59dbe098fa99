"""Preemption: what each checkpoint cadence loses to a lost node, and what it costs per step.

The same `trainctl train` run (synthetic data, the cnn, one worker on a worker node of a local
multi-node cluster, 3 epochs) is interrupted half-way through epoch 2 in three ways:

  epoch: TRAIN_CHECKPOINT_EVERY=epoch, the node is killed without notice;
  steps: TRAIN_CHECKPOINT_EVERY=<N>, the node is killed without notice;
  jit:   TRAIN_CHECKPOINT_EVERY=epoch, the node is drained first (`ray drain-node --reason
         DRAIN_NODE_REASON_PREEMPTION --deadline-remaining-seconds S`), killed once the
         just-in-time checkpoint is committed.

Per way: notice_to_commit_s (drain notice to committed checkpoint, jit only), steps_lost (from
the run's summary.json `interruptions`: the steps since the last checkpoint Ray had committed
when the node went; on this one machine a removed node's worker may outlive it for a moment,
which the count includes), and step_cost (epoch 1's images/s of the epoch-only
run over this run's: what mid-epoch checkpoints cost per step, 1.0 = nothing).

Usage: python -m bench.preemption [--rows 8000] [--every 50] [--smoke]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from app.training.sample_log import ENV as SAMPLE_LOG
from bench.common import ray_bench_arguments, result_line, say

REPO = Path(__file__).resolve().parent.parent
POOL = {"accelerator_type:A100": 1}
DEADLINE_S = 30
RAY = str(Path(sys.executable).parent / "ray")  # the CLI of the Ray this Python runs


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


def _epochs(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if line.strip()]


def _workers(address: str) -> list[Any]:
    from ray.util.state import list_actors

    filters = [("class_name", "=", "RayTrainWorker"), ("state", "=", "ALIVE")]
    return list(list_actors(address=address, filters=filters))


def _retrained(samples: Path) -> int:
    """Steps trained twice: what the interruption really lost (the test-only sample log of
    app/training/sample_log.py has one line per step and rank, across attempts)."""
    steps = [
        tuple(line.split(" ", 2)[:2]) for line in (samples / "rank-0.txt").read_text().splitlines()
    ]
    return len(steps) - len(set(steps))


def _one(way: str, every: str, cluster: Any, data: Path, work: Path, batch: int) -> dict:
    from app.runfolder.checkpoint_names import dir_name
    from app.runfolder.folder import ray_committed, read_progress

    # The previous way's workers are gone (a removed node's may linger a moment here).
    _wait(lambda: not _workers(cluster.address), 120, "the previous run's workers to go")
    storage = work / way
    run_dir = storage / "bench"
    samples = work / f"{way}-samples"
    samples.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAIN_")}
    env.update(
        TRAIN_DATASET="synthetic", TRAIN_MODEL="cnn", TRAIN_EPOCHS="3", TRAIN_NUM_WORKERS="1",
        TRAIN_GLOBAL_BATCH_SIZE=str(batch), TRAIN_CHECKPOINT_EVERY=every,
        TRAIN_DATA_PATH=str(data), TRAIN_STORAGE_PATH=str(storage), TRAIN_RUN_NAME="bench",
        TRAIN_RAY_ADDRESS=cluster.address, TRAIN_ACCELERATOR_TYPE="A100",
        TRAIN_CHECKPOINTS_TO_KEEP="3", RAY_TRAIN_HEALTH_CHECK_INTERVAL_S="0.5",
        PYTHONPATH=str(REPO),
        # Workers of a running cluster get their environment from the job's runtime env.
        RAY_JOB_CONFIG_JSON_ENV_VAR=json.dumps(
            {"runtime_env": {"env_vars": {SAMPLE_LOG: str(samples)}}}
        ),
    )  # fmt: skip
    log = (work / f"{way}.log").open("w")
    driver = subprocess.Popen(
        [sys.executable, "-m", "app", "train"], env=env, cwd=work, stdout=log, stderr=log
    )
    _wait(lambda: len(_epochs(run_dir)) >= 1, 900, "epoch 1")
    first = _epochs(run_dir)[0]
    say(f"  {way}: epoch 1 took {first['epoch_time_s']:.1f} s; the node goes half-way through 2")
    time.sleep(first["epoch_time_s"] / 2)  # half-way through epoch 2
    node_id = _workers(cluster.address)[0].node_id
    noticed_to_commit = None
    if way == "jit":
        noticed = time.monotonic()
        subprocess.run(
            [RAY, "drain-node", "--address", cluster.address, "--node-id", node_id,
             "--reason", "DRAIN_NODE_REASON_PREEMPTION", "--reason-message", "bench",
             "--deadline-remaining-seconds", str(DEADLINE_S)],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        try:
            _wait(
                lambda: (read_progress(run_dir).get("jit") or {}).get("reason") == "preemption",
                DEADLINE_S,
                "the just-in-time checkpoint",
            )
            progress = read_progress(run_dir)
            name = dir_name(int(progress["epoch"]) - 1, int(progress["jit"]["step"]))
            # Written and copied is not yet committed: Ray's controller registers it on its next
            # poll, and only a committed checkpoint is what a restart resumes from. A real node
            # stays until its deadline; this one goes as soon as the checkpoint is committed.
            _wait(
                lambda: name in ray_committed(run_dir),
                max(1.0, DEADLINE_S - (time.monotonic() - noticed)),
                f"Ray to commit {name}",
            )
            noticed_to_commit = round(time.monotonic() - noticed, 2)
        except TimeoutError:  # reported as missing (None), and the node goes all the same
            say(f"  jit: no just-in-time checkpoint within the {DEADLINE_S} s deadline")
    node = next(n for n in cluster.worker_nodes if n.node_id == node_id)
    cluster.remove_node(node, allow_graceful=False)
    cluster.add_node(num_cpus=2, resources=POOL)
    code = driver.wait(timeout=900)
    log.close()
    say(f"  {way}: trainctl train exited {code}")
    if code != 0:
        raise RuntimeError(f"{way}: trainctl exited {code}; see {work / f'{way}.log'}")
    summary = json.loads((run_dir / "summary.json").read_text())
    lost = [i["steps_lost"] for i in summary.get("interruptions", [])]
    return {
        "images_per_s": first["images_per_s"],
        "steps_lost": lost[0] if lost else None,  # as the run recorded it
        "steps_retrained": _retrained(samples),  # as it happened
        "causes": [i["cause"] for i in summary.get("interruptions", [])],
        "notice_to_commit_s": noticed_to_commit,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = ray_bench_arguments(__doc__, "3000 rows, every 20 steps", rows=8000, every=50)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args(argv)
    if args.smoke:
        args.rows, args.every = 3000, 20

    from ray.cluster_utils import Cluster

    from app.data.kinds import prepare_dataset

    work = Path(tempfile.mkdtemp(prefix="trainctl-preemptbench-"))
    prepare_dataset("synthetic", work / "data" / "synthetic", rows=args.rows)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=2, resources=POOL)
    cluster.wait_for_nodes()
    ways = {"epoch": "epoch", "steps": str(args.every), "jit": "epoch"}
    try:
        results = {
            way: _one(way, every, cluster, work / "data", work, args.batch)
            for way, every in ways.items()
        }
    except BaseException:
        say(f"preemption: stopped; each way's trainctl log is kept in {work}")
        raise
    finally:
        cluster.shutdown()
    shutil.rmtree(work, ignore_errors=True)

    base = results["epoch"]["images_per_s"]
    say(f"preemption: synthetic {args.rows} rows, cnn, batch {args.batch}, one worker")
    for way, r in results.items():
        r["step_cost"] = round(base / r["images_per_s"], 3) if r["images_per_s"] else None
        say(
            f"  {way:<6} steps lost {r['steps_lost']} (retrained {r['steps_retrained']})  "
            f"causes {r['causes']}  step cost {r['step_cost']}  "
            f"notice to commit {r['notice_to_commit_s']}"
        )
    result = {"rows": args.rows, "every": args.every, "ways": results}
    print(result_line("preemption", result), flush=True)
    return result


if __name__ == "__main__":
    main()
