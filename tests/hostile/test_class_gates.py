"""Per-class gates that could never pass are refused before Ray starts (exit 2): a term naming
a class the dataset does not have (the allowed names listed), a class without rows in the
data the gate is judged on, malformed per-class terms. `check` prints the gate as it will be
judged: each term, on which data, against what."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.folder_support import image_bytes, image_folder
from tests.hostile.support import assert_refused, files_under, trainctl

BASE = {
    "TRAIN_DATASET": "folder",
    "TRAIN_MODEL": "cnn",
    "TRAIN_IMAGE_SIZE": "16",
    "TRAIN_GLOBAL_BATCH_SIZE": "8",
    "TRAIN_NUM_WORKERS": "1",
}


def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, gate: str) -> Path:
    image_folder(tmp_path / "data", classes=("cat", "dog", "eel"))
    env = {**BASE, "TRAIN_DATA_PATH": str(tmp_path / "data"), "TRAIN_PROMOTE_IF": gate,
           "TRAIN_STORAGE_PATH": str(tmp_path / "runs")}  # fmt: skip
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return tmp_path / "data"


@pytest.mark.parametrize("command", [("check", "--skip-cluster"), ("train",)])
def test_a_gate_naming_a_class_the_data_lacks_stops_before_ray(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, command: tuple[str, ...]
) -> None:
    from app import preflight

    joined = []  # refused before Ray: the cluster is never joined (this process may be in one)
    monkeypatch.setattr(preflight, "connect_ray", lambda *args, **kw: joined.append(args))
    _env(monkeypatch, tmp_path, "beats_champion and recall[cats]>=0.9")
    result = trainctl(*command)
    assert_refused(
        result, 2, "TRAIN_PROMOTE_IF names class 'cats' (did you mean cat?), which the dataset "
        "does not have; its classes: cat, dog, eel",
    )  # fmt: skip
    assert joined == []
    assert not [f for f in files_under(tmp_path / "runs") if "checkpoint" in f]
    if command[0] == "check":  # the promotion line names the same gate: not `ok` under a FAIL
        promotion = next(x for x in result.out.splitlines() if "promotion:" in x)
        assert promotion.startswith("WARN  promotion: gate beats_champion and recall[cats]")
        assert promotion.endswith("but the gate fails (above): `train` stops before Ray starts")


def test_a_named_class_without_validation_rows_could_never_pass(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data = _env(monkeypatch, tmp_path, "f1[eel]>=0.5")
    for file in (data / "valid" / "eel").iterdir():
        file.unlink()
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, "class 'eel', which has no rows in valid/", "could never pass")


@pytest.mark.parametrize("command", [("check", "--skip-cluster"), ("train",)])
@pytest.mark.parametrize("gate", ["min_class_recall>=0.8", "beats_champion and class_drop<=0.02"])
def test_a_gate_on_every_class_with_a_class_missing_from_test_stops_before_ray(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, gate: str, command: tuple[str, ...]
) -> None:
    """test/ without eel: the floor (or class_drop) would judge cat and dog only, and a run
    promoted that way was never judged on eel. Said before any training, not at the run end."""
    from app import preflight

    joined = []
    monkeypatch.setattr(preflight, "connect_ray", lambda *args, **kw: joined.append(args))
    data = _env(monkeypatch, tmp_path, gate)
    for name in ("cat", "dog"):
        (data / "test" / name).mkdir(parents=True)
        (data / "test" / name / "a.png").write_bytes(image_bytes(3, 1, "PNG"))
    result = trainctl(*command)
    assert_refused(
        result, 2, "judges every class, and 1 has no rows in test/ (eel)",
        "add test images of them, or judge named classes only",
    )  # fmt: skip
    assert joined == []
    assert not [f for f in files_under(tmp_path / "runs") if "checkpoint" in f]


@pytest.mark.parametrize(
    ("gate", "needles"),
    [
        ("recall[cat]>=90", ("did you mean recall[cat]>=0.9?",)),
        ("class_drop>=0.02", ("write class_drop<=MARGIN",)),
        ("min_class_accuracy>=0.5", ("unknown per-class floor",)),
        ("recall[cat>=0.5", ("a named class is FIGURE[CLASS] OP FRACTION",)),
        ("recall[]>=0.5", ("a class name in [] is 1 to 200 printable characters",)),
    ],
)
def test_malformed_per_class_terms_stop_train(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, gate: str, needles: tuple[str, ...]
) -> None:
    _env(monkeypatch, tmp_path, gate)
    assert_refused(trainctl("train"), 2, "TRAIN_PROMOTE_IF", *needles)
    assert not (tmp_path / "runs").exists()


def test_check_prints_the_gate_as_it_will_be_judged(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data = _env(
        monkeypatch, tmp_path, "beats_champion and min_class_recall>=0.5 and class_drop<=0.1"
    )
    result = trainctl("check", "--skip-cluster")
    assert result.code == 0, result.text
    line = next(x for x in result.out.splitlines() if x.startswith("ok    gate:"))
    assert "beats_champion (val_accuracy against the champion's on the same rows)" in line
    assert "min_class_recall>=0.5 (every class)" in line
    assert "class_drop<=0.1 (each class's recall against the champion's export" in line
    assert "judged on the validation data the best checkpoint was selected on; add a test/" in line
    # With a held-out test/ split, every term is judged there.
    for name in ("cat", "dog", "eel"):
        (data / "test" / name).mkdir(parents=True)
        (data / "test" / name / "a.png").write_bytes(image_bytes(3, 1, "PNG"))
    held_out = trainctl("check", "--skip-cluster")
    assert held_out.code == 0, held_out.text
    assert "every term judged on the held-out test data (3 rows)" in held_out.out
    assert "/ 3 held-out test rows" in held_out.out
    assert "beats the held-out test data's majority-class rate 0.3333" in held_out.out


def test_a_class_typed_in_another_unicode_form_is_the_same_class(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Folders made on macOS spell `carré` decomposed (NFD); typed on Linux it is composed
    (NFC). The two look alike, and check said "did you mean carré?" to `carré`."""
    import unicodedata

    from app.promotion.class_gate import Judged, Scores
    from app.promotion.gate import decide
    from app.settings.gate import parse_gate

    nfd, nfc = unicodedata.normalize("NFD", "carré"), unicodedata.normalize("NFC", "carré")
    image_folder(tmp_path / "data", classes=(nfd, "rond"))
    gate = f"recall[{nfc}]>=0.5"
    for key, value in {**BASE, "TRAIN_DATA_PATH": str(tmp_path / "data"),
                       "TRAIN_PROMOTE_IF": gate, "TRAIN_STORAGE_PATH": str(tmp_path / "runs")
                       }.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    result = trainctl("check", "--skip-cluster")
    assert result.code == 0, result.text
    assert f"recall[{nfc}]>=0.5 (class {nfc})" in result.out
    # At the run's end: the evaluation names the class as the dataset spells it.
    figures = {"recall": 0.75, "precision": 0.8, "f1": 0.77, "support": 4}
    run = Scores(0.9, 0.3, {nfd: figures, "rond": figures})
    verdict = decide(parse_gate(gate), {"val_accuracy": 0.9}, None, "val_accuracy", True,
                     None, Judged("valid", 8, run, classes=(nfd, "rond")))  # fmt: skip
    assert verdict.promoted, verdict.reason


def test_a_class_whose_folder_name_has_spaces_around_it_can_be_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A folder named ` lead`: `recall[ lead]` lost its space (`names class 'lead' (did you mean
     lead?)`, the exact input refused) and the class list gave no sign of it (a red-team
    pass). Named as written, or without the spaces where that is one class."""
    from app.promotion.class_gate import Judged, Scores, judge_classes
    from app.settings.gate import parse_gate

    image_folder(tmp_path / "data", classes=(" lead", "dog"))
    env = {**BASE, "TRAIN_DATA_PATH": str(tmp_path / "data"),
           "TRAIN_STORAGE_PATH": str(tmp_path / "runs")}  # fmt: skip
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for gate in ("recall[ lead]>=0.5", "recall[lead]>=0.5"):
        monkeypatch.setenv("TRAIN_PROMOTE_IF", gate)
        result = trainctl("check", "--skip-cluster")
        assert result.code == 0, result.out + result.err
    monkeypatch.setenv("TRAIN_PROMOTE_IF", "recall[leed]>=0.5")
    assert_refused(trainctl("check", "--skip-cluster"), 2, "its classes: ' lead', dog")
    figures = {"recall": 0.75, "precision": 1.0, "f1": 0.8, "support": 4.0}
    run = Scores(0.9, 0.3, {" lead": figures, "dog": figures})
    checks, failed, _ = judge_classes(
        parse_gate("recall[lead]>=0.5"), Judged("valid", 8, run=run), has_champion=False
    )
    assert failed == [] and checks[0]["value"] == 0.75, checks
