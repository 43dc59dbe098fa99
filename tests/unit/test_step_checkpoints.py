"""Mid-epoch checkpoints: names, kinds, ranking, pruning, fallback, and safe RNG states."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from app.runfolder import checkpoints, retention
from app.runfolder.checkpoint_names import dir_name, parse_name
from app.training.checkpoint_watch import rng_state, set_rng_state


def _write(run: Path, epoch: int, step: int | None, accuracy: float | None = None) -> Path:
    folder = run / dir_name(epoch, step)
    metrics = {} if accuracy is None else {"val_accuracy": accuracy}
    checkpoints.write_checkpoint(
        folder,
        model_state=nn.Linear(2, 2).state_dict(),
        train_state={"epoch": epoch, "step": step or 0, "rng": [rng_state()]},
        epoch=epoch,
        metrics=metrics,
        step=step,
    )
    return folder


def test_names_sort_in_training_order_and_parse_back() -> None:
    names = [dir_name(2), dir_name(2, 412), dir_name(2, 9000), dir_name(3), dir_name(3, 9100)]
    assert sorted(names) == names
    assert [parse_name(n) for n in names[:2]] == [(2, None), (2, 412)]
    for bad in ("checkpoint_epoch_2", "checkpoint_epoch_0002_step_1", "corrupt_" + names[1]):
        assert parse_name(bad) is None


def test_a_step_checkpoint_is_verified_like_an_epoch_one(tmp_path: Path) -> None:
    folder = _write(tmp_path, 2, 412)
    ref = checkpoints.verify(folder)
    assert (ref.epoch, ref.step, ref.kind) == (2, 412, "step")
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["kind"] == "step" and meta["step"] == 412


def test_an_edited_step_fails_the_meta_checksum(tmp_path: Path) -> None:
    folder = _write(tmp_path, 2, 412)
    meta = json.loads((folder / "meta.json").read_text())
    meta["step"] = 999
    (folder / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="checksum"):
        checkpoints.verify(folder)


def test_a_step_folder_renamed_to_another_step_is_refused(tmp_path: Path) -> None:
    folder = _write(tmp_path, 2, 412)
    moved = folder.rename(tmp_path / dir_name(2, 500))
    with pytest.raises(ValueError, match="says step 412 but the folder is named for 500"):
        checkpoints.verify(moved)


def test_scan_orders_steps_between_epoch_ends_and_ranking_ignores_them(tmp_path: Path) -> None:
    _write(tmp_path, 1, None, 0.5)
    _write(tmp_path, 2, None, 0.6)
    _write(tmp_path, 2, 150)
    _write(tmp_path, 2, 140)
    scan = checkpoints.scan(tmp_path)
    assert [(r.epoch, r.step) for r in scan.good] == [(2, 150), (2, 140), (2, None), (1, None)]
    assert [r.epoch for r in retention.ranked(scan.good, "val_accuracy")] == [2, 1]


def test_corrupt_newest_step_checkpoint_falls_back_to_the_one_before(tmp_path: Path) -> None:
    _write(tmp_path, 2, None, 0.6)
    _write(tmp_path, 2, 140)
    newest = _write(tmp_path, 2, 150)
    (newest / "model.pt").write_bytes(b"torn")
    scan = checkpoints.scan(tmp_path)
    assert scan.latest is not None and (scan.latest.epoch, scan.latest.step) == (2, 140)
    assert [folder.name for folder, _ in scan.bad] == [newest.name]


def test_prune_keeps_a_step_checkpoint_only_while_it_is_newest(tmp_path: Path) -> None:
    for epoch, accuracy in ((1, 0.9), (2, 0.5)):
        _write(tmp_path, epoch, None, accuracy)
    _write(tmp_path, 1, 50)  # superseded by epoch 2's end
    _write(tmp_path, 2, 75)  # the newest: kept
    removed = checkpoints.prune(tmp_path, keep=2, metric="val_accuracy")
    assert [p.name for p in removed] == [dir_name(1, 50)]
    left = {(r.epoch, r.step) for r in checkpoints.scan(tmp_path).good}
    assert left == {(2, 75), (2, None), (1, None)}
    _write(tmp_path, 3, None, 0.4)  # a newer end of epoch supersedes the step checkpoint
    checkpoints.prune(tmp_path, keep=2, metric="val_accuracy")
    left = {(r.epoch, r.step) for r in checkpoints.scan(tmp_path).good}
    # The 2 best (epochs 1 and 2) and the newest (epoch 3); the step checkpoint is gone.
    assert left == {(3, None), (2, None), (1, None)}


def test_rng_states_survive_a_weights_only_load(tmp_path: Path) -> None:
    torch.manual_seed(3)
    np.random.seed(3)
    random.seed(3)
    folder = _write(tmp_path, 1, 7)
    expected = (torch.rand(3), np.random.rand(3), random.random())
    _, state = checkpoints.load_train_state(folder)  # weights_only=True inside
    set_rng_state(state["rng"][0])
    assert torch.equal(torch.rand(3), expected[0])
    assert np.array_equal(np.random.rand(3), expected[1])
    assert random.random() == expected[2]
