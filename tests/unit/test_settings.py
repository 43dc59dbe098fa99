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


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"TRAIN_EPOCHS": "ten"}, "TRAIN_EPOCHS='ten'"),
        ({"TRAIN_EPOCHS": "0"}, "greater than or equal to 1"),
        ({"TRAIN_LR": "-1"}, "TRAIN_LR='-1'"),
        ({"TRAIN_MODEL": "gpt"}, "TRAIN_MODEL='gpt': must be cnn, resnet18, vit or a torchvision"),
        ({"TRAIN_DATASET": "imagenet"}, "TRAIN_DATASET='imagenet'"),
        ({"TRAIN_NUM_WORKERS": "4-2"}, "1 <= MIN <= MAX"),
        ({"TRAIN_NUM_WORKERS": "many"}, "MIN-MAX"),
        ({"TRAIN_RUN_NAME": "My_Run"}, "lowercase"),
        ({"TRAIN_AMP": "fp16"}, "TRAIN_USE_GPU=true"),
        ({"TRAIN_GLOBAL_BATCH_SIZE": "2", "TRAIN_NUM_WORKERS": "4"}, "smaller than the 4 workers"),
        ({"TRAIN_EPOCH": "3"}, "did you mean TRAIN_EPOCHS"),
    ],
)
def test_bad_values_name_the_variable_and_what_is_allowed(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert caught.value.exit_code == 2
    assert expected in str(caught.value)


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
