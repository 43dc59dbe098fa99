"""`trainctl status` says each run's interruptions in words below the table, running or
finished, read from real run-folder files the app's own writers made; the Kubernetes API is the
scripted fake (tests/unit/fake_kube_api.py), everything else is real."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from app.errors import EXIT_CLUSTER, EXIT_FAILED, EXIT_INVALID, EXIT_OK
from app.formatting import one_line
from app.k8s.outcome import MAX_LINE_CHARS, interruption_lines
from app.run import status as run_status
from app.runfolder import folder as run_folder
from app.runfolder.interruptions import MAX_SHOWN as MAX_INTERRUPTIONS_SHOWN
from app.runfolder.interruptions import in_words, interruption
from tests.s3_support import S3Server
from tests.unit.fake_kube_api import FakeKubeApi
from tests.unit.kube_cli_support import (
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


def test_run_folder_lines_are_redacted_escaped_and_cut() -> None:
    def shown(text: str) -> str:  # as `trainctl status` shows a line read from a run folder
        return one_line(text, MAX_LINE_CHARS)

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
    line = "promoted v2 (val_accuracy 0.96 > the champion's 0.95)"
    summary = {"status": "succeeded", "interruptions": [_preempted()],
               "promotion": {"line": line}}  # fmt: skip
    run_folder.write_summary(run_dir, summary)
    api.rayjob_statuses = [SUCCEEDED]
    submit(capsys, values_file)
    code, out, err = trainctl(capsys, "status", "--storage-mount", str(tmp_path / "volume"))
    assert code == EXIT_OK, err
    below = out.split("\n\n")[0].splitlines()[2:]  # after the header and the one row
    assert below == [
        f"{rayjob_name}: {WORDS}",  # the summary's one, not the attempts' two
        f"{rayjob_name}: promoted v2 (val_accuracy 0.96 > the champion's 0.95)",
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


def test_status_with_a_rayjob_name_shows_that_rayjob_only(
    api: FakeKubeApi, values_file: Path, rayjob_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    api.rayjob_statuses = [RUNNING]
    submit(capsys, values_file)
    code, out, err = trainctl(capsys, "status", rayjob_name)
    assert code == EXIT_OK, err
    assert out.splitlines()[0].startswith("NAME") and out.splitlines()[1].startswith(rayjob_name)
    code, _, err = trainctl(capsys, "status", "other-job")
    assert code == EXIT_FAILED and "RayJob other-job not found" in err
    # Neither a path here nor a RayJob name: both rules named.
    code, _, err = trainctl(capsys, "status", "Not_A_Name")
    assert code == EXIT_INVALID and "not a valid Kubernetes name" in err
    assert "nor is it a file or folder here" in err


# --- local run folders: `trainctl status RUN_DIR` and `--storage DIR` ---------------------------
NOW = 1_700_000_000.0


def _finished(storage: Path, name: str = "done") -> Path:
    """A succeeded run as the driver and the promotion step leave it."""
    run_dir = storage / name
    _attempts(run_dir, _preempted())
    run_folder.write_summary(
        run_dir,
        {
            "status": "succeeded", "run_name": name, "epochs_completed": 15, "epochs_target": 15,
            "metrics": {"val_accuracy": 0.3667, "val_loss": 1.1, "train_loss": 1.0},
            "best": {"metric": "val_accuracy", "val_accuracy": 0.4667, "val_loss": 1.0,
                     "epoch": 9, "checkpoint": str(run_dir / "checkpoint_epoch_0009")},
            "failures": 0, "interruptions": [_preempted()],
            "promoted": True, "champion_version": 1,
            "promotion": {"line": "promoted v1 (no champion yet)"},
            "accelerator_hours": {"kind": "gpu", "hours": 12.5, "workers": 4, "per_worker": 1.0},
        },
    )  # fmt: skip
    return run_dir


def _running(storage: Path, name: str = "live", *, last_seen: float = NOW - 5) -> Path:
    """A run whose second driver trains: summary.json still says what the first one left."""
    run_dir = storage / name
    run_folder.write_summary(
        run_dir,
        {
            "status": "running", "run_name": name, "epochs_completed": 1, "epochs_target": 5,
            "metrics": {"val_loss": 0.9}, "interruptions": [],
            "settings": {"use_gpu": False, "cpus_per_worker": 2.0, "checkpoint_metric": "val_loss"},
            "accelerator_hours": {"kind": "cpu", "hours": 1.0, "workers": 2, "per_worker": 2.0},
        },
    )  # fmt: skip
    run_folder.record_epoch(
        run_dir, {"epoch": 1, "train_loss": 1.0, "val_loss": 0.9, "val_accuracy": 0.5}
    )
    run_folder.start_attempt(
        run_dir, invocation="second", start_epoch=2, world_size=2, restored_from="ckpt",
        resumed_step=40, interruption=_preempted(40),
    )  # fmt: skip
    for epoch, loss in ((2, 0.5), (3, 0.7)):
        run_folder.record_epoch(
            run_dir, {"epoch": epoch, "train_loss": 1.0, "val_loss": loss, "val_accuracy": 0.5}
        )
    # This driver's worker group started half an hour before its last sign of life.
    _rewrite_times(run_dir, attempt=last_seen - 1795, metrics=last_seen - 60)
    (run_dir / run_folder.PROGRESS_FILE).write_text(
        json.dumps({"invocation": "second", "epoch": 4, "step": 90, "time": last_seen})
    )
    return run_dir


def _rewrite_times(run_dir: Path, *, attempt: float, metrics: float) -> None:
    """The records' clock times set to known values (the writers stamp the real clock)."""
    for name, when in ((run_folder.ATTEMPTS_FILE, attempt), (run_folder.METRICS_FILE, metrics)):
        path = run_dir / name
        records = [{**json.loads(line), "time": when} for line in path.read_text().splitlines()]
        path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_a_finished_run_folder_says_each_figure_with_its_label(tmp_path: Path) -> None:
    status = run_status.read_run(_finished(tmp_path), now=NOW)
    assert status.lines() == [
        f"run done  ({tmp_path / 'done'})",
        "  status:          succeeded",
        "  epochs:          15/15",
        "  last epoch:      val_accuracy 0.3667 (epoch 15)",
        "  best checkpoint: val_accuracy 0.4667 (epoch 9)",
        "  promotion:       promoted v1 (no champion yet)",
        "  interruptions:   1 (1 preempted, 0 steps lost)",
        f"                   {WORDS}",
        "  usage:           12.50 GPU-hours (4 workers x 1 GPU)",
    ]
    assert status.problems == []


@pytest.mark.parametrize(
    ("ended", "error"), [("interrupted", "stopped by Ctrl-C"), ("failed", "x")]
)
def test_a_stopped_run_says_its_ending_is_recorded_by_the_rerun(
    tmp_path: Path, ended: str, error: str
) -> None:
    """ "interruptions: none" under "status: stopped" read as a contradiction (found by a
    red-team pass): an ending becomes an interruption when a rerun resumes after it."""
    run_dir = tmp_path / "cut"
    run_folder.write_summary(
        run_dir, {"status": ended, "run_name": "cut", "error": error, "interruptions": []}
    )
    run_folder.start_attempt(
        run_dir, invocation="a", start_epoch=1, world_size=1, restored_from=None
    )
    lines = run_status.read_run(run_dir, now=NOW).lines()
    said = "  interruptions:   none recorded yet: a rerun records how this one ended"
    assert said in lines, lines
    done = run_status.read_run(_finished(tmp_path / "other"), now=NOW).lines()
    assert not any("recorded yet" in line for line in done), done


def test_a_running_run_is_read_from_its_live_records(tmp_path: Path) -> None:
    status = run_status.read_run(_running(tmp_path), now=NOW)
    assert (status.status, status.silent_s) == ("running", 5.0)
    assert (status.epochs_completed, status.epochs_target) == (3, 5)
    # Ranked by val_loss (the run's TRAIN_CHECKPOINT_METRIC): lower is better.
    assert status.best == {"epoch": 2, "val_loss": 0.5, "val_accuracy": 0.5}
    assert status.last_epoch == {"epoch": 3, "val_loss": 0.7, "val_accuracy": 0.5}
    assert status.interruptions["count"] == 1 and status.interruptions["preemptions"] == 1
    # The earlier driver's hour, plus this one's 2 workers x 2 CPUs for the last half hour.
    assert status.accelerator_hours == {
        "kind": "cpu", "hours": 3.0, "workers": 2, "per_worker": 2.0,
    }  # fmt: skip
    assert status.promotion is None and status.problems == []


def test_a_damaged_status_is_not_counted_on_with_the_clock(tmp_path: Path) -> None:
    """A summary whose status is damaged (an object): its usage was counted on up to now as if
    a driver ran, a figure that grew with every look (a red-team pass). Only the record."""
    run_dir = _running(tmp_path)
    summary = json.loads((run_dir / run_folder.SUMMARY_FILE).read_text())
    run_folder.write_summary(run_dir, {**summary, "status": {"a": 1}})
    status = run_status.read_run(run_dir, now=NOW)
    assert status.status == "unknown" and "damaged (status" in status.problems[0]
    assert status.accelerator_hours == {
        "kind": "cpu",
        "hours": 1.0,
        "workers": 2,
        "per_worker": 2.0,
    }
    assert (
        run_status.read_run(run_dir, now=NOW + 3600).accelerator_hours == status.accelerator_hours
    )


def test_a_run_silent_for_long_says_what_that_usually_means(tmp_path: Path) -> None:
    status = run_status.read_run(_running(tmp_path, last_seen=NOW - 7200), now=NOW)
    assert status.status == "running" and status.status_text() == "running (silent 2h00m)"
    assert "a driver that was killed leaves its run like this" in "\n".join(status.lines())


def test_status_of_a_run_folder_and_of_a_storage_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = tmp_path / "runs"
    _finished(storage)
    _running(storage)
    (storage / "champions").mkdir()  # pointers, not a run
    (storage / "empty").mkdir()  # not a run folder: skipped, counted
    code, out, err = trainctl(capsys, "status", str(storage / "done"))
    assert code == EXIT_OK, err
    assert "  best checkpoint: val_accuracy 0.4667 (epoch 9)" in out.splitlines()
    code, out, err = trainctl(capsys, "status", str(storage / "done"), "--json")
    assert code == EXIT_OK, err
    record = json.loads(out)
    assert record["status"] == "succeeded" and record["best"]["val_accuracy"] == 0.4667
    assert record["promotion"] == {
        "promoted": True,
        "version": 1,
        "line": "promoted v1 (no champion yet)",
        "model": None,  # its summary names no pointer
    }
    assert record["accelerator_hours"]["hours"] == 12.5
    # A folder of runs: as --storage, or given as the path itself; and a run name under it.
    for args in (("--storage", str(storage)), (str(storage),)):
        code, out, err = trainctl(capsys, "status", *args)
        assert code == EXIT_OK, err
        rows = out.splitlines()
        assert rows[0].split() == list(run_status.HEADER)
        assert {rows[1].split()[0], rows[2].split()[0]} == {"done", "live"}
        assert "(1 folder without run records skipped)" in out and "champions" not in out
    code, out, err = trainctl(capsys, "status", "live", "--storage", str(storage), "--json")
    assert code == EXIT_OK and json.loads(out)["status"] == "running", err
    code, out, err = trainctl(capsys, "status", "--storage", str(storage), "--json", "--limit", "1")
    listing = json.loads(out)
    assert len(listing["runs"]) == 1 and listing["folders"] == 3 and listing["not_read"] >= 1


def test_a_storage_folder_names_the_sweeps_it_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Sweeps were skipped as folders without run records: `status runs` said "No run
    folders" over a storage folder holding only sweeps. Then they were named without their
    state: each is now said with its status, its trials ended and its best, as sweep.json
    says; a damaged sweep.json (many hands write the folder) is said as such."""
    storage = tmp_path / "runs"
    (storage / "nightly" / "trials").mkdir(parents=True)
    # The sweep's own driver logs, as `trainctl tune` leaves them: with them the sweep was
    # listed as a run, "unknown ?/?" (a red-team pass).
    (storage / "nightly" / "logs" / "attempt-1").mkdir(parents=True)
    (storage / "nightly" / "sweep.json").write_text(json.dumps({
        "sweep": "nightly", "status": "incomplete", "metric": "val_loss",
        "trials": [{"trial": "trial-0001", "status": "succeeded", "best": 0.21},
                   {"trial": "trial-0002", "status": "stopped", "best": 0.9},
                   {"trial": "trial-0003", "status": "failed", "best": None}, "not a row"],
        "best": {"trial": "trial-0001", "best": 0.21},
    }))  # fmt: skip
    (storage / "weekly").mkdir()
    (storage / "weekly" / "sweep.json").write_text('{"status": "running", "trials": [')
    code, out, err = trainctl(capsys, "status", "--storage", str(storage))
    assert code == EXIT_OK, err
    assert f"sweeps, each a folder of trial runs (`trainctl status {storage}/<sweep>`" in out, out
    lines = out.splitlines()
    assert "  nightly: incomplete, 2 of 3 trials ended, best trial-0001 (val_loss 0.2100)" in lines
    assert "  weekly: sweep.json unreadable" in lines, out
    assert "without run records" not in out and "damaged" not in out + err, out
    assert "No run folders" not in out, out  # it went on to list two sweeps (a red-team pass)
    code, out, err = trainctl(capsys, "status", "--storage", str(storage), "--json")
    listing = json.loads(out)
    assert sorted(listing["sweeps"]) == ["nightly", "weekly"] and listing["not_run_folders"] == 0
    states = {state["name"]: state for state in listing["sweep_states"]}
    assert states["nightly"] == {
        "name": "nightly", "status": "incomplete", "trials": 3, "ended": 2,
        "metric": "val_loss", "best_trial": "trial-0001", "best": 0.21,
    }  # fmt: skip


def test_a_running_sweep_shows_its_trials_as_their_folders_say(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """sweep.json is rewritten only when a trial ends: a trial in training showed `pending 0`
    while it trained, and one whose driver was killed stayed so, the sweep `running`, for good."""
    sweep = tmp_path / "runs" / "nightly"
    now = time.time()
    _running(sweep / "trials", "trial-0001", last_seen=now - 5)
    _running(sweep / "trials", "trial-0002", last_seen=now - 7200)
    rows = [
        {
            "trial": f"trial-000{n}",
            "status": "pending",
            "values": {"lr": 0.01 * n},
            "epochs": 0,
            "final": None,
            "best": None,
            "duration_s": None,
        }
        for n in (1, 2, 3)
    ]
    rows.append({"trial": "../../etc", "status": "pending", "values": {}, "epochs": 0})
    record = {"sweep": "nightly", "status": "running", "metric": "val_loss", "trials": rows}
    (sweep / "sweep.json").write_text(json.dumps(record))
    code, out, err = trainctl(capsys, "status", str(sweep))
    assert code == EXIT_OK, err
    lines = {line.split()[0]: line.split() for line in out.splitlines()[2:] if line.strip()}
    # TRIAL STATUS LR EPOCHS FINAL BEST: epochs and figures from metrics.jsonl (val_loss).
    assert lines["trial-0001"][1:6] == ["running", "0.01", "3", "0.7000", "0.5000"], out
    assert lines["trial-0002"][1:3] == ["running", "0.02"], out
    assert lines["trial-0003"][1:4] == ["pending", "0.03", "0"], out  # not started: as recorded
    assert lines["../../etc"][1] == "pending"  # not a trial's name: never read as a path
    assert "(trial-0002 silent 2h00m: no progress for over 15m00s;" in out, out
    assert "rerun `trainctl tune` to continue it)" in out
    code, out, err = trainctl(capsys, "status", str(sweep), "--json")
    trials = {row["trial"]: row for row in json.loads(out)["trials"]}
    assert trials["trial-0001"]["epochs"] == 3 and trials["trial-0001"]["best"] == 0.5


def test_status_refuses_what_is_no_run_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = trainctl(capsys, "status", str(tmp_path / "nowhere"))
    assert code == EXIT_INVALID and f"{tmp_path / 'nowhere'}: no such folder" in err
    (tmp_path / "file").write_text("x")
    code, _, err = trainctl(capsys, "status", str(tmp_path / "file"))
    assert code == EXIT_INVALID and "not a folder" in err
    code, _, err = trainctl(capsys, "status", str(tmp_path), "-n", "ml")
    assert code == EXIT_INVALID and "are for RayJobs, not run folders" in err
    code, _, err = trainctl(capsys, "status", "--json")
    assert code == EXIT_INVALID and "are for run folders" in err


def test_status_lists_run_folders_in_a_bucket(
    s3_server: S3Server,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bucket = s3_server.bucket("status-listing")
    monkeypatch.setenv("TRAIN_STORAGE_ENDPOINT", bucket.endpoint)
    local = tmp_path / "runs"
    _finished(local)
    _running(local)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        bucket.write(f"runs/{path.relative_to(local)}", path.read_bytes())
    bucket.write("runs/champions/digits-cnn.json", b"{}")
    code, out, err = trainctl(capsys, "status", "--storage", bucket.uri("runs"), "--json")
    assert code == EXIT_OK, err
    listing = json.loads(out)
    # In a bucket by name (objects have no folder times): done, then live.
    assert [run["name"] for run in listing["runs"]] == ["done", "live"]
    assert listing["runs"][0]["best"]["val_accuracy"] == 0.4667
    assert listing["runs"][1]["last_epoch"]["epoch"] == 3
    code, out, err = trainctl(capsys, "status", bucket.uri("runs/done"))
    assert code == EXIT_OK and "  promotion:       promoted v1 (no champion yet)" in out, err


def test_without_kubernetes_status_and_logs_point_to_the_run_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A newcomer's first `trainctl status` on a laptop: exit 4 as before, and where the runs
    are seen without Kubernetes."""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("TRAIN_STORAGE_PATH", "runs")
    code, _, err = trainctl(capsys, "status")
    assert code == EXIT_CLUSTER and "no usable Kubernetes configuration" in err
    assert "`trainctl status --storage runs`, or `trainctl status runs/NAME`" in err
    code, _, err = trainctl(capsys, "logs", "digits-cnn")
    assert code == EXIT_CLUSTER and "`trainctl logs runs/digits-cnn` (or --storage)" in err


def test_a_storage_listing_names_the_run_each_champion_pointer_names(tmp_path: Path) -> None:
    """The first champion's row still read `promoted v1` after another run became v2, and
    nothing said which run the pointer named (a red-team pass): the listing says it, and an
    unreadable pointer is named without failing the listing."""
    from app.promotion.step import promote_run
    from tests.promotion_support import INFO, make_run, settings_for

    make_run(tmp_path, "first", 0.8)
    promote_run(settings_for(tmp_path, "first"), INFO, {"status": "succeeded"})
    make_run(tmp_path, "second", 0.9)
    promote_run(settings_for(tmp_path, "second"), INFO, {"status": "succeeded"})
    (tmp_path / "champions" / "other-model.json").write_text("{not json")
    listing = run_status.list_runs(tmp_path, limit=10)
    (champion, damaged) = sorted(listing.champions, key=lambda c: c["model"])
    assert champion == {"model": "digits-cnn", "version": 2, "run": "second"}, listing.champions
    assert damaged["model"] == "other-model" and "unreadable champion pointer" in damaged["problem"]
    lines: list[str] = []
    run_status.show_listing(listing, lines.append, as_json=False, limit=10)
    text = "\n".join(lines)
    assert f"champions ({tmp_path}/champions/, each pointer checked with its card):" in text
    assert "  digits-cnn: v2, run second" in text, text
    record = json.loads(json.dumps(listing.record()))
    assert record["champions"][0] == champion
    # A pointer edited to name another run (a red-team pass: the listing showed it as it said).
    pointer = tmp_path / "champions" / "digits-cnn.json"
    pointer.write_text(json.dumps({**json.loads(pointer.read_text()), "run_name": "attacker"}))
    listing = run_status.list_runs(tmp_path, limit=10)
    edited = next(c for c in listing.champions if c["model"] == "digits-cnn")
    assert "version" not in edited and "attacker" not in json.dumps(edited.get("run")), edited
    assert "the pointer says otherwise than the model card it names" in edited["problem"], edited


def test_a_sweep_stopped_mid_trial_shows_that_trial_interrupted_with_what_it_trained(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The sweep's SIGTERM marked its running trial interrupted by flipping the status alone:
    `status` then showed it `stopped` (the word of a trial the scheduler stopped, never
    resumed) with 0 epochs and no figures, and the sweep's best as `- ()`, though its folder
    held two epochs and their checkpoints (found by a red-team pass)."""
    from app.runfolder.summary import record_interrupted
    from tests.promotion_support import make_run

    sweep = tmp_path / "runs" / "nightly"
    trial = _running(sweep / "trials", "trial-0001")
    for epoch, loss in ((1, 0.9), (2, 0.5), (3, 0.7)):
        make_run(sweep / "trials", "trial-0001", 1 - loss, epoch=epoch, loss=loss)
    assert record_interrupted(trial, "the sweep was stopped by SIGTERM; rerun the sweep to go on")
    summary = json.loads((trial / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["epochs_completed"] == 3
    assert summary["best"]["epoch"] == 2 and summary["best"]["val_loss"] == 0.5  # val_loss ranks
    assert summary["settings"]["checkpoint_metric"] == "val_loss"  # the rest is kept
    row = {"trial": "trial-0001", "status": "running", "values": {"lr": 0.01}, "epochs": 0}
    record = {"sweep": "nightly", "status": "interrupted", "metric": "val_loss", "trials": [row]}
    (sweep / "sweep.json").write_text(json.dumps(record))
    code, out, err = trainctl(capsys, "status", str(sweep))
    assert code == EXIT_OK, err
    lines = out.splitlines()
    assert (
        lines[0] == "sweep nightly: interrupted, metric val_loss, no trial trained to the end yet"
    )
    assert lines[2].split()[:6] == ["trial-0001", "interrupted", "0.01", "3", "0.7000", "0.5000"]
    # Stopped after its last epoch (its run was ending): "no trial trained to the end" read as
    # false beside a row of every epoch; a rerun ends it at once.
    for epochs, header in (
        (3, "no trial finished yet (trial-0001 trained every epoch but did not end: rerun the "
            "sweep to finish)"),
        (4, "no trial trained to the end yet"),
    ):  # fmt: skip
        (sweep / "sweep.json").write_text(json.dumps({**record, "epochs": epochs}))
        code, out, err = trainctl(capsys, "status", str(sweep))
        assert out.splitlines()[0] == f"sweep nightly: interrupted, metric val_loss, {header}"
    # Only a trial still `running` is marked: an ended one keeps its driver's own words.
    assert not record_interrupted(trial, "again")
