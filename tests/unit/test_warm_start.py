"""TRAIN_WARM_START from what a team has (app/run/warm_start.py): a run folder, a
checkpoint folder, an export folder, a champion or a state-dict file, each resolved to the
weights it vouches for and loaded from the bytes that were hashed; altered, linked, non-regular
and other-task sources refused with the reason. Real checkpoints, a real promotion (export,
pointer, champion's copy), real files; no Ray."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image

from app.errors import ConfigError
from app.promotion.step import promote_run
from app.run.warm_start import resolve
from app.runfolder import checkpoints
from app.training.warm_weights import WarmStart
from tests.promotion_support import CATS_AND_DOGS, INFO, make_run, settings_for


@pytest.fixture
def champion_run(tmp_path: Path) -> Path:
    """Run `r` (one checkpoint), promoted: its export and the champion digits-cnn v1."""
    run_dir = make_run(tmp_path, "r", 0.9)
    assert promote_run(settings_for(tmp_path, "r"), INFO, {})["champion_version"] == 1
    return run_dir


def _resolve(storage: Path, source: Any, info: Any = INFO, **extra: Any) -> WarmStart:
    return resolve(settings_for(storage, "next", warm_start=source, **extra), info)


def _refused(storage: Path, source: Any, *needles: str, info: Any = INFO) -> str:
    with pytest.raises(ConfigError) as caught:
        _resolve(storage, source, info)
    said = "; ".join(caught.value.problems)
    for needle in needles:
        assert needle in said, said
    return said


def test_every_source_resolves_to_the_weights_it_vouches_for(
    tmp_path: Path, champion_run: Path
) -> None:
    checkpoint = checkpoints.scan(champion_run).good[0].path
    trained = checkpoints.load_train_state(checkpoint)[0]
    pointer = json.loads((tmp_path / "champions" / "digits-cnn.json").read_text())
    copy = Path(pointer["export"])
    expected = {
        str(champion_run): (
            checkpoint / "model.pt",
            f"run {champion_run}'s best checkpoint checkpoint_epoch_0001 (epoch 1, "
            "val_accuracy 0.9)",
        ),
        str(checkpoint): (checkpoint / "model.pt", f"checkpoint {checkpoint}"),
        str(checkpoint / "model.pt"): (
            checkpoint / "model.pt",
            f"checkpoint {checkpoint} (named by its model.pt)",
        ),
        str(champion_run / "export" / "weights.pt"): (
            champion_run / "export" / "weights.pt",
            f"export {champion_run}/export (named by its weights.pt)",
        ),
        str(champion_run / "export"): (
            champion_run / "export" / "weights.pt",
            f"export {champion_run}/export",
        ),
        "champion:digits-cnn": (copy / "weights.pt", "champion digits-cnn v1 (run r, epoch 1)"),
    }
    for source, (file, described) in expected.items():
        warm = _resolve(tmp_path, source)
        assert (warm.file, warm.described) == (file, described)
        loaded = warm.load_weights()
        assert loaded.keys() == trained.keys()
        assert all(torch.equal(loaded[k], trained[k]) for k in trained), source


def test_a_champion_of_another_task_is_refused_naming_both(
    tmp_path: Path, champion_run: Path
) -> None:
    _refused(
        tmp_path, "champion:digits-cnn",
        "TRAIN_WARM_START=champion:digits-cnn: champion digits-cnn v1 (run r, epoch 1) is "
        "another task: classes [0, 1, 2, 3, 4, 5, 6, 7, 8, 9] 1x8x8; this run [cat, dog] 1x8x8",
        info=CATS_AND_DOGS,
    )  # fmt: skip
    _refused(tmp_path, str(champion_run / "export"), "is another task", info=CATS_AND_DOGS)
    weights = champion_run / "export" / "weights.pt"
    _refused(
        tmp_path, str(weights), "(named by its weights.pt) is another task", info=CATS_AND_DOGS
    )
    # A checkpoint records its class names: the same names in another order are refused too.
    pets = make_run(tmp_path, "pets", 0.9, info=CATS_AND_DOGS)
    swapped = dataclasses.replace(CATS_AND_DOGS, class_names=("dog", "cat"))
    _refused(tmp_path, str(pets), "trained on other classes: classes [cat, dog]", info=swapped)
    assert _resolve(tmp_path, str(pets), CATS_AND_DOGS).described.startswith("run ")


@pytest.mark.parametrize("linked", ["copy", "name"])
def test_a_champion_reached_through_a_link_is_refused_by_warm_start_and_predict(
    tmp_path: Path, champion_run: Path, linked: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """champions/<name>/<sha> (or champions/<name>) moved out of the storage folder and
    linked back was followed by predict and warm start alike (found by a red-team pass)."""
    from tests.hostile.support import assert_refused, trainctl

    pointer = json.loads((tmp_path / "champions" / "digits-cnn.json").read_text())
    copy = Path(pointer["export"])
    moved = copy if linked == "copy" else copy.parent
    outside = tmp_path / "outside"
    outside.mkdir()
    moved.rename(outside / moved.name)
    moved.symlink_to(outside / moved.name)
    _refused(tmp_path, "champion:digits-cnn", f"{moved}: is a symbolic link", "never read")
    image = tmp_path / "digit.png"
    Image.new("L", (8, 8)).save(image)
    monkeypatch.setenv("TRAIN_STORAGE_PATH", str(tmp_path))
    result = trainctl("predict", "champion:digits-cnn", str(image))
    assert_refused(result, 2, f"{moved}: is a symbolic link", "never read through a link")


def test_altered_sources_are_refused_before_anything_loads(
    tmp_path: Path, champion_run: Path
) -> None:
    export = champion_run / "export"
    weights = export / "weights.pt"
    good = weights.read_bytes()
    state = torch.load(weights, weights_only=True)
    state[next(iter(state))] += 1  # other weights, a valid state dict
    torch.save(state, weights)
    _refused(tmp_path, str(export), f"{weights} has sha256 ", "its model card records")
    # Named by the file itself, not its folder: checked against the same card.
    _refused(tmp_path, str(weights), f"{weights} has sha256 ", "its model card records")
    weights.write_bytes(good)
    # The champion's card altered after promotion: the pointer's card_sha256 no longer holds.
    pointer = json.loads((tmp_path / "champions" / "digits-cnn.json").read_text())
    card = Path(pointer["export"]) / "model_card.json"
    card.write_bytes(card.read_bytes().replace(b'"format"', b'"format" ', 1))
    _refused(tmp_path, "champion:digits-cnn", "the champion's card", "not the pointer's")
    # A checkpoint's model.pt altered: its meta.json checksum no longer holds.
    model = champion_run / "checkpoint_epoch_0001" / "model.pt"
    model.write_bytes(model.read_bytes() + b"\0")
    _refused(tmp_path, str(model.parent), "an unusable checkpoint", "model.pt does not match")
    _refused(tmp_path, str(model), "an unusable checkpoint", "model.pt does not match")


def test_an_export_resealed_against_its_run_is_refused_as_predict_refuses_it(
    tmp_path: Path, champion_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Other weights, the card rewritten to list their sha256: the card's own checksums hold,
    and only summary.json's record of the card tells. `predict` refused such an export while a
    warm start took it as verified (found by a red-team pass)."""
    import hashlib

    from app.export.card import verified

    export = champion_run / "export"
    weights, card_file = export / "weights.pt", export / "model_card.json"
    state = torch.load(weights, weights_only=True)
    state[next(iter(state))] += 1
    torch.save(state, weights)
    card = json.loads(card_file.read_text())
    card["files"]["weights.pt"] = hashlib.sha256(weights.read_bytes()).hexdigest()
    card_file.write_text(json.dumps(card))
    recorded = "promotion.export.card_sha256"
    with pytest.raises(ConfigError) as caught:
        verified(export)
    assert recorded in caught.value.problems[0]
    _refused(tmp_path, str(export), f"TRAIN_WARM_START={export}: {card_file}: sha256 ", recorded)
    _refused(tmp_path, str(weights), f"{card_file}: sha256 ", recorded)
    # Without the record (removed, damaged, or set aside by a rerun): taken, with a warning
    # naming the check that could not be made, where no signature anchors the card.
    (champion_run / "summary.json").unlink()
    capsys.readouterr()
    assert _resolve(tmp_path, str(export)).file == weights
    warned = capsys.readouterr().err
    assert f"trainctl: warning: {card_file}: checked against its own list of files only" in warned
    assert "records no card_sha256" in warned and "TRAIN_VERIFY_KEY" in warned


def test_a_file_changed_after_preflight_is_not_loaded(tmp_path: Path) -> None:
    """The workers load what preflight verified: the bytes read then, by their sha256."""
    run_dir = make_run(tmp_path, "r", 0.9)
    file = tmp_path / "warm.pt"
    file.write_bytes((run_dir / "checkpoint_epoch_0001" / "model.pt").read_bytes())
    warm = _resolve(tmp_path, str(file))
    state = torch.load(file, weights_only=True)
    torch.save({k: v + 1 for k, v in state.items()}, file)
    with pytest.raises(ConfigError) as caught:
        warm.load_weights()
    assert "read before the run started; altered, and not loaded" in str(caught.value)


class Payload:
    """A pickle that writes a file when it is unpickled: the proof that nothing ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.write_text, (self.marker, "code ran"))


def test_links_fifos_and_pickled_code_are_refused(tmp_path: Path, champion_run: Path) -> None:
    export = champion_run / "export"
    weights = export / "weights.pt"
    weights.rename(tmp_path / "elsewhere.pt")
    weights.symlink_to(tmp_path / "elsewhere.pt")  # the same bytes, through a link
    _refused(
        tmp_path, str(export), f"{weights}: is a symbolic link (to {tmp_path / 'elsewhere.pt'})"
    )
    linked = tmp_path / "linked.pt"
    linked.symlink_to(tmp_path / "elsewhere.pt")
    _refused(
        tmp_path, str(linked), f"{linked}: is a symbolic link (to {tmp_path / 'elsewhere.pt'})"
    )

    fifo = tmp_path / "fifo.pt"
    os.mkfifo(fifo)
    done = threading.Event()
    said: list[str] = []

    def refuse() -> None:  # a FIFO would block a plain open forever: bounded here
        said.append(_refused(tmp_path, str(fifo), "not a regular file"))
        done.set()

    threading.Thread(target=refuse, daemon=True).start()
    assert done.wait(timeout=60), "a FIFO at TRAIN_WARM_START hung the resolution"

    marker = tmp_path / "pwned"
    code = tmp_path / "code.pt"
    torch.save({"weight": Payload(marker)}, code)
    _refused(tmp_path, str(code), "cannot be loaded as weights")
    assert not marker.exists()


def test_what_cannot_start_a_run_says_what_can(tmp_path: Path, champion_run: Path) -> None:
    _refused(tmp_path, "champion:nobody", "no champion nobody under TRAIN_STORAGE_PATH")
    _refused(tmp_path, "champion:digits-cn", "is not there); did you mean digits-cnn?")
    (tmp_path / "empty").mkdir()
    _refused(tmp_path, str(tmp_path / "empty"), "no model_card.json (an export)", "champion:")
    # An export made before exports carried weights.pt: its run folder is the way.
    card_file = champion_run / "export" / "model_card.json"
    card = json.loads(card_file.read_text())
    del card["files"]["weights.pt"]
    card_file.write_text(json.dumps(card))
    _refused(tmp_path, str(champion_run / "export"), "has no weights.pt", "run folder instead")


def test_a_champion_pointer_file_is_pointed_to_its_name(tmp_path: Path, champion_run: Path) -> None:
    """The pointer is JSON, not weights: the refusal says how a champion is named instead of
    leaving a new user with torch's UnpicklingError."""
    pointer = tmp_path / "champions" / "digits-cnn.json"
    _refused(
        tmp_path, str(pointer), "cannot be loaded as weights",
        "digits-cnn.json is a champion's pointer: write TRAIN_WARM_START=champion:digits-cnn",
    )  # fmt: skip
    other = tmp_path / "notes.json"
    other.write_text('{"not": "weights"}')
    _refused(tmp_path, str(other), "not a plain state-dict file", "champion:<model-name>")


def test_check_says_a_plain_file_is_hashed_not_verified(tmp_path: Path, champion_run: Path) -> None:
    """Only a card or a meta.json records a checksum to verify against; a plain file's line
    must not claim a verification that never happened."""
    from app.preflight import Found, _warm_start

    model = champion_run / "checkpoint_epoch_0001" / "model.pt"
    plain = tmp_path / "plain.pt"
    plain.write_bytes(model.read_bytes())
    for source, said in ((plain, "(a plain file: nothing to verify)"), (model.parent, "verified")):
        line = _warm_start(settings_for(tmp_path, "next", warm_start=str(source)), Found(INFO))
        assert f"{said}; fits the model" in line, line
    assert "verified" not in _warm_start(
        settings_for(tmp_path, "next", warm_start=str(plain)), Found(INFO)
    )


def test_a_storage_moved_after_promotion_still_finds_its_champion(tmp_path: Path) -> None:
    """The pointer's `export` names the copy where the storage was mounted when it was
    written; a storage mounted elsewhere (another pod's path, a folder moved) finds the
    champion's copy below itself, by the card's sha256: warm start, and the next promotion's
    task check, read it there."""
    old, new = tmp_path / "old", tmp_path / "new"
    make_run(old, "r", 0.5)
    assert promote_run(settings_for(old, "r"), INFO, {})["champion_version"] == 1
    old.rename(new)
    pointer = json.loads((new / "champions" / "digits-cnn.json").read_text())
    assert pointer["export"].startswith(str(old))  # names a folder that is gone
    copy = new / "champions" / "digits-cnn" / pointer["card_sha256"]
    warm = _resolve(new, "champion:digits-cnn")
    assert (warm.file, warm.described) == (
        copy / "weights.pt",
        "champion digits-cnn v1 (run r, epoch 1)",
    )
    assert warm.load_weights()  # the bytes its card records
    make_run(new, "s", 0.9)
    summary = promote_run(settings_for(new, "s"), INFO, {})
    assert summary["promoted"] and summary["champion_version"] == 2, summary["promotion"]
    # A pointer whose card_sha256 is not a sha256 names no copy: refused, never a path.
    pointer = json.loads((new / "champions" / "digits-cnn.json").read_text())
    pointer["card_sha256"] = "../../r/export"
    (new / "champions" / "digits-cnn.json").write_text(json.dumps(pointer))
    _refused(new, "champion:digits-cnn", "names no copy of the champion", "is not a sha256")


def test_a_champion_pointer_that_says_otherwise_than_its_card_is_no_warm_start(
    tmp_path: Path, champion_run: Path
) -> None:
    """A fine-tune of the champion starts from the copy whose card says what the pointer says
    (its run, task and figures), as the gate judges it: the warm start read only the card's
    checksum and signature (found in review)."""
    path = tmp_path / "champions" / "digits-cnn.json"
    pointer = json.loads(path.read_text())
    path.write_text(json.dumps({**pointer, "run_name": "someone-else"}))
    _refused(
        tmp_path, "champion:digits-cnn", "the pointer says otherwise than the model card",
        'its run is "someone-else", the card\'s "r"',
    )  # fmt: skip


def test_a_sweep_starts_every_trial_from_the_champion_it_read_once(
    tmp_path: Path, champion_run: Path
) -> None:
    """champion:<name> for a sweep: its trials' storage is the sweep's trials folder, where no
    champion lives, so the sweep resolves the champion once and hands every trial the copy the
    pointer named and the weights it verified (app/sweep/warm_start.py); `render` refused it."""
    from app.settings.tune_plan import Trial, trial_settings
    from app.sweep.warm_start import pin_champion, same_weights

    sweep = settings_for(tmp_path, "nightly", warm_start="champion:digits-cnn")
    warm = resolve(sweep, INFO)
    drawn = (Trial(1, {"lr": 0.01}), Trial(2, {"lr": 0.1}))
    trials = {t.trial_id: trial_settings(sweep, t, sweep.run_dir) for t in drawn}
    with pytest.raises(ConfigError, match="no champion digits-cnn under TRAIN_STORAGE_PATH"):
        resolve(trials["trial-0001"], INFO)  # unpinned: looked up in the trials folder
    pinned_trials, pinned, record = pin_champion(sweep, warm, {}, trials, trials_left=True)
    assert pinned is warm
    assert record == {"source": "champion:digits-cnn", "sha256": warm.sha256,
                      "described": "champion digits-cnn v1 (run r, epoch 1)"}  # fmt: skip
    for trial_id, trial in pinned_trials.items():
        assert trial.run_dir == trials[trial_id].run_dir and trial.lr == trials[trial_id].lr
        own = resolve(trial, INFO)  # the trial's own check of the copy, as `train` does
        assert (own.file, own.sha256) == (warm.file, warm.sha256)
        assert same_weights(own, pinned) is pinned  # the trial logs `champion digits-cnn v1`

    # A champion promoted while the sweep runs changes nothing for its trials...
    make_run(tmp_path, "better", 0.95, seed=1)
    assert promote_run(settings_for(tmp_path, "better"), INFO, {})["champion_version"] == 2
    assert resolve(pinned_trials["trial-0002"], INFO).sha256 == warm.sha256
    # ...and a rerun after it is refused: the trials left would start from other weights.
    newer = resolve(sweep, INFO)
    assert newer.sha256 != warm.sha256
    with pytest.raises(ConfigError) as refused:
        pin_champion(sweep, newer, {"warm_start": record}, trials, trials_left=True)
    said = refused.value.problems[0]
    assert "trials started from champion digits-cnn v1 (run r, epoch 1)" in said, said
    assert "now champion digits-cnn v2 (run better, epoch 1)" in said and "new sweep" in said
    same = pin_champion(sweep, warm, {"warm_start": record}, trials, trials_left=True)
    assert same[1] is warm  # the same champion: the trials left go on from it
    # No trial left (the sweep's own promotion moved the champion): nothing to start, the
    # record kept as the trials trained.
    done = pin_champion(sweep, newer, {"warm_start": record}, trials, trials_left=False)
    assert done == (trials, None, record)
    # A copy that gives other weights when a trial checks it is not loaded.
    altered = dataclasses.replace(warm, sha256="0" * 64)
    with pytest.raises(ConfigError, match="altered, and not loaded"):
        same_weights(altered, pinned)
    # Any other warm start is each trial's own, resolved as `train` resolves it.
    export = settings_for(tmp_path, "nightly", warm_start=str(champion_run / "export"))
    unpinned = pin_champion(export, resolve(export, INFO), {}, trials, trials_left=True)
    assert unpinned == (trials, None, None)


def test_a_sweeps_trials_are_fitted_to_the_weights_preflight_loaded_once(
    tmp_path: Path, champion_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`check` and `tune` loaded the warm start's file twice: once to resolve it, again to fit
    each trial's model. The shapes resolve() read serve the trials."""
    from app.run.warm_start import trials_fit_problems
    from app.settings.tune_plan import Trial, trial_settings

    loads: list[Path] = []
    load_weights = WarmStart.load_weights

    def counted(self: WarmStart) -> dict[str, Any]:
        loads.append(Path(str(self.file)))
        return load_weights(self)

    monkeypatch.setattr(WarmStart, "load_weights", counted)
    sweep = settings_for(tmp_path, "nightly", warm_start=str(champion_run / "export"))
    warm = resolve(sweep, INFO)
    assert loads == [champion_run / "export" / "weights.pt"]
    assert dict(warm.shapes) and all(isinstance(s, tuple) for _, s in warm.shapes)
    drawn = [Trial(1, {"model": "cnn"}), Trial(2, {"model": "resnet18"})]
    trials = {t.trial_id: trial_settings(sweep, t, sweep.run_dir) for t in drawn}
    problems = trials_fit_problems(warm, trials, INFO)
    assert len(loads) == 1  # not loaded again
    assert [trial for trial, _ in problems] == ["trial-0002"], problems
    assert "does not fit TRAIN_MODEL=resnet18" in problems[0][1]
