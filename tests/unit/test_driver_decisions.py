"""The driver's decisions without Ray: what a run starts from, whether anything is left to
train, how an ending is classified, and what the summary says (app/run/decisions.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from app.run import decisions
from app.run.signals import StopForSigterm
from app.runfolder import usage
from app.runfolder.checkpoints import CheckpointRef


def _ref(epoch: int) -> CheckpointRef:
    return CheckpointRef(Path(f"/runs/r/checkpoint_epoch_{epoch:04d}"), epoch, {"val_loss": 0.5})


def test_no_verified_checkpoint_starts_fresh() -> None:
    start = decisions.plan_start(None, 5)
    assert (start.kind, start.checkpoint, start.epochs_done) == ("fresh", None, 0)
    assert start.announcement("r", Path("/runs/r"), 5) == "starting run r in /runs/r"


def test_a_checkpoint_short_of_the_target_resumes_from_it() -> None:
    start = decisions.plan_start(_ref(3), 5)
    assert (start.kind, start.checkpoint, start.epochs_done) == ("resume", _ref(3).path, 3)
    assert start.announcement("r", Path("/runs/r"), 5) == (
        "resuming run r at epoch 4 from /runs/r/checkpoint_epoch_0003"
    )


def test_a_resume_hands_the_workers_the_digests_its_checkpoint_was_verified_with() -> None:
    """The workers load the checkpoint's files only as the bytes the driver verified
    (app/runfolder/checkpoints.py load_train_state)."""
    import dataclasses

    verified = dataclasses.replace(_ref(3), files={"model.pt": "ab" * 32, "train_state.pt": "cd"})
    assert decisions.plan_start(verified, 5).files == verified.files


def test_a_fresh_run_names_the_warm_start_it_resolved_and_a_resume_does_not() -> None:
    """`champion:<name>` is whichever champion is current: the run says which it started from."""
    from app.training.warm_weights import WarmStart

    warm = WarmStart(
        "champion:pets", "champion pets v3 (run nightly-0411, epoch 7)",
        Path("/runs/champions/pets/ab/weights.pt"), "5c1f" * 16, "its model card records",
    )  # fmt: skip
    said = decisions.warm_start_line(decisions.plan_start(None, 5), warm)
    assert said == (
        "warm start from champion pets v3 (run nightly-0411, epoch 7), sha256 5c1f5c1f5c1f "
        "(checked before Ray)"
    )
    assert decisions.warm_start_line(decisions.plan_start(None, 5), None) is None
    assert decisions.warm_start_line(decisions.plan_start(_ref(3), 5), warm) is None


@pytest.mark.parametrize("epoch", [5, 7])
def test_a_checkpoint_at_or_past_the_target_leaves_nothing_to_train(epoch: int) -> None:
    start = decisions.plan_start(_ref(epoch), 5)
    assert start.kind == "finished" and start.checkpoint == _ref(epoch).path
    said = start.announcement("r", Path("/runs/r"), 5)
    assert f"already finished {epoch} epochs (TRAIN_EPOCHS=5); nothing to train" in said
    # Raising TRAIN_EPOCHS from 5 to 6 would not continue a run at epoch 7 (a newcomer pass).
    assert said.endswith(f"Set TRAIN_EPOCHS above {epoch} to continue.")


def test_trackers_left_open_by_a_killed_driver_are_closed_once() -> None:
    ids = {"mlflow": {"run_id": "abc"}}
    assert decisions.trackers_to_close({"status": "running", "tracking": ids}) == ids
    assert decisions.trackers_to_close({"status": "succeeded", "tracking": ids}) is None
    assert decisions.trackers_to_close({"status": "failed"}) is None
    assert decisions.trackers_to_close(None) is None
    # A driver that finished while a tracker's server was down: its record says what is owed.
    missed = {"mlflow": {"delivered_epochs": [1], "undelivered_epochs": [2], "closed": False}}
    done = {"mlflow": {"delivered_epochs": [1, 2], "undelivered_epochs": [], "closed": True}}
    ended = {"status": "succeeded", "tracking": ids}
    assert decisions.trackers_to_close({**ended, "tracking_delivery": missed}) == ids
    assert decisions.trackers_to_close({**ended, "tracking_delivery": done}) is None
    unclosed = {"mlflow": {**done["mlflow"], "closed": False}}
    assert decisions.trackers_to_close({**ended, "tracking_delivery": unclosed}) == ids
    # Switched off at the start (no tracker run recorded): a run of its own now, caught up.
    off = {"mlflow": {"delivered_epochs": [], "undelivered_epochs": [1, 2], "switched_off": "x"}}
    assert decisions.trackers_to_close({"status": "succeeded", "tracking_delivery": off}) == {}
    assert decisions.trackers_to_close({**ended, "tracking_delivery": ["damaged"]}) is None


def test_sigterm_is_told_by_its_flag_whatever_ray_raised() -> None:
    # ray.get turns the handler's StopForSigterm into a plain KeyboardInterrupt, or wraps it.
    assert decisions.classify_ending(KeyboardInterrupt(), sigterm=True) == "sigterm"
    assert decisions.classify_ending(RuntimeError("wrapped"), sigterm=True) == "sigterm"
    assert decisions.classify_ending(StopForSigterm("SIGTERM"), sigterm=True) == "sigterm"


def test_ctrl_c_and_failures_without_sigterm() -> None:
    assert decisions.classify_ending(KeyboardInterrupt(), sigterm=False) == "ctrl_c"
    assert decisions.classify_ending(ValueError("x"), sigterm=False) == "failure"


def test_the_root_cause_is_the_innermost_errors_last_line() -> None:
    try:
        try:
            raise ValueError("first line\n\n  the real reason  \n")
        except ValueError as inner:
            raise RuntimeError("Ray's wrapping") from inner
    except RuntimeError as outer:
        assert decisions.root_cause(outer) == "ValueError: the real reason"
    assert decisions.root_cause(MemoryError()) == "MemoryError"


def test_a_bad_image_is_recognised_in_the_cause_or_the_error() -> None:
    assert decisions.is_bad_image("ImageError: truncated", RuntimeError())
    assert decisions.is_bad_image("RayTaskError", RuntimeError("ImageError in block 3"))
    assert not decisions.is_bad_image("ValueError: x", RuntimeError("y"))


def test_a_bad_image_met_by_a_workers_ray_data_iterator_is_named() -> None:
    """What Ray Train raises when a worker's streamed Ray Data read fails on an image: a
    WorkerGroupError holding, per rank, a RayTaskError whose cause is Ray Data's
    UserCodeException (a message about retries); the ImageError is only in the remote
    traceback's text. Built from Ray's own classes, as Ray builds them."""
    from ray.exceptions import RayTaskError, UserCodeException
    from ray.train.v2.api.exceptions import WorkerGroupError

    advice = (
        "UDF failed to process a data block.\nFailed to apply UDF transform after 1/1 attempts."
        "\nTo change retry attempts, backoff, or which errors are retried, configure "
        "`ray.data.DataContext.get_current()` if you believe this to be transient."
    )
    remote = (
        'Traceback (most recent call last):\n  File "/app/data/images.py", line 275, in _open\n'
        "    raise ImageError(...)\napp.data.image_decode.ImageError: row 15 is not a "
        "decodable PNG/JPEG image (Truncated File Read)\n\nThe above exception was the direct "
        f"cause of the following exception:\n\nray.exceptions.UserCodeException: {advice}"
    )
    task_error = RayTaskError(
        "ReadParquet->MapBatches(to_uint8_rows)", remote, UserCodeException(advice)
    ).as_instanceof_cause()
    failed = WorkerGroupError(f"[Rank 0]\n{task_error}", {0: task_error})
    cause = decisions.root_cause(failed)
    assert cause == (
        "ImageError: row 15 is not a decodable PNG/JPEG image (Truncated File Read)"
    ), cause
    assert decisions.is_bad_image(cause, failed)
    # A decompression bomb's own kind of ImageError: named too (it ended as Ray Data's advice
    # on retries, naming no file, found by a red-team pass).
    bomb = remote.replace("raise ImageError(", "raise TooManyPixelsError(").replace(
        "app.data.image_decode.ImageError: row 15 is not a decodable PNG/JPEG image (Truncated "
        "File Read)",
        "app.data.image_decode.TooManyPixelsError: /data/train/x/bomb.png: 900,000,000 pixels",
    )
    task_error = RayTaskError(
        "ReadFiles->MapBatches(to_folder_rows)", bomb, UserCodeException(advice)
    ).as_instanceof_cause()
    failed = WorkerGroupError(f"[Rank 0]\n{task_error}", {0: task_error})
    cause = decisions.root_cause(failed)
    assert cause == "TooManyPixelsError: /data/train/x/bomb.png: 900,000,000 pixels", cause
    assert decisions.is_bad_image(cause, failed)
    # Without an ImageError anywhere, the innermost error's last line stays the cause.
    plain = WorkerGroupError("[Rank 1]\nboom", {1: ValueError("x\nthe reason")})
    assert decisions.root_cause(plain) == "ValueError: the reason"
    assert not decisions.is_bad_image(decisions.root_cause(plain), plain)


def test_a_file_refused_by_ray_datas_own_reader_is_named_not_its_wrapper() -> None:
    """A Parquet file swapped after preflight for one with a pickled-object column: Ray
    Data's reader refuses it and wraps the refusal in a SystemException without a message,
    and the run ended "training failed: SystemException" (found by a red-team pass)."""
    from ray.data.exceptions import SystemException
    from ray.exceptions import RayTaskError
    from ray.train.v2.api.exceptions import WorkerGroupError

    refusal = (
        "This file contains columns stored as 'ray.data.arrow_pickled_object', which Ray Data "
        "does not read back unless it is allowed"
    )
    remote = (
        'Traceback (most recent call last):\n  File "ray/data/_internal/arrow_block.py", line 9, '
        f"in _read\n    raise ValueError(...)\nValueError: {refusal}\n\nThe above exception "
        "was the direct cause of the following exception:\n\nray.data.exceptions.SystemException"
    )
    task_error = RayTaskError("ReadParquet", remote, SystemException()).as_instanceof_cause()
    failed = WorkerGroupError(f"[Rank 0]\n{task_error}", {0: task_error})
    assert decisions.root_cause(failed) == f"ValueError: {refusal}"


def test_a_failed_read_or_parquet_sampling_task_is_a_refused_read() -> None:
    """Ray keeps a task's name only in its error's text (`ray::<task>()`); the driver then
    looks for the file, which the error does not name."""
    from ray.exceptions import RayTaskError

    def failed(task: str) -> BaseException:
        error = RayTaskError(task, "Traceback ...\nOSError: x", OSError("x"), f"ray::{task}")
        return error.as_instanceof_cause()

    assert decisions.is_refused_read(failed("_fetch_parquet_file_info"))
    assert decisions.is_refused_read(failed("ReadFilesParquetV2->MapBatches(to_uint8_rows)"))
    assert not decisions.is_refused_read(failed("TrainController.run"))
    assert not decisions.is_refused_read(OSError("a Read of nothing"))


def test_restored_from_prefers_the_latest_worker_group_start() -> None:
    starts = [{"restored_from": "/a"}, {"restored_from": None}, {"restored_from": "/b"}, {}]
    assert decisions.restored_from(starts, "/driver") == "/b"
    assert decisions.restored_from([{}], "/driver") == "/driver"
    assert decisions.restored_from([], None) is None
    assert decisions.failures_recovered(starts) == 3
    assert decisions.failures_recovered([]) == 0


def test_the_running_summary_drops_the_last_drivers_outcome() -> None:
    previous = {"status": "failed", "error": "boom", "tracking_delivery": {}, "tracking": {"x": 1}}
    summary = decisions.running_summary(
        previous, run_name="r", run_dir="/runs/r", target_epochs=4, resume_from=None,
        settings={"epochs": 4},
    )  # fmt: skip
    assert summary == {
        "status": "running", "run_name": "r", "run_dir": "/runs/r", "epochs_target": 4,
        "restored_from": None, "settings": {"epochs": 4}, "tracking": {"x": 1},
    }  # fmt: skip
    assert previous["status"] == "failed"  # the record read is not changed


def test_the_outcome_line_labels_the_last_epoch_and_the_best_checkpoint() -> None:
    best = {"metric": "val_accuracy", "val_accuracy": 0.93, "val_loss": 0.2, "epoch": 2}
    summary = {
        "metrics": {"val_accuracy": 0.91234}, "epochs_completed": 3, "failures": 1, "best": best,
    }  # fmt: skip
    assert decisions.outcome_line("r", "succeeded", summary, 5) == (
        "run r succeeded: 3/5 epochs; last epoch val_accuracy 0.9123; "
        "best checkpoint (epoch 2) val_accuracy 0.9300; 1 failure(s) recovered"
    )
    # Ranked by val_loss: that figure first, accuracy beside it, for both.
    best = {"metric": "val_loss", "val_loss": 0.1, "val_accuracy": 0.9, "epoch": 4}
    summary = {
        "metrics": {"val_loss": 0.12, "val_accuracy": 0.88},
        "epochs_completed": 5, "failures": 0, "best": best,
    }  # fmt: skip
    assert decisions.outcome_line("r", "succeeded", summary, 5) == (
        "run r succeeded: 5/5 epochs; last epoch val_loss 0.1200, val_accuracy 0.8800; "
        "best checkpoint (epoch 4) val_loss 0.1000, val_accuracy 0.9000; 0 failure(s) recovered"
    )
    summary = {"metrics": {}, "epochs_completed": 0, "failures": 0, "best": None}
    assert decisions.outcome_line("r", "failed", summary, 5) == (
        "run r failed: 0/5 epochs; 0 failure(s) recovered"
    )
    # A finished run rerun with a lower TRAIN_EPOCHS said `4/2 epochs` (a red-team pass).
    summary = {"metrics": {}, "epochs_completed": 4, "failures": 0, "best": None}
    assert decisions.outcome_line("r", "succeeded", summary, 2) == (
        "run r succeeded: 4 epochs (TRAIN_EPOCHS=2); 0 failure(s) recovered"
    )


def test_compile_fallback_is_said_only_when_compile_was_required() -> None:
    epochs = [{"compiled": 1.0}, {"compiled": 0.0}]
    assert decisions.compile_fell_back("on", epochs)
    assert not decisions.compile_fell_back("auto", epochs)
    assert not decisions.compile_fell_back("on", [{"compiled": 1.0}, {}])


# --- accelerator-hours (app/runfolder/usage.py) -----------------------------------------------
def test_accelerator_hours_count_each_worker_group_until_the_next_start() -> None:
    # 2 workers for an hour, then (a restart at another size) 4 workers for half an hour.
    starts = [{"time": 1000.0, "world_size": 2}, {"time": 4600.0, "world_size": 4}]
    record = usage.accelerator_hours(None, starts, end=6400.0, use_gpu=True, cpus_per_worker=8.0)
    assert record == {"kind": "gpu", "hours": 4.0, "workers": 4, "per_worker": 1.0}
    # Without GPUs, CPU-hours: each worker holds TRAIN_CPUS_PER_WORKER CPUs.
    record = usage.accelerator_hours(None, starts[:1], end=2800.0, use_gpu=False, cpus_per_worker=2)
    assert record == {"kind": "cpu", "hours": 2.0, "workers": 2, "per_worker": 2.0}
    assert usage.in_words(record) == "2.00 CPU-hours (2 workers x 2 CPU)"


def test_accelerator_hours_add_to_the_earlier_drivers_of_the_same_kind() -> None:
    before = {"kind": "gpu", "hours": 1.5, "workers": 8, "per_worker": 1.0}
    starts = [{"time": 0.5, "world_size": 1}]
    record = usage.accelerator_hours(before, starts, end=3600.5, use_gpu=True, cpus_per_worker=1)
    assert record["hours"] == 2.5 and record["workers"] == 1
    # A driver that trained nothing (a finished run rerun) keeps the total and the size.
    record = usage.accelerator_hours(before, [], end=10.0, use_gpu=True, cpus_per_worker=1)
    assert record == before
    # GPU- and CPU-hours are not added together.
    record = usage.accelerator_hours(before, [], end=10.0, use_gpu=False, cpus_per_worker=1)
    assert record["hours"] == 0 and record["kind"] == "cpu"


@pytest.mark.parametrize(
    "damaged",
    [
        None, "1.5", [1], {"kind": "tpu", "hours": 1, "per_worker": 1},
        {"kind": "gpu", "hours": float("nan"), "per_worker": 1},
        {"kind": "gpu", "hours": 1e300, "per_worker": 1},
        {"kind": "gpu", "hours": True, "per_worker": 1},
        {"kind": "gpu", "hours": 1, "per_worker": 0},
        {"kind": "gpu", "hours": 1, "per_worker": 1, "workers": -2},
    ],
)  # fmt: skip
def test_a_damaged_record_or_start_is_not_counted(damaged: object) -> None:
    assert usage.checked(damaged) is None
    starts = [
        {"time": "x", "world_size": 2}, {"time": 5.0, "world_size": 10**9}, "a string",
        {"time": 1e300, "world_size": 1}, {"time": 1.0, "world_size": True},
    ]  # fmt: skip
    record = usage.accelerator_hours(damaged, starts, end=100.0, use_gpu=True, cpus_per_worker=1)
    assert record == {"kind": "gpu", "hours": 0.0, "workers": None, "per_worker": 1.0}


@pytest.mark.parametrize("earlier", [None, "60", True, -5.0, float("nan"), 1e300, [60]])
def test_a_runs_time_adds_each_drivers_and_ignores_a_damaged_record(earlier: object) -> None:
    assert usage.run_seconds(120.0, 30.0) == 150.0  # a resumed run took both drivers' time
    assert usage.run_seconds(earlier, 30.0) == 30.0


def test_the_training_clock_is_the_floor_of_a_runs_time_and_hours() -> None:
    records = [{"run_time_s": 10.0}, {"run_time_s": float("nan")}, {}, {"run_time_s": -4}]
    assert usage.clock_seconds(records) == 10.0  # the newest figure that is one
    assert usage.clock_seconds([{"run_time_s": 1e300}, {"x": 1}]) == 0.0
    mine = {"kind": "gpu", "hours": 2.0, "workers": 4, "per_worker": 1.0}
    clock = {"kind": "gpu", "hours": 3.0, "workers": None, "per_worker": 1.0}
    assert usage.at_least(mine, clock) == {**mine, "hours": 3.0}  # workers kept
    assert usage.at_least(mine, {**clock, "hours": 1.0}) == mine
    assert usage.at_least(mine, {**clock, "kind": "cpu"}) == mine  # other units do not compare
    assert usage.at_least(mine, None) == mine


def test_a_damaged_tracking_record_leaves_no_tracker_run_to_close() -> None:
    for damaged in (["mlflow"], "mlflow", {"mlflow": "abc"}, 3):
        assert decisions.trackers_to_close({"status": "running", "tracking": damaged}) is None
    mixed = {"mlflow": {"run_id": "abc"}, "wandb": ["x"]}
    assert decisions.trackers_to_close({"status": "failed", "tracking": mixed}) == {
        "mlflow": {"run_id": "abc"}
    }


def test_a_run_whose_loss_went_nan_is_said_to_have_diverged_from_that_epoch() -> None:
    """A diverged run read `succeeded` with figures that stopped moving and nothing saying
    why (found by a red-team pass on sweeps). NaN is written as null in metrics.jsonl."""
    epochs = [
        {"epoch": 1, "train_loss": 2.3}, {"epoch": 2, "train_loss": None},
        {"epoch": 3, "train_loss": float("nan")}, {"epoch": 4, "train_loss": float("inf")},
    ]  # fmt: skip
    assert decisions.diverged_since(epochs) == 2
    assert decisions.diverged_line(2, lr=0.5) == (
        "training diverged: train_loss was not a finite number (NaN or infinite) from epoch 2 "
        "on; a lower TRAIN_LR (now 0.5) usually keeps it finite"
    )
    assert decisions.diverged_since([{"epoch": 1, "train_loss": 0.4}]) is None
    # Finite again at the end (a line restored without the figure, then trained on): no word.
    finite_again = [{"epoch": 1, "train_loss": None}, {"epoch": 2, "train_loss": 0.3}]
    assert decisions.diverged_since(finite_again) is None
    assert decisions.diverged_since([]) is None


def test_a_diverged_epoch_says_its_loss_is_not_finite_and_status_says_the_run_diverged(
    tmp_path: Path,
) -> None:
    """The epoch lines dropped the loss columns of a NaN epoch without a word, and nothing in
    summary.json or `status` kept the divergence (a red-team pass)."""
    from app.run import status as run_status
    from app.runfolder import folder as run_folder
    from app.runfolder.epoch_record import epoch_line

    line = epoch_line({"epoch": 2, "train_loss": None, "val_loss": None, "val_accuracy": 0.08}, 3)
    assert line.startswith("epoch 2/3  train_loss not finite  val_loss not finite  val_acc 8.00%")
    assert "not finite" not in epoch_line({"epoch": 2, "val_accuracy": 0.5}, 3)  # not recorded
    epochs = [{"epoch": 1, "train_loss": 2.3}, {"epoch": 2, "train_loss": None}]
    assert decisions.diverged_since(epochs) == 2
    summary = {"status": "succeeded", "run_name": "r", "diverged_since_epoch": 2}
    run_folder.write_summary(tmp_path / "r", summary)
    lines = run_status.read_run(tmp_path / "r").lines()
    assert "  diverged:        train_loss not a finite number from epoch 2 on" in "\n".join(lines)


JIT = {"reason": "stopped", "invocation": "me"}  # a just-in-time checkpoint of this driver's


@pytest.mark.parametrize(
    ("progress", "answer"),
    [
        ({}, None),  # nothing written yet
        # A just-in-time checkpoint of this stop, and one left by an earlier stop.
        ({"invocation": "me", "time": 20.0, "jit": {**JIT, "step": 7}}, "checkpoint"),
        ({"invocation": "me", "time": 5.0, "jit": {**JIT, "step": 7}}, None),
        ({"invocation": "me", "time": 20.0, "jit": {**JIT, "reason": "preemption"}}, None),
        # An earlier driver's, carried into this driver's progress writes: it answered this
        # stop with that stop's step (a red-team pass).
        ({"invocation": "me", "time": 20.0, "jit": {**JIT, "invocation": "before"}}, None),
        ({"invocation": "me", "time": 20.0, "jit": {"reason": "stopped", "step": 7}}, None),
        # The workers' loop had ended before the stop was asked (a Ctrl-C as the run ends):
        # found by a red-team pass, where the driver waited its full 60 s for a checkpoint.
        ({"invocation": "me", "time": 5.0, "trained_out": "me"}, "trained_out"),
        ({"invocation": "me", "time": 20.0, "trained_out": "an-earlier-driver"}, None),
        ({"invocation": "other", "time": 20.0, "trained_out": "other"}, None),
        # progress.json is the storage's: anything may be in it.
        ({"invocation": "me", "time": "soon", "jit": JIT}, None),
        ({"invocation": "me", "time": 20.0, "jit": ["stopped"]}, None),
    ],
)
def test_a_stop_is_answered_by_a_checkpoint_of_it_or_by_workers_done_training(
    progress: dict[str, object], answer: str | None
) -> None:
    from app.run.signals import stop_answer

    assert stop_answer(progress, "me", asked=10.0) == answer


def test_a_stop_asks_every_run_first_then_awaits_them_together(tmp_path: Path) -> None:
    """A stopped sweep's training trials, each asked for a just-in-time checkpoint, as a run's
    driver asks its own; before, a SIGTERM'd sweep asked none, and each trial resumed from its
    last committed checkpoint and trained the steps after it again (found by a red-team pass).
    The workers are played by what their rank 0 writes (app/training/loop.py): progress.json."""
    from app.run.signals import TRAINED_OUT, just_in_time_each
    from app.runfolder import folder as run_folder

    runs = []
    for name in ("checkpoints", "trained-out", "silent", "never-started"):
        run_dir = tmp_path / name
        run_dir.mkdir()
        if name != "never-started":
            run_folder.start_attempt(
                run_dir, invocation=name, start_epoch=1, world_size=2, restored_from=None
            )
        runs.append((run_dir, name))
    asked: list[str] = []

    def workers(invocation: str) -> None:
        asked.append(invocation)
        run_dir = tmp_path / invocation
        if invocation == "checkpoints":
            jit = {"reason": "stopped", "step": 412, "checkpoint_s": 1.5, "invocation": invocation}
            run_folder.write_progress(run_dir, invocation, epoch=3, step=412, jit=jit)
        elif invocation == "trained-out":
            run_folder.write_progress(run_dir, invocation, trained_out=invocation)

    began = time.monotonic()
    lines = just_in_time_each(runs, wait_s=2.0, ask=workers)
    assert asked == ["checkpoints", "trained-out", "silent"]  # each asked once, none twice
    assert lines == [
        "just-in-time checkpoint at step 412 in 1.5 s",
        TRAINED_OUT,
        "no just-in-time checkpoint within 2 s; the last committed one stays",
        "no just-in-time checkpoint (no worker had started training)",
    ]
    assert time.monotonic() - began < 60  # one shared wait, not one per run

    def gone(invocation: str) -> None:
        raise ConnectionError("the cluster is gone")

    said = just_in_time_each(runs[:1], wait_s=2.0, ask=gone)
    assert said == ["no just-in-time checkpoint (Ray is gone: ConnectionError)"]


THIS_DRIVER = decisions.AsTrained({"lr": 0.5, "use_gpu": True}, 4, True, 1.0)
RECORDED = {"settings": {"lr": 0.003, "use_gpu": False, "cpus_per_worker": 2}, "epochs_target": 6}


def test_a_rerun_that_trains_nothing_keeps_what_the_run_was_trained_with() -> None:
    """A finished run rerun with TRAIN_USE_GPU=true, TRAIN_LR=0.5 and fewer epochs (a red-team
    pass): its summary said it trained on GPUs at lr 0.5, and counted its hours as GPU-hours."""
    ran = decisions.as_trained(RECORDED, THIS_DRIVER, trained_now=False)
    assert ran == decisions.AsTrained(RECORDED["settings"], 6, False, 2.0)
    # A driver that trained records its own.
    assert decisions.as_trained(RECORDED, THIS_DRIVER, trained_now=True) == THIS_DRIVER


@pytest.mark.parametrize(
    "before",
    [
        {},
        {"settings": "lr=0.003"},
        {"settings": {}},
        {"settings": None, "epochs_target": 6},
    ],
)
def test_no_readable_record_of_the_settings_records_this_drivers(before: dict) -> None:
    assert decisions.as_trained(before, THIS_DRIVER, trained_now=False) == THIS_DRIVER


@pytest.mark.parametrize(
    ("target", "gpu", "cpus"),
    [("6", "false", "2"), (True, 0, float("nan")), (0, None, 0), (-1, [], 1e9)],
)
def test_recorded_values_no_driver_writes_are_replaced_by_this_drivers(
    target: object, gpu: object, cpus: object
) -> None:
    before = {
        "settings": {"lr": 0.003, "use_gpu": gpu, "cpus_per_worker": cpus},
        "epochs_target": target,
    }
    ran = decisions.as_trained(before, THIS_DRIVER, trained_now=False)
    assert ran == decisions.AsTrained(before["settings"], 4, True, 1.0)
