"""Ray token authentication as the chart configures it: the job API refuses a submitter without
the token and runs the job of one that has it.

The chart asks KubeRay for `authOptions: {mode: token, secretName: <release>-ray-auth}`; KubeRay
then starts the head with RAY_AUTH_MODE=token and RAY_AUTH_TOKEN from the Secret's `auth_token`,
and gives the submitter the same two variables. This module starts its own short-lived head
(`ray start --head --block`, as KubeRay's head container does) with exactly that env, so the
shared cluster of the other tests is never touched.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.contract.k8s_support import EXAMPLES, load_yaml
from tests.rayjob_support import auth_env, render_pool
from tests.support import REPO, free_port, run_trainctl, trainctl_env

# One group: under `--dist loadgroup` the module's tests were spread over both workers, and each
# started its own token head (about 12 s of two busy cores apiece).
pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.xdist_group("token-auth")]

READY = "This command will now block forever"
# A driver that talks to the GCS and runs a task on a worker: in-cluster auth works too.
ENTRYPOINT = (
    "python -c 'import ray; ray.init(); "
    'print("task answered", ray.get(ray.remote(lambda: 6 * 7).remote()))\''
)


def _clean_env() -> dict[str, str]:
    """The test's env without any Ray credentials, cluster address or TRAIN_* settings."""
    # Either address variable would win over the address the submitter is given.
    drop = (
        "RAY_AUTH_MODE",
        "RAY_AUTH_TOKEN",
        "RAY_AUTH_TOKEN_PATH",
        "RAY_ADDRESS",
        "RAY_API_SERVER_ADDRESS",
    )
    return {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("TRAIN_")}


@pytest.fixture(scope="module")
def chart_auth() -> dict[str, str]:
    """The env KubeRay derives from the chart's authOptions and the rendered auth Secret."""
    job, objects = render_pool(load_yaml(EXAMPLES / "values-cpu.yaml"), "pool-a")
    env = auth_env(job, objects)
    assert env.get("RAY_AUTH_MODE") == "token", job["spec"]["rayClusterSpec"]
    assert len(env["RAY_AUTH_TOKEN"]) >= 32
    return env


class TokenHead(NamedTuple):
    jobs: str  # the job API's URL, as KubeRay's submitter is given it
    gcs: str  # host:port of the head's control store, as TRAIN_RAY_ADDRESS names it


@pytest.fixture(scope="module")
def token_head(chart_auth: dict[str, str]) -> Iterator[TokenHead]:
    """A one-node cluster started with the chart's auth env.

    `ray start` gives its raylet a fixed 30 s to register with the GCS and then exits; on two
    cores busy with both test groups' clusters that can run out, so a start that ended so is
    tried once more (any other failure is the test's to report)."""
    for attempt in (1, 2):
        head, temp_dir, dashboard, gcs = _start_head(chart_auth)
        try:
            _wait_ready(head, temp_dir / "head.log", retry=attempt == 1)
        except _StartTimedOut:
            _stop(head)
            shutil.rmtree(temp_dir, ignore_errors=True)
            continue
        except BaseException:
            _stop(head)
            shutil.rmtree(temp_dir, ignore_errors=True)
            raise
        try:
            yield TokenHead(f"http://127.0.0.1:{dashboard}", f"127.0.0.1:{gcs}")
        finally:
            _stop(head)
            shutil.rmtree(temp_dir, ignore_errors=True)
        return


class _StartTimedOut(Exception):
    """`ray start` gave up waiting for its own raylet (Ray's fixed 30 s)."""


def _start_head(chart_auth: dict[str, str]) -> tuple[subprocess.Popen[bytes], Path, int, int]:
    # Its own short temp dir: Ray's socket paths must stay short, and `ray start` records its
    # address there instead of in /tmp/ray, where other clusters' `ray.init()` would find it.
    temp_dir = Path(tempfile.mkdtemp(prefix="rayauth-", dir="/tmp"))
    dashboard, gcs = free_port(), free_port()
    log_path = temp_dir / "head.log"
    command = [
        str(Path(sys.executable).parent / "ray"),
        "start",
        "--head",
        "--block",
        f"--port={gcs}",
        "--num-cpus=1",
        "--include-dashboard=true",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard}",
        f"--dashboard-agent-listen-port={free_port()}",
        f"--temp-dir={temp_dir}",
        "--disable-usage-stats",
    ]
    with log_path.open("w") as log:
        head = subprocess.Popen(
            command,
            env={**_clean_env(), **chart_auth},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its Ray processes form one group we can end together
        )
    return head, temp_dir, dashboard, gcs


def _wait_ready(
    head: subprocess.Popen[bytes], log_path: Path, timeout: float = 240, retry: bool = False
) -> None:
    deadline = time.monotonic() + timeout
    while READY not in log_path.read_text():
        if head.poll() is not None or time.monotonic() > deadline:
            said = log_path.read_text()
            if retry and "The current node timed out during startup" in said:
                raise _StartTimedOut
            raise AssertionError(f"token-auth head did not start:\n{said[-4000:]}")
        time.sleep(0.5)


def _stop(head: subprocess.Popen[bytes]) -> None:
    # SIGTERM makes `ray start --block` stop every Ray process it started.
    head.send_signal(signal.SIGTERM)
    try:
        head.wait(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(head.pid, signal.SIGKILL)
        head.wait(timeout=30)


def _submit(address: str, env: dict[str, str]) -> dict[str, str]:
    """Submit ENTRYPOINT from a separate process holding only `env`'s credentials."""
    result = subprocess.run(
        [sys.executable, "-m", "tests.job_submitter", address, ENTRYPOINT, "--timeout", "240"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0 and result.stdout.strip(), result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_submission_without_a_token_is_refused(token_head: TokenHead, tmp_path: Path) -> None:
    # An empty HOME: no ~/.ray/auth_token to fall back on.
    outcome = _submit(token_head.jobs, {**_clean_env(), "HOME": str(tmp_path)})
    assert "status" not in outcome, outcome
    assert "Missing authentication token" in outcome["error"], outcome


def test_submission_with_a_wrong_token_is_refused(
    token_head: TokenHead, chart_auth: dict[str, str], tmp_path: Path
) -> None:
    wrong = {**chart_auth, "RAY_AUTH_TOKEN": chart_auth["RAY_AUTH_TOKEN"][::-1] + "x"}
    outcome = _submit(token_head.jobs, {**_clean_env(), "HOME": str(tmp_path), **wrong})
    assert "status" not in outcome, outcome
    assert "Invalid authentication token" in outcome["error"], outcome


def test_submission_with_the_charts_token_runs(
    token_head: TokenHead, chart_auth: dict[str, str], tmp_path: Path
) -> None:
    outcome = _submit(token_head.jobs, {**_clean_env(), "HOME": str(tmp_path), **chart_auth})
    assert outcome.get("status") == "SUCCEEDED", outcome
    assert "task answered 42" in outcome["logs"], outcome["logs"]


def test_trainctl_joins_with_the_token_and_names_a_missing_or_refused_one(
    token_head: TokenHead, chart_auth: dict[str, str], tmp_path: Path
) -> None:
    """A client without the token was refused by Ray after 20 s of retries with a bare
    ConnectionError, which trainctl called an internal error; with RAY_AUTH_MODE=token and no
    token file, Ray's C++ client aborted the process. Each is now a FAIL line naming the fix."""
    base = trainctl_env(
        {**_clean_env(), "HOME": str(tmp_path)},
        ray_address=token_head.gcs,
        num_workers="1",  # the head is the one node, with 1 CPU
        data_path=str(tmp_path / "data"),
        storage_path=str(tmp_path / "runs"),
    )
    missing = tmp_path / "no-token"
    said = f"FAIL  cluster: Ray address {token_head.gcs}: "
    cases = [
        ({}, said + "the cluster requires token authentication, and this client sends no token "
             "(RAY_AUTH_MODE=unset): set RAY_AUTH_MODE=token and the cluster's token in "
             "RAY_AUTH_TOKEN or in the file RAY_AUTH_TOKEN_PATH names (`ray start` writes "
             "~/.ray/auth_token on the head's machine)"),
        ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(missing)},
         said + "RAY_AUTH_MODE=token, but this client has no token to send: RAY_AUTH_TOKEN_PATH "
                f"is set but file cannot be opened or is empty: {missing}"),
        (chart_auth, "ok    cluster: 1 node(s)"),
    ]  # fmt: skip
    for auth, expected in cases:
        result = run_trainctl("check", env={**base, **auth}, cwd=tmp_path, timeout=300)
        told = (sorted(auth), result.stdout[-3000:], result.stderr[-3000:])
        lines = [line for line in result.stdout.splitlines() if line[6:14] == "cluster:"]
        assert len(lines) == 1 and lines[0].startswith(expected), told
        assert result.returncode == (0 if expected.startswith("ok") else 2), told
        assert "internal error" not in result.stderr and "StackTrace" not in result.stderr, told
