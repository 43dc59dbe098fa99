"""A start refused before it began leaves an earlier run's record as it was: a succeeded run
stays succeeded (for `status`, `evaluate` and a sweep's results), with the refusal noted beside
it until a start gets through. A folder with no run's record is marked invalid, as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.errors import ConfigError
from app.run import status as run_status
from app.run.decisions import running_summary
from app.runfolder import folder as run_folder
from app.runfolder.folder import REFUSED_KEY, record_invalid
from app.runfolder.summary import STATUS_WORDS

REFUSAL = ConfigError("TRAIN_MODEL: 'resnet1800' is not a model; did you mean resnet18?")


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / run_folder.SUMMARY_FILE).read_text())


@pytest.mark.parametrize("status", ["succeeded", "failed", "interrupted", "stopped"])
def test_a_refused_rerun_keeps_the_runs_record_and_notes_why(tmp_path: Path, status: str) -> None:
    before = {"status": status, "run_name": tmp_path.name, "epochs_completed": 3, "error": "x"}
    run_folder.write_summary(tmp_path, before)
    record_invalid(tmp_path, REFUSAL)
    after = _summary(tmp_path)
    refused = after.pop(REFUSED_KEY)
    assert after == before
    assert refused["error"] == REFUSAL.problems[0] and refused["time"] > 0

    shown = run_status.read_run(tmp_path)
    assert shown.status == STATUS_WORDS[status]
    assert shown.refused == REFUSAL.problems[0]
    assert any(line.startswith("  last start:      refused") for line in shown.lines())


def test_the_next_start_that_gets_through_drops_the_note(tmp_path: Path) -> None:
    run_folder.write_summary(tmp_path, {"status": "interrupted", "run_name": tmp_path.name})
    record_invalid(tmp_path, REFUSAL)
    summary = running_summary(
        _summary(tmp_path), run_name=tmp_path.name, run_dir=str(tmp_path), target_epochs=3,
        resume_from=None, settings={},
    )  # fmt: skip
    assert REFUSED_KEY not in summary and summary["status"] == "running"


@pytest.mark.parametrize("before", [None, {"status": "invalid", "error": "an older refusal"}])
def test_a_folder_without_a_runs_record_is_marked_invalid(
    tmp_path: Path, before: dict | None
) -> None:
    if before is not None:
        run_folder.write_summary(tmp_path, before)
    record_invalid(tmp_path, REFUSAL)
    after = _summary(tmp_path)
    assert after["status"] == "invalid" and after["error"] == REFUSAL.problems[0]
    assert REFUSED_KEY not in after
    assert run_status.read_run(tmp_path).refused is None
