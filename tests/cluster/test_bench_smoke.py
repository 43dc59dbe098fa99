"""Every benchmark in bench/ runs at a tiny size and reports sane figures, so none can rot.

The figures themselves are not checked (no timing assertions): only that each script runs the
real app code paths end to end and its result line says what it measured. Each script starts
its own local Ray, as `make bench` does, and so covers the local start-up that users of
`make run` and `make bench` get.

They check the benchmark tooling, not the product, and take seven to eight minutes of both cores:
`make bench-smoke` runs them, and CI (.ci/run) runs it after `make test`, which leaves them out
so that the product's suite stays within ten minutes on two cores.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.bench_smoke]


# Far above what any script takes alone (the slowest, preemption, about four minutes here), as
# two run side by side on two loaded cores: the bound only says a script that hangs is a failure.
TIMEOUT_S = 900


def run_bench(name: str, *args: str, cache: Path, command: list[str] | None = None) -> Any:
    # Nothing points it at a running cluster: the script starts its own.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAIN_") and k != "RAY_ADDRESS"}
    env.update(
        TRAINCTL_BENCH_CACHE=str(cache),
        PYTHON=sys.executable,
        PYTHONUNBUFFERED="1",
        RAY_USAGE_STATS_ENABLED="0",
    )
    command = command or [sys.executable, "-m", f"bench.{name}"]
    # Its own process group, so that a script past the bound is interrupted with everything it
    # started (its local Ray, a `trainctl train` it drives) and can shut its cluster down.
    process = subprocess.Popen(
        [*command, "--smoke", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGINT)
        try:
            stdout, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
        pytest.fail(
            f"bench.{name} --smoke still ran after {TIMEOUT_S} s; what it printed:\n"
            f"{stdout[-3000:]}\n{stderr[-5000:]}"
        )
    tail = f"exit {process.returncode}\n{stdout[-3000:]}\n{stderr[-5000:]}"
    assert process.returncode == 0, tail
    last = stdout.strip().splitlines()[-1]
    figures = json.loads(last)
    assert figures["bench"] == name, tail
    return figures


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bench-cache")


def test_ingest_variants_each_deliver_every_row(cache: Path) -> None:
    figures = run_bench("ingest", cache=cache)
    delivered = figures["rows_delivered"]
    variants = [
        "a_tutorial",
        "b_app",
        "b_stream",
        "c_pyarrow",
        "b_app_raw",
        "b_stream_raw",
        "c_pyarrow_raw",
        "b_stream_folder",  # JPEG files in class folders (at most MAX_FOLDER_ROWS of them)
    ]
    assert set(delivered) == set(variants)
    assert set(delivered.values()) == {figures["rows"]}
    assert all(rate > 0 for rate in figures["rows_per_s"].values())
    assert figures["b_over_a"] > 0 and figures["b_over_c"] > 0
    assert figures["folder_stream_over_raw_stream"] > 0
    # The app's first epoch (with the cache, the one that reads the files) is reported too.
    assert set(figures["cold_end_to_end_rows_per_s"]) == {v for v in variants if v.startswith("b_")}
    assert all(rate > 0 for rate in figures["cold_end_to_end_rows_per_s"].values())


def test_overhead_times_the_app_run_and_the_bare_loop(cache: Path) -> None:
    figures = run_bench("overhead", cache=cache)
    assert figures["samples_per_s"]["app"] > 0 and figures["samples_per_s"]["bare"] > 0
    assert figures["app_over_bare"] > 0 and figures["epoch_app_over_bare"] > 0


def test_startup_sees_every_phase_in_order(cache: Path) -> None:
    figures = run_bench("startup", cache=cache)
    phases = figures["phases_s"]
    order = "python_start app_imported cluster_ready workers_ready first_step checkpoint exit"
    assert list(phases) == order.split()
    assert all(seconds >= 0 for seconds in phases.values()), phases
    assert 0 < figures["first_step_s"] < figures["first_checkpoint_s"]


def test_checkpoint_compares_sync_and_async_reports(cache: Path) -> None:
    figures = run_bench("checkpoint", cache=cache)
    assert set(figures["per_epoch"]) == {"SYNC", "ASYNC"}
    assert all(mode["blocked_s"] > 0 for mode in figures["per_epoch"].values())
    assert figures["checkpoint_mib"] > 0


def test_object_storage_compares_s3_and_the_volume(cache: Path) -> None:
    figures = run_bench("object_storage", cache=cache)
    assert figures["checkpoint_mib"] > 0
    for step in ("upload", "verify", "delete"):
        assert figures[f"s3_{step}_s"] > 0 and figures[f"volume_{step}_s"] > 0
        assert figures[f"s3_over_volume_{step}"] > 0


def test_batch_inference_scores_every_image_both_ways(cache: Path) -> None:
    figures = run_bench("batch_inference", cache=cache)
    assert set(figures["images_per_s"]) == {"a_single", "b_ray_data"}
    assert all(rate > 0 for rate in figures["images_per_s"].values())
    assert figures["images"] == 128 and figures["b_over_a"] > 0


def test_gpu_script_runs_its_variants_on_cpu(cache: Path) -> None:
    script = REPO / "bench" / "gpu.sh"
    figures = run_bench("gpu", cache=cache, command=["bash", str(script)])
    variants = figures["variants"]
    assert set(variants) == {"b_app", "a_tutorial", "c_bare_eager", "c_bare_compiled"}
    assert all(v["images_per_s"] > 0 for v in variants.values())
    for timed in ("a_tutorial", "b_app"):
        assert variants[timed]["epoch_s"] > 0 and variants[timed]["first_epoch_s"] > 0
    app = variants["b_app"]
    assert app["first_step_s"] > 0 and next(iter(app["startup_phases_s"])) == "python_start"
    assert figures["b_over_a"] > 0 and figures["b_over_c"] > 0
    assert os.access(script, os.X_OK)


def test_preemption_interrupts_each_cadence_and_counts_what_it_lost(cache: Path) -> None:
    figures = run_bench("preemption", cache=cache)
    ways = figures["ways"]
    assert set(ways) == {"epoch", "steps", "jit"}
    assert all(way["images_per_s"] > 0 and way["step_cost"] > 0 for way in ways.values())
    # What each way recorded, in the run's own words. Which cause the drained run gets is a
    # figure (a just-in-time checkpoint that misses a loaded machine's deadline is reported as
    # missing, and the node goes all the same), not checked here.
    for way in ways.values():
        assert set(way["causes"]) <= {"preemption", "failure", "stopped"}, way
        assert way["notice_to_commit_s"] is None or way["notice_to_commit_s"] > 0, way


def test_data_pool_decodes_every_image_on_either_node(cache: Path) -> None:
    figures = run_bench("data_pool", cache=cache)
    assert figures["mode"] == "cpu" and figures["rows"] == 256
    assert set(figures["rows_per_s"]) == {"training_node", "data_pool"}
    assert all(rate > 0 for rate in figures["rows_per_s"].values())
    assert figures["data_pool_over_training_node"] > 0
    assert figures["placement"]["data_node_cpus"] > 0


def test_sweep_against_the_same_trials_one_after_another(cache: Path) -> None:
    figures = run_bench("sweep", cache=cache)
    assert figures["trials"] == 2 and figures["epochs"] == 1
    assert figures["sweep_s"] > 0 and figures["sequential_s"] > 0
    assert figures["sequential_over_sweep"] == round(
        figures["sequential_s"] / figures["sweep_s"], 3
    )
