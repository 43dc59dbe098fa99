"""`trainctl check`'s promotion line on real pointer files: one the promotion step wrote, one
written by the pointer's own writer (champion.replace), none, and damaged ones; a pointer the
step could not use fails the check with the step's own words for it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.data.schema import DatasetInfo
from app.errors import ConfigError
from app.promotion import champion
from app.promotion.check import UnguardedChampion, promotion_check
from app.promotion.task import Task
from app.settings import TrainSettings
from tests.promotion_support import CATS_AND_DOGS, INFO, make_run, settings_for

DEFAULT = (
    "gate beats_champion (the default: a run is promoted when its val_accuracy, "
    "TRAIN_CHECKPOINT_METRIC, is strictly better than the champion's, both scored on the run's "
    "rows)"
)


def _pointer_file(storage: Path) -> Path:
    return storage / "champions" / "digits-cnn.json"


def _write(storage: Path, pointer: dict[str, Any]) -> None:
    """The pointer as the promotion step writes it: whole, through champion.replace."""
    champion.replace(champion.pointer_path(storage, "digits-cnn"), lambda current: pointer)


def _failure(settings: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        promotion_check(settings)
    return "; ".join(caught.value.problems)


def _failure_with(settings: Any, info: DatasetInfo) -> str:
    with pytest.raises(ConfigError) as caught:
        promotion_check(settings, info)
    return "; ".join(caught.value.problems)


def test_the_champion_the_promotion_step_wrote(tmp_path: Path) -> None:
    from app.promotion.step import promote_run

    make_run(tmp_path, "first", 0.962)
    promote_run(settings_for(tmp_path, "first"), INFO, {"status": "succeeded"})
    task = "classes [0, 1, 2, 3, 4, 5, 6, 7, 8, 9] 1x8x8"
    line = promotion_check(settings_for(tmp_path, "next"))  # the data not read: the pointer's
    assert line == f"{DEFAULT}; champion: run first v1, val_accuracy 0.962 on its own data, {task}"
    gated = settings_for(tmp_path, "next", promote_if="val_accuracy>=0.95 and beats_champion")
    assert promotion_check(gated, INFO) == (
        "gate beats_champion and val_accuracy>=0.95; champion: run first v1, val_accuracy "
        f"0.962 on its own data, {task}; this run: {task}"
    )


def test_a_champion_of_another_task_fails_the_check_naming_both(tmp_path: Path) -> None:
    from app.promotion.step import promote_run

    make_run(tmp_path, "first", 0.962)
    promote_run(settings_for(tmp_path, "first"), INFO, {"status": "succeeded"})
    said = _failure_with(settings_for(tmp_path, "pets"), CATS_AND_DOGS)
    assert said == (
        f"{_pointer_file(tmp_path)}: another task: champion digits-cnn v1 classes [0, 1, 2, 3, "
        "4, 5, 6, 7, 8, 9] 1x8x8; this run [cat, dog] 1x8x8 (new: cat, dog; missing: 0, 1, 2, "
        "3, 4 ...); use another TRAIN_MODEL_NAME for a new task; a run would train and then "
        "keep the champion, not promoted"
    )
    other = settings_for(tmp_path, "pets", model_name="pets-cnn")  # a new task, a new name
    assert "; no champion yet (" in promotion_check(other, CATS_AND_DOGS)


def test_no_champion_yet_says_what_the_first_must_score(tmp_path: Path) -> None:
    line = promotion_check(settings_for(tmp_path, "r"), INFO)
    assert line == (
        f"{DEFAULT}; no champion yet (the first run whose val_accuracy beats the validation "
        "data's majority-class rate 0.1000 + 0.1342 becomes v1 at "
        f"{_pointer_file(tmp_path)})"
    )
    gated = settings_for(tmp_path, "r", promote_if="val_accuracy>=0.95")  # the bar is given
    assert "majority-class" not in promotion_check(gated, INFO)


def test_a_pointer_without_a_task_is_judged_by_the_card_it_vouches_for(tmp_path: Path) -> None:
    """A pointer written before pointers recorded the task: the champion's card is read
    (bounded, no links) and used only while its sha256 is the pointer's."""
    from app.promotion.step import promote_run

    make_run(tmp_path, "first", 0.962)
    promote_run(settings_for(tmp_path, "first"), INFO, {"status": "succeeded"})
    pointer = json.loads(_pointer_file(tmp_path).read_text())
    del pointer["task"]
    _pointer_file(tmp_path).write_text(json.dumps(pointer))
    assert promotion_check(settings_for(tmp_path, "r"), INFO).endswith(
        "; this run: classes [0, 1, 2, 3, 4, 5, 6, 7, 8, 9] 1x8x8"
    )
    assert "another task" in _failure_with(settings_for(tmp_path, "r"), CATS_AND_DOGS)
    card = Path(pointer["export"]) / "model_card.json"
    card.write_bytes(card.read_bytes().replace(b'"0"', b'"zero"'))  # altered after promotion
    said = _failure_with(settings_for(tmp_path, "r"), INFO)
    assert (
        "the champion cannot be checked against its model card" in said
        and "not the pointer's" in said
    )
    card.unlink()
    card.symlink_to(tmp_path / "first" / "export" / "model_card.json")  # the same bytes, linked
    said = _failure_with(settings_for(tmp_path, "r"), INFO)
    assert "a symbolic link, not followed" in said


# A pointer edited by hand after promotion, its card untouched: the champion's figure lowered
# (value alone, or metrics and value), its task replaced by another whole task (names and
# digest agreeing), or one class renamed with the digest left as it was.
POINTER_EDITS = ["value", "metrics", "task", "a name"]


def _edit(pointer: dict[str, Any], edit: str) -> None:
    if edit == "value":
        pointer["value"] = 0.1
    elif edit == "metrics":
        pointer["metrics"]["val_accuracy"] = pointer["value"] = 0.1
    elif edit == "task":
        pointer["task"] = Task.of_info(CATS_AND_DOGS).record()
    else:
        pointer["task"]["class_names"][0] = "zero"


@pytest.mark.parametrize("edit", POINTER_EDITS)
def test_a_pointer_saying_otherwise_than_its_card_keeps_the_champion(
    tmp_path: Path, edit: str
) -> None:
    """The gate believes the card the pointer vouches for (by sha256), not what the pointer
    says beside it: a worse model, or a model of another task, is not promoted on an edited
    pointer, and `check` fails on it in the step's words."""
    from app.promotion.step import promote_run

    make_run(tmp_path, "first", 0.962)
    promote_run(settings_for(tmp_path, "first"), INFO, {"status": "succeeded"})
    pointer = json.loads(_pointer_file(tmp_path).read_text())
    _edit(pointer, edit)
    _pointer_file(tmp_path).write_text(json.dumps(pointer))
    info = CATS_AND_DOGS if edit == "task" else INFO  # the task the edited pointer claims
    said = _failure_with(settings_for(tmp_path, "r"), info)
    assert "the pointer says otherwise than the model card it names" in said, said
    assert "another task" not in said, said  # the pointer is at fault, not the run
    if edit == "metrics":  # the edited figure named, beside the card's (not two cut prefixes)
        assert "its metrics differ from the card's: val_accuracy 0.1, the card's 0.962" in said
    make_run(tmp_path, "worse", 0.5, info=info)
    summary = promote_run(settings_for(tmp_path, "worse"), info, {"status": "succeeded"})
    assert summary["promoted"] is False, summary["promotion"]
    assert "the pointer says otherwise than the model card" in summary["promotion"]["reason"]
    assert json.loads(_pointer_file(tmp_path).read_text()) == pointer  # not moved


def test_a_champion_copy_whose_weights_were_altered_fails_the_check(tmp_path: Path) -> None:
    """Its card verifies, its weights.pt does not: every run's gate scores that copy on the
    run's rows, cannot, and keeps the champion. `check` said ok (found by a red-team pass)."""
    from app.promotion.step import promote_run

    make_run(tmp_path, "first", 0.962)
    promote_run(settings_for(tmp_path, "first"), INFO, {"status": "succeeded"})
    pointer = json.loads(_pointer_file(tmp_path).read_text())
    weights = Path(pointer["export"]) / "weights.pt"
    weights.write_bytes(weights.read_bytes()[:-8] + b"planted!")
    said = _failure_with(settings_for(tmp_path, "r"), INFO)
    assert said.startswith(f"{_pointer_file(tmp_path)}: the champion's copy fails its check ("), (
        said
    )
    assert "weights.pt" in said and "does not match" in said, said
    assert said.endswith("put the copy back from the champion run's export, or remove the pointer")


def test_a_champion_copy_whose_vouched_weights_do_not_load_fails_the_check(
    tmp_path: Path,
) -> None:
    """NaN weights with a card and pointer rewritten to vouch for them: every checksum holds,
    `check` said ok, and each run then trained and kept the champion, which it could not score
    (a red-team pass). The check loads the copy's weights as the gate would."""
    import hashlib
    import shutil

    import torch

    from app.promotion.step import promote_run

    make_run(tmp_path, "first", 0.962)
    promote_run(settings_for(tmp_path, "first"), INFO, {"status": "succeeded"})
    pointer = json.loads(_pointer_file(tmp_path).read_text())
    copy = Path(pointer["export"])
    state = torch.load(copy / "weights.pt", weights_only=True)
    state = {
        key: torch.full_like(value, float("nan")) if value.is_floating_point() else value
        for key, value in state.items()
    }
    torch.save(state, copy / "weights.pt")
    card = json.loads((copy / "model_card.json").read_text())
    card["files"]["weights.pt"] = hashlib.sha256((copy / "weights.pt").read_bytes()).hexdigest()
    card_bytes = json.dumps(card).encode()
    (copy / "model_card.json").write_bytes(card_bytes)
    digest = hashlib.sha256(card_bytes).hexdigest()
    moved = shutil.move(copy, copy.parent / digest)  # a copy is found by its card's sha256
    pointer.update(card_sha256=digest, export=str(moved))
    _pointer_file(tmp_path).write_text(json.dumps(pointer))
    said = _failure_with(settings_for(tmp_path, "r"), INFO)
    assert said.startswith(f"{_pointer_file(tmp_path)}: the champion's copy fails its check ("), (
        said
    )
    assert "weights.pt" in said and "NaN" in said, said


def test_no_champion_yet_and_nothing_written(tmp_path: Path) -> None:
    line = promotion_check(settings_for(tmp_path, "r"))
    assert (
        line
        == f"{DEFAULT}; no champion yet (the first run becomes v1 at {_pointer_file(tmp_path)})"
    )
    gated = settings_for(tmp_path, "r", promote_if="val_accuracy>=0.95")
    assert promotion_check(gated).startswith(
        "gate val_accuracy>=0.95; no champion yet (the first run to pass the gate becomes v1"
    )
    assert not tmp_path.joinpath("champions").exists()  # check reads, never writes


def test_a_storage_path_that_is_no_folder_is_left_to_the_storage_check(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("a regular file, not a folder\n")
    assert "; no champion yet (" in promotion_check(settings_for(tmp_path / "a-file", "r"))


DAMAGED = [
    ("torn", b'{"version": 3, "metr', "unreadable champion pointer"),
    ("not-utf8", b'{"version": 3, "run_name": "\xff"}', "unreadable champion pointer"),
    ("a-list", b"[1, 2]", "no whole-number `version`"),
    ("version-text", b'{"version": "3"}', "no whole-number `version`"),
    ("version-bool", b'{"version": true}', "no whole-number `version`"),
    # Shown as ok (`v-7`), and the next promotion numbered itself from it (a red-team pass).
    ("version-negative", b'{"version": -7}', "`version` -7 is not a promotion count from 1"),
    ("version-zero", b'{"version": 0}', "`version` 0 is not a promotion count from 1"),
    ("version-huge", b'{"version": 1' + b"0" * 30 + b"}", "is not a promotion count from 1 to"),
    ("metrics-text", b'{"version": 3, "metrics": "val_accuracy 0.9"}', "`metrics` is not an"),
    ("too-big", b'{"version": 3, "pad": "' + b"x" * (2 << 20) + b'"}', "over the"),
    ("deep", b"[" * 100_000, "unreadable champion pointer"),
    # Python's json keeps the last (v99), other readers the first (a red-team pass).
    ("key-twice", b'{"version": 3, "version": 99}', 'the key "version" is given twice'),
]


@pytest.mark.parametrize(
    ("content", "problem"), [c[1:] for c in DAMAGED], ids=[c[0] for c in DAMAGED]
)
def test_a_damaged_pointer_fails_naming_the_file(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    _pointer_file(tmp_path).parent.mkdir()
    _pointer_file(tmp_path).write_bytes(content)
    said = _failure(settings_for(tmp_path, "r"))
    assert said.startswith(f"{_pointer_file(tmp_path)}: ") and problem in said, said
    assert "a run would train and then keep the champion, not promoted" in said
    assert said.isprintable() and len(said) < 800, said


def test_a_link_or_a_folder_is_not_a_pointer(tmp_path: Path) -> None:
    (tmp_path / "elsewhere.json").write_text(json.dumps({"version": 1}))
    _pointer_file(tmp_path).parent.mkdir()
    _pointer_file(tmp_path).symlink_to(tmp_path / "elsewhere.json")
    assert "unreadable champion pointer" in _failure(settings_for(tmp_path, "r"))
    (tmp_path / "elsewhere.json").unlink()  # dangling: still a link, not "no champion yet"
    assert "a symbolic link, not followed" in _failure(settings_for(tmp_path, "r"))
    _pointer_file(tmp_path).unlink()
    _pointer_file(tmp_path).mkdir()
    assert "unreadable champion pointer" in _failure(settings_for(tmp_path, "r"))


def test_the_step_keeps_the_champion_on_what_check_fails(tmp_path: Path) -> None:
    """`metrics` that is not an object stopped the gate midway (AttributeError) before the
    reader refused it: now the step keeps the champion with the reason check gives."""
    from app.promotion.step import promote_run

    _write(tmp_path, {"version": 3, "run_name": "old", "metrics": "val_accuracy 0.9"})
    make_run(tmp_path, "r", 0.99)
    summary = promote_run(settings_for(tmp_path, "r"), INFO, {"status": "succeeded"})
    assert summary["promoted"] is False
    reason = summary["promotion"]["reason"]
    assert "`metrics` is not an object" in reason and reason in _failure(
        settings_for(tmp_path, "r")
    )


def test_a_champion_at_the_last_version_is_kept_and_check_says_why(tmp_path: Path) -> None:
    """At v1,000,000,000 a promotion wrote v1,000,000,001, which every reader of the pointer
    then refused, `check` included (a red-team pass): the step keeps it, saying why, and check
    fails on it before a run trains."""
    from app.promotion.champion import MAX_VERSION
    from app.promotion.step import promote_run

    _write(tmp_path, {"version": MAX_VERSION, "run_name": "old", "metrics": {"val_accuracy": 0.1}})
    said = _failure(settings_for(tmp_path, "r"))
    assert f"at v{MAX_VERSION:,}, the last version a pointer may hold" in said, said
    assert "a run would train and then keep the champion, not promoted" in said
    make_run(tmp_path, "r", 0.99)
    summary = promote_run(settings_for(tmp_path, "r"), INFO, {"status": "succeeded"})
    assert summary["promoted"] is False
    assert "the last version a pointer may hold" in summary["promotion"]["reason"]
    assert summary["promotion"]["line"].startswith(f"kept v{MAX_VERSION}: not promoted")
    assert json.loads(_pointer_file(tmp_path).read_text())["version"] == MAX_VERSION


def _unguarded(settings: TrainSettings) -> str:
    """The line of a gate that never compares with the champion, said as a warning."""
    with pytest.raises(UnguardedChampion) as said:
        promotion_check(settings)
    assert "the gate never compares with the champion" in str(said.value)
    return str(said.value)


def test_a_champion_without_the_metric_would_mis_gate(tmp_path: Path) -> None:
    """beats_champion has no figure on record to beat: the step keeps the champion, and the
    check fails. A gate of thresholds alone never reads the champion's metrics: fine, and
    said."""
    _write(tmp_path, {"version": 2, "run_name": "old", "metrics": {"val_loss": 0.1}})
    said = _failure(settings_for(tmp_path, "r"))
    assert said.startswith(f"{_pointer_file(tmp_path)}: the champion has no val_accuracy")
    assert "TRAIN_CHECKPOINT_METRIC" in said
    line = _unguarded(settings_for(tmp_path, "r", promote_if="val_accuracy>=0.9"))
    assert line.startswith("gate val_accuracy>=0.9; champion: run old v2, no val_accuracy; ")
    by_loss = settings_for(tmp_path, "r", checkpoint_metric="val_loss")
    assert promotion_check(by_loss).endswith("champion: run old v2, val_loss 0.1 on its own data")


def test_strings_from_the_pointer_are_bounded_and_printable(tmp_path: Path) -> None:
    hostile = "\x1b]0;owned\x07 s3://user:secret@host/b " + "z" * 100_000
    _write(
        # (A version past MAX_VERSION is refused, its text bounded: DAMAGED, version-huge.)
        tmp_path,
        {"version": 3, "run_name": hostile, "metrics": {"val_accuracy": 10**400}},
    )
    said = _failure(settings_for(tmp_path, "r"))  # a number past a float's range: nothing to beat
    assert "has no val_accuracy" in said
    line = _unguarded(settings_for(tmp_path, "r", promote_if="val_accuracy>=0.9"))
    assert line.isprintable() and len(line) < 500 and "secret" not in line, line
    assert "\\x1b]0;owned\\x07" in line
