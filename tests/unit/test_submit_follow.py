"""`trainctl submit --wait`: the per-poll decision and the loop around it.

The RayJob statuses come from a scripted list, standing in for the Kubernetes API server (the
one thing allowed to be faked); the epoch lines come from a real metrics.jsonl written by the
training app's own history module.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from app.errors import EXIT_FAILED, EXIT_INVALID, EXIT_OK
from app.k8s.follow import FollowState, advance, epoch_line, follow, summary_line
from app.runfolder import folder as run_folder

NAME = "demo-a100-1a2b3c4d"


def _rayjob(deployment: str, job: str = "", reason: str = "", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": NAME},
        "spec": {"activeDeadlineSeconds": 60},
        "status": {
            "jobDeploymentStatus": deployment,
            "jobStatus": job,
            "reason": reason,
            **status,
        },
    }


class ScriptedApi:
    """Answers each poll with the next RayJob state; the last one repeats."""

    def __init__(self, states: list[Mapping[str, Any] | None]) -> None:
        self.states = states
        self.polls = 0

    def __call__(self) -> Mapping[str, Any] | None:
        state = self.states[min(self.polls, len(self.states) - 1)]
        self.polls += 1
        return state


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _follow(api: ScriptedApi, **kwargs: Any) -> tuple[Any, list[str]]:
    lines: list[str] = []
    clock = FakeClock()
    outcome = follow(api, name=NAME, echo=lines.append, clock=clock, sleep=clock.sleep, **kwargs)
    return outcome, lines


def test_one_line_per_change_until_success() -> None:
    api = ScriptedApi(
        [
            _rayjob(""),
            _rayjob("Initializing"),
            _rayjob("Initializing"),
            _rayjob("Running", "PENDING"),
            _rayjob("Running", "RUNNING"),
            _rayjob("Running", "RUNNING"),
            _rayjob("Complete", "SUCCEEDED"),
        ]
    )
    outcome, lines = _follow(api, poll_s=5)
    assert outcome.verdict.exit_code == EXIT_OK
    assert api.polls == 7
    assert [line.split("] ", 1)[1].split(":")[0] for line in lines] == [
        "New / job -",
        "Initializing / job -",
        "Running / job PENDING",
        "Running / job RUNNING",
        "Complete / job SUCCEEDED",
    ]
    assert lines[-1].startswith("[    30s]")


def test_failure_returns_the_reason_and_message() -> None:
    api = ScriptedApi(
        [
            _rayjob("Running", "RUNNING"),
            _rayjob("Failed", "RUNNING", "DeadlineExceeded", message="past the deadline"),
        ]
    )
    outcome, lines = _follow(api)
    assert outcome.verdict.exit_code == EXIT_FAILED
    assert "Failed / job RUNNING: failed (DeadlineExceeded)" in lines[-1]
    assert "activeDeadlineSeconds (60s)" in outcome.verdict.problems[0]
    assert "message: past the deadline" in outcome.verdict.problems


def test_validation_failed_is_invalid_input() -> None:
    outcome, _ = _follow(ScriptedApi([_rayjob("ValidationFailed", "", "ValidationFailed")]))
    assert outcome.verdict.exit_code == EXIT_INVALID


def test_timeout_gives_up_without_a_verdict_and_never_oversleeps() -> None:
    api = ScriptedApi([_rayjob("Running", "RUNNING")])
    outcome, lines = _follow(api, timeout_s=10, poll_s=4)
    assert outcome.verdict is None
    assert outcome.elapsed_s == 10  # polls at 0, 4, 8 and a last one exactly at the limit
    assert api.polls == 4
    assert len(lines) == 1


class SlowApi(ScriptedApi):
    """An API server that takes `seconds` to answer each request, on the fake clock."""

    def __init__(self, states: list[Mapping[str, Any] | None], clock: FakeClock, seconds: float):
        super().__init__(states)
        self.clock, self.seconds = clock, seconds

    def __call__(self) -> Mapping[str, Any] | None:
        self.clock.sleep(self.seconds)
        return super().__call__()


def test_a_slow_api_is_not_polled_past_the_timeout_and_the_time_said_is_the_real_one() -> None:
    """The time was read before each request: `--timeout 8` against a server answering in 20 s
    slept, polled again, and said `ran out after 23s` at 64 s of wall time (a red-team pass)."""
    clock, lines = FakeClock(), []
    api = SlowApi([_rayjob("Running", "RUNNING")], clock, 20)
    outcome = follow(
        api, name=NAME, echo=lines.append, clock=clock, sleep=clock.sleep, timeout_s=8, poll_s=3
    )
    assert outcome.verdict is None and api.polls == 1
    assert outcome.elapsed_s == 20 == clock.now


def test_a_request_cut_by_the_timeout_ends_the_wait_as_a_timeout() -> None:
    from app.storage.deadline import DeadlineExceeded

    clock = FakeClock()

    def cut() -> Mapping[str, Any] | None:
        clock.sleep(8)
        raise DeadlineExceeded("the Kubernetes API (RayJob x)", 8)

    outcome = follow(cut, name=NAME, echo=print, clock=clock, sleep=clock.sleep, timeout_s=8)
    assert outcome.verdict is None and outcome.elapsed_s == 8


@pytest.mark.timeout(60)
def test_submit_bounds_each_request_by_the_time_the_timeout_leaves() -> None:
    """A request that would take 30 s (TRAINCTL_API_TIMEOUT's default, times its retries) is
    given up when --timeout's 0.5 s are spent; then no request starts at all."""
    import time

    from app.k8s.submit import _within
    from app.storage.deadline import DeadlineExceeded

    bounded = _within(0.5, "the Kubernetes API (RayJob x)")
    assert bounded(lambda: "answer") == "answer"
    with pytest.raises(DeadlineExceeded, match="RayJob x"):
        bounded(lambda: time.sleep(30))
    started = []
    with pytest.raises(DeadlineExceeded):
        bounded(lambda: started.append(1))
    assert started == []
    assert _within(None, "x")(lambda: "unbounded") == "unbounded"


def test_a_rayjob_deleted_mid_wait_is_a_failure_that_says_so() -> None:
    outcome, _ = _follow(ScriptedApi([_rayjob("Running", "RUNNING"), None]))
    assert outcome.verdict.exit_code == EXIT_FAILED
    problem = outcome.verdict.problems[0]
    assert "disappeared before it finished; last seen as Running / job RUNNING" in problem


def test_retries_print_a_line_per_attempt() -> None:
    api = ScriptedApi(
        [
            _rayjob("Running", "RUNNING"),
            _rayjob("Retrying", "FAILED", failed=1),
            _rayjob("Initializing", "", failed=1),
            _rayjob("Running", "RUNNING", failed=1),
            _rayjob("Complete", "SUCCEEDED", failed=1),
        ]
    )
    outcome, lines = _follow(api)
    assert outcome.verdict.exit_code == EXIT_OK
    assert len(lines) == 5 and "attempt 2" in lines[1]


def _epochs(run_dir: Path, count: int) -> Iterator[dict[str, Any]]:
    for epoch in range(1, count + 1):
        metrics = {
            "epoch": epoch,
            "train_loss": 1.0 / epoch,
            "val_loss": 1.1 / epoch,
            "val_accuracy": 0.5 + epoch / 10,
            "epoch_time_s": 2.0,
        }
        run_folder.record_epoch(run_dir, metrics)
        yield metrics


def test_epoch_lines_come_from_the_run_folder_once_each(tmp_path: Path) -> None:
    run_dir = tmp_path / NAME
    writer = _epochs(run_dir, 2)

    def api() -> dict[str, Any]:
        # Training advances one epoch per poll, as it would while the job runs.
        if next(writer, None) is None:
            return _rayjob("Complete", "SUCCEEDED")
        return _rayjob("Running", "RUNNING")

    outcome, lines = _follow(api, run_dir=run_dir, total_epochs=2)  # type: ignore[arg-type]
    assert outcome.verdict.exit_code == EXIT_OK
    epoch_lines = [line for line in lines if line.startswith("epoch")]
    assert epoch_lines == [
        "epoch 1/2  train_loss 1.0000  val_loss 1.1000  val_acc 60.00%  2.0s/epoch  ETA 2s",
        "epoch 2/2  train_loss 0.5000  val_loss 0.5500  val_acc 70.00%  2.0s/epoch  ETA 0s",
    ]


def test_an_epoch_repeated_after_a_restart_is_printed_again() -> None:
    first = {"epoch": 1, "train_loss": 1.0, "time": 100.0}
    state = advance(FollowState(), None, name=NAME, elapsed_s=0, records=[first]).state
    again = advance(state, _rayjob("Running"), name=NAME, elapsed_s=1, records=[first])
    assert not any(line.startswith("epoch") for line in again.lines)
    redone = {**first, "time": 200.0}
    tick = advance(again.state, _rayjob("Running"), name=NAME, elapsed_s=2, records=[redone])
    assert [line for line in tick.lines if line.startswith("epoch")] == [
        "epoch 1/1  train_loss 1.0000"
    ]


def test_epoch_line_tolerates_missing_metrics() -> None:
    assert epoch_line({"epoch": 3}, 10) == "epoch  3/10"


def test_summary_line_reports_the_run_folder(tmp_path: Path) -> None:
    summary = {
        "run_name": NAME,
        "status": "succeeded",
        "epochs_completed": 2,
        "epochs_target": 2,
        "best": {"val_accuracy": 0.91234, "epoch": 2},
        "failures": 1,
        "checkpoint": "/mnt/x/checkpoint_000001",
    }
    line = summary_line(summary, tmp_path)
    assert line.startswith(f"run {NAME} succeeded: 2/2 epochs, best val_accuracy 0.9123")
    assert "1 failure(s) recovered; checkpoint /mnt/x/checkpoint_000001" in line
    assert f"no summary yet ({tmp_path / 'summary.json'})" in summary_line(None, tmp_path)
    # A summary written by a run that keeps its best by val_loss names that metric.
    by_loss = {**summary, "best": {"metric": "val_loss", "val_loss": 0.25, "epoch": 1}}
    assert ", best val_loss 0.2500 at epoch 1," in summary_line(by_loss, tmp_path)
