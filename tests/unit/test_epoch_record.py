"""The one epoch record (app/runfolder/epoch_record.py): its readers take their lists from it, and
the writer cannot add a figure the readers do not know."""

from __future__ import annotations

import pytest

from app.runfolder import epoch_record
from app.runfolder.epoch_record import epoch_line, new_record
from app.training.ray_gauges import GAUGES, figures


def test_a_figure_not_in_the_record_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="not fields of the epoch record: val_acc"):
        new_record(epoch=1, val_acc=0.5)
    assert new_record(epoch=1, val_accuracy=0.5) == {"epoch": 1, "val_accuracy": 0.5}


def test_every_gauge_is_a_field_of_the_record_or_the_eta() -> None:
    record = {name: 1.0 for name in epoch_record.NAMES} | {"epoch": 2}
    assert set(figures(record, 5)) == set(GAUGES)
    assert figures(record, 5)["trainctl_eta_seconds"] == 3.0


def test_the_one_eta_never_goes_below_zero() -> None:
    assert epoch_record.eta_s(3, 10, 2.5) == 17.5
    assert epoch_record.eta_s(12, 10, 2.5) == 0
    assert "ETA 18s" in epoch_line({"epoch": 3, "epoch_time_s": 2.5}, 10)


def test_a_bool_is_not_a_figure() -> None:
    assert epoch_record.pace({"epoch_time_s": True}) is None
    assert "s/epoch" not in epoch_line({"epoch": 1, "epoch_time_s": True}, 2)
