"""Runs shared by the cluster tests that only read what a run left.

A `trainctl train` costs about half a minute of two busy cores, mostly process starts, so:
- one finished training run serves the tests that read a finished run (its folder, its
  checkpoint, its learning); the tests that change a run (rerun, corrupt a checkpoint) work on
  their own copy of it;
- one tracked run whose driver is stopped, then killed, then rerun to the end
  (tests/cluster/interrupted_run.py) serves the preemption and observability tests;
- one `mlflow server` serves every cluster test that tracks or registers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cluster.interrupted_run import InterruptedRun, run_interrupted
from tests.support import (
    FINISHED_EPOCHS,
    REPO,
    FinishedRun,
    background_server,
    explain,
    free_port,
    open_local,
    placement_group_cleaners,
    run_trainctl,
    server_log_tail,
    trainctl_env,
    wait_until,
)


@pytest.fixture(scope="session")
def finished_run(ray_cluster: object, tmp_path_factory: pytest.TempPathFactory) -> FinishedRun:
    """digits on two workers for 6 epochs, every checkpoint kept: enough to learn (>= 90%).

    It trains compiled (TRAIN_COMPILE=on) so that every test reading it also covers compiled
    runs. Inductor's code generation would take minutes on this CPU, so the workers compile with
    aot_eager (TRAINCTL_COMPILE_BACKEND): the same Dynamo capture and AOT autograd graphs, run
    without generated code.
    """
    tmp = tmp_path_factory.mktemp("finished")
    env = trainctl_env(
        dataset="digits",
        model="cnn",
        epochs=str(FINISHED_EPOCHS),
        lr="0.003",
        num_workers="2",
        global_batch_size="64",
        checkpoints_to_keep=str(FINISHED_EPOCHS),
        data_path=str(tmp / "data"),
        storage_path=str(tmp / "runs"),
        ray_address=ray_cluster.address,  # type: ignore[attr-defined]
        max_failures="0",
        compile="on",
    )
    # Workers of a running cluster do not inherit this environment: hand it over the way
    # `ray job submit` hands a job its runtime environment.
    worker_env = {"TRAINCTL_COMPILE_BACKEND": "aot_eager"}
    env["RAY_JOB_CONFIG_JSON_ENV_VAR"] = json.dumps({"runtime_env": {"env_vars": worker_env}})
    cleaners = placement_group_cleaners(ray_cluster)
    result = run_trainctl("train", env=env, cwd=tmp)
    assert result.returncode == 0, explain(result)
    return FinishedRun(tmp, env, result, placement_group_cleaners(ray_cluster) - cleaners)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[], str]]:
    """`mlflow server` on 127.0.0.1 with a local store, from its own venv (.venv-mlflow: full
    mlflow pins pyarrow<26, the app's Ray Data needs 26; the app itself uses mlflow-skinny)."""
    binary = os.environ.get("MLFLOW_BIN") or str(REPO / ".venv-mlflow" / "bin" / "mlflow")
    if not Path(binary).is_file():
        pytest.skip(f"mlflow server not found at {binary} (make setup builds .venv-mlflow)")
    home = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    command = [
        binary, "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
        "--backend-store-uri", f"sqlite:///{home}/mlflow.db",
        "--artifacts-destination", str(home / "artifacts"),
    ]  # fmt: skip
    # MLflow's background job runner (a pool of huey consumers) serves no test here and would
    # compete for the 2 cores.
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    uri = f"http://127.0.0.1:{port}"
    with background_server(command, home=home, env=env) as server:

        def healthy() -> bool:
            try:
                with open_local(f"{uri}/health", timeout=2) as answer:
                    return answer.status == 200
            except OSError:
                assert server.poll() is None, server_log_tail(home)
                return False

        def ready() -> str:
            """The server's URI once it answers (it starts while the caller does other work)."""
            wait_until(healthy, timeout=120, what="mlflow server")
            return uri

        yield ready


@pytest.fixture(scope="session")
def interrupted_run(
    ray_cluster: object,
    mlflow_server: Callable[[], str],
    tmp_path_factory: pytest.TempPathFactory,
) -> InterruptedRun:
    """The tracked run stopped, killed and finished (tests/cluster/interrupted_run.py)."""
    return run_interrupted(ray_cluster, tmp_path_factory.mktemp("interrupted"), mlflow_server())
