"""Checkpoint folders are verified before anyone trusts them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from app.runfolder import checkpoint_names, checkpoints
from app.runfolder.summary import build_summary


def _write(folder: Path, epoch: int, accuracy: float) -> nn.Module:
    model = nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    checkpoints.write_checkpoint(
        folder,
        model_state=model.state_dict(),
        train_state={"optimizer": optimizer.state_dict(), "epoch": epoch, "step": 7},
        epoch=epoch,
        metrics={"val_accuracy": accuracy, "val_loss": 1 - accuracy},
    )
    return model


def test_round_trip_loads_on_cpu_with_weights_only(tmp_path: Path) -> None:
    model = _write(tmp_path / checkpoint_names.dir_name(3), 3, 0.5)
    ref = checkpoints.verify(tmp_path / "checkpoint_epoch_0003")
    assert ref.epoch == 3
    weights = torch.load(ref.path / "model.pt", map_location="cpu", weights_only=True)
    assert torch.equal(weights["weight"], model.state_dict()["weight"])
    _, state = checkpoints.load_train_state(ref.path)
    assert state["step"] == 7
    assert state["optimizer"]["state"]


def test_what_loads_is_the_bytes_verified_whoever_rewrote_the_folder_since(tmp_path: Path) -> None:
    """A rerun verified its checkpoint before Ray started, and its workers read the files
    again seconds later: a writer who replaced model.pt meanwhile (and resealed meta.json to
    match) had the run train on, and then export, weights never checked (found by a red-team
    pass). The reference carries the digests it was verified with, and loading holds the
    bytes it reads to them."""
    folder = tmp_path / checkpoint_names.dir_name(2)
    _write(folder, 2, 0.5)
    ref = checkpoints.verify(folder)
    assert set(ref.files) == {"model.pt", "train_state.pt"}
    checkpoints.load_train_state(ref.path, ref.files)  # as verified: loads
    # The swap: other weights, and a meta.json resealed over them, as any writer can.
    _write(tmp_path / "forged", 2, 0.5)
    (folder / "model.pt").write_bytes((tmp_path / "forged" / "model.pt").read_bytes())
    meta = json.loads((folder / "meta.json").read_text())
    meta["files"]["model.pt"] = json.loads((tmp_path / "forged" / "meta.json").read_text())[
        "files"
    ]["model.pt"]
    meta["meta_sha256"] = checkpoints._meta_digest(meta)
    (folder / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(checkpoints.CheckpointAltered, match=r"model\.pt has sha256 \w+, not the"):
        checkpoints.load_train_state(ref.path, ref.files)
    shapes = {"weight": torch.Size([3, 4]), "bias": torch.Size([3])}
    assert "verified before this run loaded it" in str(checkpoints.resume_problem(ref, shapes))
    # Without a verified reference (Ray's own newest, written by this run's workers) the bytes
    # are held to meta.json as it is when read: an unsealed rewrite is refused too.
    (folder / "model.pt").write_bytes(b"PK" + bytes(100))
    with pytest.raises(checkpoints.CheckpointAltered, match=r"its meta\.json records"):
        checkpoints.load_train_state(folder)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda f: (f / "model.pt").write_bytes((f / "model.pt").read_bytes()[:50]), "checksum"),
        (lambda f: (f / "train_state.pt").unlink(), "train_state.pt is missing"),
        (lambda f: (f / "meta.json").unlink(), "never completed"),
        (lambda f: (f / "meta.json").write_text("{not json"), "unreadable"),
    ],
)
def test_damaged_checkpoints_are_rejected_with_a_reason(tmp_path: Path, damage, reason) -> None:
    folder = tmp_path / checkpoint_names.dir_name(1)
    _write(folder, 1, 0.5)
    damage(folder)
    with pytest.raises(ValueError, match=reason):
        checkpoints.verify(folder)


def test_scan_skips_bad_and_orders_newest_first(tmp_path: Path) -> None:
    for epoch in (1, 2, 3):
        _write(tmp_path / checkpoint_names.dir_name(epoch), epoch, 0.1 * epoch)
    (tmp_path / "checkpoint_epoch_0003" / "model.pt").write_bytes(b"")
    scan = checkpoints.scan(tmp_path)
    assert [ref.epoch for ref in scan.good] == [2, 1]
    assert scan.latest is not None and scan.latest.epoch == 2
    assert [folder.name for folder, _ in scan.bad] == ["checkpoint_epoch_0003"]
    moved = checkpoints.quarantine(scan.bad[0][0])
    assert moved.name == "corrupt_checkpoint_epoch_0003"
    assert checkpoints.scan(tmp_path).bad == []


def test_prune_keeps_the_best_and_the_newest(tmp_path: Path) -> None:
    for epoch, accuracy in [(1, 0.9), (2, 0.5), (3, 0.7), (4, 0.6)]:
        _write(tmp_path / checkpoint_names.dir_name(epoch), epoch, accuracy)
    removed = checkpoints.prune(tmp_path, keep=2, metric="val_accuracy")
    left = sorted(ref.epoch for ref in checkpoints.scan(tmp_path).good)
    assert left == [1, 3, 4]  # best two by accuracy (1, 3) plus the newest (4)
    assert len(removed) == 1
    meta = json.loads((tmp_path / "checkpoint_epoch_0001" / "meta.json").read_text())
    assert meta["metrics"]["val_accuracy"] == 0.9


def test_best_and_pruning_follow_the_checkpoint_metric(tmp_path: Path) -> None:
    # Accuracy and loss disagree here on purpose: epoch 2 has the best accuracy, epoch 3 the
    # lowest loss. With TRAIN_CHECKPOINT_METRIC=val_loss the summary's best is epoch 3.
    for epoch, accuracy, loss in [(1, 0.5, 0.9), (2, 0.9, 0.6), (3, 0.8, 0.2), (4, 0.7, 0.8)]:
        _write(tmp_path / checkpoint_names.dir_name(epoch), epoch, accuracy)
        meta_path = tmp_path / checkpoint_names.dir_name(epoch) / "meta.json"
        meta = json.loads(meta_path.read_text())
        meta["metrics"]["val_loss"] = loss
        meta["meta_sha256"] = checkpoints._meta_digest(meta)
        meta_path.write_text(json.dumps(meta))
    record = {"status": "succeeded", "run_name": "r", "target_epochs": 4, "settings": {}}
    timing = {"duration_s": 1.0, "failures": 0, "restored_from": None}
    by_loss = build_summary(tmp_path, **record, **timing, metric="val_loss")["best"]
    assert (by_loss["metric"], by_loss["epoch"], by_loss["val_loss"]) == ("val_loss", 3, 0.2)
    by_accuracy = build_summary(tmp_path, **record, **timing, metric="val_accuracy")["best"]
    assert (by_accuracy["epoch"], by_accuracy["val_accuracy"]) == (2, 0.9)

    checkpoints.prune(tmp_path, keep=1, metric="val_loss")
    left = sorted(ref.epoch for ref in checkpoints.scan(tmp_path).good)
    assert left == [3, 4]  # the lowest loss, plus the newest


def test_a_pickle_in_a_checkpoint_is_named_without_torchs_advice_to_load_it_anyway(
    tmp_path: Path,
) -> None:
    """torch's refusal says re-running with weights_only=False "will likely succeed": the
    wrong advice for a file a stranger planted, and it reached the run's messages."""
    from tests.hostile.support import malicious_torch_file

    folder = tmp_path / checkpoint_names.dir_name(1)
    _write(folder, 1, 0.5)
    marker = tmp_path / "PWNED"
    (folder / "train_state.pt").write_bytes(malicious_torch_file(marker))
    meta = json.loads((folder / "meta.json").read_text())
    meta["files"]["train_state.pt"] = checkpoints.sha256_of(folder / "train_state.pt")
    meta["meta_sha256"] = checkpoints._meta_digest(meta)
    (folder / "meta.json").write_text(json.dumps(meta))
    ref = checkpoints.verify(folder)
    problem = str(checkpoints.resume_problem(ref, {"weight": torch.Size([3, 4])}))
    assert "holds more than tensors" in problem and "it is not loaded" in problem, problem
    assert "weights_only" not in problem and not marker.exists()


def test_a_final_epoch_without_its_metrics_line_gets_it_back_from_its_checkpoint(
    tmp_path: Path,
) -> None:
    """A sweep stopped by Ctrl-C as a trial finished its last epoch left the epoch's checkpoint
    committed and no line in metrics.jsonl; the rerun found the trial finished and never wrote
    it (found by a red-team pass). The line is restored from the checkpoint's own figures."""
    from app.run.resume import restore_epoch_line
    from app.runfolder import folder as run_folder

    run_folder.record_epoch(tmp_path, {"epoch": 1, "train_loss": 0.9, "val_loss": 0.8,
                                       "val_accuracy": 0.4})  # fmt: skip
    _write(tmp_path / checkpoint_names.dir_name(2), 2, 0.75)  # no train_loss recorded in it
    latest = checkpoints.scan(tmp_path).latest
    said: list[str] = []
    restore_epoch_line(tmp_path, latest, said.append)
    first, second = run_folder.epochs(tmp_path)
    assert first["val_accuracy"] == 0.4
    assert second["epoch"] == 2 and second["val_accuracy"] == 0.75 and second["val_loss"] == 0.25
    assert second["train_loss"] is None and second["restored_from"] == "checkpoint_epoch_0002"
    assert said == [
        "epoch 2 had no line in metrics.jsonl (stopped between its checkpoint and its line): "
        "restored from checkpoint checkpoint_epoch_0002"
    ]
    restore_epoch_line(tmp_path, latest, said.append)  # the line is there: nothing to do
    assert len(run_folder.epochs(tmp_path)) == 2 and len(said) == 1
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(line) for line in lines)
