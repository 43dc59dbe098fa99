"""`make bench`: run every benchmark in turn, then print the figures that matter on one screen.

Each benchmark runs in its own process (a fresh Ray, no state carried over) and its output is
shown as it comes; its last line is its result. bench/gpu.sh runs too when a GPU is present.
A benchmark that cannot run here (its server did not start) says why and is skipped; one that
fails is reported and the others still run, and `make bench` then exits 1.
Usage: python -m bench [--smoke] [--only ingest,overhead] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCHES = (
    "ingest",
    "overhead",
    "startup",
    "checkpoint",
    "object_storage",
    "preemption",
    "batch_inference",
    "data_pool",
    "sweep",
)
REPO = Path(__file__).resolve().parent.parent


def _gpu_present() -> bool:
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    return subprocess.run([sys.executable, "-c", probe], check=False).returncode == 0


class Failed(Exception):
    """A benchmark that exited non-zero or printed no result line."""


def run(name: str, extra: list[str]) -> dict[str, Any]:
    if name == "gpu":
        command = ["bash", str(REPO / "bench" / "gpu.sh"), *extra]
    else:
        command = [sys.executable, "-m", f"bench.{name}", *extra]
    print(f"\n=== {' '.join(command[1:])}", flush=True)
    started = time.monotonic()
    with subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        last = ""
        for line in proc.stdout:
            print(line, end="", flush=True)
            last = line if line.startswith("{") else last
    if proc.returncode != 0 or not last:
        raise Failed(f"exit {proc.returncode}" if proc.returncode else "no result line")
    result = json.loads(last)
    result["wall_s"] = round(time.monotonic() - started, 1)
    return result


def summary(results: dict[str, dict[str, Any]]) -> list[str]:
    lines = []
    if "ingest" in results:
        r = results["ingest"]
        rates = r["rows_per_s"]
        lines.append(
            f"ingest     tutorial {rates['a_tutorial']:,} | app {rates['b_app']:,} | "
            f"pyarrow {rates['c_pyarrow']:,} rows/s per epoch: b/a {r['b_over_a']} (>= 3), "
            f"b/c {r['b_over_c']} (>= 0.5); first epoch end to end b/a "
            f"{r['cold_end_to_end_b_over_a']}; streaming every epoch: b/a "
            f"{r['stream_b_over_a']}, b/c {r['stream_b_over_c']}; prepare-data layout: b/a "
            f"{r['raw_b_over_a']}, b/c {r['raw_b_over_c']}, streaming b/a "
            f"{r['raw_stream_b_over_a']}, b/c {r['raw_stream_b_over_c']}"
        )
    if "overhead" in results:
        r = results["overhead"]
        lines.append(
            f"overhead   training steps: app {r['samples_per_s']['app']} vs bare "
            f"{r['samples_per_s']['bare']} samples/s, app/bare {r['app_over_bare']} (>= 0.95); "
            f"whole epoch incl. validation and checkpoint {r['epoch_app_over_bare']}"
        )
    if "startup" in results:
        r = results["startup"]
        lines.append(
            f"startup    first optimizer step {r['first_step_s']}s, first committed "
            f"checkpoint {r['first_checkpoint_s']}s (medians of {r['reps']})"
        )
    if "checkpoint" in results:
        r = results["checkpoint"]
        sync, asyn = r["per_epoch"]["SYNC"], r["per_epoch"]["ASYNC"]
        lines.append(
            f"checkpoint {r['model']} {r['checkpoint_mib']} MiB: save+report SYNC "
            f"{sync['blocked_s']}s vs ASYNC {asyn['blocked_s']}s per epoch"
        )
    if "preemption" in results:
        r = results["preemption"]
        shown = ", ".join(
            f"{way} {v['steps_lost']} steps lost (step cost {v['step_cost']})"
            for way, v in r["ways"].items()
        )
        notice = r["ways"]["jit"]["notice_to_commit_s"]
        lines.append(f"preemption {shown}; drain notice to committed checkpoint {notice}s")
    if "batch_inference" in results:
        r = results["batch_inference"]
        rates = r["images_per_s"]
        lines.append(
            f"batch inf. {r['images']:,} JPEGs, {r['model']}: Ray Data {rates['b_ray_data']:,} vs "
            f"single process {rates['a_single']:,} images/s end to end, b/a {r['b_over_a']}"
        )
    if "data_pool" in results:
        r = results["data_pool"]
        rates, where = r["rows_per_s"], r["placement"]
        lines.append(
            f"data pool  image folder: training node's CPUs {rates['training_node']:,} vs a data "
            f"node's {rates['data_pool']:,} rows/s, {r['data_pool_over_training_node']} "
            f"({where['training_node_cpus']} + {where['data_node_cpus']} CPUs on "
            f"{where['machine_cores']} cores)"
        )
    if "sweep" in results:
        r = results["sweep"]
        lines.append(
            f"sweep      {r['trials']} trials x {r['epochs']} epochs: trainctl tune "
            f"{r['sweep_s']}s ({r['concurrent']} at a time) vs trainctl train one after another "
            f"{r['sequential_s']}s, sequential/sweep {r['sequential_over_sweep']}"
        )
    if "gpu" in results:
        r = results["gpu"]
        shown = ", ".join(
            f"{name} {v['epoch_s']}s ({v['images_per_s']:,} img/s)"
            for name, v in r["variants"].items()
        )
        lines.append(f"gpu        {r['device']}: {shown}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="every benchmark at a tiny size")
    parser.add_argument("--only", help="comma-separated subset of " + ",".join(BENCHES))
    parser.add_argument("--out", type=Path, help="also write all results to this JSON file")
    args = parser.parse_args()
    names = args.only.split(",") if args.only else [*BENCHES, *(["gpu"] if _gpu_present() else [])]
    extra = ["--smoke"] if args.smoke else []
    started = time.monotonic()
    results: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    failed: dict[str, str] = {}
    for name in names:
        try:
            result = run(name, extra)
        except Failed as why:
            failed[name] = str(why)
            continue
        if "skipped" in result:
            skipped[name] = result["skipped"]
        else:
            results[name] = result
    print(f"\n=== summary ({time.monotonic() - started:.0f}s)")
    for line in summary(results):
        print(line)
    for name, why in skipped.items():
        print(f"{name:<10} skipped: {why}")
    for name, why in failed.items():
        print(f"{name:<10} FAILED: {why} (its output is above)")
    met = not failed and all(r.get("targets_met", True) for r in results.values())
    total = {
        "bench": "all",
        "targets_met": met,
        "skipped": skipped,
        "failed": failed,
        **{name: {k: v for k, v in r.items() if k != "machine"} for name, r in results.items()},
    }
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(total))
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
