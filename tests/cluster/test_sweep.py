"""`trainctl tune` on the shared session cluster: ONE sweep, asserted on by every test here.

The sweep: digits, the cnn, four trials of two epochs on one worker each, two at a time, ASHA
(grace period 1, reduction factor 2), tracked to the real `mlflow server`. Its grid, drawn twice,
puts a learning rate that learns next to one that barely moves, so ASHA has something to stop.
The driver is killed outright (SIGKILL) once a trial has ended, then the sweep is rerun with the
same name; the rerun trains the trials that had not ended (resuming any that had checkpointed),
not the ended ones, and promotes the best. The sweep signs (TRAIN_SIGNING_KEY): each trial's
checkpoints are witnessed by its controller, on the head, as on Kubernetes, where only the head
holds the key; and as there, the head has no CPU free for the sweep (head_without_cpus).
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from app.runfolder.sweep_records import shown_value
from tests.support import (
    actor_nodes,
    explain,
    head_without_cpus,
    placement_group_cleaners,
    run_trainctl,
    start_trainctl,
    trainctl_env,
    wait_until,
    write_signing_key,
)

SWEEP = "nightly"
TRIALS = [f"trial-000{n}" for n in range(1, 5)]
EXPERIMENT = "trainctl-sweep-tests"
SPACE = "lr: {grid: [0.003, 0.00001]}\nweight_decay: {uniform: [0.0, 0.05]}\n"


@dataclass
class Sweep:
    tmp: Path
    sweep_dir: Path
    mlflow_uri: str
    finished_before_kill: list[str] = field(default_factory=list)
    attempts_before_kill: dict[str, int] = field(default_factory=dict)
    killed_code: int = 0
    rerun: subprocess.CompletedProcess[str] | None = None
    attempts_after: dict[str, int] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)
    cleaners_started: int = 0  # Ray Train's placement-group cleaners the rerun's trials started
    signing_key: Path | None = None
    trial_driver_nodes: list[str | None] = field(default_factory=list)  # Tune's trial actors' nodes
    checkpointed_before_rerun: list[str] = field(default_factory=list)  # holding a checkpoint
    head_node: str = ""


def _summary(trial_dir: Path) -> dict[str, Any]:
    from app.runfolder.folder import read_summary

    return read_summary(trial_dir) or {}


def _attempts(trial_dir: Path) -> int:
    """Driver starts of a trial: its logs/attempt-K folders (one per `run_training`)."""
    logs = trial_dir / "logs"
    return len(list(logs.glob("attempt-*"))) if logs.is_dir() else 0


def _finished(sweep_dir: Path) -> list[str]:
    """The trials that have ended: trained to the end, or stopped by ASHA."""
    ended = ("succeeded", "stopped")
    return [t for t in TRIALS if _summary(sweep_dir / "trials" / t).get("status") in ended]


@pytest.fixture(scope="module")
def sweep(
    ray_cluster: object, mlflow_server: Callable[[], str], tmp_path_factory: pytest.TempPathFactory
) -> Sweep:
    tmp = tmp_path_factory.mktemp("sweep")
    (tmp / "space.yaml").write_text(SPACE)
    env = trainctl_env(
        dataset="digits", model="cnn", epochs="2", num_workers="1", global_batch_size="64",
        data_path=str(tmp / "data"), storage_path=str(tmp / "runs"), run_name=SWEEP,
        ray_address=ray_cluster.address,  # type: ignore[attr-defined]
        tune_space=str(tmp / "space.yaml"), tune_samples="2", tune_concurrent="2",
        tune_reduction_factor="2", max_failures="0", signing_key=str(write_signing_key(tmp)),
    )  # fmt: skip
    uri = mlflow_server()
    env.update(MLFLOW_TRACKING_URI=uri, MLFLOW_EXPERIMENT_NAME=EXPERIMENT)
    run = Sweep(tmp, tmp / "runs" / SWEEP, uri, signing_key=Path(env["TRAIN_SIGNING_KEY"]))

    with head_without_cpus(ray_cluster):
        driver = start_trainctl("tune", env=env, cwd=tmp)
        try:
            wait_until(lambda: bool(_finished(run.sweep_dir)), timeout=900, what="an ended trial")
        finally:
            driver.send_signal(signal.SIGKILL)
            run.killed_code = driver.wait(timeout=60)
        run.finished_before_kill = _finished(run.sweep_dir)
        run.attempts_before_kill = {t: _attempts(run.sweep_dir / "trials" / t) for t in TRIALS}
        run.checkpointed_before_rerun = [
            t for t in TRIALS if list((run.sweep_dir / "trials" / t).glob("checkpoint_*/meta.json"))
        ]

        cleaners = placement_group_cleaners(ray_cluster)
        run.rerun = run_trainctl("tune", env=env, cwd=tmp, timeout=900)
        run.cleaners_started = placement_group_cleaners(ray_cluster) - cleaners
    run.attempts_after = {t: _attempts(run.sweep_dir / "trials" / t) for t in TRIALS}
    run.record = json.loads((run.sweep_dir / "sweep.json").read_text())
    # Tune's trial actors: a function trainable runs as ImplicitFunc (ray.tune's own name).
    run.trial_driver_nodes = actor_nodes(ray_cluster, "ImplicitFunc")
    run.head_node = ray_cluster.head_node.node_id  # type: ignore[attr-defined]
    return run


def _restarted(sweep: Sweep) -> list[str]:
    """The trials the rerun started a driver for: those the killed sweep left unended."""
    return [t for t in TRIALS if sweep.attempts_after[t] > sweep.attempts_before_kill[t]]


def test_the_killed_sweep_continues_without_retraining_finished_trials(sweep: Sweep) -> None:
    assert sweep.killed_code == -signal.SIGKILL
    assert sweep.rerun is not None and sweep.rerun.returncode == 0, explain(sweep.rerun)
    assert "Last result" not in sweep.rerun.stdout + sweep.rerun.stderr, explain(sweep.rerun)
    assert sweep.finished_before_kill
    restarted = _restarted(sweep)
    assert restarted, sweep.attempts_after  # the kill left work for the rerun
    # The rerun says how many of those it trains resume from their own checkpoints.
    resuming = len(set(restarted) & set(sweep.checkpointed_before_rerun))
    said = (
        f" to train ({resuming} resuming from their checkpoints) (" if resuming else " to train ("
    )
    assert said in sweep.rerun.stdout, explain(sweep.rerun)
    for trial in sweep.finished_before_kill:
        # Its one driver start: the rerun did not start it again.
        assert sweep.attempts_after[trial] == sweep.attempts_before_kill[trial] == 1, trial
    for trial in set(TRIALS) - set(restarted):
        assert sweep.attempts_after[trial] <= 1, trial  # never trained twice
    statuses = {row["trial"]: row["status"] for row in sweep.record["trials"]}
    assert sorted(statuses) == TRIALS
    assert set(statuses.values()) <= {"succeeded", "stopped"}, statuses
    assert sweep.record["status"] == "succeeded"
    # Progress, trial by trial: each epoch the rerun's trials reported, and how each ended;
    # a trial's first line names the values it drew.
    rows = {row["trial"]: row for row in sweep.record["trials"]}
    for trial in restarted:
        drawn = ", ".join(f"{k} {shown_value(v)}" for k, v in rows[trial]["values"].items())
        assert drawn.startswith("lr ") and "weight_decay " in drawn, drawn
        # Epoch 1, or only 2 where the killed sweep had checkpointed the trial's first epoch.
        assert f"trainctl: {trial} ({drawn}): epoch " in sweep.rerun.stdout, explain(sweep.rerun)
        ended = "stopped by asha after epoch" if statuses[trial] == "stopped" else "succeeded"
        assert f"trainctl: {trial}: {ended}" in sweep.rerun.stdout, explain(sweep.rerun)
    assert "Configuration for experiment" not in sweep.rerun.stdout  # Tune's banner
    assert "tensorboard --logdir" not in sweep.rerun.stdout  # into Ray's temporary folder


def test_each_trial_keeps_rays_placement_group_cleaner(sweep: Sweep) -> None:
    # A trial's training ends long before the sweep's job: Ray's cleaner frees its group
    # (app/run/job_trainer.py). A run alone goes without (tests/cluster/test_train.py).
    assert sweep.cleaners_started >= len(_restarted(sweep)) >= 1


def test_trial_drivers_run_on_the_head_and_witness_every_checkpoint(sweep: Sweep) -> None:
    """The head has no CPU free during the sweep, as on Kubernetes (num-cpus 0): the trials'
    drivers go there anyway, beside the key, and the workers (on the other nodes) never need
    it. (Asking for a hundredth of a CPU, as they did, put them on the GPU pods.)"""
    from app.export.signature import SIGNATURE_FILE
    from app.export.witness import unwitnessed
    from app.runfolder.checkpoints import recorded

    # (An actor the SIGKILL ended before Ray placed it ran nowhere: no node.)
    placed = {node for node in sweep.trial_driver_nodes if node is not None}
    assert placed == {sweep.head_node}, sweep.trial_driver_nodes
    statuses = {row["trial"]: row["status"] for row in sweep.record["trials"]}
    for trial in TRIALS:
        trial_dir = sweep.sweep_dir / "trials" / trial
        refs = recorded(trial_dir)
        assert refs, trial  # each trial ended with at least its first epoch's checkpoint
        assert unwitnessed(refs, sweep.signing_key) == [], trial
        # Only an epoch a stopped trial's workers trained after the verdict, as Tune ended its
        # controller before the witness, or one Ray committed as the SIGKILL ended the sweep
        # in a trial the rerun restarted (README "Signed exports"): set aside, with the reason.
        for aside in trial_dir.glob("corrupt_*"):
            interrupted = trial in _restarted(sweep)
            assert statuses[trial] == "stopped" or interrupted, (trial, aside.name)
            assert "no witness.sig" in (aside / "UNUSABLE.txt").read_text()
    best = sweep.sweep_dir / "trials" / sweep.record["best"]["trial"]
    assert (best / "export" / SIGNATURE_FILE).is_file()


def test_each_trial_is_a_normal_run_folder_and_stopped_trials_say_so(sweep: Sweep) -> None:
    for row in sweep.record["trials"]:
        trial_dir = sweep.sweep_dir / "trials" / row["trial"]
        summary = _summary(trial_dir)
        assert summary["status"] == row["status"], row
        assert summary["settings"]["lr"] == row["values"]["lr"]
        assert summary["run_dir"] == str(trial_dir)
        epochs = [json.loads(x) for x in (trial_dir / "metrics.jsonl").read_text().splitlines()]
        assert row["epochs"] == len(epochs) >= 1
        if row["status"] == "stopped":
            stop = sweep.record["stopped"][row["trial"]]["epoch"]
            # Its workers may finish the epoch they are in before the stop reaches them (Ray
            # Train's report returns before Tune has judged it): what they wrote is kept, and
            # the summary says so rather than contradict its own epoch count.
            assert 1 <= stop < 2 and len(epochs) >= stop
            said, last = f"asha after epoch {stop}", max(row["epoch"] for row in epochs)
            if last > stop:
                said += f"; epoch {last} had trained before the stop reached the workers"
            assert summary["stopped_by"] == said, summary
        else:
            assert len(epochs) == 2 and summary["epochs_completed"] == 2
        assert "promotion" not in summary or row["trial"] == sweep.record["best"]["trial"]


def test_sweep_records_table_and_plot(sweep: Sweep) -> None:
    lines = (sweep.sweep_dir / "trials.csv").read_text().splitlines()
    assert lines[0].startswith("trial,status,lr,weight_decay,epochs,final_val_accuracy")
    assert len(lines) == 1 + len(TRIALS)
    assert (sweep.sweep_dir / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    best = sweep.record["best"]
    scored = [r["best"] for r in sweep.record["trials"] if r["status"] == "succeeded"]
    assert best["best"] == max(scored) and best["values"]["lr"] == 0.003
    shown = run_trainctl("status", str(sweep.sweep_dir), env=trainctl_env(), cwd=sweep.tmp)
    assert shown.returncode == 0, explain(shown)
    assert f"best {best['trial']}" in shown.stdout and all(t in shown.stdout for t in TRIALS)


def test_the_sweeps_own_output_is_kept_in_its_folder(sweep: Sweep) -> None:
    """The sweep's console output (its trials, its best, the promotion) was on the terminal
    only (a red-team pass): each invocation's is in <sweep>/logs/attempt-K/driver.log, the
    killed one's included, and `trainctl logs` shows the newest."""
    logs = sweep.sweep_dir / "logs"
    assert sorted(p.name for p in logs.iterdir()) == ["attempt-1", "attempt-2"]
    killed = (logs / "attempt-1" / "driver.log").read_text()
    assert "=== sweep, attempt 1" in killed and f"sweep {SWEEP}: 4 trials, 0 done" in killed
    assert sweep.rerun is not None
    rerun = (logs / "attempt-2" / "driver.log").read_text()
    said = [line for line in sweep.rerun.stdout.splitlines() if line.startswith("trainctl: ")]
    assert said and all(line in rerun for line in said), (said, rerun[-3000:])
    shown = run_trainctl("logs", str(sweep.sweep_dir), env=trainctl_env(), cwd=sweep.tmp)
    assert shown.returncode == 0, explain(shown)
    assert "=== sweep, attempt 2" in shown.stdout and said[-1] in shown.stdout


def test_the_best_trial_is_promoted_once_for_the_sweep(sweep: Sweep) -> None:
    best = sweep.record["best"]["trial"]
    pointer = json.loads((sweep.tmp / "runs" / "champions" / "digits-cnn.json").read_text())
    assert pointer["run_dir"] == str(sweep.sweep_dir / "trials" / best)
    assert pointer["run_name"] == SWEEP
    # The first champion under this storage: the sweep's best beats chance, so it is promoted.
    assert sweep.record["promoted"] is True
    assert sweep.record["promotion"]["line"].startswith("promoted v1")
    promoted = [t for t in TRIALS if "promotion" in _summary(sweep.sweep_dir / "trials" / t)]
    assert promoted == [best]  # never one per trial
    # Its status reads the champion where the sweep promoted it, the sweep's storage: it said
    # "no champion digits-cnn under <sweep>/trials" (a red-team pass).
    trial = run_trainctl("status", str(sweep.sweep_dir / "trials" / best), env=trainctl_env(),
                         cwd=sweep.tmp)  # fmt: skip
    assert "promoted v1" in trial.stdout and "champion now" not in trial.stdout, explain(trial)
    assert "promoted v1" in sweep.rerun.stdout  # type: ignore[union-attr]
    # The best trial's figure as its own run's lines show figures: four places, not `.4g`.
    figure = sweep.record["best"]["best"]
    values = sweep.record["best"]["values"]
    drawn = f"lr {shown_value(values['lr'])}, weight_decay {shown_value(values['weight_decay'])}"
    said = f"best: {best} (val_accuracy {figure:.4f}) with {drawn}"  # what won, not only which
    assert said in sweep.rerun.stdout, sweep.rerun.stdout  # type: ignore[union-attr]


def test_mlflow_has_one_parent_run_with_a_child_per_trial(sweep: Sweep) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=sweep.mlflow_uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if r.data.tags.get("trainctl.kind") == "sweep"]
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.run_id == sweep.record["tracking"]["mlflow"]["run_id"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(r.info.run_name for r in children) == TRIALS
    assert parent.data.tags["trainctl.best_trial"] == sweep.record["best"]["trial"]
    assert parent.info.status == "FINISHED"
