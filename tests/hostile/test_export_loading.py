"""Exports written by someone else: `trainctl predict` runs none of their code, loads exactly
the bytes it hashed, and refuses links and non-regular files (exit 2, naming them) instead of
following them or hanging. The champions folder and artifact uploads refuse links alike.

Each malicious file is built here and proven live at the end of its test (loaded the unsafe
way, it does write its marker): a test whose payload could never run would prove nothing.
Exports are real (a cnn checkpoint put through the promotion step, no Ray).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from app.export.card import CARD_FILE, card_json, verified
from app.export.predict import load_model
from app.promotion.step import promote_run
from app.storage import safe_fs
from app.storage.location import local_copy
from tests.hostile.support import Payload, assert_refused, malicious_torch_file, trainctl
from tests.promotion_support import INFO, exported_run, make_run, settings_for


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A finished run with its real export (weights.pt, model.pt2, the card)."""
    return exported_run(tmp_path / "runs")


@pytest.fixture
def image(tmp_path: Path) -> str:
    path = tmp_path / "seven.png"
    Image.fromarray(np.full((8, 8), 200, dtype=np.uint8), "L").save(path)
    return str(path)


def _vouch(export: Path, name: str) -> None:
    """Rewrite the card so that it lists `name` with its current sha256, and the run's
    summary.json so that it records the new card's: what anyone who can write the run folder
    can do, since both are in it. (The card alone rewritten is refused before any file is
    read: tests/hostile/test_evaluate_inputs.py.)"""
    card = json.loads((export / CARD_FILE).read_text())
    card["files"][name] = hashlib.sha256((export / name).read_bytes()).hexdigest()
    (export / CARD_FILE).write_bytes(card_json(card))
    summary_file = export.parent / "summary.json"
    summary = json.loads(summary_file.read_text())
    summary["promotion"]["export"]["card_sha256"] = hashlib.sha256(card_json(card)).hexdigest()
    summary_file.write_text(json.dumps(summary))


# --- the card's classes ------------------------------------------------------------------------
@pytest.mark.parametrize("change", ["renamed", "reordered"])
def test_a_card_relabelled_against_its_run_is_refused(run: Path, image: str, change: str) -> None:
    """The card names what each output means: edited (other names, or the same in another
    order) it would relabel every prediction and evaluation while every checksum held. A run's
    export answers in the classes its run recorded (classes.json)."""
    from app.runfolder.class_names import record

    names = tuple(str(n) for n in range(10))
    record(run, names)
    assert trainctl("predict", str(run), image).code == 0  # the names recorded: it loads
    card = json.loads((run / "export" / CARD_FILE).read_text())
    edited = ["zero", *names[1:]] if change == "renamed" else [names[1], names[0], *names[2:]]
    card["class_names"] = edited
    (run / "export" / CARD_FILE).write_bytes(card_json(card))
    for target in (run, run / "export"):  # the run folder, or its export/ named directly
        result = trainctl("predict", str(target), image)
        assert_refused(result, 2, "are not its run's", "classes.json", "the card was altered")
    result = trainctl("evaluate", str(run), "--split", "valid")
    assert_refused(result, 2, "are not its run's")
    assert not (run / "eval").exists()  # nothing written over the run's own evaluation


def test_a_sweep_that_exported_no_trial_says_to_finish_it(tmp_path: Path, image: str) -> None:
    """A sweep's folder answers with its best trial's export; before it has one, the sweep
    pointed to its trials, and each trial back to the sweep (a red-team pass)."""
    sweep = tmp_path / "runs" / "nightly"
    (sweep / "trials" / "trial-0001").mkdir(parents=True)
    (sweep / "sweep.json").write_text("{}")
    needles = ("a sweep's folder", "has exported no trial yet", "rerun the sweep", "champion:")
    for command in (("predict", str(sweep), image), ("evaluate", str(sweep), "--split", "valid")):
        assert_refused(trainctl(*command), 2, *needles)
    trial = str(sweep / "trials" / "trial-0001")
    for command in (("predict", trial, image), ("evaluate", trial, "--split", "valid")):
        result = trainctl(*command)
        assert_refused(result, 2, *needles)
        assert "give the sweep's folder" not in result.text


# --- code execution ----------------------------------------------------------------------------
def test_weights_that_would_run_code_are_refused_not_unpickled(
    run: Path, image: str, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    weights = run / "export" / "weights.pt"
    weights.write_bytes(malicious_torch_file(marker))
    _vouch(run / "export", "weights.pt")
    result = trainctl("predict", str(run), image)
    assert_refused(result, 2, f"{weights}: cannot be loaded as a state dict (UnpicklingError: "
                   "it holds more than tensors", "treat the folder as tampered with")  # fmt: skip
    # Not "the card was written for this file", torch's own warning asking to file an issue,
    # or its advice to load with weights_only=False (found by a red-team pass).
    assert "written for this file" not in result.text and "UserWarning" not in result.text
    assert "weights_only=False" not in result.text
    assert not marker.exists()
    torch.load(io.BytesIO(weights.read_bytes()), weights_only=False)  # the payload is live
    assert marker.exists()


def test_a_plain_pickle_is_refused_without_torchs_warning(
    run: Path, image: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """pickle.dumps output (protocol 4) made torch print a UserWarning asking to file an issue
    with torch, on the user's terminal, before the refusal."""
    import pickle

    marker = tmp_path / "pwned"
    weights = run / "export" / "weights.pt"
    weights.write_bytes(pickle.dumps(Payload(marker), protocol=4))
    _vouch(run / "export", "weights.pt")
    result = trainctl("predict", str(run), image)
    assert_refused(result, 2, "cannot be loaded as a state dict", "tampered with")
    captured = capfd.readouterr()
    assert "UserWarning" not in captured.err + captured.out + result.text
    assert not marker.exists()


def test_a_damaged_weights_file_is_called_damaged_not_code(run: Path, image: str) -> None:
    """Random bytes read "it holds more than tensors, which would run code if loaded", the
    words for a planted payload (a red-team pass): only a file naming something to call is."""
    weights = run / "export" / "weights.pt"
    weights.write_bytes(b"\x80\x02" + bytes(range(256)) * 8)
    _vouch(run / "export", "weights.pt")
    result = trainctl("predict", str(run), image)
    assert_refused(result, 2, "UnpicklingError: not a file of tensors torch.save wrote")
    assert "run code" not in result.text and "weights_only" not in result.text


def _sympy_payload(program: bytes, marker: Path) -> bytes:
    """The program with Python in a symbolic shape expression: torch.export.load hands it to
    sympy.sympify, which evaluates it. No pickle involved."""
    code = f"__import__('pathlib').Path({str(marker)!r}).write_text('ran') or "
    return _rewrite(program, "models/model.json", lambda text: text.replace(
        '"expr_str": "Symbol(', f'"expr_str": "{code}Symbol(', 1))  # fmt: skip


def _pickle_payload(program: bytes, marker: Path) -> bytes:
    """The program whose sample inputs need weights_only=False: torch.export.load's fallback
    (deserialize_torch_artifact) unpickles them."""
    return _rewrite(program, "sample_inputs/model.pt", lambda _: malicious_torch_file(marker))


def _rewrite(program: bytes, suffix: str, change: Callable[[Any], str | bytes]) -> bytes:
    source, out = zipfile.ZipFile(io.BytesIO(program)), io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for info in source.infolist():
            data = source.read(info.filename)
            if info.filename.endswith(suffix):
                new = change(data.decode() if suffix.endswith(".json") else data)
                data = new.encode() if isinstance(new, str) else new
                assert data != source.read(info.filename)
            archive.writestr(info, data)
    return out.getvalue()


@pytest.mark.parametrize("payload", [_sympy_payload, _pickle_payload], ids=["sympy", "pickle"])
def test_a_program_that_would_run_code_is_never_loaded(
    run: Path, image: str, tmp_path: Path, payload
) -> None:
    """model.pt2 is for model servers: predict answers from weights.pt and never hands the
    program to torch.export.load, which would run both payloads."""
    marker = tmp_path / "pwned"
    program = run / "export" / "model.pt2"
    before = trainctl("predict", str(run), image, "--json")
    program.write_bytes(payload(program.read_bytes(), marker))
    _vouch(run / "export", "model.pt2")
    result = trainctl("predict", str(run), image, "--json")
    assert result.code == 0, result.text
    assert json.loads(result.out) == json.loads(before.out)
    assert not marker.exists()
    with pytest.raises(Exception):  # noqa: B017 - it fails after the payload ran
        torch.export.load(io.BytesIO(program.read_bytes())).module()(torch.zeros(1, 1, 8, 8))
    assert marker.exists()


def test_a_torchscript_export_is_refused_unloaded(run: Path, image: str) -> None:
    export = run / "export"
    scripted = torch.jit.script(torch.nn.Linear(64, 10))
    torch.jit.save(scripted, str(export / "model.ts"))
    card = json.loads((export / CARD_FILE).read_text())
    card.update(file="model.ts", format="torchscript")
    card["files"] = {"model.ts": hashlib.sha256((export / "model.ts").read_bytes()).hexdigest()}
    (export / CARD_FILE).write_bytes(card_json(card))
    result = trainctl("predict", str(run), image)
    assert_refused(result, 2, "lists model.ts, a TorchScript program", "loads only weights.pt")


def test_what_is_loaded_is_the_bytes_that_were_hashed(run: Path, tmp_path: Path) -> None:
    """weights.pt replaced between the check and the load changes nothing: the load reads no
    file, it takes the verified bytes."""
    marker = tmp_path / "pwned"
    export = verified(run / "export")
    original = torch.load(run / "export" / "weights.pt", weights_only=True)
    (run / "export" / "weights.pt").write_bytes(malicious_torch_file(marker))
    model = load_model(export)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in original.items())
    assert not marker.exists()


def test_weights_without_data_are_named_by_key(run: Path, image: str) -> None:
    weights = run / "export" / "weights.pt"
    state = torch.load(weights, weights_only=True)
    torch.save({k: v.to("meta") for k, v in state.items()}, weights)
    _vouch(run / "export", "weights.pt")
    first = next(iter(state))
    result = trainctl("predict", str(run), image)
    assert_refused(result, 2, str(weights), f"{first} has shape", "no data (saved from the meta")


# --- links and non-regular files -------------------------------------------------------------
def _fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def _link(path: Path) -> None:
    target = path.with_name(path.name + ".real")
    path.rename(target)
    path.symlink_to(target)


EXPORT_FILES = [
    ("weights-fifo", "weights.pt", _fifo, "a FIFO (named pipe), not a regular file"),
    ("program-fifo", "model.pt2", _fifo, "a FIFO (named pipe), not a regular file"),
    ("card-fifo", CARD_FILE, _fifo, "a FIFO (named pipe), not a regular file"),
    ("weights-link", "weights.pt", _link, "is a symbolic link"),
    ("program-link", "model.pt2", _link, "is a symbolic link"),
    ("card-link", CARD_FILE, _link, "is a symbolic link"),
]


@pytest.mark.timeout(60)  # a FIFO used to block predict forever; refused at once now
@pytest.mark.parametrize(
    ("name", "plant", "needle"), [c[1:] for c in EXPORT_FILES], ids=[c[0] for c in EXPORT_FILES]
)
def test_export_files_are_opened_as_regular_files_only(
    run: Path, image: str, name: str, plant, needle: str
) -> None:
    plant(run / "export" / name)
    result = trainctl("predict", str(run), image)
    assert_refused(result, 2, str(run / "export" / name), needle)


def test_a_linked_export_folder_is_refused(run: Path, image: str, tmp_path: Path) -> None:
    (run / "export").rename(tmp_path / "elsewhere")
    (run / "export").symlink_to(tmp_path / "elsewhere")
    result = trainctl("predict", str(run), image)
    assert_refused(result, 2, f"{run / 'export'}: is a symbolic link")
    # The folder the operator names is theirs: the export folder itself may be given.
    assert trainctl("predict", str(tmp_path / "elsewhere"), image).code == 0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "link", "folder-link", "device"])
def test_image_arguments_are_regular_files_only(
    run: Path, image: str, tmp_path: Path, kind: str
) -> None:
    """A link to a folder, too: it was taken as one image, read on Ray, and skipped as
    unreadable, exit 1 (a red-team pass); links below a named folder were already refused."""
    planted = tmp_path / "photo.png"
    if kind == "fifo":
        os.mkfifo(planted)
        needle = "a FIFO (named pipe), not a regular file"
    elif kind == "link":
        planted.symlink_to(image)
        needle = f"is a symbolic link (to {image})"
    elif kind == "folder-link":
        album = tmp_path / "album"
        album.mkdir()
        shutil.copy(image, album / "one.png")
        planted = tmp_path / "photos"
        planted.symlink_to(album)
        needle = f"is a symbolic link (to {album})"
    else:
        planted = Path("/dev/zero")  # endless: read whole, it would never end
        needle = "a device, not a regular file"
    result = trainctl("predict", str(run), image, str(planted))
    assert_refused(result, 2, str(planted), needle)


# --- uploads and the champions folder ----------------------------------------------------------
@pytest.mark.timeout(60)
def test_an_upload_copy_refuses_links_and_fifos(run: Path, tmp_path: Path) -> None:
    """What MLflow and W&B upload is local_copy's folder: they follow links themselves, so a
    planted link in export/ would upload what it points at."""
    export = run / "export"
    with local_copy(export) as copy:
        assert sorted(p.name for p in copy.iterdir()) == sorted(p.name for p in export.iterdir())
        assert (copy / "weights.pt").read_bytes() == (export / "weights.pt").read_bytes()
    (tmp_path / "secret").write_text("root:x")
    (export / "secret.txt").symlink_to(tmp_path / "secret")
    link = pytest.raises(safe_fs.LinkRefused, match=r"secret\.txt: is a symbolic link")
    with link, local_copy(export):
        pass
    (export / "secret.txt").unlink()
    os.mkfifo(export / "pipe")
    with pytest.raises(safe_fs.NotRegularFile, match="a FIFO"), local_copy(export):
        pass


def test_a_linked_champions_folder_keeps_the_champion_untouched(tmp_path: Path) -> None:
    storage, outside = tmp_path / "runs", tmp_path / "outside"
    outside.mkdir()
    storage.mkdir()
    (storage / "champions").symlink_to(outside)
    make_run(storage, "r", 0.9)
    summary = promote_run(settings_for(storage, "r"), INFO, {"status": "succeeded"})
    assert summary["promoted"] is False
    assert f"{storage / 'champions'}: is a symbolic link" in summary["promotion"]["reason"]
    assert list(outside.iterdir()) == []  # no pointer, no lock written through the link


def test_predict_and_evaluate_on_a_sweep_use_the_trial_it_exported(
    tmp_path: Path, image: str
) -> None:
    """`trainctl predict <sweep>` (and evaluate) were refused though sweep.json names the best
    trial, the one the sweep exported. Only the trial's id is read from the record: the folder
    is the sweep's own trials/<id>, verified as any run is."""
    import shutil

    exported_run(tmp_path / "runs")
    sweep = tmp_path / "sweeps" / "nightly"
    (sweep / "trials").mkdir(parents=True)
    shutil.copytree(tmp_path / "runs" / "r", sweep / "trials" / "trial-0002")
    record = {"best": {"trial": "trial-0002", "run_dir": "/elsewhere"}}
    (sweep / "sweep.json").write_text(json.dumps(record))
    direct = trainctl("predict", str(sweep / "trials" / "trial-0002"), image, "--json")
    result = trainctl("predict", str(sweep), image, "--json")
    assert result.code == 0, result.text
    assert f"{sweep} is a sweep: predicting with its best trial, trial-0002" in result.err
    assert json.loads(result.out) == json.loads(direct.out)
    # evaluate too: the trial's run is the one judged, so a folder with a class it lacks is
    # refused naming the class (not the sweep's folder for having no export of its own)
    emu = tmp_path / "holdout" / "emu"
    emu.mkdir(parents=True)
    Image.new("L", (8, 8)).save(emu / "a.png")
    evaluated = trainctl("evaluate", str(sweep), str(tmp_path / "holdout"))
    assert f"{sweep} is a sweep: evaluating its best trial, trial-0002" in evaluated.err
    assert_refused(evaluated, 2, "class folders the run does not have: emu")
    # Another trial, which the sweep did not export: named as such, not as a failed run.
    (sweep / "trials" / "trial-0001").mkdir()
    other = trainctl("predict", str(sweep / "trials" / "trial-0001"), image)
    assert_refused(other, 2, "a trial the sweep", "did not export", "give the sweep's folder")
    for hostile in ("../../runs/r", {"x": 1}):  # a path, no id
        (sweep / "sweep.json").write_text(json.dumps({"best": {"trial": hostile}}))
        for command in (("predict", str(sweep), image), ("evaluate", str(sweep), "--split=valid")):
            refused = trainctl(*command)
            assert_refused(refused, 2, "a sweep's folder", "has exported no trial yet")
    # A best trial whose folder is gone (deleted, moved): said so, not "rerun the sweep" (a
    # red-team pass: the sweep had finished).
    (sweep / "sweep.json").write_text(json.dumps({"best": {"trial": "trial-0003"}}))
    for command in (("predict", str(sweep), image), ("evaluate", str(sweep), "--split=valid")):
        refused = trainctl(*command)
        assert_refused(refused, 2, "names trial-0003 as the best trial", "holds no model card")
        assert "rerun the sweep" not in refused.text


def test_an_image_named_twice_is_one_row(run: Path, image: str) -> None:
    """`predict run a.png ./a.png` answered twice: one row per image, the repeat said."""
    spelled = str(Path(image).parent / "." / Path(image).name)
    result = trainctl("predict", str(run), image, spelled, "--json")
    assert result.code == 0, result.text
    assert [p["image"] for p in json.loads(result.out)["predictions"]] == [image]
    assert "trainctl: 1 image(s) named more than once (by two arguments) were scored once" in (
        result.err
    ), result.text
