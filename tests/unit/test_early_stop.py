"""Early stopping's decisions (app/training/early_stop.py), its settings (TRAIN_STOP_AT,
TRAIN_PATIENCE: app/settings/stopping.py), the driver's reading of a recorded stop
(app/run/decisions.py) and the worker plan that carries the rule to every rank."""

from __future__ import annotations

import math
import pickle
import subprocess
import sys
from pathlib import Path

import cloudpickle
import pytest

from app.data.schema import DatasetInfo
from app.errors import EXIT_INVALID
from app.run import decisions
from app.runfolder.checkpoints import CheckpointRef
from app.settings import TrainSettings
from app.settings.stopping import parse_stop_at
from app.training.early_stop import (
    Progress,
    Stop,
    after_epoch,
    recorded_stop,
    rule_of,
    still_holds,
)
from app.training.plan import PLAN_KEY, WorkerPlan
from tests.support import trainctl_env


def _settings(**values: object) -> TrainSettings:
    return TrainSettings(_env_file=None, **values)  # type: ignore[call-arg]


def _run(rule_settings: TrainSettings, figures: list[dict[str, float]]) -> tuple[int, Stop | None]:
    """Feed epochs 1.. to the rule, as the loop does; (epochs trained, the stop)."""
    rule, progress = rule_of(rule_settings), Progress()
    for epoch, metrics in enumerate(figures, start=1):
        progress, stop = after_epoch(rule, progress, epoch, rule_settings.epochs, metrics)
        if stop is not None:
            return epoch, stop
    return len(figures), None


ACC = [0.5, 0.8, 0.91, 0.95, 0.97, 0.97, 0.96]


def test_stop_at_ends_at_the_first_epoch_that_meets_every_term() -> None:
    settings = _settings(epochs=10, stop_at="val_accuracy>=0.95")
    epochs, stop = _run(settings, [{"val_accuracy": a, "val_loss": 1 - a} for a in ACC])
    assert (epochs, stop) == (4, Stop("stop_at", 4, "TRAIN_STOP_AT=val_accuracy>=0.95"))
    assert str(stop) == "stopped early at epoch 4: TRAIN_STOP_AT=val_accuracy>=0.95 met"
    # Both terms of an `and` must hold at the same epoch.
    both = _settings(epochs=10, stop_at="val_accuracy>=0.9 and val_loss<0.04")
    epochs, stop = _run(both, [{"val_accuracy": a, "val_loss": 1 - a} for a in ACC])
    assert (epochs, stop and stop.reason) == (5, "stop_at")
    # A threshold met exactly counts (>=), one above the best never does.
    exact = _settings(epochs=10, stop_at="val_accuracy>=0.97")
    assert _run(exact, [{"val_accuracy": a} for a in ACC])[0] == 5
    never = _settings(epochs=10, stop_at="val_accuracy>0.97")
    assert _run(never, [{"val_accuracy": a} for a in ACC]) == (len(ACC), None)


def test_the_target_epoch_is_never_an_early_stop() -> None:
    settings = _settings(epochs=3, stop_at="val_accuracy>=0.5", patience=1)
    rule = rule_of(settings)
    _, stop = after_epoch(rule, Progress(), 3, 3, {"val_accuracy": 0.99})
    assert stop is None


def test_patience_counts_epochs_without_strict_improvement_in_the_metrics_direction() -> None:
    settings = _settings(epochs=20, patience=2)
    # 0.97 at epoch 5, equal at 6 (no improvement), worse at 7: the second stale epoch stops.
    epochs, stop = _run(settings, [{"val_accuracy": a} for a in ACC])
    assert (epochs, stop) == (7, Stop("patience", 7, "TRAIN_PATIENCE=2 on val_accuracy"))
    # val_loss: lower is better.
    by_loss = _settings(epochs=20, patience=2, checkpoint_metric="val_loss")
    losses = [0.9, 0.5, 0.4, 0.45, 0.41, 0.3, 0.35]
    epochs, stop = _run(by_loss, [{"val_loss": v} for v in losses])
    assert (epochs, stop and stop.rule) == (5, "TRAIN_PATIENCE=2 on val_loss")
    # A NaN never improves: it counts as a stale epoch.
    epochs, stop = _run(settings, [{"val_accuracy": 0.5}, {"val_accuracy": math.nan}] * 2)
    assert (epochs, stop and stop.reason) == (3, "patience")


def test_off_by_default_and_progress_survives_a_checkpoint_round_trip() -> None:
    settings = _settings(epochs=5)
    assert not rule_of(settings).active
    assert _run(settings, [{"val_accuracy": 1.0}] * 5) == (5, None)
    progress, _ = after_epoch(rule_of(settings), Progress(), 1, 5, {"val_accuracy": 0.4})
    assert Progress.of(progress.record()) == progress == Progress(0.4, 1, 0)
    # A checkpoint written before early stopping existed, or a damaged value: a fresh start.
    assert Progress.of(None) == Progress.of({"best": float("nan")}) == Progress()


def test_a_recorded_stop_ends_a_rerun_only_while_its_rule_is_in_force() -> None:
    stopped = _settings(epochs=10, stop_at="val_accuracy>=0.95")
    stop = Stop("stop_at", 4, rule_of(stopped).text("stop_at"))
    ref = CheckpointRef(Path("/runs/r/checkpoint_epoch_0004"), 4, {}, stopped=stop.record())
    start = decisions.plan_start(ref, 10, rule_of(stopped))
    assert (start.kind, start.epochs_done, start.stopped) == ("finished", 4, stop)
    line = start.announcement("r", Path("/runs/r"), 10)
    assert "stopped early at epoch 4: TRAIN_STOP_AT=val_accuracy>=0.95 met" in line
    assert "nothing to train" in line and "Change TRAIN_STOP_AT to train on" in line
    # Another threshold, or none: the run trains on from its checkpoint.
    for other in (_settings(epochs=10, stop_at="val_accuracy>=0.99"), _settings(epochs=10)):
        assert decisions.plan_start(ref, 10, rule_of(other)).kind == "resume"
    assert still_holds(stop, rule_of(stopped)) and not still_holds(None, rule_of(stopped))


@pytest.mark.parametrize(
    "meta",
    [None, "stop", {}, {"reason": "bored", "epoch": 2, "rule": "x"},
     {"reason": "stop_at", "epoch": True, "rule": "x"},
     {"reason": "stop_at", "epoch": 0, "rule": "x"}, {"reason": "patience", "epoch": 2}],
)  # fmt: skip
def test_a_stop_record_not_shaped_as_a_run_writes_it_is_no_stop(meta: object) -> None:
    assert recorded_stop(meta) is None


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("val_acc>=0.9", "did you mean val_accuracy?"),
        ("epoch>=3", "training can stop on val_accuracy, val_loss, train_loss only"),
        ("beats_champion", "beats_champion is a promotion condition"),
        ("val_accuracy>=95%", "write 0.95"),
        ("val_accuracy>=1.5", "is a fraction from 0 to 1"),
        ("val_accuracy=>0.9", "'val_accuracy=>0.9': the operator is >=, not =>"),
    ],
)
def test_stop_at_refuses_nonsense_naming_what_is_allowed(text: str, says: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_stop_at(text)
    assert says in str(err.value) and "beats_champion or" not in str(err.value)


def test_check_refuses_bad_stopping_settings_with_exit_2_before_ray(tmp_path: Path) -> None:
    env = trainctl_env(
        stop_at="val_accuracy>=0.9 and lr<1", patience="10001", gpu_hour_price="-1",
        storage_path=str(tmp_path / "runs"), data_path=str(tmp_path / "data"),
    )  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "app", "check", "--skip-cluster"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode == EXIT_INVALID, out
    assert "TRAIN_STOP_AT='val_accuracy>=0.9 and lr<1': 'lr<1': training can stop on" in out
    assert "TRAIN_PATIENCE='10001': Input should be less than or equal to 10000" in out
    assert "TRAIN_GPU_HOUR_PRICE='-1': Input should be greater than or equal to 0" in out
    assert "Traceback" not in out and not (tmp_path / "runs").exists()


def test_the_worker_plan_is_frozen_and_pickles_for_ray() -> None:
    info = DatasetInfo(1, 8, 8, 10, 100, 20, "tensor", (0.5,), (0.25,))
    settings = _settings(stop_at="val_accuracy>=0.9", patience=3, storage_path="/tmp/x")
    plan = WorkerPlan(settings, info, invocation="abc", log_attempt=2)
    for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)):
        again = WorkerPlan.of(loads(dumps(plan.config())))
        assert again == plan and again.stop_rule == plan.stop_rule
        assert again.settings.stop_at == settings.stop_at
    with pytest.raises(AttributeError):
        plan.invocation = "other"  # type: ignore[misc]
    with pytest.raises(TypeError, match=PLAN_KEY):
        WorkerPlan.of({"settings": settings})


def test_check_says_the_rule_as_judged_and_warns_where_patience_can_never_stop() -> None:
    from app.preflight import Advice, Found, _stopping

    both = _settings(epochs=10, stop_at="val_accuracy>=0.9", patience=3)
    assert _stopping(both, Found()) == (
        "stop at the first epoch with val_accuracy>=0.9 or after 3 epoch(s) without a better "
        "val_accuracy (else at TRAIN_EPOCHS=10)"
    )
    assert _stopping(_settings(epochs=4), Found()) == "off (else at TRAIN_EPOCHS=4)"
    # Patience 3 can stop a 5-epoch run at epoch 4 at the earliest; 4 never can.
    assert _stopping(_settings(epochs=5, patience=3), Found()).startswith("after 3 epoch(s)")
    with pytest.raises(Advice, match="TRAIN_PATIENCE=4 cannot end a run of TRAIN_EPOCHS=5 early"):
        _stopping(_settings(epochs=5, patience=4), Found())
    with pytest.raises(Advice, match="use 0 for off"):
        _stopping(_settings(epochs=2, patience=1), Found())
