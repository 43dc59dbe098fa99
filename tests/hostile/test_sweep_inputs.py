"""`trainctl tune`, careless or hostile: exit 2 before Ray starts, naming the key or the
setting and what it allows, no traceback, nothing trained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.hostile.support import assert_refused, files_under, trainctl

SPACES = [
    ("lrr: {uniform: [0, 1]}", ["lrr", "not a trainctl setting", "did you mean lr"]),
    # The variable's name (it said "not a trainctl setting", of one; found by a red-team pass).
    ("TRAIN_LR: {uniform: [0.1, 1]}", ["TRAIN_LR", "write the setting as `lr`"]),
    ("lr: {uniform: [0, 0.1]}", ["lr", "TRAIN_LR", "greater than 0"]),
    ("lr: {loguniform: [1e-6, 100]}", ["lr", "TRAIN_LR", "less than or equal to 10"]),
    ("global_batch_size: {choice: [64, 0]}", ["global_batch_size", "TRAIN_GLOBAL_BATCH_SIZE"]),
    ("model: {choice: [cnn, rm -rf]}", ["model", "rm -rf"]),
    ("storage_path: {choice: [/etc]}", ["storage_path", "a trial may vary"]),
    ("ray_address: {choice: [auto]}", ["ray_address", "a trial may vary"]),
    # The sweep's own settings are not the space's (did you mean tune_scheduler? misled).
    ("scheduler: asha", ["scheduler: a setting of the sweep", "set TRAIN_TUNE_SCHEDULER"]),
    ("grace_period: {choice: [1, 2]}", ["TRAIN_TUNE_GRACE_PERIOD (the chart's tune.gracePeriod)"]),
    ("lr: 0.1", ["lr", "one distribution"]),
    ("- lr", ["must map settings"]),
    ("lr: {uniform: [1, .nan]}", ["lr", "two numbers"]),
    ("!!python/object/apply:os.system [touch pwned]", ["not YAML"]),
    # YAML keeps a key's last value silently: the `lr` edited first would never be drawn.
    ("lr: {uniform: [0.001, 0.01]}\nlr: {uniform: [0.1, 1]}", ["line 2: lr is given twice"]),
    ("lr: " + "[" * 20_000 + "]" * 20_000, ["nested too deeply"]),  # a RecursionError inside
    ("compile: {grid: [on, auto]}", ["compile", "True", "quote the word"]),  # YAML 1.1's `on`
    # pydantic took `true` as lr 1.0 without a word (a red-team pass).
    ("lr: {grid: [true, 0.1]}", ["grid of lr holds true, a boolean", "takes numbers"]),
    ("weight_decay: {choice: [0.01, no]}", ["weight_decay holds false", "unquoted as booleans"]),
]


@pytest.mark.parametrize(("space", "needles"), SPACES, ids=lambda v: repr(v)[:30])
def test_a_bad_space_is_refused_before_ray_naming_the_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, space: str, needles: list[str]
) -> None:
    (tmp_path / "space.yaml").write_text(space + "\n")
    monkeypatch.setenv("TRAIN_TUNE_SPACE", str(tmp_path / "space.yaml"))
    assert_refused(trainctl("tune"), 2, "TRAIN_TUNE_SPACE", *needles)
    assert files_under(tmp_path) == ["space.yaml"]  # nothing written, nothing run


@pytest.mark.parametrize(
    ("name", "value"),
    [("TRAIN_TUNE_SAMPLES", "0"), ("TRAIN_TUNE_SAMPLES", "-1"), ("TRAIN_TUNE_SAMPLES", "1e9"),
     ("TRAIN_TUNE_SCHEDULER", "pbt"), ("TRAIN_TUNE_REDUCTION_FACTOR", "1"),
     ("TRAIN_TUNE_GRACE_PERIOD", "0"), ("TRAIN_TUNE_CONCURRENT", "-3")],
)  # fmt: skip
def test_bad_sweep_settings_are_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    assert_refused(trainctl("tune"), 2, name)
    assert files_under(tmp_path) == []


def test_a_space_in_a_bucket_is_refused_as_what_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    # As a path it was ./s3:/bucket/space.yaml, "no such file".
    monkeypatch.setenv("TRAIN_TUNE_SPACE", "s3://bucket/space.yaml")
    assert_refused(trainctl("tune"), 2, "TRAIN_TUNE_SPACE", "must be a local YAML file")


def test_no_space_is_refused(tmp_path: Path) -> None:
    assert_refused(trainctl("tune"), 2, "TRAIN_TUNE_SPACE is not set")


def test_a_space_file_planted_as_a_link_is_not_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "real.yaml").write_text("lr: {uniform: [0.001, 0.01]}\n")
    (tmp_path / "space.yaml").symlink_to(tmp_path / "real.yaml")
    monkeypatch.setenv("TRAIN_TUNE_SPACE", str(tmp_path / "space.yaml"))
    assert_refused(trainctl("tune"), 2, "TRAIN_TUNE_SPACE", "link")


def _sweep_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    (tmp_path / "space.yaml").write_text("lr: {loguniform: [0.001, 0.01]}\n")
    monkeypatch.setenv("TRAIN_TUNE_SPACE", str(tmp_path / "space.yaml"))
    monkeypatch.setenv("TRAIN_TUNE_SAMPLES", "2")
    monkeypatch.setenv("TRAIN_RUN_NAME", "sweep")
    monkeypatch.setenv("TRAIN_STORAGE_PATH", str(tmp_path / "runs"))
    sweep_dir = tmp_path / "runs" / "sweep"
    sweep_dir.mkdir(parents=True)
    return sweep_dir


def test_a_sweep_folder_drawn_from_another_space_is_not_mixed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sweep_dir = _sweep_env(monkeypatch, tmp_path)
    record = {"trials": [{"trial": "trial-0001", "values": {"lr": 0.5}}]}
    (sweep_dir / "sweep.json").write_text(json.dumps(record))
    assert_refused(trainctl("tune"), 2, "trial-0001", "new TRAIN_RUN_NAME")
    # `check` (the RayJob's first step) says so too: it passed this sweep, which tune refused.
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, "FAIL  sweep", "trial-0001 of this sweep was drawn with")
    assert files_under(sweep_dir) == ["sweep.json"]


@pytest.mark.parametrize(
    "trials",
    [
        [{"trial": ["trial-0001"], "values": {}}, {"trial": {"a": 1}}, 7, None],
        1e308,
        "trial-0001",
    ],
    ids=["names-of-other-types", "a-number", "text"],
)
def test_a_damaged_trial_list_in_the_sweep_record_is_no_trial(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, trials: object
) -> None:
    """Trial rows of another type in sweep.json were an internal error (exit 1) in `check`
    and `tune` both; they are no trial of this sweep, and a row drawn otherwise is still
    refused beside them, its recorded values bounded."""
    sweep_dir = _sweep_env(monkeypatch, tmp_path)
    (sweep_dir / "sweep.json").write_text(json.dumps({"trials": trials}))
    result = trainctl("check", "--skip-cluster")
    assert "internal error" not in result.text and "ok    sweep:" in result.out, result.text
    drawn_otherwise = {"trial": "trial-0001", "values": {"lr": "\x1b[31m" + "9" * 5000}}
    rows = [*(trials if isinstance(trials, list) else []), drawn_otherwise]
    (sweep_dir / "sweep.json").write_text(json.dumps({"trials": rows}))
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, "FAIL  sweep", "trial-0001 of this sweep was drawn with {'lr': ")
    assert "\x1b" not in result.text and "9" * 201 not in result.text
    assert_refused(trainctl("tune"), 2, "trial-0001 of this sweep was drawn with")
    assert files_under(sweep_dir) == ["sweep.json"]


@pytest.mark.parametrize(
    ("kept", "variable", "given"),
    [
        ({"epochs": 2}, "TRAIN_EPOCHS", "3"),
        ({"scheduler": "asha"}, "TRAIN_TUNE_SCHEDULER", "random"),
        # Recorded as sweep.json's `kept`: a rerun into another dataset, metric, batch size or
        # trial count mixed trials that cannot be compared, and promoted the best of them.
        ({"kept": {"dataset": "digits"}}, "TRAIN_DATASET", "synthetic"),
        ({"kept": {"checkpoint_metric": "val_accuracy"}}, "TRAIN_CHECKPOINT_METRIC", "val_loss"),
        ({"kept": {"global_batch_size": 128}}, "TRAIN_GLOBAL_BATCH_SIZE", "64"),
        ({"kept": {"tune_samples": 2}}, "TRAIN_TUNE_SAMPLES", "1"),
    ],
)
def test_a_sweep_rerun_that_would_train_its_trials_otherwise_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kept: dict, variable: str, given: str
) -> None:
    """A rerun with more epochs said "0 to train" and recorded the new epochs over trials
    trained to the old."""
    sweep_dir = _sweep_env(monkeypatch, tmp_path)
    (sweep_dir / "sweep.json").write_text(json.dumps({**kept, "trials": []}))
    monkeypatch.setenv(variable, given)
    value = next(iter(kept.get("kept", kept).values()))
    assert_refused(trainctl("tune"), 2, f"{variable}={given}", f"keep {variable}={value}")
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, "FAIL  sweep", f"{variable}={given}", f"keep {variable}={value}")
    assert files_under(sweep_dir) == ["sweep.json"]


def test_a_sweep_into_a_runs_folder_and_a_run_into_a_sweeps_are_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A sweep run into a run's folder hid the run from `status`; a run trained into a
    sweep's mixed into its records. `check` (the RayJob's first step) refuses each as the
    command does: it passed both (found by a red-team pass)."""
    sweep_dir = _sweep_env(monkeypatch, tmp_path)
    (sweep_dir / "attempts.jsonl").write_text('{"attempt": 1}\n')  # a run trained here
    for command in (["tune"], ["check", "--skip-cluster"]):
        result = trainctl(*command)
        assert_refused(
            result, 2, "a training run's folder", "give the sweep another TRAIN_RUN_NAME"
        )
        assert files_under(sweep_dir) == ["attempts.jsonl"]

    (sweep_dir / "attempts.jsonl").unlink()
    (sweep_dir / "sweep.json").write_text(json.dumps({"trials": []}))
    monkeypatch.setenv("TRAIN_DATASET", "synthetic")
    monkeypatch.delenv("TRAIN_TUNE_SPACE")
    for command in (["train"], ["check", "--skip-cluster"]):
        result = trainctl(*command)
        assert_refused(result, 2, "a sweep's folder", "continue the sweep with `trainctl tune`")
        assert files_under(sweep_dir) == ["sweep.json"]


def test_a_trial_whose_model_cannot_take_the_data_is_refused_before_ray(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Found inside the trial, it was a traceback in Tune's log and a trial that never ran."""
    sweep_dir = _sweep_env(monkeypatch, tmp_path)
    (tmp_path / "space.yaml").write_text("model: {choice: [vit]}\nvit_patch: {choice: [3]}\n")
    monkeypatch.setenv("TRAIN_TUNE_SAMPLES", "1")
    monkeypatch.setenv("TRAIN_DATASET", "digits")  # 8px images: a 3px patch does not divide
    monkeypatch.setenv("TRAIN_DATA_PATH", str(tmp_path / "data"))
    result = trainctl("tune")
    assert_refused(result, 2, "trial-0001: TRAIN_VIT_PATCH=3 does not divide the 8px images")
    assert not (sweep_dir / "trials").exists() and not (sweep_dir / "tune").exists()
    # With the data there (tune prepared it), `check` (the RayJob's first step) says so too.
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, "FAIL  sweep", "trial-0001: TRAIN_VIT_PATCH=3 does not divide")


def test_many_trials_with_one_problem_are_one_fail_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """5,000 trials that could not fit printed 5,000 FAIL lines of one cause (a red-team
    pass): one line per distinct problem, naming the first trials and how many more."""
    from app.data.kinds import prepare_dataset

    sweep_dir = _sweep_env(monkeypatch, tmp_path)
    prepare_dataset("digits", tmp_path / "data" / "digits")
    (tmp_path / "space.yaml").write_text(
        "model: {choice: [vit]}\nvit_patch: {choice: [3, 5]}\nlr: {loguniform: [0.001, 0.1]}\n"
    )
    monkeypatch.setenv("TRAIN_TUNE_SAMPLES", "400")
    monkeypatch.setenv("TRAIN_DATASET", "digits")  # 8px images: neither 3 nor 5 divides them
    monkeypatch.setenv("TRAIN_DATA_PATH", str(tmp_path / "data"))
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, "FAIL  sweep")
    fails = [line for line in result.out.splitlines() if line.startswith("FAIL  sweep")]
    assert len(fails) == 2, fails  # one per patch size, not one per trial
    counts = [int(line.split(" and ")[1].split()[0]) for line in fails]
    assert sum(counts) + 3 * len(fails) == 400, fails
    assert any("TRAIN_VIT_PATCH=3 does not divide" in line for line in fails), fails
    assert any("TRAIN_VIT_PATCH=5 does not divide" in line for line in fails), fails
    assert all(line.startswith("FAIL  sweep: trial-0") for line in fails), fails
    assert not (sweep_dir / "trials").exists()


def test_a_warm_start_that_only_some_trials_models_take_is_refused_before_ray(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A cnn's weights as the warm start of a space that varies `model`: check said ok with
    the base model's fit, and resnet18's trials then failed in Tune with a traceback, the
    sweep saying "rerun to resume" with exit 0 (a red-team pass)."""
    import torch

    from app.data.kinds import prepare_dataset
    from app.data.schema import inspect_dataset
    from app.training.model import build_model

    sweep_dir = _sweep_env(monkeypatch, tmp_path)
    prepare_dataset("digits", tmp_path / "data" / "digits")
    info = inspect_dataset(tmp_path / "data" / "digits")
    torch.save(build_model("cnn", info).state_dict(), tmp_path / "cnn.pt")
    (tmp_path / "space.yaml").write_text("model: {choice: [cnn, resnet18]}\n")
    for key, value in {
        "TRAIN_TUNE_SAMPLES": "1", "TRAIN_TUNE_SCHEDULER": "grid", "TRAIN_MODEL": "cnn",
        "TRAIN_DATASET": "digits", "TRAIN_DATA_PATH": str(tmp_path / "data"),
        "TRAIN_WARM_START": str(tmp_path / "cnn.pt"),
    }.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, "FAIL  sweep", "does not fit TRAIN_MODEL=resnet18")
    assert "does not fit TRAIN_MODEL=cnn" not in result.text
    result = trainctl("tune")
    assert_refused(
        result, 2, f"TRAIN_WARM_START={tmp_path / 'cnn.pt'} does not fit TRAIN_MODEL=resnet18"
    )
    assert not (sweep_dir / "trials").exists() and not (sweep_dir / "tune").exists()


def test_a_trial_folder_planted_as_a_link_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sweep_dir = _sweep_env(monkeypatch, tmp_path)
    (tmp_path / "elsewhere").mkdir()
    (sweep_dir / "trials").mkdir()
    (sweep_dir / "trials" / "trial-0002").symlink_to(tmp_path / "elsewhere")
    # check says what tune will refuse (it passed, and tune then refused the folder).
    assert_refused(trainctl("check", "--skip-cluster"), 2, "FAIL  sweep", "trial-0002", "link")
    assert_refused(trainctl("tune"), 2, "trial-0002")
    assert files_under(tmp_path / "elsewhere") == []


def test_check_holds_the_space_and_every_trial_to_the_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "space.yaml").write_text("global_batch_size: {choice: [64, 1]}\n")
    monkeypatch.setenv("TRAIN_TUNE_SPACE", str(tmp_path / "space.yaml"))
    monkeypatch.setenv("TRAIN_NUM_WORKERS", "2")
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, "FAIL  sweep", "global_batch_size", "smaller than the 2 workers")
    (tmp_path / "space.yaml").write_text("lr: {loguniform: [1e-4, 1e-2]}\n")
    result = trainctl("check", "--skip-cluster")
    assert "ok    sweep: 8 trials over lr (asha)" in result.out, result.text
    # Two problems, a FAIL line each (they were run together on one line, joined by "; ").
    (tmp_path / "space.yaml").write_text("bogus: {grid: [1]}\nother: {grid: [2]}\n")
    result = trainctl("check", "--skip-cluster")
    failed = [line for line in result.out.splitlines() if line.startswith("FAIL")]
    assert [line.split(": ", 2)[2][:6] for line in failed] == ["bogus:", "other:"], result.text


@pytest.mark.parametrize(
    ("record", "says"),
    [
        ({"trials": [{"trial": "x", "values": 5}]}, "x"),
        ({"trials": "x", "best": [1], "status": {"a": 1}}, "sweep None: {'a': 1}"),
        ({"metric": ["val_loss"], "trials": [{"trial": "y"}]}, "metric val_accuracy"),
        ({"metric": {"a": 1}, "trials": []}, "metric val_accuracy"),
        ({"sweep": "s\x1b]52;c;cm0gLXJm\x07", "trials": [{"trial": "t\x1b[31m", "best": "hi"}]},
         "s\\x1b]52;c;cm0gLXJm\\x07"),
    ],
)  # fmt: skip
def test_status_shows_a_damaged_or_hostile_sweep_record_safely(
    tmp_path: Path, record: object, says: str
) -> None:
    """sweep.json lies where many hands write: fields of another type were a TypeError or
    an AttributeError (exit 1), a truncated file said 'rebuilt' and then 'No run folders',
    and its texts reached the terminal raw (an OSC 52 clipboard write)."""
    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    text = record if isinstance(record, str) else json.dumps(record)
    (sweep_dir / "sweep.json").write_text(text)
    result = trainctl("status", str(sweep_dir))
    assert result.code == 0 and "internal error" not in result.text, result.text
    assert says in result.text, result.text
    assert "\x1b" not in result.text and "\x07" not in result.text
    assert "No run folders" not in result.text


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[1, 2]", "is damaged (not a JSON object)"),
        ('{"trials": [', "is damaged (JSONDecodeError)"),
    ],
)
@pytest.mark.parametrize("as_json", [False, True])
def test_a_damaged_sweep_record_is_exit_2_on_stderr(
    tmp_path: Path, text: str, says: str, as_json: bool
) -> None:
    """As a run folder's damaged summary.json: it was said on stdout (into `--json`'s JSON)
    with exit 0, which hid the damage from a script (a red-team pass)."""
    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    (sweep_dir / "sweep.json").write_text(text)
    result = trainctl("status", str(sweep_dir), *(["--json"] if as_json else []))
    assert result.code == 2 and result.out == "", result.text
    assert says + "; each trial's own folder: trainctl status " in result.err, result.text


def test_a_sweep_whose_ended_trial_folder_is_gone_or_damaged_is_exit_2(tmp_path: Path) -> None:
    """status read sweep.json only: with the best trial's folder deleted, or a trial's
    summary.json cut short, it showed the healthy table with exit 0 (a red-team pass)."""
    sweep_dir = tmp_path / "sweep"
    rows = [{"trial": f"trial-000{n}", "status": "succeeded", "best": 0.5} for n in (1, 2, 3)]
    record = {"sweep": "s", "status": "succeeded", "metric": "val_accuracy", "trials": rows}
    (sweep_dir / "trials").mkdir(parents=True)
    (sweep_dir / "sweep.json").write_text(json.dumps(record))
    for n in (1, 3):
        trial = sweep_dir / "trials" / f"trial-000{n}"
        trial.mkdir()
        (trial / "summary.json").write_text(json.dumps({"status": "succeeded"}))
    (sweep_dir / "trials" / "trial-0003" / "summary.json").write_text('{"status": "succ')
    result = trainctl("status", str(sweep_dir))
    assert result.code == 2, result.text
    assert "trial-0001  succeeded" in result.out  # the table is still shown
    assert "sweep.json lists trials whose folders do not hold them" in result.err
    assert f"trial-0002: its folder {sweep_dir}/trials/trial-0002 is missing" in result.err
    assert "trial-0003: " in result.err and "trial-0001:" not in result.err, result.err


def test_a_warm_started_sweep_rerun_after_the_champion_moved_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Its trials left would start from other weights than the trials trained: refused by
    `tune` and by `check` (which passed it, a red-team pass). With no trial left (a RayJob
    retried after the sweep promoted its best, moving the champion itself), it goes on."""
    from app.promotion.step import promote_run
    from tests.promotion_support import INFO, make_run, settings_for

    sweep_dir = _sweep_env(monkeypatch, tmp_path)
    storage = tmp_path / "runs"
    make_run(storage, "r", 0.9)
    assert promote_run(settings_for(storage, "r"), INFO, {})["champion_version"] == 1
    monkeypatch.setenv("TRAIN_WARM_START", "champion:digits-cnn")
    monkeypatch.setenv("TRAIN_MODEL", "cnn")
    monkeypatch.setenv("TRAIN_DATA_PATH", str(tmp_path / "data"))
    started = {"source": "champion:digits-cnn", "sha256": "ab" * 32,
               "described": "champion digits-cnn v0 (run old, epoch 1)"}  # fmt: skip
    (sweep_dir / "sweep.json").write_text(json.dumps({"trials": [], "warm_start": started}))
    said = ("this sweep's trials started from champion digits-cnn v0 (run old, epoch 1) "
            "(sha256 abababababab); it is now champion digits-cnn v1 (run r, epoch 1)")  # fmt: skip
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, "FAIL  sweep", said, "Start a new sweep (another TRAIN_RUN_NAME)")
    assert_refused(trainctl("tune"), 2, said)
    assert sorted(p.name for p in sweep_dir.iterdir()) == ["sweep.json"]
    for trial in ("trial-0001", "trial-0002"):  # every trial ended: nothing starts from it
        (sweep_dir / "trials" / trial).mkdir(parents=True)
        (sweep_dir / "trials" / trial / "summary.json").write_text('{"status": "succeeded"}')
    result = trainctl("check", "--skip-cluster")
    assert "ok    sweep: 2 trials over lr" in result.out, result.text


def test_a_setting_the_space_draws_is_said_to_be_unused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """TRAIN_LR set beside a space that draws lr: every trial trains with its own draw, and the
    setting was dropped without a word (a pool's train.lr in the chart, likewise)."""
    _sweep_env(monkeypatch, tmp_path)
    monkeypatch.setenv("TRAIN_LR", "0.05")
    unused = "TRAIN_LR=0.05 is not used: every trial draws its own lr (TRAIN_TUNE_SPACE)"
    result = trainctl("check", "--skip-cluster")
    assert result.code == 0 and "WARN  sweep: 2 trials over lr (asha)" in result.out, result.text
    assert unused in result.out, result.text
    # tune says it before anything else can stop it (here: data that is not there)
    monkeypatch.setenv("TRAIN_DATASET", "parquet")
    monkeypatch.setenv("TRAIN_DATA_PATH", str(tmp_path / "missing"))
    result = trainctl("tune")
    assert result.code == 2 and f"trainctl: warning: {unused}" in result.err, result.text
    monkeypatch.delenv("TRAIN_LR")  # the default is the base of no trial either: nothing to say
    assert "is not used" not in trainctl("tune").text
    monkeypatch.delenv("TRAIN_DATASET")
    monkeypatch.delenv("TRAIN_DATA_PATH")
    assert "ok    sweep: 2 trials over lr" in trainctl("check", "--skip-cluster").out


def test_a_distribution_of_one_value_is_warned_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`randint: [64, 64]` (or `uniform: [3.5, 4.4]` over a whole-number setting) gives every
    trial the same value: a sweep of only such keys trained one setting over and over without
    a word (a red-team pass)."""
    _sweep_env(monkeypatch, tmp_path)
    space = tmp_path / "space.yaml"
    space.write_text("global_batch_size: {randint: [64, 64]}\nseed: {uniform: [3.5, 4.4]}\n")
    result = trainctl("check", "--skip-cluster")
    said = ("global_batch_size: randint [64, 64], seed: uniform [4, 4] hold one value each, the "
            "same in every trial (every trial trains the same settings): set "
            "TRAIN_GLOBAL_BATCH_SIZE=64, TRAIN_SEED=4 instead")  # fmt: skip
    assert result.code == 0 and "WARN  sweep: 2 trials over" in result.out, result.text
    assert said in result.out, result.text
    space.write_text("lr: {loguniform: [0.001, 0.01]}\nglobal_batch_size: {choice: [64]}\n")
    result = trainctl("check", "--skip-cluster")
    said = ("global_batch_size: choice [64] holds one value, the same in every trial: set "
            "TRAIN_GLOBAL_BATCH_SIZE=64 instead")  # fmt: skip
    assert said in result.out, result.text
    space.write_text("lr: {loguniform: [0.001, 0.01]}\nglobal_batch_size: {choice: [32, 64]}\n")
    assert "ok    sweep: 2 trials over" in trainctl("check", "--skip-cluster").out


def test_a_space_with_a_tab_is_said_in_one_line_with_its_place(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "space.yaml").write_text("lr:\n\t{uniform: [0.1, 1]}\n")
    monkeypatch.setenv("TRAIN_TUNE_SPACE", str(tmp_path / "space.yaml"))
    result = trainctl("tune")
    assert_refused(result, 2, "not YAML (line 2, column 1: found character", "never tabs")
    assert "<unicode string>" not in result.text


def test_a_grace_period_asha_never_ends_is_warned_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """TRAIN_TUNE_GRACE_PERIOD=5 beside TRAIN_EPOCHS=2 was accepted without a word: ASHA
    then stops no trial (found by a red-team pass)."""
    _sweep_env(monkeypatch, tmp_path)
    monkeypatch.setenv("TRAIN_EPOCHS", "2")
    monkeypatch.setenv("TRAIN_TUNE_GRACE_PERIOD", "5")
    result = trainctl("check", "--skip-cluster")
    assert result.code == 0, result.text
    assert "WARN  sweep: 2 trials over lr (asha)" in result.out, result.text
    assert "TRAIN_TUNE_GRACE_PERIOD=5 is not below TRAIN_EPOCHS=2: ASHA judges" in result.out
    # `tune` itself says it too, before its preflight (here refusing a data folder not there).
    monkeypatch.setenv("TRAIN_DATASET", "folder")
    monkeypatch.setenv("TRAIN_DATA_PATH", str(tmp_path / "no-images"))
    result = trainctl("tune")
    assert result.code == 2 and "no-images" in result.err, result.text
    said = "trainctl: warning: TRAIN_TUNE_GRACE_PERIOD=5 is not below TRAIN_EPOCHS=2: ASHA"
    assert said in result.err, result.text
    monkeypatch.delenv("TRAIN_DATASET")
    monkeypatch.delenv("TRAIN_DATA_PATH")
    for grace, scheduler in (("1", "asha"), ("5", "random")):  # ASHA can stop; no ASHA
        monkeypatch.setenv("TRAIN_TUNE_GRACE_PERIOD", grace)
        monkeypatch.setenv("TRAIN_TUNE_SCHEDULER", scheduler)
        result = trainctl("check", "--skip-cluster")
        assert "GRACE_PERIOD" not in result.out, result.text


def test_a_rerun_on_other_files_is_refused_before_any_trial_trains(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """For an image folder TRAIN_DATA_PATH is the data, and paths may change between reruns:
    a rerun on a copy missing a third of train/ went on, and the sweep would have ranked
    trials trained on other files against each other (found by a red-team pass)."""
    from app.data.kinds import dataset_kind
    from app.export.build import data_fingerprint
    from app.runfolder.sweep_records import data_of
    from app.settings.env import load_settings
    from tests.folder_support import image_folder

    sweep_dir = _sweep_env(monkeypatch, tmp_path)
    image_folder(tmp_path / "shapes")
    monkeypatch.setenv("TRAIN_DATASET", "folder")
    monkeypatch.setenv("TRAIN_MODEL", "cnn")
    monkeypatch.setenv("TRAIN_DATA_PATH", str(tmp_path / "shapes"))
    settings = load_settings()
    kind = dataset_kind(settings.dataset)
    info, _ = kind.ensure(kind.location(settings.data_path), settings)
    record = {"trials": [], "data": data_of(data_fingerprint(info))}  # what its trials had
    (sweep_dir / "sweep.json").write_text(json.dumps(record))
    result = trainctl("check", "--skip-cluster")
    assert result.code == 0 and "sweep: 2 trials over lr" in result.out, result.text

    for stale in sorted((tmp_path / "shapes" / "train").rglob("*.png"))[:4]:
        stale.unlink()  # the copy it resumes on lacks some files
    said = (
        f"TRAIN_DATA_PATH={tmp_path / 'shapes'}: not the data this sweep's trials trained on "
        f"(its files' names or sizes differ; then {info.train_rows} train and "
        f"{info.valid_rows} valid rows, now {info.train_rows - 4} and {info.valid_rows})"
    )
    for command in (["check", "--skip-cluster"], ["tune"]):
        result = trainctl(*command)
        assert_refused(result, 2, said, "restore that data to continue the sweep")
    assert files_under(sweep_dir) == ["sweep.json"]


def test_check_says_how_many_trials_train_at_once_and_warns_above_the_room(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`tune` warned that TRAIN_TUNE_CONCURRENT asked for more trials than the cluster holds,
    but only once Ray was up; `check`, which the chart runs first, said nothing of it."""
    (tmp_path / "space.yaml").write_text("lr: {loguniform: [1e-4, 1e-2]}\n")
    monkeypatch.setenv("TRAIN_TUNE_SPACE", str(tmp_path / "space.yaml"))
    monkeypatch.setenv("TRAIN_NUM_WORKERS", "1")
    monkeypatch.setenv("TRAIN_TUNE_SAMPLES", "40")
    result = trainctl("check")
    assert result.code == 0, result.text
    cluster = next(
        line for line in result.out.splitlines() if line.endswith("TUNE_CONCURRENT sets it)")
    )
    assert cluster.startswith("ok    cluster: local"), result.text
    assert "; the sweep trains " in cluster and "(a trial holds 1 worker x 1 CPU;" in cluster
    monkeypatch.setenv("TRAIN_TUNE_CONCURRENT", "40")
    result = trainctl("check")
    assert result.code == 0, result.text  # a warning: the sweep runs, more slowly than asked
    cluster = next(line for line in result.out.splitlines() if " cluster: " in line)
    assert cluster.startswith("WARN  cluster: local"), result.text
    assert "; the sweep trains 40 trials at a time (TRAIN_TUNE_CONCURRENT); but " in cluster
    assert cluster.endswith("of 1 worker x 1 CPU at once: the others wait for one to end"), cluster
    # Without a sweep, the cluster's line says nothing of trials.
    monkeypatch.delenv("TRAIN_TUNE_SPACE")
    result = trainctl("check")
    assert result.code == 0 and "trials" not in result.out, result.text


def test_a_space_varying_the_model_warns_of_the_champions_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A sweep over cnn and resnet18 promoted its resnet18 winner as `synthetic-cnn`, the
    name TRAIN_MODEL makes (a red-team pass): check warns until TRAIN_MODEL_NAME is set."""
    _sweep_env(monkeypatch, tmp_path)
    (tmp_path / "space.yaml").write_text("model: {choice: [cnn, resnet18]}\n")
    monkeypatch.setenv("TRAIN_DATASET", "synthetic")
    monkeypatch.setenv("TRAIN_MODEL", "cnn")
    result = trainctl("check", "--skip-cluster")
    assert result.code == 0, result.text
    assert "WARN  sweep" in result.out, result.out
    assert "whichever model wins is promoted as 'synthetic-cnn'" in result.out, result.out
    monkeypatch.setenv("TRAIN_MODEL_NAME", "shapes-classifier")
    result = trainctl("check", "--skip-cluster")
    assert result.code == 0, result.text
    assert "whichever model wins" not in result.text, result.text
