"""Witnessed checkpoints (app/export/witness.py): a run that signs its exports signs only weights
its own workers wrote. A red-team pass copied a checkpoint of its own training (epoch 8 of a
3-epoch run) into a signing run's folder: the run found nothing left to train, exported it,
signed the card and promoted it. Real Ed25519 keys, real checkpoints and exports."""

from __future__ import annotations

import hashlib
import json
import pickle
import shutil
from pathlib import Path

import pytest
import torch

from app.export import signature, witness
from app.promotion.step import promote_run
from app.runfolder import checkpoints
from tests.promotion_support import INFO, make_run, settings_for
from tests.support import write_ray_snapshot, write_signing_key


@pytest.fixture
def key(tmp_path: Path) -> Path:
    return write_signing_key(tmp_path)


def _reason(run: Path, name: str) -> str:
    return (run / f"corrupt_{name}" / checkpoints.REASON_FILE).read_text()


def _exported_epoch(run: Path) -> int:
    card = json.loads((run / "export" / "model_card.json").read_text())
    return int(card["checkpoint"]["epoch"])


def test_a_planted_checkpoint_is_set_aside_and_its_weights_never_signed(
    tmp_path: Path, key: Path
) -> None:
    storage = tmp_path / "runs"
    run = make_run(storage, "nightly", 0.6, witness_key=key)  # what the run's workers wrote
    make_run(storage, "nightly", 0.99, epoch=8, seed=1)  # a writer of the storage, no key
    summary = promote_run(settings_for(storage, "nightly", signing_key=str(key)), INFO, {})
    assert summary["promotion"]["checkpoint"]["epoch"] == 1
    assert _exported_epoch(run) == 1 and (run / "export" / signature.SIGNATURE_FILE).is_file()
    assert "no witness.sig" in _reason(run, "checkpoint_epoch_0008")


def test_a_witnessed_checkpoint_of_another_run_or_rewritten_does_not_verify(
    tmp_path: Path, key: Path
) -> None:
    storage = tmp_path / "runs"
    run = make_run(storage, "nightly", 0.6, witness_key=key)
    other = make_run(storage, "other", 0.99, epoch=2, seed=1, witness_key=key)
    shutil.copytree(other / "checkpoint_epoch_0002", run / "checkpoint_epoch_0002")
    # Its own epoch-1 weights edited, and meta.json re-hashed over them: every checksum holds.
    edited = make_run(tmp_path / "edits", "nightly", 0.6, witness_key=key) / "checkpoint_epoch_0001"
    state = torch.load(edited / "model.pt", weights_only=True)
    next(iter(state.values())).add_(1.0)
    torch.save(state, edited / "model.pt")
    meta = json.loads((edited / "meta.json").read_text())
    meta["files"]["model.pt"] = hashlib.sha256((edited / "model.pt").read_bytes()).hexdigest()
    meta["metrics"]["val_accuracy"] = 0.999
    meta["meta_sha256"] = checkpoints._meta_digest(meta)
    (edited / "meta.json").write_text(json.dumps(meta))
    checkpoints.verify(edited)  # intact as far as its checksums tell
    shutil.rmtree(run / "checkpoint_epoch_0001")
    shutil.copytree(edited, run / "checkpoint_epoch_0001")
    summary = promote_run(settings_for(storage, "nightly", signing_key=str(key)), INFO, {})
    assert summary["promotion"].get("checkpoint") is None, summary["promotion"]
    assert not (run / "export").exists()
    for name in ("checkpoint_epoch_0001", "checkpoint_epoch_0002"):
        assert "witness.sig does not verify over its meta.json" in _reason(run, name)


def test_a_run_without_a_signing_key_uses_its_checkpoints_as_their_checksums_say(
    tmp_path: Path,
) -> None:
    storage = tmp_path / "runs"
    run = make_run(storage, "plain", 0.6)
    summary = promote_run(settings_for(storage, "plain"), INFO, {})
    assert summary["promotion"]["checkpoint"]["epoch"] == 1 and _exported_epoch(run) == 1


def test_a_resume_sets_aside_what_was_not_witnessed(tmp_path: Path, key: Path) -> None:
    from app.run.resume import usable_checkpoint

    storage = tmp_path / "runs"
    run = make_run(storage, "nightly", 0.6, witness_key=key)
    make_run(storage, "nightly", 0.99, epoch=8, seed=1)
    said: list[str] = []
    plain = usable_checkpoint(settings_for(storage, "nightly"), INFO, said.append)
    assert plain is not None and plain.epoch == 8 and not said  # no key: checksums decide
    signing = settings_for(storage, "nightly", signing_key=str(key))
    ref = usable_checkpoint(signing, INFO, said.append)
    assert ref is not None and ref.epoch == 1
    assert said and said[0].startswith("checkpoint checkpoint_epoch_0008 is unusable: no witness")
    assert (run / "corrupt_checkpoint_epoch_0008").is_dir()


def test_the_controllers_callback_witnesses_what_rank_0_reported(tmp_path: Path, key: Path) -> None:
    """Ray Train's controller calls it with the reports' metrics and the committed checkpoint
    (a real ray.train.Checkpoint); the key is read there, never pickled with the callback."""
    from ray.train import Checkpoint

    from app.export.witness_callback import Witness

    storage = tmp_path / "runs"
    run = make_run(storage, "nightly", 0.6)
    folder = run / "checkpoint_epoch_0001"
    ref = checkpoints.verify(folder)
    callback = pickle.loads(pickle.dumps(Witness(run, key)))
    assert b"PRIVATE KEY" not in pickle.dumps(callback) and key.read_bytes() not in pickle.dumps(
        callback
    )
    public = signature.private_key(key).public_key()
    callback.after_report(None, [{"val_accuracy": 0.6}], Checkpoint.from_directory(str(folder)))
    assert "no witness.sig" in str(witness.problem(ref, public))  # no digest reported: none
    reported = [{"val_accuracy": 0.6, checkpoints.WITNESSED_METRIC: ref.meta_sha256}, {}]
    callback.after_report(None, reported, Checkpoint.from_directory(str(folder)))
    assert witness.problem(ref, public) is None


@pytest.mark.parametrize(
    "content", [b"[]", b"{}", b'{"signature": 7}', b'{"signature": "not base64!"}', b"\xff\x00"]
)
def test_a_hostile_witness_file_is_a_reason_not_a_crash(
    tmp_path: Path, key: Path, content: bytes
) -> None:
    run = make_run(tmp_path / "runs", "nightly", 0.6)
    folder = run / "checkpoint_epoch_0001"
    (folder / witness.WITNESS_FILE).write_bytes(content)
    public = signature.private_key(key).public_key()
    why = witness.problem(checkpoints.verify(folder), public)
    assert why is not None and why.startswith("witness.sig is unreadable"), why


def test_a_linked_witness_file_is_refused(tmp_path: Path, key: Path) -> None:
    signed = make_run(tmp_path / "a", "nightly", 0.6, witness_key=key) / "checkpoint_epoch_0001"
    run = make_run(tmp_path / "b", "nightly", 0.6)
    folder = run / "checkpoint_epoch_0001"
    (folder / witness.WITNESS_FILE).symlink_to(signed / witness.WITNESS_FILE)
    public = signature.private_key(key).public_key()
    assert witness.problem(checkpoints.verify(folder), public) == "witness.sig is a link"


def test_rays_own_restore_loads_only_the_meta_json_rank_0_reported(tmp_path: Path) -> None:
    """Ray restores its latest checkpoint by path after a worker failure: a meta.json rewritten
    there since (with weights re-hashed to match) is refused against the digest the report
    carried through Ray."""
    run = make_run(tmp_path / "runs", "nightly", 0.6)
    folder = run / "checkpoint_epoch_0001"
    reported = checkpoints.verify(folder).meta_sha256
    model_state, _ = checkpoints.load_train_state(folder, None, reported)
    assert model_state
    meta = json.loads((folder / "meta.json").read_text())
    meta["metrics"]["val_accuracy"] = 0.999
    meta["meta_sha256"] = checkpoints._meta_digest(meta)
    (folder / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(checkpoints.CheckpointAltered, match="reported to Ray"):
        checkpoints.load_train_state(folder, None, reported)


def test_check_warns_of_the_checkpoints_train_will_set_aside(tmp_path: Path, key: Path) -> None:
    from app.preflight import Found, Warned, _signing

    storage = tmp_path / "runs"
    make_run(storage, "nightly", 0.6, witness_key=key)
    settings = settings_for(storage, "nightly", signing_key=str(key))
    assert _signing(settings, Found()).startswith("exports signed")
    make_run(storage, "nightly", 0.99, epoch=8, seed=1)
    with pytest.raises(
        Warned,
        match=r"1 checkpoint\(s\) of run nightly are not witnessed "
        r"\(checkpoint_epoch_0008; the first: no witness.sig",
    ):
        _signing(settings, Found())
    assert (storage / "nightly" / "checkpoint_epoch_0008").is_dir()  # `check` moves nothing
    # Where none is witnessed, the run starts over: not "resumes from the newest witnessed".
    make_run(storage, "unsigned", 0.6)
    with pytest.raises(Warned, match="sets them aside and starts over: none is witnessed"):
        _signing(settings_for(storage, "unsigned", signing_key=str(key)), Found())


def test_check_with_a_failing_store_names_it_once_and_walks_no_checkpoints(
    tmp_path: Path, key: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The storage check's failure says what is wrong; the signing check, run after it, must not
    reach the same store again (a GCS bucket with no identity waited for good: a hung CI run)."""
    from tests.hostile.support import assert_refused, trainctl

    monkeypatch.setenv("TRAIN_STORAGE_PATH", "s3://bucket/runs")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "minio:9000")
    monkeypatch.setenv("TRAIN_SIGNING_KEY", str(key))
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, "AWS_ENDPOINT_URL='minio:9000'", "http:// or https:// URL")
    assert "signing: exports signed" in result.text
    assert "checkpoints not inspected: the storage fails (above)" in result.text


def test_the_in_run_pruner_ranks_only_witnessed_checkpoints(tmp_path: Path, key: Path) -> None:
    """Ray's record of committed checkpoints is a file in the storage too. A checkpoint planted
    mid-run, its name added to that record, ranked best and was the newest: with one kept, the
    run's own best and its resume point were deleted while Ray trained."""
    storage = tmp_path / "runs"
    for epoch, accuracy in [(1, 0.4), (2, 0.7), (3, 0.5)]:
        run = make_run(storage, "nightly", accuracy, epoch=epoch, witness_key=key)
    make_run(storage, "nightly", 0.99, epoch=8, seed=1)  # a writer of the storage, no key
    write_ray_snapshot(run, *(f"checkpoint_epoch_000{n}" for n in (1, 2, 3, 8)))
    pruner = checkpoints.in_run_pruner(
        run, keep=1, metric="val_accuracy", warn=print,
        trusted=lambda refs: witness.verified_only(refs, key),
    )  # fmt: skip
    pruner.after_checkpoint()
    left = sorted(p.name for p in run.iterdir() if p.is_dir())
    # The best witnessed (epoch 2) and the newest (epoch 3, the resume point); the planted one
    # is neither ranked nor removed in-run: the run's end sets it aside, with the reason.
    assert left == ["checkpoint_epoch_0002", "checkpoint_epoch_0003", "checkpoint_epoch_0008"]


def test_a_signing_driver_stopped_by_sigterm_waits_for_the_witness(
    tmp_path: Path, key: Path
) -> None:
    """Rank 0 says the just-in-time checkpoint is committed before the controller has collected
    its report and witnessed it; a driver that exited then left it unwitnessed, and the run's
    end set aside the steps it had saved."""
    import threading
    import time

    from app.run.signals import await_witness

    run = make_run(tmp_path / "runs", "nightly", 0.6, epoch=2)
    name = "checkpoint_epoch_0002"
    digest = json.loads((run / name / "meta.json").read_text())["meta_sha256"]
    late = threading.Timer(0.5, witness.write, (run / name, digest, signature.private_key(key)))
    late.start()
    try:
        assert await_witness(run, name, time.monotonic() + 60) == ", witnessed"
    finally:
        late.cancel()
    assert "not witnessed in time: it is set aside, and the rerun resumes" in await_witness(
        run, "checkpoint_epoch_0001_step_00000007", time.monotonic() + 0.5
    )
    for hostile in ("../../etc", None, 7, "checkpoint_epoch_0002/../x"):
        said = await_witness(run, hostile, time.monotonic() + 60)
        assert said == "; its folder is not named, so its witness is not waited for", hostile


def test_a_signing_driver_stopped_after_the_last_epoch_waits_for_its_witness(
    tmp_path: Path, key: Path
) -> None:
    """Ctrl-C as a signed run ended: its workers had trained out, so no just-in-time
    checkpoint was asked, and the driver left at once, before the controller witnessed the
    last epoch's checkpoint; the run's end set it aside and the rerun trained the epoch again
    (a red-team pass)."""
    import threading

    from app.run.signals import TRAINED_OUT, just_in_time_each
    from app.runfolder import folder as run_folder

    run = make_run(tmp_path / "runs", "nightly", 0.6, epoch=2)
    name = "checkpoint_epoch_0002"
    (run / name / witness.WITNESS_FILE).unlink(missing_ok=True)  # collected, not witnessed
    run_folder.start_attempt(run, invocation="i", start_epoch=1, world_size=1, restored_from=None)
    digest = json.loads((run / name / "meta.json").read_text())["meta_sha256"]

    def workers(invocation: str) -> None:  # their loop had ended: rank 0 says so
        run_folder.write_progress(run, invocation, trained_out=invocation)
        threading.Timer(
            0.5, witness.write, (run / name, digest, signature.private_key(key))
        ).start()

    said = just_in_time_each([(run, "i")], wait_s=60, signs=True, ask=workers)
    assert said == [f"{TRAINED_OUT}, {name}, witnessed"], said
    (run / name / witness.WITNESS_FILE).unlink()
    late = just_in_time_each([(run, "i")], wait_s=1.0, signs=True, ask=lambda i: None)
    assert late[0].startswith(f"{TRAINED_OUT}, {name}; not witnessed in time"), late
    # Without signing, nothing to wait for: the line as before.
    assert just_in_time_each([(run, "i")], wait_s=1.0, ask=lambda i: None) == [TRAINED_OUT]
