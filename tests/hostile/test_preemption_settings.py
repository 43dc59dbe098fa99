"""TRAIN_CHECKPOINT_EVERY and TRAIN_MAX_PREEMPTIONS, careless or hostile: exit 2 before Ray,
naming the variable and what it allows, no traceback, nothing written; and a mid-epoch
checkpoint that lies about itself is set aside, never resumed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from torch import nn

from app.runfolder import checkpoints
from app.runfolder.checkpoint_names import dir_name
from tests.hostile.support import assert_refused, files_under, trainctl

CASES = [
    ("TRAIN_CHECKPOINT_EVERY", "0", "a step count (1 to 99999999"),
    ("TRAIN_CHECKPOINT_EVERY", "-10", "a step count (1 to 99999999"),
    ("TRAIN_CHECKPOINT_EVERY", "5s", "a duration of at least 10s"),
    ("TRAIN_CHECKPOINT_EVERY", "1000000h", "a duration of at least 10s"),
    ("TRAIN_CHECKPOINT_EVERY", "500\u00a0", "`epoch`, a step count"),
    ("TRAIN_CHECKPOINT_EVERY", "10 minutes", "`epoch`, a step count"),
    ("TRAIN_CHECKPOINT_EVERY", "1e9", "`epoch`, a step count"),
    ("TRAIN_CHECKPOINT_EVERY", "99999999999999999999", "`epoch`, a step count"),
    ("TRAIN_CHECKPOINT_EVERY", "٣٠٠", "`epoch`, a step count"),
    ("TRAIN_CHECKPOINT_EVERY", "epoch\n500", "`epoch`, a step count"),
    ("TRAIN_CHECKPOINT_EVERY", "$(reboot)", "`epoch`, a step count"),
    ("TRAIN_MAX_PREEMPTIONS", "-2", "TRAIN_MAX_PREEMPTIONS"),
    ("TRAIN_MAX_PREEMPTIONS", "nan", "TRAIN_MAX_PREEMPTIONS"),
    ("TRAIN_MAX_PREEMPTIONS", str(2**70), "TRAIN_MAX_PREEMPTIONS"),
]


@pytest.mark.parametrize(("name", "value", "needle"), CASES, ids=lambda v: repr(v)[:30])
def test_bad_preemption_setting_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, value: str, needle: str
) -> None:
    monkeypatch.setenv(name, value)
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, name, needle)
    assert files_under(tmp_path) == []


def _step_checkpoint(run: Path, epoch: int, step: int) -> Path:
    folder = run / dir_name(epoch, step)
    checkpoints.write_checkpoint(
        folder,
        model_state=nn.Linear(2, 2).state_dict(),
        train_state={"epoch": epoch, "step": step},
        epoch=epoch,
        metrics={},
        step=step,
    )
    return folder


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        ({"kind": "bogus"}, "unreadable"),
        ({"step": -1}, "unreadable"),
        ({"step": "12"}, "unreadable"),
        ({"step": 10**30}, "checksum"),
    ],
)
def test_a_step_checkpoint_with_forged_meta_is_unusable(
    tmp_path: Path, edit: dict, reason: str
) -> None:
    folder = _step_checkpoint(tmp_path, 1, 12)
    meta = json.loads((folder / "meta.json").read_text())
    meta.update(edit)
    (folder / "meta.json").write_text(json.dumps(meta))
    scan = checkpoints.scan(tmp_path)
    assert scan.good == []
    [(bad, why)] = scan.bad
    assert bad == folder and reason in why
