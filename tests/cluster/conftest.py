"""One finished training run, shared by the cluster tests that only need its outputs.

A `trainctl train` costs about half a minute of two busy cores, mostly process starts, so the
tests that read a finished run (its folder, its checkpoint, its learning) share this one, and the
tests that change a run (rerun, corrupt a checkpoint) work on their own copy of it.
"""

from __future__ import annotations

import json

import pytest

from tests.support import FINISHED_EPOCHS, FinishedRun, explain, run_trainctl, trainctl_env


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
    result = run_trainctl("train", env=env, cwd=tmp)
    assert result.returncode == 0, explain(result)
    return FinishedRun(tmp, env, result)
