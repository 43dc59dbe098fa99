"""The search space and the trials drawn from it: pure, no Ray, no torch."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.errors import ConfigError
from app.runfolder.sweep_records import best_row, importance, table, trials_csv
from app.settings import TrainSettings
from app.settings.tune_plan import Trial, draw, trial_settings
from app.settings.tune_space import MAX_SPACE_BYTES, VARIABLE, load_space, parse_space
from tests.support import free_port

BASE = TrainSettings.model_validate({"num_workers": "2", "storage_path": "/store"})


def _refused(data: object, *needles: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_space(data, BASE)
    text = "\n".join(caught.value.problems)
    for needle in needles:
        assert needle in text, (needle, text)
    return caught.value.problems


def test_every_distribution_parses_with_the_settings_types() -> None:
    space = parse_space(
        {
            "lr": {"loguniform": ["1e-4", 0.1]},  # YAML 1.1 reads 1e-4 as a string
            "weight_decay": {"uniform": [0, 0.1]},
            "global_batch_size": {"randint": [32, 64]},
            "model": {"choice": ["cnn", "resnet18", "cnn"]},
            "augment": {"grid": ["crop", "none"]},
            "freeze": {"choice": ["none", "backbone"]},
        },
        BASE,
    )
    assert space["lr"].values == (1e-4, 0.1)
    assert space["global_batch_size"].values == (32, 64) and space["global_batch_size"].integer
    assert space["model"].values == ("cnn", "resnet18")  # duplicates once


def test_unknown_key_is_named_with_a_suggestion() -> None:
    problems = _refused({"lrr": {"uniform": [0, 1]}}, "lrr", "not a trainctl setting", "lr")
    assert len(problems) == 1


def test_a_range_torch_cannot_take_is_refused_with_the_settings_own_message() -> None:
    _refused({"lr": {"uniform": [0, 0.1]}}, "lr", "TRAIN_LR", "greater than 0")
    _refused({"weight_decay": {"uniform": [0, 5]}}, "weight_decay", "TRAIN_WEIGHT_DECAY")
    _refused({"lr": {"loguniform": [0, 0.1]}}, "lr", "0 < low")
    _refused({"global_batch_size": {"randint": [0, 8]}}, "global_batch_size")
    # Below the two workers of the base: the rule across settings, with its own message.
    _refused({"global_batch_size": {"choice": [1, 64]}}, "global_batch_size", "smaller than")
    _refused({"model": {"choice": ["cnn", "no_such_net"]}}, "model", "no_such_net")


def test_keys_a_trial_may_not_vary_and_bad_shapes_are_refused_all_at_once() -> None:
    problems = _refused(
        {
            "storage_path": {"choice": ["/a"]},
            "epochs": {"randint": [1, 3]},
            "freeze": {"uniform": [0, 1]},
            "lr": {"uniform": [0.1, 0.01]},
            "seed": {"grid": []},
            "amp": {"pick": ["off"]},
            "weight_decay": {"uniform": [0, "x"]},
            "vit_patch": 4,
        },
        "storage_path",
        "a trial may vary",
        "uniform is for numeric settings",
        "low <= high",
        "seed: grid is empty: list at least one value",  # it was "takes a list", of a list
        "'pick' is not a distribution",
        "two numbers",
        "one distribution",
    )
    assert len(problems) == 8
    _refused([], "must map settings")
    _refused({"lr": {"uniform": [float("nan"), 1]}}, "two numbers")
    assert "epochs" not in VARIABLE and "lr" in VARIABLE


def test_the_space_file_is_bounded_link_safe_and_yaml(tmp_path: Path) -> None:
    good = tmp_path / "space.yaml"
    good.write_text("lr: {loguniform: [1e-4, 1e-1]}\n")
    assert load_space(good, BASE)["lr"].kind == "loguniform"
    for text, needle in [
        ("lr: [unclosed", "not YAML"),
        ("# " + "x" * MAX_SPACE_BYTES, "larger than"),
        ("!!python/object:os.system {}", "not YAML"),  # safe_load: nothing that runs code
    ]:
        good.write_text(text)
        with pytest.raises(ConfigError, match=needle):
            load_space(good, BASE)
    link = tmp_path / "link.yaml"
    link.symlink_to(good)
    with pytest.raises(ConfigError, match="link"):
        load_space(link, BASE)
    with pytest.raises(ConfigError, match="no such file"):
        load_space(tmp_path / "absent.yaml", BASE)
    with pytest.raises(ConfigError, match="cannot hold a NUL byte"):  # it read "larger than"
        load_space(Path("a\x00b.yaml"), BASE)
    with pytest.raises(ConfigError) as forged:  # a newline in the path printed a second line
        load_space(tmp_path / "x\nFAKE ok line", BASE)
    assert "\n" not in str(forged.value) and "x\\nFAKE" in str(forged.value)


def test_trials_are_stable_in_range_and_more_samples_only_add() -> None:
    space = parse_space(
        {
            "lr": {"loguniform": [1e-4, 1e-1]},
            "global_batch_size": {"randint": [32, 40]},
            "augment": {"grid": ["crop", "none"]},
        },
        BASE,
    )
    four = draw(space, 2, seed=7, scheduler="asha")
    assert [t.trial_id for t in four] == [f"trial-000{n}" for n in range(1, 5)]
    assert [t.values["augment"] for t in four] == ["crop", "none", "crop", "none"]
    assert draw(space, 2, seed=7, scheduler="asha") == four  # a rerun draws the same
    assert draw(space, 3, seed=7, scheduler="asha")[:4] == four  # more samples: appended
    assert draw(space, 2, seed=8, scheduler="asha") != four
    for trial in four:
        assert 1e-4 <= trial.values["lr"] <= 1e-1
        assert isinstance(trial.values["global_batch_size"], int)
        assert 32 <= trial.values["global_batch_size"] <= 40
    assert len({t.values["lr"] for t in four}) == 4


def test_whole_numbers_past_a_floats_precision_stay_exact() -> None:
    """TRAIN_SEED goes up to 2^64 - 1: its values and range ends are drawn as written."""
    top = 2**64 - 1
    space = parse_space({"seed": {"randint": [2**60, f"{2**60 + 3}"]}}, BASE)
    assert space["seed"].values == (2**60, 2**60 + 3)
    seeds = {t.values["seed"] for t in draw(space, 40, seed=1, scheduler="asha")}
    assert seeds == set(range(2**60, 2**60 + 4))  # all four, none rounded onto another
    assert parse_space({"seed": {"choice": [top, top - 1]}}, BASE)["seed"].values == (top, top - 1)
    _refused({"seed": {"choice": [top + 1]}}, "seed", "TRAIN_SEED")


def test_grid_scheduler_enumerates_choices_and_bounds_the_total() -> None:
    space = parse_space(
        {"freeze": {"choice": ["none", "backbone"]}, "seed": {"grid": [1, 2]}}, BASE
    )
    grid = draw(space, 1, seed=0, scheduler="grid")
    assert sorted((t.values["freeze"], t.values["seed"]) for t in grid) == [
        ("backbone", 1), ("backbone", 2), ("none", 1), ("none", 2)
    ]  # fmt: skip
    wide = parse_space({"seed": {"grid": list(range(1000))}}, BASE)
    with pytest.raises(ConfigError) as refused:
        draw(wide, 11, seed=0, scheduler="asha")
    assert str(refused.value) == (
        "TRAIN_TUNE_SPACE: 1000 grid combinations x TRAIN_TUNE_SAMPLES=11 is over 10000 "
        "trials; list fewer values or draw fewer samples"
    )
    # A billion combinations are refused without being listed.
    thousand = [round(0.001 * i, 3) for i in range(1, 1001)]
    huge = parse_space(
        {"seed": {"grid": list(range(1000))}, "lr": {"grid": thousand},
         "weight_decay": {"grid": thousand}},
        BASE,
    )  # fmt: skip
    with pytest.raises(ConfigError, match="more than 10000 grid combinations x"):
        draw(huge, 1, seed=0, scheduler="asha")
    assert len(draw(wide, 10, seed=0, scheduler="asha")) == 10_000  # the limit itself is allowed


def test_the_grid_scheduler_over_ranges_only_is_refused_naming_them() -> None:
    """Every trial of a grid over ranges was a random draw, said nowhere."""
    space = parse_space({"lr": {"loguniform": [1e-4, 1e-1]}, "seed": {"randint": [0, 9]}}, BASE)
    with pytest.raises(ConfigError) as refused:
        draw(space, 4, seed=0, scheduler="grid")
    assert str(refused.value) == (
        "TRAIN_TUNE_SCHEDULER=grid lists every combination of the space's grid: and choice: "
        "keys, and TRAIN_TUNE_SPACE has none (lr: loguniform, seed: randint): list values "
        "with grid: or choice:, or set TRAIN_TUNE_SCHEDULER=random to draw each trial from the "
        "ranges"
    )
    assert len(draw(space, 4, seed=0, scheduler="random")) == 4  # what it was, said so


def test_a_trial_is_a_normal_run_in_the_sweeps_folder() -> None:
    trial = Trial(3, {"lr": 0.01})
    settings = trial_settings(BASE, trial, BASE.run_dir)
    assert settings.run_dir == Path("/store") / BASE.run_name / "trials" / "trial-0003"
    assert settings.lr == 0.01 and settings.epochs == BASE.epochs
    with pytest.raises(ConfigError, match="trial-0003"):
        trial_settings(BASE, Trial(3, {"global_batch_size": 1}), BASE.run_dir)


def _row(trial: str, status: str, best: float | None, lr: float) -> dict[str, object]:
    return {"trial": trial, "status": status, "values": {"lr": lr, "model": "cnn"},
            "epochs": 2, "final": best, "best": best, "duration_s": 3.0}  # fmt: skip


def test_best_is_the_best_trial_trained_to_the_end() -> None:
    rows = [
        _row("trial-0001", "succeeded", 0.8, 0.01),
        _row("trial-0002", "stopped", 0.95, 0.02),  # stopped early: not shipped
        _row("trial-0003", "succeeded", 0.9, 0.1),
        _row("trial-0004", "failed", None, 0.2),
    ]
    assert best_row(rows, "val_accuracy", 3)["trial"] == "trial-0003"  # type: ignore[index]
    assert best_row(rows, "val_loss", 3)["trial"] == "trial-0001"  # type: ignore[index]
    assert best_row(rows[1:2], "val_accuracy", 3) is None
    assert importance(rows)[0] == "lr"  # model never changes
    # A learning rate that decides everything, beside a weight decay that does not matter
    # (its every value distinct: grouping by value alone would call it decisive).
    swept = [
        {"trial": f"t{n}", "status": "succeeded", "best": best, "values": {"lr": lr, "wd": wd}}
        for n, (lr, wd, best) in enumerate(
            [(1e-5, 0.0024, 0.15), (3e-3, 0.0243, 0.89), (1e-5, 0.043, 0.13), (3e-3, 0.0486, 0.89)]
        )
    ]  # fmt: skip
    assert importance(swept) == ["lr", "wd"]
    text = trials_csv(rows, "val_accuracy")
    assert text.splitlines()[0].split(",") == [
        "trial", "status", "lr", "model", "epochs", "final_val_accuracy", "best_val_accuracy",
        "duration_s",
    ]  # fmt: skip
    assert len(text.splitlines()) == 5
    # A value as a spreadsheet would run it is written as text; a negative number stays one.
    odd = [{"trial": "t", "status": "succeeded", "epochs": 1, "final": 0.5, "best": 0.5,
            "duration_s": 1.0, "values": {"tag": "=1+1", "shift": -0.5}}]  # fmt: skip
    assert trials_csv(odd, "val_accuracy").splitlines()[1].startswith("t,succeeded,'=1+1,-0.5,")
    shown = table({"sweep": "s", "status": "succeeded", "metric": "val_accuracy", "trials": rows,
                   "best": rows[2]})  # fmt: skip
    lines = shown.splitlines()
    assert "best trial-0003" in lines[0]
    # Those it could ship first, best first; then the stopped one that scored higher (it headed
    # the table above the trial exported: found by a red-team pass), then the failed one.
    assert [line.split()[0] for line in lines[2:]] == [
        "trial-0003", "trial-0001", "trial-0002", "trial-0004"
    ]  # fmt: skip
    # The scheduler's stop in the words a run's status uses: bare "stopped" is SIGTERM's.
    assert lines[4].startswith("trial-0002  stopped early  "), lines[4]
    # Every figure with four decimals, as the epoch lines say them (0.4 stood beside 0.6167).
    assert lines[0].endswith("best trial-0003 (0.9000)"), lines[0]
    assert lines[2].split()[5:7] == ["0.9000", "0.9000"], lines[2]


def test_a_tie_for_best_is_said_with_the_trial_kept() -> None:
    """Two trials with the same best figure (common where the valid split is small): the first
    drawn was shipped, and the sweep's line named it alone."""
    from app.sweep.sweep import best_line

    rows = [
        _row("trial-0001", "succeeded", 0.8, 0.01),
        _row("trial-0002", "succeeded", 0.9, 0.02),
        _row("trial-0003", "stopped", 0.9, 0.03),  # stopped early: could not ship, no tie
        _row("trial-0004", "succeeded", 0.9, 0.04),
    ]
    best = best_row(rows, "val_accuracy", 3)
    assert best is not None and best["trial"] == "trial-0002"
    line = best_line({"trials": rows, "best": best}, "val_accuracy", 3)
    assert line == (
        "best: trial-0002 (val_accuracy 0.9000) with lr 0.02, model cnn; tied with trial-0004: "
        "the first drawn is kept"
    )
    alone = best_line({"trials": rows[:2], "best": best}, "val_accuracy", 3)
    assert alone == "best: trial-0002 (val_accuracy 0.9000) with lr 0.02, model cnn"


def test_a_trial_the_stop_reached_after_its_last_epoch_counts_as_trained_to_the_end() -> None:
    """With short epochs, a trial the scheduler stopped at its epoch-1 rung trained on to
    TRAIN_EPOCHS before the stop reached its workers, to the best figure of the sweep; the
    sweep shipped a worse trial, and the table listed the better one below it as if it could
    not be shipped (found by a red-team pass)."""
    rows = [
        _row("trial-0001", "succeeded", 0.86, 0.01),
        {**_row("trial-0003", "stopped", 0.93, 0.07), "epochs": 3},  # all 3 trained
        _row("trial-0002", "stopped", 0.99, 0.02),  # stopped at epoch 2 of 3: not shipped
    ]
    assert best_row(rows, "val_accuracy", 3)["trial"] == "trial-0003"  # type: ignore[index]
    assert best_row(rows, "val_accuracy", 4)["trial"] == "trial-0001"  # type: ignore[index]
    record = {"sweep": "s", "status": "succeeded", "metric": "val_accuracy", "epochs": 3,
              "trials": rows, "best": rows[1]}  # fmt: skip
    lines = table(record).splitlines()
    assert [line.split()[0] for line in lines[2:]] == ["trial-0003", "trial-0001", "trial-0002"]
    # A record another hand wrote, its epochs not a number: no trial stopped counts.
    for epochs in ("3", None, True, -1):
        assert table({**record, "epochs": epochs}).splitlines()[2].startswith("trial-0001")


def test_a_damaged_sweep_record_or_trial_is_rebuilt_from_the_trials_folders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from app.runfolder.folder import read_sweep, record_epoch
    from app.runfolder.sweep_records import trial_row
    from tests.promotion_support import make_run

    sweep_dir = tmp_path / "sweep"
    (sweep_dir / "trials" / "trial-0001").mkdir(parents=True)
    (sweep_dir / "sweep.json").write_bytes(b"\x00{not json")
    assert read_sweep(sweep_dir) is None
    assert "damaged" in capsys.readouterr().out
    trial = Trial(1, {"lr": 0.01})
    folder = sweep_dir / "trials" / "trial-0001"
    assert trial_row(sweep_dir, trial, "val_accuracy", {})["status"] == "pending"
    make_run(sweep_dir / "trials", "trial-0001", 0.5)  # its epoch-1 checkpoint
    record_epoch(folder, {"epoch": 1, "train_loss": 1.0, "val_loss": 1.0, "val_accuracy": 0.5})
    (folder / "summary.json").write_text('{"status": "succ')  # cut short by a full disk
    row = trial_row(sweep_dir, trial, "val_accuracy", {})
    # Not finished as far as anyone can tell: trained again, from its own checkpoints.
    assert row["status"] == "interrupted" and row["epochs"] == 1 and row["best"] == 0.5
    # The best is the checkpoints' (what promotion exports and reads), not metrics.jsonl's: an
    # edited line made a worse trial the sweep's best, exported and judged instead.
    record_epoch(folder, {"epoch": 1, "train_loss": 1.0, "val_loss": 1.0, "val_accuracy": 0.999})
    row = trial_row(sweep_dir, trial, "val_accuracy", {})
    assert (row["final"], row["best"]) == (0.999, 0.5)
    stopped = trial_row(sweep_dir, trial, "val_accuracy", {"trial-0001": {"epoch": 1}})
    assert stopped["status"] == "stopped"


def test_asha_stops_behind_a_rung_but_never_at_the_last_epoch() -> None:
    """A rung at TRAIN_EPOCHS saves no training; its stop killed the trial's driver before it
    wrote the run's end, leaving the trial "running" and the sweep incomplete."""
    from types import SimpleNamespace

    from ray.tune.schedulers import TrialScheduler

    from app.sweep.sweep import _scheduler

    judged: dict[str, int] = {}

    def decisions(epochs: int) -> list[str]:
        settings = TrainSettings(epochs=epochs, tune_grace_period=1, tune_reduction_factor=2)
        scheduler = _scheduler(settings, judged)
        scheduler.set_search_properties("val_accuracy", "max")
        ahead = SimpleNamespace(trial_id="a", config={"trial": "trial-0001"})
        behind = SimpleNamespace(trial_id="b", config={"trial": "trial-0002"})
        for trial in (ahead, behind):
            scheduler.on_trial_add(None, trial)
        first = scheduler.on_trial_result(None, ahead, {"epoch": 1, "val_accuracy": 0.9})
        second = scheduler.on_trial_result(None, behind, {"epoch": 1, "val_accuracy": 0.1})
        return [first, second]

    continue_, stop = TrialScheduler.CONTINUE, TrialScheduler.STOP
    assert decisions(epochs=1) == [continue_, continue_]  # epoch 1 is the last: it ends itself
    assert judged == {}
    assert decisions(epochs=4) == [continue_, stop]  # epoch 1 is a rung before the last
    assert judged == {"trial-0002": 1}  # the verdict the sweep records a stop by


def test_a_trial_tune_ends_as_the_sweep_stops_is_not_recorded_as_stopped(tmp_path: Path) -> None:
    """Tune ends the running trials as a stopped sweep unwinds: they were recorded stopped by
    ASHA, never trained again, and the sweep said so against trials.csv (a red-team pass).
    Only a trial the scheduler stopped is."""
    from app.runfolder.folder import record_epoch
    from app.sweep.sweep import _Sweep

    settings = TrainSettings(
        _env_file=None, storage_path=tmp_path / "runs", run_name="nightly", epochs=3
    )  # fmt: skip
    trials = [Trial(1, {"lr": 0.01}), Trial(2, {"lr": 0.1})]
    for trial in trials:
        folder = settings.run_dir / "trials" / trial.trial_id
        folder.mkdir(parents=True)
        (folder / "summary.json").write_text('{"status": "running"}')
        record_epoch(folder, {"epoch": 1, "train_loss": 1.0, "val_loss": 1.0, "val_accuracy": 0.5})
    sweep = _Sweep(settings, {}, trials, {}, {})
    sweep.judged["trial-0002"] = 1  # ASHA's verdict at epoch 1
    for trial in trials:
        sweep.trial_ended(trial.trial_id, {"epoch": 1}, error=False)
    assert list(sweep.stopped) == ["trial-0002"]
    statuses = {row["trial"]: row["status"] for row in sweep.rows()}
    assert statuses == {"trial-0001": "running", "trial-0002": "stopped"}


def test_a_sweep_stopped_by_ctrl_c_or_sigterm_says_its_folder_is_consistent(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C ended with only `trainctl: interrupted`, where SIGTERM said the folder was
    consistent and a rerun continues (found by a red-team pass)."""
    from types import SimpleNamespace

    from app.run import signals
    from app.sweep import sweep as sweep_module

    recorded: list[str] = []
    record = SimpleNamespace(
        write=recorded.append,
        parent=SimpleNamespace(finish=lambda *_: recorded.append("closed")),
        interrupt_running=lambda why: recorded.append(why),
        checkpoint_training=lambda: recorded.append("just-in-time checkpoints asked"),
    )

    def pressed(*_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_module, "_tune", pressed)
    with pytest.raises(KeyboardInterrupt):
        sweep_module._tune_until_sigterm(BASE, record, [], {}, None)  # type: ignore[arg-type]
    said = capsys.readouterr().out
    assert f"stopped by Ctrl-C; sweep folder {BASE.run_dir} is consistent: rerun" in said
    assert recorded == [
        "the sweep was stopped by Ctrl-C; rerun the sweep to go on",
        "interrupted",
        "closed",
    ]

    def terminated(*_: object) -> None:  # as SIGTERM's handler does inside the sweep
        signals.SIGTERM_SEEN.set()
        raise signals.StopForSigterm("SIGTERM")

    monkeypatch.setattr(sweep_module, "_tune", terminated)
    recorded.clear()
    try:
        with pytest.raises(sweep_module.Interrupted, match="stopped by SIGTERM; sweep folder"):
            sweep_module._tune_until_sigterm(BASE, record, [], {}, None)  # type: ignore[arg-type]
    finally:
        signals.SIGTERM_SEEN.clear()
    # SIGTERM (an evicted head) asks the training trials for just-in-time checkpoints first,
    # as a run's driver does; a trial resumed from its last committed one (a red-team pass).
    assert recorded == [
        "just-in-time checkpoints asked",
        "the sweep was stopped by SIGTERM; rerun the sweep to go on",
        "interrupted",
        "closed",
    ]


def test_a_stopped_trial_records_the_settings_and_hours_it_trained_with(tmp_path: Path) -> None:
    """`auto` resolved as the finished trials' drivers record it: compare showed `amp auto`
    beside `off` as a difference between trials that was none, and derived hours several times
    over from wall time (found by a red-team pass)."""
    import json

    from app.runfolder.folder import record_epoch
    from app.sweep.ship import mark_stopped
    from tests.promotion_support import INFO, make_run, settings_for

    run_dir = make_run(tmp_path, "trial-0002", 0.5)
    # Its training clock: 1.5 hours of worker time by the epoch the scheduler stopped it at.
    record_epoch(run_dir, {"epoch": 1, "train_loss": 1.0, "val_loss": 1.0, "val_accuracy": 0.5,
                           "worker_time_s": 5400.0})  # fmt: skip
    trial = settings_for(tmp_path, "trial-0002")
    assert trial.amp == "auto" and trial.compile == "auto"
    mark_stopped(trial, {"epoch": 1, "time_s": 2.5}, INFO)
    summary = json.loads((tmp_path / "trial-0002" / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["stopped_by"].endswith("after epoch 1")
    assert (summary["settings"]["amp"], summary["settings"]["compile"]) == ("off", "off")
    # ... and its accelerator-hours (none were recorded: compare then derived wall time x
    # workers, several times over; found by a red-team pass).
    assert summary["accelerator_hours"] == {"kind": "cpu", "hours": 1.5, "workers": None,
                                            "per_worker": 1.0}  # fmt: skip


def test_a_trial_that_trained_past_its_rung_says_which_epoch_the_stop_reached(
    tmp_path: Path,
) -> None:
    """Ray Train's report returns before Tune has judged it, so a trial stopped at its epoch-1
    rung may hold epoch 2: its summary said "after epoch 1" beside two epochs (found in review)."""
    import json

    from app.runfolder.folder import record_epoch
    from app.sweep.ship import mark_stopped
    from tests.promotion_support import INFO, make_run, settings_for

    for epoch in (1, 2):
        run_dir = make_run(tmp_path, "trial-0003", 0.5, epoch=epoch)
        record_epoch(run_dir, {"epoch": epoch, "train_loss": 1.0, "val_loss": 1.0,
                               "val_accuracy": 0.5})  # fmt: skip
    mark_stopped(settings_for(tmp_path, "trial-0003"), {"epoch": 1, "time_s": 2.5}, INFO)
    summary = json.loads((tmp_path / "trial-0003" / "summary.json").read_text())
    assert summary["stopped_by"] == (
        "asha after epoch 1; epoch 2 had trained before the stop reached the workers"
    )
    assert summary["epochs_completed"] == 2


def test_a_stopped_trial_whose_last_epoch_has_no_line_gets_it_from_its_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tune's stop ended the workers between epoch 3's checkpoint and its metrics line: the
    trial's metrics.jsonl said two epochs, its summary and checkpoints three, and `status` put
    epoch 2's figure beside epoch 3's (found by a red-team pass)."""
    import json

    from app.runfolder.folder import epochs, record_epoch
    from app.sweep.ship import mark_stopped
    from tests.promotion_support import INFO, make_run, settings_for

    for epoch, accuracy in ((1, 0.3), (2, 0.66), (3, 0.93)):
        run_dir = make_run(tmp_path, "trial-0003", accuracy, epoch=epoch)
        if epoch < 3:
            record_epoch(run_dir, {"epoch": epoch, "train_loss": 1.0, "val_loss": 1.0,
                                   "val_accuracy": accuracy})  # fmt: skip
    mark_stopped(settings_for(tmp_path, "trial-0003"), {"epoch": 1, "time_s": 2.5}, INFO)
    lines = epochs(run_dir)
    assert [(r["epoch"], r["val_accuracy"]) for r in lines] == [(1, 0.3), (2, 0.66), (3, 0.93)]
    assert lines[-1]["restored_from"] == "checkpoint_epoch_0003"
    assert "trial-0003: epoch 3 had no line in metrics.jsonl" in capsys.readouterr().out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["epochs_completed"] == 3
    assert summary["stopped_by"].endswith("epoch 3 had trained before the stop reached the workers")


def test_tunes_progress_printer_is_silenced_where_it_printed_raw_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A resumed sweep printed Tune's raw "Trial run_trial_... completed. Last result: " for a
    trial that ended without a new result, whatever `verbose` said (found in review)."""
    from ray.tune.progress_reporter import TrialProgressCallback

    from app.sweep.sweep import _quiet_progress

    class Trial:  # what the printer reads of a trial restored from the sweep's experiment
        def __init__(self) -> None:
            self.last_result: dict[str, object] = {}

        def __str__(self) -> str:
            return "run_trial_8c1f2_00001"

    TrialProgressCallback().on_trial_complete(0, [], Trial())
    assert "completed. Last result" in capsys.readouterr().out  # Ray's own printer does
    quiet = _quiet_progress()
    assert isinstance(quiet, TrialProgressCallback)  # so Tune adds no printer of its own
    quiet.on_trial_complete(0, [], Trial())
    assert capsys.readouterr().out == ""


def test_trials_at_once_are_what_the_cluster_holds_said_with_why() -> None:
    from app.sweep_capacity import trials_at_once

    # 2 workers x 1 CPU per trial; 2 of the cluster's CPUs are kept for Ray Data's reads.
    fits, why = trials_at_once(BASE, {"CPU": 11.0}, todo=8, head_memory=None)
    assert fits == 4
    assert why == (
        "a trial holds 2 workers x 1 CPU; the cluster has 11 CPUs, 2 kept for reading data, "
        "and 0 GPUs; TRAIN_TUNE_CONCURRENT sets it"
    )
    assert trials_at_once(BASE, {"CPU": 11.0}, todo=3, head_memory=None)[0] == 3  # no more
    assert trials_at_once(BASE, {"CPU": 3.0}, todo=3, head_memory=None)[0] == 1  # always one
    # A data pool's 16 CPUs (2 nodes of 8) are the cluster's too, but no training worker's: 3
    # training CPUs hold one trial, not 8 (a red-team pass), and the data is read there.
    fits, why = trials_at_once(BASE, {"CPU": 19.0}, todo=8, head_memory=None, pool_cpus=16.0)
    assert fits == 1 and "the cluster has 19 CPUs, 16 on the data pool for reading data" in why
    gpu = BASE.model_copy(update={"use_gpu": True})
    fits, why = trials_at_once(gpu, {"CPU": 64.0, "GPU": 5.0}, todo=8, head_memory=None)
    assert fits == 2 and "a trial holds 2 workers x 1 GPU" in why and "5 GPUs" in why


def test_trials_at_once_are_bounded_by_what_the_heads_memory_holds() -> None:
    """Each trial's driver and Ray Train controller run on the head: with concurrent 0, a
    sweep counted only the GPU pods, and a small head could be handed more trials than its
    memory holds, to be killed for memory with the whole sweep on it."""
    from app.sweep_capacity import GIB, trials_at_once, trials_on_head

    gpu = BASE.model_copy(update={"use_gpu": True})
    resources = {"CPU": 512.0, "GPU": 64.0}
    fits, why = trials_at_once(gpu, resources, todo=40, head_memory=5.6 * GIB)
    assert fits == trials_on_head(5.6 * GIB) == 3
    assert "the head's 5.6 GiB of memory holds 3 trials at once" in why, why
    assert why.endswith("TRAIN_TUNE_CONCURRENT sets it")
    roomy = trials_at_once(gpu, resources, todo=40, head_memory=200 * GIB)
    assert roomy[0] == 32 and "head" not in roomy[1]  # the GPUs bound it there
    assert trials_on_head(0.5 * GIB) == 1  # always one
    assert trials_on_head(None) is None
    # Set by hand: kept, with a warning naming what to raise.
    asked = gpu.model_copy(update={"tune_concurrent": 8})
    fits, why = trials_at_once(asked, resources, todo=40, head_memory=5.6 * GIB)
    assert fits == 8 and why.startswith("TRAIN_TUNE_CONCURRENT; warning: the head's 5.6 GiB")
    assert why.endswith("raise head.memory"), why
    assert trials_at_once(asked, resources, todo=40, head_memory=None) == (
        8,
        "TRAIN_TUNE_CONCURRENT",
    )


def test_more_trials_at_once_than_the_cluster_holds_are_kept_with_a_warning() -> None:
    """TRAIN_TUNE_CONCURRENT=8 on a cluster that holds 2 trials said "8 trials at a time"; Tune
    then ran 2 and queued the rest, said nowhere (a red-team pass). The CPUs kept for reading
    data are no reservation: trials may take them (the warning said 1 where 2 ran, a second
    pass), so the warning counts every CPU but a data pool's."""
    from app.sweep_capacity import trials_at_once

    asked = BASE.model_copy(update={"tune_concurrent": 8})
    fits, why = trials_at_once(asked, {"CPU": 7.0}, todo=8, head_memory=None)
    assert fits == 8
    assert why == (
        "TRAIN_TUNE_CONCURRENT; warning: the cluster's 7 CPUs for training hold 3 trials of 2 "
        "workers x 1 CPU at once: the others wait for one to end"
    )
    fits, why = trials_at_once(asked, {"CPU": 23.0}, todo=8, head_memory=None, pool_cpus=16.0)
    assert "the cluster's 7 CPUs for training hold 3 trials" in why, why  # not the pool's
    gpu = asked.model_copy(update={"use_gpu": True})
    fits, why = trials_at_once(gpu, {"CPU": 64.0, "GPU": 4.0}, todo=8, head_memory=None)
    assert why.endswith("the cluster's 4 GPUs hold 2 trials of 2 workers x 1 GPU at once: "
                        "the others wait for one to end"), why  # fmt: skip
    # Within its room: no warning. Above the trials left: lowered to them, and said.
    assert trials_at_once(asked, {"CPU": 16.0}, todo=8, head_memory=None) == (
        8, "TRAIN_TUNE_CONCURRENT"
    )  # fmt: skip
    assert trials_at_once(asked, {"CPU": 7.0}, todo=2, head_memory=None) == (
        2, "TRAIN_TUNE_CONCURRENT=8, for the 2 trials left to train"
    )  # fmt: skip


def test_the_sweep_plot_marks_the_trial_it_ships(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sweep.png coloured trials by status only: the one exported was not told from another
    succeeded trial near it. Matplotlib draws for real; its annotations are recorded."""
    from matplotlib.axes import Axes

    from app.runfolder.sweep_records import plot

    named: list[str] = []
    real = Axes.annotate

    def annotate(self: Axes, text: str, *args: object, **kwargs: object) -> object:
        named.append(text)
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(Axes, "annotate", annotate)
    trials = [
        {"trial": f"trial-000{n}", "status": status, "best": best, "values": {"lr": lr}}
        for n, status, best, lr in [
            (1, "succeeded", 0.80, 1e-3), (2, "succeeded", 0.90, 3e-3), (3, "stopped", 0.95, 1e-1)
        ]
    ]  # fmt: skip
    record = {"sweep": "s", "metric": "val_accuracy", "trials": trials,
              "best": {"trial": "trial-0002"}}  # fmt: skip
    path = plot(tmp_path, record, {"lr": "loguniform"})
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert named == ["trial-0002"]  # the shipped trial, not the stopped one that scored higher


@pytest.mark.parametrize(
    "tracking",
    [["mlflow"], "mlflow", {"mlflow": "run-1"}, {"mlflow": {"run_id": ["run-1"]}}, None, 7],
)
def test_a_trials_damaged_tracking_record_names_no_run_to_adopt(
    tmp_path: Path, tracking: object
) -> None:
    """A trial's summary.json has many writers: a tracking record of another shape gave the
    sweep's row a list or text where the parent run looks up each trial's MLflow run, and the
    sweep ended in an internal error."""
    import json

    from app.runfolder.folder import mlflow_run_id
    from app.runfolder.sweep_records import trial_row

    folder = tmp_path / "sweep" / "trials" / "trial-0001"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({"status": "running", "tracking": tracking}))
    row = trial_row(tmp_path / "sweep", Trial(1, {"lr": 0.01}), "val_accuracy", {})
    assert isinstance(row["tracking"], dict)
    assert mlflow_run_id(row["tracking"]) is None


def test_a_trials_tracking_record_keeps_each_tracker_run(tmp_path: Path) -> None:
    import json

    from app.runfolder.folder import mlflow_run_id
    from app.runfolder.sweep_records import trial_row

    folder = tmp_path / "sweep" / "trials" / "trial-0001"
    folder.mkdir(parents=True)
    ids = {"mlflow": {"run_id": "run-1"}, "tensorboard": {"log_dir": "tb"}, "wandb": "x"}
    (folder / "summary.json").write_text(json.dumps({"status": "running", "tracking": ids}))
    row = trial_row(tmp_path / "sweep", Trial(1, {"lr": 0.01}), "val_accuracy", {})
    assert row["tracking"] == {"mlflow": {"run_id": "run-1"}, "tensorboard": {"log_dir": "tb"}}
    assert mlflow_run_id(row["tracking"]) == "run-1"


def test_a_stop_record_of_another_type_is_not_quoted_or_read_as_a_time(tmp_path: Path) -> None:
    """sweep.json's `stopped` has many writers: a stop time that was text ended the sweep in
    an internal error (float('soon')), and an epoch that was a list was quoted into the trial's
    summary."""
    import json

    from app.runfolder.folder import record_epoch
    from app.runfolder.sweep_records import stopped_by
    from app.sweep.ship import mark_stopped
    from tests.promotion_support import INFO, make_run, settings_for

    assert stopped_by("asha", [1, 2], 2) == stopped_by("asha", True, 2) == "asha"
    assert stopped_by("asha", 1, 1) == "asha after epoch 1"
    run_dir = make_run(tmp_path, "trial-0004", 0.5)
    record_epoch(run_dir, {"epoch": 1, "train_loss": 1.0, "val_loss": 1.0, "val_accuracy": 0.5})
    mark_stopped(settings_for(tmp_path, "trial-0004"), {"epoch": ["x"], "time_s": "soon"}, INFO)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped_by"] == "asha" and summary["duration_s"] == 0.0


@pytest.mark.parametrize("status", [["succeeded"], {"s": 1}, "done!", 3, None])
def test_a_trials_status_of_another_kind_trains_it_on(tmp_path: Path, status: object) -> None:
    """A trial whose summary.json says no status a trial has is trained on from its own
    checkpoints, and its row carries no list or object where the table and plot read text."""
    import json

    from app.runfolder.folder import record_epoch
    from app.runfolder.sweep_records import DONE, trial_row

    folder = tmp_path / "sweep" / "trials" / "trial-0001"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({"status": status, "duration_s": [1]}))
    trial = Trial(1, {"lr": 0.01})
    row = trial_row(tmp_path / "sweep", trial, "val_accuracy", {})
    assert (row["status"], row["duration_s"]) == ("pending", None)
    record_epoch(folder, {"epoch": 1, "train_loss": 1.0, "val_loss": 1.0, "val_accuracy": 0.5})
    row = trial_row(tmp_path / "sweep", trial, "val_accuracy", {})
    assert row["status"] == "interrupted" and row["status"] not in DONE


def test_the_trials_training_when_the_sweep_stops_say_interrupted(tmp_path: Path) -> None:
    """After Ctrl-C, the trial that was training said `running` for good: in its summary,
    sweep.json, trials.csv and `status` (found by a red-team pass). Its driver ends with the
    sweep's Ray job before it can say so: the sweep says it for it."""
    import json

    from app.runfolder.folder import read_summary
    from app.runfolder.sweep_records import trial_row
    from app.sweep.sweep import _Sweep

    settings = TrainSettings.model_validate(
        {"storage_path": str(tmp_path), "run_name": "nightly", "epochs": 2}
    )
    trials = [Trial(1, {"lr": 0.01}), Trial(2, {"lr": 0.02}), Trial(3, {"lr": 0.03})]
    for trial, status in zip(trials, ("succeeded", "running", None), strict=True):
        folder = settings.run_dir / "trials" / trial.trial_id
        folder.mkdir(parents=True)
        if status:
            (folder / "summary.json").write_text(json.dumps({"status": status}))
    sweep = _Sweep(settings, {}, trials, {}, {})
    sweep.interrupt_running("the sweep was stopped by Ctrl-C; rerun the sweep to go on")
    rows = [trial_row(settings.run_dir, t, "val_accuracy", {}) for t in trials]
    assert [r["status"] for r in rows] == ["succeeded", "interrupted", "pending"]
    summary = read_summary(settings.run_dir / "trials" / "trial-0002")
    assert summary is not None and "stopped by Ctrl-C" in summary["error"]


def test_yaml_merge_keys_are_read_as_yaml_reads_them(tmp_path: Path) -> None:
    """`<<: *shared`, YAML's merge: PyYAML's raw "could not determine a constructor for the tag
    'tag:yaml.org,2002:merge'" came back as "not YAML" (a red-team pass)."""
    space = tmp_path / "space.yaml"
    space.write_text("lr: &rates {grid: [0.1, 0.01]}\nweight_decay:\n  <<: {uniform: [0.0, 0.1]}\n")
    loaded = load_space(space, BASE)
    assert (loaded["lr"].kind, loaded["weight_decay"].kind) == ("grid", "uniform")
    space.write_text("lr: {uniform: [0.1, 0.2]}\nweight_decay: {<<: {grid: [0.1]}, grid: [0.2]}\n")
    assert load_space(space, BASE)["weight_decay"].values == (0.2,)  # given here overrides merged


def test_a_trial_refused_before_its_first_start_is_recorded_and_said_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trial whose own settings failed `train`'s checks inside Tune had no folder yet: it
    read `pending`, and the sweep said to rerun it to resume (a red-team pass). Its folder is
    the sweep's, so the refusal is recorded there, and the sweep names it, with its reason."""
    from app.runfolder.sweep_records import trial_row
    from app.sweep.sweep import _failed_line
    from app.sweep.trial import run_trial

    sweep_dir = tmp_path / "runs" / "nightly"
    trial = Trial(2, {"lr": 0.01})
    settings = TrainSettings(
        dataset="folder", data_path=tmp_path / "no-images", storage_path=sweep_dir / "trials",
        run_name=trial.trial_id,
    )  # fmt: skip
    # A tracker down since the sweep checked it is retried as a run's is, not a refusal: a
    # server down mid-sweep made every later trial `invalid` (a red-team pass).
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")
    with pytest.raises(ConfigError) as refused:
        run_trial(
            {"trial": trial.trial_id},
            {trial.trial_id: settings},
            env={},
            pinned=None,
            group_cleaner=False,
        )
    assert not any("MLflow" in problem for problem in refused.value.problems), refused.value
    row = trial_row(sweep_dir, trial, "val_accuracy", {})
    assert row["status"] == "invalid", row
    said = "; ".join(refused.value.problems)  # cut to one line of 300 characters in the row
    assert row["error"] and said.startswith(row["error"].removesuffix("...")), row["error"]
    assert str(tmp_path / "no-images") in row["error"]
    assert _failed_line(row) == f"trial-0002 invalid: {row['error']}"
    # A trial folder that is not the sweep's own is still left as found by `train`'s refusal.
    from app.preflight import preflight_for_training

    elsewhere = settings.model_copy(update={"run_name": "typo"})
    with pytest.raises(ConfigError):
        preflight_for_training(elsewhere)
    assert not (sweep_dir / "trials" / "typo").exists()


def test_an_incomplete_sweep_judges_its_best_then_exits_1_naming_each_trial_left(
    tmp_path: Path,
) -> None:
    """A sweep whose Tune run ended with a trial refused said "rerun to resume" and exited 0
    (a red-team pass): a RayJob read it as done and nothing retried. Now its best is still
    judged, and the sweep ends with exit 1 and why, each trial left named."""
    import json

    from app.errors import RunFailed
    from app.runfolder.folder import read_sweep
    from app.settings.tune_plan import trial_settings
    from app.sweep.sweep import _conclude, _Sweep
    from tests.promotion_support import INFO, make_run, settings_for

    space_file = tmp_path / "space.yaml"
    space_file.write_text("lr: {grid: [0.01, 0.1, 0.2]}\n")
    settings = settings_for(tmp_path / "runs", "nightly", tune_space=space_file)
    space = load_space(space_file, settings)
    trials = draw(space, 1, settings.seed, settings.tune_scheduler)  # the grid, once
    per_trial = {t.trial_id: trial_settings(settings, t, settings.run_dir) for t in trials}
    folders = settings.run_dir / "trials"
    make_run(folders, "trial-0001", 0.9)
    (folders / "trial-0001" / "summary.json").write_text('{"status": "succeeded"}')
    (folders / "trial-0002").mkdir()
    (folders / "trial-0002" / "summary.json").write_text(
        json.dumps({"status": "invalid", "error": "TRAIN_LR=0.1: \x1b[31mrefused"})
    )
    sweep = _Sweep(settings, space, trials, {}, {})
    with pytest.raises(RunFailed) as ended:
        _conclude(settings, sweep, per_trial, INFO, 0.0)
    assert ended.value.problems == [
        "sweep nightly incomplete: 2 trials of 3 did not end, and the best of the others was "
        "judged",
        "trial-0002 invalid: TRAIN_LR=0.1: \\x1b[31mrefused",
        "1 trial did not finish (trial-0003): rerun the sweep to resume them",
        f"trials: {settings.run_dir}/trials.csv (`trainctl status {settings.run_dir}`)",
    ]
    record = read_sweep(settings.run_dir)
    assert record is not None and record["status"] == "incomplete"
    assert record["best"]["trial"] == "trial-0001" and record["promoted"] is True


def test_the_trials_a_stop_asks_for_checkpoints_are_those_training(tmp_path: Path) -> None:
    """Each with its newest worker group's invocation: what its workers answer a stop by."""
    from app.runfolder import folder as run_folder
    from app.runfolder.sweep_records import training_trials

    trials = [Trial(n, {"lr": 0.01 * n}) for n in (1, 2, 3, 4)]
    for trial, status, starts in (
        (trials[0], "running", ["first", "second"]),  # resumed once: the second group trains
        (trials[1], "succeeded", ["done"]),
        (trials[2], "running", []),  # its driver started, no worker group yet
    ):
        folder = tmp_path / "trials" / trial.trial_id
        run_folder.write_summary(folder, {"status": status})
        for invocation in starts:
            run_folder.start_attempt(
                folder, invocation=invocation, start_epoch=1, world_size=1, restored_from=None
            )
    found = training_trials(tmp_path, trials)
    assert found == [(trials[0], tmp_path / "trials" / "trial-0001", "second")]


def test_a_sweep_record_without_its_data_or_with_damage_there_asks_nothing() -> None:
    """sweep.json from before sweeps kept their data, or damaged by another writer: a rerun
    is not refused for it; a record of other files is."""
    from app.runfolder.sweep_records import data_problem

    now = {"files_sha256": "a" * 64, "train_rows": 90, "valid_rows": 30}
    for before in ({}, {"data": "x"}, {"data": {"files_sha256": 7}}, {"data": now}):
        assert data_problem(before, now, "/data/shapes") is None
    other = {"data": {**now, "files_sha256": "b" * 64, "train_rows": "\x1b[31m"}}
    said = data_problem(other, now, "/data/shapes")
    assert said is not None and said.startswith("TRAIN_DATA_PATH=/data/shapes: not the data")
    assert "\x1b" not in said  # another writer's text, escaped


@pytest.mark.parametrize("scheduler", ["asha", "random", "grid"])
def test_more_samples_continue_a_sweep_and_fewer_are_refused(scheduler: str) -> None:
    """Asking a finished sweep for more trials was refused as if they would be trained
    otherwise (a red-team pass): trials are drawn one after another from (seed, number, key)
    alone, so those drawn so far stay as they are and the new ones follow."""
    from app.settings.tune_continuation import kept_alike, same_trials, samples_raised

    space = parse_space(
        {"lr": {"loguniform": [1e-4, 1e-2]}, "model": {"choice": ["cnn", "resnet18"]}}, BASE
    )
    three = BASE.model_copy(update={"tune_samples": 3, "tune_scheduler": scheduler})
    five = three.model_copy(update={"tune_samples": 5})
    drawn = draw(space, 3, three.seed, scheduler)
    record = {"kept": kept_alike(three, space),
              "trials": [{"trial": t.trial_id, "values": t.values} for t in drawn]}  # fmt: skip
    more = draw(space, 5, five.seed, scheduler)
    assert more[: len(drawn)] == drawn and len(more) > len(drawn)
    same_trials(five, record, more, space)  # continued
    assert samples_raised(record, five) == 3 and samples_raised(record, three) is None
    fewer = three.model_copy(update={"tune_samples": 2})
    with pytest.raises(ConfigError) as refused:
        same_trials(fewer, record, draw(space, 2, fewer.seed, scheduler), space)
    assert str(refused.value).startswith(
        "TRAIN_TUNE_SAMPLES=2: this sweep drew TRAIN_TUNE_SAMPLES=3, and fewer samples"
    )
    assert "keep TRAIN_TUNE_SAMPLES=3, raise it to add trials" in str(refused.value)
