"""The env listing is generated from the settings model, and the committed docs match it."""

from __future__ import annotations

from app.envdoc import env_vars, render_env
from app.settings import TrainSettings
from tests.conftest import REPO


def test_every_setting_is_listed_once() -> None:
    names = [row.name for row in env_vars()]
    assert names == [f"TRAIN_{field.upper()}" for field in TrainSettings.model_fields]
    assert {"TRAIN_NUM_WORKERS", "TRAIN_AMP", "TRAIN_STORAGE_PATH"} <= set(names)


def test_table_shows_type_default_and_meaning() -> None:
    table = render_env("table")
    assert "TRAIN_AMP" in table
    assert "off | bf16 | fp16" in table
    assert "[default: 10]" in table


def test_committed_settings_doc_is_current() -> None:
    committed = (REPO / "docs" / "settings.md").read_text()
    assert committed == render_env("markdown") + "\n", "run `make docs` to regenerate"
