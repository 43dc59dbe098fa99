"""The settings model: defaults, parsing, and the messages users see for bad values."""

from __future__ import annotations

import pytest

from app.errors import ConfigError
from app.settings import TrainSettings
from app.settings.env import load_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    for key in list(__import__("os").environ):
        if key.startswith("TRAIN_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)  # no stray .env file from the repo


def test_defaults_are_the_make_run_job() -> None:
    settings = load_settings()
    assert settings.dataset == "digits"
    assert settings.workers == (2, 2)
    assert settings.run_name == "digits-resnet18"
    assert settings.storage_path.is_absolute()
    assert settings.run_dir == settings.storage_path / "digits-resnet18"


def test_env_values_are_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAIN_EPOCHS", "3")
    monkeypatch.setenv("TRAIN_USE_GPU", "false")
    monkeypatch.setenv("TRAIN_NUM_WORKERS", " 2 - 8 ")
    monkeypatch.setenv("TRAIN_AMP", "bf16")
    monkeypatch.setenv("TRAIN_ACCELERATOR_TYPE", "")
    settings = load_settings()
    assert settings.epochs == 3
    assert settings.num_workers == "2-8"
    assert settings.workers.elastic
    assert settings.accelerator_type is None


def test_dotenv_file_is_read(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".env").write_text("TRAIN_EPOCHS=7\nTRAIN_MODEL=cnn\n")
    settings = load_settings()
    assert (settings.epochs, settings.model, settings.run_name) == (7, "cnn", "digits-cnn")


def test_given_values_are_read_alone_without_the_shell_or_env_file(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rendered ConfigMap (settings_from_env) and a sweep's trials (from_values) are held to
    the settings' rules with what they give: a shell's TRAIN_EPOCHS or ./.env filled in what
    the ConfigMap left out, so `render` checked values the pod would never see."""
    from app.settings.env import settings_from_env

    monkeypatch.setenv("TRAIN_EPOCHS", "7")
    (tmp_path / ".env").write_text("TRAIN_MODEL=cnn\n")
    rendered = settings_from_env({"TRAIN_LR": "0.5"})
    assert (rendered.lr, rendered.epochs, rendered.model) == (0.5, 10, "resnet18")
    assert TrainSettings.from_values({"lr": 0.5}).epochs == 10
    assert load_settings().epochs == 7 and load_settings().model == "cnn"  # the shell's own


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"TRAIN_EPOCHS": "ten"}, "TRAIN_EPOCHS='ten'"),
        ({"TRAIN_EPOCHS": "0"}, "greater than or equal to 1"),
        ({"TRAIN_LR": "-1"}, "TRAIN_LR='-1'"),
        ({"TRAIN_MODEL": "gpt"}, "TRAIN_MODEL='gpt': must be cnn, resnet18, vit or a torchvision"),
        ({"TRAIN_DATASET": "imagenet"}, "TRAIN_DATASET='imagenet'"),
        ({"TRAIN_NUM_WORKERS": "4-2"}, "1 <= MIN <= MAX"),
        ({"TRAIN_NUM_WORKERS": "0-2"}, "1 <= MIN <= MAX"),
        # A plain count names no range (a newcomer pass read "MIN <= MAX" for "0").
        ({"TRAIN_NUM_WORKERS": "0"}, "must be at least 1 (a count of workers"),
        # A choice of a fixed set says the closest, as TRAIN_MODEL does (a newcomer pass).
        ({"TRAIN_DATASET": "digit"}, "or 'folder'; did you mean digits?"),
        ({"TRAIN_AMP": "bf61"}, "or 'fp16'; did you mean bf16?"),
        ({"TRAIN_NUM_WORKERS": "many"}, "MIN-MAX"),
        ({"TRAIN_RUN_NAME": "My_Run"}, "lowercase"),
        ({"TRAIN_AMP": "fp16"}, "TRAIN_USE_GPU=true"),
        ({"TRAIN_GLOBAL_BATCH_SIZE": "2", "TRAIN_NUM_WORKERS": "4"}, "smaller than the 4 workers"),
        ({"TRAIN_EPOCH": "3"}, "did you mean TRAIN_EPOCHS"),
        ({"TRAIN_LR": "nan"}, "TRAIN_LR='nan': Input should be a finite number"),
        ({"TRAIN_WEIGHT_DECAY": "inf"}, "TRAIN_WEIGHT_DECAY='inf': Input should be a finite"),
        ({"TRAIN_RUN_NAME": "champions"}, "the folder of the champion pointers"),
        # Read without regard to case, a lowercase twin would win or lose by its place.
        ({"TRAIN_EPOCHS": "5", "train_epochs": "7"}, "train_epochs must be written in capitals"),
        # A gate the run's own settings rule out: it kept the champion after the whole run.
        ({"TRAIN_PROMOTE_IF": "peak_gpu_gib<=10"}, "peak_gpu_gib is recorded on a GPU only"),
        ({"TRAIN_PROMOTE_IF": "epoch>=3", "TRAIN_EPOCHS": "2"},
         "epoch>=3: a checkpoint's epoch is a whole number from 1 to TRAIN_EPOCHS=2"),
        ({"TRAIN_PROMOTE_IF": "epoch>2", "TRAIN_EPOCHS": "2"},
         "epoch>2: a checkpoint's epoch is a whole number from 1 to TRAIN_EPOCHS=2"),
        ({"TRAIN_PROMOTE_IF": "epoch<1"}, "epoch<1: a checkpoint's epoch is a whole number from 1"),
        ({"TRAIN_PROMOTE_IF": "epoch>1 and epoch<2"}, "epoch>1 and epoch<2: a checkpoint's epoch"),
        ({"TRAIN_PROMOTE_IF": "compiled>=1"}, "records compiled 0 (TRAIN_COMPILE off, or auto"),
        ({"TRAIN_PROMOTE_IF": "compile_s>0", "TRAIN_COMPILE": "off"}, "records compile_s 0"),
    ],
)  # fmt: skip
def test_bad_values_name_the_variable_and_what_is_allowed(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert caught.value.exit_code == 2
    assert expected in str(caught.value)


def test_a_long_bad_value_is_quoted_shortened(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAIN_RUN_NAME", "X" * 100_000)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert len(str(caught.value)) < 1_000
    assert "(100,000 characters)" in str(caught.value)


@pytest.mark.parametrize("name", ["storage_path", "data_path"])
def test_an_empty_folder_setting_is_its_default_not_the_current_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path, name: str
) -> None:
    monkeypatch.setenv(f"TRAIN_{name.upper()}", " ")
    default = TrainSettings.model_fields[name].default
    assert getattr(load_settings(), name) == (tmp_path / default)


def test_every_problem_is_reported_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAIN_EPOCHS", "-1")
    monkeypatch.setenv("TRAIN_LR", "abc")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert len(caught.value.problems) == 2


def test_credentials_in_urls_are_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAIN_RAY_ADDRESS", "ray://admin:hunter2@head.example:10001")
    dumped = load_settings().redacted()
    assert "hunter2" not in str(dumped)
    assert dumped["ray_address"] == "ray://***@head.example:10001"


def test_every_field_is_documented() -> None:
    for name, field in TrainSettings.model_fields.items():
        assert field.description, f"{name} has no description"


def test_env_file_keys_that_would_be_misread_are_refused(tmp_path) -> None:
    (tmp_path / ".env").write_bytes(
        b'"TRAIN_EPOCHS"=3\n'  # python-dotenv keeps the quotes in the key: it was skipped
        b"\xe2\x80\x8bTRAIN_LR=0.1\n"  # a zero-width space before the name: skipped too
        b"train_seed=3\n"  # read as TRAIN_SEED, beside any TRAIN_SEED
        b"TRAIN_EPOCHS=4\nTRAIN_EPOCHS=5\n"  # the last one won
        b"OTHER_TOOL=1\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert caught.value.problems == [
        ".env:1: '\"TRAIN_EPOCHS\"' has quotes or invisible characters around the name; "
        "write TRAIN_EPOCHS=VALUE",
        ".env:2: '\\u200bTRAIN_LR' has quotes or invisible characters around the name; "
        "write TRAIN_LR=VALUE",
        ".env:3: train_seed must be written in capitals: TRAIN_SEED",
        ".env:5: TRAIN_EPOCHS is set again (first on line 4); keep one",
    ]


@pytest.mark.parametrize("kind", ["fifo", "endless"])
def test_env_file_that_is_not_a_bounded_file_is_refused_at_once(tmp_path, kind: str) -> None:
    import os

    if kind == "fifo":
        os.mkfifo(tmp_path / ".env")  # opening it to read would wait for a writer forever
    else:
        (tmp_path / ".env").symlink_to("/dev/zero")  # reading it would never end
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert caught.value.problems == [
        ".env: cannot be read (it is a FIFO, socket or device, not a regular file)"
    ]


def test_commands_that_read_a_few_settings_read_the_env_file_too(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.settings.env import settings_environ, storage_path_setting

    (tmp_path / ".env").write_text("TRAIN_STORAGE_PATH=/from/env-file\n")
    assert storage_path_setting(settings_environ()) == "/from/env-file"
    monkeypatch.setenv("TRAIN_STORAGE_PATH", "/from/environment")  # over .env, as for `train`
    assert storage_path_setting(settings_environ()) == "/from/environment"
    monkeypatch.setenv("TRAIN_STORAGE_PATH", "")
    assert storage_path_setting(settings_environ()) == "runs"


@pytest.mark.parametrize(
    ("given", "hint"),
    [
        ("TRAIN_EPOCH", "did you mean TRAIN_EPOCHS?"),
        ("TRAIN_MODLE", "did you mean TRAIN_MODEL?"),
        # Alike only in the TRAIN_ every setting shares: it suggested TRAIN_EPOCHS.
        ("TRAIN_BOGUS", "run `trainctl env` for the list"),
        ("TRAIN_FOO", "run `trainctl env` for the list"),
    ],
)
def test_a_suggestion_is_alike_beyond_the_shared_prefix(
    monkeypatch: pytest.MonkeyPatch, given: str, hint: str
) -> None:
    monkeypatch.setenv(given, "1")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert caught.value.problems == [f"{given} is not a trainctl setting; {hint}"]
