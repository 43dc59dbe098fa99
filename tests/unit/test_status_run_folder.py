"""`trainctl status` says each run's interruptions in words below the table, running or
finished, read from real run-folder files the app's own writers made; the Kubernetes API is the
scripted fake (tests/unit/fake_kube_api.py), everything else is real."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.errors import EXIT_OK
from app.k8s.outcome import MAX_INTERRUPTIONS_SHOWN, interruption_lines, shown
from app.run import folder as run_folder
from app.run.interruptions import in_words, interruption
from tests.unit.fake_kube_api import FakeKubeApi
from tests.unit.test_submit_cli import (
    RUNNING,
    SUCCEEDED,
    api,
    rayjob_name,
    submit,
    trainctl,
    values_file,
)

__all__ = ["api", "rayjob_name", "values_file"]  # fixtures used by name below

WORDS = "preempted at step 412 (epoch 3), checkpoint in 1.8 s, resumed, 0 steps lost"
RUNNING_JOB = {"metadata": {"name": "r"}, "status": RUNNING}
FINISHED_JOB = {"metadata": {"name": "r"}, "status": SUCCEEDED}


def _preempted(step: int = 412) -> dict[str, Any]:
    return interruption(
        reason="preemption", epoch=3, last_step=step, resumed_step=step, checkpoint_s=1.8
    )


def _attempts(run_dir: Path, *records: dict[str, Any]) -> None:
    """attempts.jsonl as the driver writes it: a first start, then one per interruption."""
    run_folder.start_attempt(
        run_dir, invocation="a", start_epoch=1, world_size=2, restored_from=None
    )
    for record in records:
        run_folder.start_attempt(
            run_dir, invocation="a", start_epoch=3, world_size=2, restored_from="ckpt",
            resumed_step=record["resumed_step"], interruption=record,
        )  # fmt: skip


# --- the pure function ---------------------------------------------------------------------------
def test_a_running_run_says_what_its_attempts_recorded(tmp_path: Path) -> None:
    _attempts(tmp_path, _preempted())
    attempts = run_folder.read_jsonl(tmp_path / run_folder.ATTEMPTS_FILE)
    stale = {"interruptions": [], "status": "interrupted"}  # an earlier driver's summary
    assert interruption_lines(RUNNING_JOB, stale, attempts) == [WORDS]


def test_a_finished_run_says_what_its_summary_lists() -> None:
    failed = interruption(reason=None, epoch=2, last_step=13, resumed_step=12, checkpoint_s=None)
    summary = {"interruptions": [_preempted(), failed]}
    lines = interruption_lines(FINISHED_JOB, summary, [{"interruption": _preempted(9)}])
    assert lines == [WORDS, "failed at step 13 (epoch 2), resumed, 1 step lost"]
    # A finished run without the list (an older driver's summary) falls back to its attempts.
    assert interruption_lines(FINISHED_JOB, {}, [{"interruption": _preempted()}]) == [WORDS]


def test_no_interruptions_no_lines() -> None:
    assert interruption_lines(RUNNING_JOB, None, []) == []
    assert interruption_lines(FINISHED_JOB, {"interruptions": []}, []) == []


def test_only_the_newest_few_are_shown_and_the_rest_counted() -> None:
    records = [_preempted(step) for step in range(1, 13)]
    lines = interruption_lines(FINISHED_JOB, {"interruptions": records}, [])
    assert len(lines) == MAX_INTERRUPTIONS_SHOWN + 1
    assert lines[0].startswith("preempted at step 8 ") and lines[-2].startswith(
        "preempted at step 12 "
    )
    assert lines[-1] == "and 7 more before these (summary.json lists them all)"


HOSTILE: list[Any] = [
    "a string, not a record",
    None,
    [1, 2],
    {"cause": "\x1b[2J\x1b]0;owned\x07", "step": "9" * 100_000, "epoch": [1], "steps_lost": -3},
    {"cause": ["preemption"], "step": True, "epoch": 10**30, "checkpoint_s": "1.8"},
    {"cause": "preemption", "step": 1.5, "checkpoint_s": float("nan"), "steps_lost": "x"},
    {"checkpoint_s": 1e300},
    {},
]


def test_hostile_records_print_bounded_and_never_raise() -> None:
    lines = interruption_lines(FINISHED_JOB, {"interruptions": HOSTILE}, [])
    # The newest five of the five records that are objects; the three others are counted.
    assert len(lines) == 6 and lines[-1] == "3 unreadable interruption record(s) skipped"
    for line in lines:
        assert line.isprintable() and len(line) < 120, line
    assert lines[0] == "interrupted at step ? (epoch ?), resumed, ? steps lost"
    assert lines[1] == "interrupted at step ? (epoch ?), resumed, 0 steps lost"
    # The same records in attempts.jsonl, and attempts that are not objects at all.
    attempts = [{"interruption": r} for r in HOSTILE] + ["x", 3, None]  # type: ignore[list-item]
    assert interruption_lines(RUNNING_JOB, None, attempts)[:5] == lines[:5]
    # A summary whose list is not a list: nothing from it, the attempts instead.
    assert interruption_lines(FINISHED_JOB, {"interruptions": "many"}, []) == []


def test_in_words_keeps_its_wording_for_good_records() -> None:
    assert in_words(_preempted()) == WORDS


def test_shown_redacts_escapes_and_cuts() -> None:
    assert shown("kept v1: not promoted (s3://user:pw@host/b unreadable)").count("pw") == 0
    assert shown("a\x1b[2Jb\nc") == "a\\x1b[2Jb\\nc"
    long = shown("a b " * 50_000)
    assert len(long) <= 300 and long.endswith("...") and long.startswith("a b a b")
    # Cut before redacting (redact_text is slow on long words), at a space: a credential
    # across the cut is dropped whole, never shown in part.
    straddling = shown("word " * 55 + "s3://user:" + "p" * 10_000 + "@host/b " + "z:" * 10**5)
    assert "user" not in straddling and "ppp" not in straddling, straddling


# --- end to end: the table, then each run's lines -----------------------------------------------
def _run_dir(mount: Path, name: str) -> Path:
    run_dir = mount / "runs" / name  # TRAIN_STORAGE_PATH is <mountPath>/runs
    run_dir.mkdir(parents=True)
    return run_dir


def test_status_says_a_running_runs_interruptions(
    api: FakeKubeApi,
    values_file: Path,
    rayjob_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _attempts(_run_dir(tmp_path / "volume", rayjob_name), _preempted())
    api.rayjob_statuses = [RUNNING]
    submit(capsys, values_file)
    code, out, err = trainctl(capsys, "status", "--storage-mount", str(tmp_path / "volume"))
    assert code == EXIT_OK, err
    assert out.startswith("NAME") and f"\n{rayjob_name}: {WORDS}\n" in out
    code, out, _ = trainctl(capsys, "status")  # no mount: the table alone
    assert code == EXIT_OK and WORDS not in out


def test_status_says_a_finished_runs_interruptions_then_its_outcome(
    api: FakeKubeApi,
    values_file: Path,
    rayjob_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_dir = _run_dir(tmp_path / "volume", rayjob_name)
    _attempts(run_dir, _preempted(), _preempted(500))
    summary = {"status": "succeeded", "interruptions": [_preempted()],
               "promotion": {"line": "promoted v2 (val_accuracy 0.96 > 0.95)"}}  # fmt: skip
    run_folder.write_summary(run_dir, summary)
    api.rayjob_statuses = [SUCCEEDED]
    submit(capsys, values_file)
    code, out, err = trainctl(capsys, "status", "--storage-mount", str(tmp_path / "volume"))
    assert code == EXIT_OK, err
    below = out.split("\n\n")[0].splitlines()[2:]  # after the header and the one row
    assert below == [
        f"{rayjob_name}: {WORDS}",  # the summary's one, not the attempts' two
        f"{rayjob_name}: promoted v2 (val_accuracy 0.96 > 0.95)",
    ]


def test_status_survives_a_hostile_run_folder(
    api: FakeKubeApi,
    values_file: Path,
    rayjob_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_dir = _run_dir(tmp_path / "volume", rayjob_name)
    summary = {"interruptions": HOSTILE, "promotion": {"line": "\x1b]0;owned\x07" + "y" * 10**6}}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    api.rayjob_statuses = [SUCCEEDED]
    submit(capsys, values_file)
    code, out, err = trainctl(capsys, "status", "--storage-mount", str(tmp_path / "volume"))
    assert code == EXIT_OK, err
    assert "\x1b" not in out and "\x07" not in out and "Traceback" not in out + err
    assert max(len(line) for line in out.splitlines()) < 400
    assert f"{rayjob_name}: 3 unreadable interruption record(s) skipped" in out
