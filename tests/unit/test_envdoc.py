"""The env listing is generated from the settings model, and the committed docs match it."""

from __future__ import annotations

import re

import pytest

from app.envdoc import render_env
from app.settings import TrainSettings
from tests.conftest import REPO

# Where each format starts a setting's entry: a description may name other settings.
ENTRY = {
    "table": r"^{name}  ",
    "markdown": r"^\| `{name}` \|",
    "dotenv": r"^# {name}=",
}


@pytest.mark.parametrize("fmt", sorted(ENTRY))
def test_every_setting_has_exactly_one_entry_in_each_format(fmt: str) -> None:
    text = render_env(fmt)
    for field in TrainSettings.model_fields:
        name = f"TRAIN_{field.upper()}"
        found = re.findall(ENTRY[fmt].format(name=name), text, flags=re.MULTILINE)
        assert len(found) == 1, (fmt, name, len(found))


def test_rows_show_type_default_and_meaning() -> None:
    rows = render_env("markdown").splitlines()
    assert "| `TRAIN_EPOCHS` | int 1..100000 | `10` | Total epochs of the run. |" in rows
    assert any(r.startswith("| `TRAIN_AMP` | auto / off / bf16 / fp16 | `auto` | ") for r in rows)
    assert any(
        r.startswith("| `TRAIN_STORAGE_PATH` | path or URI (s3://, gs://) | `runs` | ")
        for r in rows
    )
    table = render_env("table")
    assert re.search(r"^TRAIN_EPOCHS +int 1..100000 +\[default: 10\]$", table, flags=re.MULTILINE)
    # bounds said with the type, not only by the error past them (a red-team pass)
    assert "| `TRAIN_LR` | float > 0, <= 10 | " in render_env("markdown")
    assert "# TRAIN_EPOCHS=10" in render_env("dotenv").splitlines()


def test_committed_settings_doc_is_current() -> None:
    committed = (REPO / "docs" / "settings.md").read_text()
    assert committed == render_env("markdown") + "\n", "run `make docs` to regenerate"


@pytest.mark.parametrize("fmt", ["table", "dotenv"])
def test_descriptions_are_wrapped_to_the_width_given(fmt: str) -> None:
    for columns in (80, 120):
        text = render_env(fmt, columns)
        long = [line for line in text.splitlines() if len(line) > columns]
        # Only a single word longer than the line (a URL, a path) may stand out.
        assert all(" " not in line.strip() for line in long), long
        words = [word for word in text.split() if word != "#"]
        assert [w for w in render_env(fmt, 10_000).split() if w != "#"] == words  # rewrapped
