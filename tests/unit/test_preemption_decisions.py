"""Issue 25's decisions without Ray: the checkpoint cadence, where a resume starts, what an
interruption cost and how it is said."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.run.decisions import previous_interrupted
from app.runfolder import folder as run_folder
from app.runfolder import interruptions
from app.settings import TrainSettings
from app.settings.cadence import CheckpointEvery, parse


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("epoch", "epoch", 0),
        (" epoch ", "epoch", 0),
        ("500", "steps", 500),
        ("1", "steps", 1),
        ("90s", "seconds", 90),
        ("10m", "seconds", 600),
        ("1h", "seconds", 3600),
        ("10s", "seconds", 10),
        ("99999999", "steps", 99_999_999),
        ("\t500\n", "steps", 500),
    ],
)
def test_checkpoint_every_parses_once_into_a_typed_value(text: str, kind: str, value: int) -> None:
    parsed = TrainSettings(checkpoint_every=text).checkpoint_every
    assert parsed == CheckpointEvery(kind, value)  # type: ignore[arg-type]
    # What the run records (summary settings, chart values) reads back to the same value.
    dumped = TrainSettings(checkpoint_every=text).model_dump(mode="json")["checkpoint_every"]
    assert parse(dumped) == parsed


@pytest.mark.parametrize(
    "text",
    [
        "0",
        "-5",
        "5x",
        "1.5m",
        "9s",
        "1000000h",
        "epochs",
        "",
        "٣",
        "1e3",
        "100000000",
        "05",
        "10 m",
        "500\u2003",
    ],
)
def test_checkpoint_every_refuses_what_it_cannot_mean(text: str) -> None:
    with pytest.raises(ValueError, match="epoch`, a step count"):
        parse(text)


def test_due_follows_the_kind() -> None:
    assert not CheckpointEvery("epoch").due(10**9, 10**9)
    steps = CheckpointEvery("steps", 5)
    assert [steps.due(n, 0.0) for n in (4, 5, 6)] == [False, True, True]
    seconds = CheckpointEvery("seconds", 60)
    assert not seconds.due(10**6, 59.9) and seconds.due(0, 60.0)


def test_resume_from_an_epoch_end_starts_the_next_epoch() -> None:
    position = interruptions.resume_position({"epoch": 3, "step": 90}, 2, 64)
    assert position == interruptions.Position(4, 0)


def test_resume_mid_epoch_on_the_same_world_skips_what_was_trained() -> None:
    state = {"epoch": 3, "step": 100, "epoch_step": 10, "world_size": 2}
    assert interruptions.resume_position(state, 2, 64) == interruptions.Position(4, 10)


def test_resume_mid_epoch_on_another_world_restarts_the_epoch_and_says_so() -> None:
    state = {"epoch": 3, "step": 100, "epoch_step": 10, "world_size": 2}
    position = interruptions.resume_position(state, 4, 64)
    assert (position.start_epoch, position.skip_batches) == (4, 0)
    assert position.repeated_samples == 640
    assert "from 2 to 4" in position.note and "640 samples" in position.note


@pytest.mark.parametrize(
    ("reason", "cause", "lost"),
    [("preemption", "preemption", 0), ("stopped", "stopped", 0), ("interval", "failure", 7),
     ("epoch", "failure", 7), (None, "failure", 7)],
)  # fmt: skip
def test_interruption_record(reason: str | None, cause: str, lost: int) -> None:
    record = interruptions.interruption(
        reason=reason, epoch=3, last_step=419, resumed_step=412, checkpoint_s=1.834
    )
    assert record == {
        "cause": cause,
        "epoch": 3,
        "step": 419,
        "resumed_step": 412,
        "steps_lost": lost,
        "checkpoint_s": 1.83,
    }


def test_unknown_progress_counts_the_resumed_step() -> None:
    record = interruptions.interruption(
        reason=None, epoch=1, last_step=None, resumed_step=20, checkpoint_s=None
    )
    assert (record["step"], record["steps_lost"]) == (20, 0)
    stale = interruptions.interruption(
        reason=None, epoch=1, last_step=5, resumed_step=20, checkpoint_s=None
    )
    assert stale["steps_lost"] == 0  # progress older than the checkpoint loses nothing


@pytest.mark.parametrize("reason", ["interval", "epoch", None])
def test_a_driver_stopped_before_its_checkpoint_is_a_stop_that_lost_steps(
    reason: str | None,
) -> None:
    """Ctrl-C twice (the second while the just-in-time checkpoint was being written), or
    SIGKILL after SIGTERM's grace: the rerun resumes an older checkpoint. It was recorded as a
    failure; it was a stop, and the steps past that checkpoint were lost."""
    record = interruptions.interruption(
        reason=reason, epoch=3, last_step=419, resumed_step=412, checkpoint_s=None,
        without_checkpoint="stopped",
    )  # fmt: skip
    assert (record["cause"], record["steps_lost"]) == ("stopped", 7)
    said = interruptions.in_words(record)
    assert said == "stopped at step 419 (epoch 3), resumed, 7 steps lost"


def test_interruption_in_words() -> None:
    record = interruptions.interruption(
        reason="preemption", epoch=3, last_step=412, resumed_step=412, checkpoint_s=1.8
    )
    said = interruptions.in_words(record)
    assert said == "preempted at step 412 (epoch 3), checkpoint in 1.8 s, resumed, 0 steps lost"
    failed = interruptions.in_words(
        interruptions.interruption(
            reason=None, epoch=2, last_step=13, resumed_step=12, checkpoint_s=None
        )
    )
    assert failed == "failed at step 13 (epoch 2), resumed, 1 step lost"


def test_interruptions_come_from_the_attempts_that_recorded_one() -> None:
    record = {"cause": "failure", "epoch": 1, "step": 3}
    starts = [{"interruption": None}, {"interruption": record}, {}]
    assert interruptions.from_attempts(starts) == [record]


@pytest.mark.parametrize(
    ("status", "expected"),
    [("interrupted", "stopped"), ("failed", "failure"), ("running", "failure"),
     ("succeeded", None), ("invalid", None), (None, None)],
)  # fmt: skip
def test_a_rerun_after_an_unfinished_driver_is_an_interruption(
    status: str | None, expected: str | None
) -> None:
    assert previous_interrupted({"status": status} if status else None) == expected


def _interrupted_run(run_dir: Path) -> dict:
    from app.runfolder import folder as run_folder

    record = interruptions.interruption(
        reason="preemption", epoch=3, last_step=412, resumed_step=412, checkpoint_s=1.8
    )
    run_folder.start_attempt(
        run_dir, invocation="a", start_epoch=1, world_size=2, restored_from=None
    )
    run_folder.start_attempt(
        run_dir, invocation="a", start_epoch=3, world_size=2, restored_from="ckpt",
        resumed_step=412, interruption=record,
    )  # fmt: skip
    return record


def test_the_summary_lists_the_runs_interruptions(tmp_path: Path) -> None:
    from app.runfolder.summary import build_summary

    record = _interrupted_run(tmp_path)
    summary = build_summary(
        tmp_path, status="succeeded", run_name="r", target_epochs=3, settings={},
        duration_s=1.0, failures=0, restored_from=None, good=[],
    )  # fmt: skip
    assert summary["interruptions"] == [record]


def test_the_driver_and_submit_wait_say_each_interruption_in_words(tmp_path: Path) -> None:
    from app.k8s.follow import summary_line
    from app.run.progress import EpochFollower

    _interrupted_run(tmp_path)
    said: list[str] = []
    follower = EpochFollower(tmp_path, 3, since=0.0, emit=said.append)
    follower.poll()
    follower.poll()  # each interruption once
    words = "preempted at step 412 (epoch 3), checkpoint in 1.8 s, resumed, 0 steps lost"
    assert said == [words]
    line = summary_line({"status": "succeeded", "interruptions": [_record()]}, tmp_path)
    assert words in line


def _record() -> dict:
    return interruptions.interruption(
        reason="preemption", epoch=3, last_step=412, resumed_step=412, checkpoint_s=1.8
    )


def test_the_follower_passes_over_an_epoch_line_whose_time_is_no_number(tmp_path: Path) -> None:
    """metrics.jsonl lies in the run folder: an epoch line whose `time` was text ended the
    driver's progress thread with a TypeError traceback, one without `epoch_time_s` with a
    KeyError, and no epoch after either was said."""
    from app.run.progress import EpochFollower

    lines = [{"epoch": 1, "val_accuracy": 0.5, "time": "yesterday"},
             {"epoch": 2, "val_accuracy": 0.7, "time": 2.0}]  # fmt: skip
    (tmp_path / run_folder.METRICS_FILE).write_text("".join(json.dumps(x) + "\n" for x in lines))
    said: list[str] = []
    EpochFollower(tmp_path, 3, since=1.0, emit=said.append).poll()
    assert said == ["epoch 2/3  val_acc 70.00%"]  # epoch 1's time is no time of this driver
