"""`trainctl check` on a champion pointer other hands damaged: the promotion check fails with
exit 2, naming the file and what is wrong, and every other check still reports; a missing
pointer is no champion yet. Real CLI in-process, real files, no Ray (--skip-cluster)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import parquet_support as data
from tests.hostile.support import assert_refused, trainctl

BASE = {"TRAIN_DATASET": "parquet", "TRAIN_MODEL": "cnn", "TRAIN_GLOBAL_BATCH_SIZE": "64"}


def _setup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    data.good(tmp_path / "data")
    env = {**BASE, "TRAIN_DATA_PATH": str(tmp_path / "data")}
    env["TRAIN_STORAGE_PATH"] = str(tmp_path / "runs")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return tmp_path / "runs" / "champions" / "parquet-cnn.json"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"\x1b[2J{torn", "unreadable champion pointer"),
        # JSON's escapes: the parsed strings hold the control characters.
        (b'{"version": 1, "metrics": ["\\u001b]0;owned\\u0007"]}', "`metrics` is not an object"),
        (b'{"version": "\\u001b[2J"}', "no whole-number `version`"),
    ],
    ids=["torn", "metrics-list", "version-text"],
)
def test_a_damaged_pointer_fails_the_check_and_hides_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, content: bytes, problem: str
) -> None:
    pointer = _setup(monkeypatch, tmp_path)
    pointer.parent.mkdir(parents=True)
    pointer.write_bytes(content)
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, f"FAIL  promotion: {pointer}: ", problem, "until the file is fixed")
    assert "\x1b" not in result.text and "\x07" not in result.text
    for name in ("settings", "storage", "dataset", "versions"):
        assert f"ok    {name}: " in result.out, result.out
    assert pointer.read_bytes() == content  # check reads, never repairs


def test_no_pointer_is_no_champion_yet(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pointer = _setup(monkeypatch, tmp_path)
    monkeypatch.setenv("TRAIN_PROMOTE_IF", "val_accuracy>=0.95")
    result = trainctl("check", "--skip-cluster")
    assert result.code == 0, result.text
    assert (
        "ok    promotion: gate val_accuracy>=0.95; no champion yet (the first run to pass the "
        f"gate becomes v1 at {pointer})"
    ) in result.out
    assert not pointer.parent.exists()


def test_check_names_the_warm_start_and_train_refuses_another_task(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """TRAIN_WARM_START=champion:<name> resolved in preflight, named with its verified file;
    a champion of another task stops `check` and `train` (before Ray) with exit 2."""
    from app import preflight
    from app.data.schema import inspect_dataset
    from app.promotion.step import promote_run
    from tests.promotion_support import INFO, make_run, settings_for

    pointer = _setup(monkeypatch, tmp_path)
    storage = tmp_path / "runs"
    info = inspect_dataset(tmp_path / "data")
    make_run(storage, "base", 0.9, info=info)
    promote_run(settings_for(storage, "base", model_name="parquet-cnn"), info, {})
    make_run(storage, "digits", 0.9)  # another dataset's champion: 10 classes, 8x8
    promote_run(settings_for(storage, "digits"), INFO, {})
    sha = json.loads(pointer.read_text())["card_sha256"]

    monkeypatch.setenv("TRAIN_WARM_START", "champion:parquet-cnn")
    result = trainctl("check", "--skip-cluster")
    assert result.code == 0, result.text
    assert (
        "ok    warm_start: champion parquet-cnn v1 (run base, epoch 1): "
        f"{storage}/champions/parquet-cnn/{sha}/weights.pt, sha256 "
    ) in result.out
    assert "; fits the model" in result.out
    assert "; this run: classes [0, 1, 2, 3] 1x8x8" in result.out  # the promotion line

    def refuse(settings: object) -> None:
        raise AssertionError("preflight let this through: Ray would start")

    monkeypatch.setattr(preflight, "connect_ray", refuse)
    monkeypatch.setenv("TRAIN_WARM_START", "champion:digits-cnn")
    for command in (("check", "--skip-cluster"), ("train",)):
        result = trainctl(*command)
        assert_refused(
            result, 2, "TRAIN_WARM_START=champion:digits-cnn: champion digits-cnn v1 (run "
            "digits, epoch 1) is another task: classes [0, 1, 2, 3, 4, 5, 6, 7, 8, 9] 1x8x8; "
            "this run [0, 1, 2, 3] 1x8x8",
        )  # fmt: skip


def test_train_warns_before_ray_of_a_champion_it_could_never_replace(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`check` fails on a champion of another task; `train` still trains (the step reads the
    pointer again at the end) but says so before Ray starts, not only after training."""
    from app import preflight
    from app.errors import ConfigError
    from app.promotion.step import promote_run
    from tests.promotion_support import INFO, make_run, settings_for

    _setup(monkeypatch, tmp_path)
    storage = tmp_path / "runs"
    make_run(storage, "digits", 0.9)  # a 10-class 8x8 champion under this run's model name
    promote_run(settings_for(storage, "digits", model_name="parquet-cnn"), INFO, {})

    def no_ray(*args: object) -> None:
        raise ConfigError("stopped where Ray would start")

    monkeypatch.setattr(preflight, "cluster_check", no_ray)
    result = trainctl("train")
    assert_refused(result, 2, "stopped where Ray would start")
    warning = (
        "trainctl: warning: promotion: "
        f"{storage}/champions/parquet-cnn.json: another task: champion parquet-cnn v1 classes "
        "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9] 1x8x8; this run [0, 1, 2, 3] 1x8x8"
    )
    assert warning in result.err, result.text
    assert result.err.index(warning) < result.err.index("stopped where Ray would start")


def test_a_gate_that_never_compares_with_the_champion_is_warned_of(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`val_accuracy>=0.4` promoted a run that never recognised one class over a better
    champion, with nothing said (found by a red-team pass). The gate is the user's: `check`
    warns and passes, `train` warns once before Ray starts; a gate that compares does not."""
    from app import preflight
    from app.data.schema import inspect_dataset
    from app.errors import ConfigError
    from app.promotion.step import promote_run
    from tests.promotion_support import make_run, settings_for

    _setup(monkeypatch, tmp_path)
    storage = tmp_path / "runs"
    info = inspect_dataset(tmp_path / "data")
    make_run(storage, "base", 0.9, info=info)
    promote_run(settings_for(storage, "base", model_name="parquet-cnn"), info, {})
    said = (
        "the gate never compares with the champion: any run that meets it replaces v1, a worse "
        "one too; add beats_champion (or class_drop<=0.02) to keep a worse model out"
    )
    monkeypatch.setenv("TRAIN_PROMOTE_IF", "val_accuracy>=0.4")
    checked = trainctl("check", "--skip-cluster")
    assert checked.code == 0, checked.text
    assert "WARN  promotion: gate val_accuracy>=0.4; champion: run base v1, " in checked.out
    assert said in checked.out

    def no_ray(*args: object) -> None:
        raise ConfigError("stopped where Ray would start")

    monkeypatch.setattr(preflight, "cluster_check", no_ray)
    trained = trainctl("train")
    assert_refused(trained, 2, "stopped where Ray would start")
    assert trained.err.count(said) == 1 and trained.err.index(said) < trained.err.index("stopped")

    for gate in ("beats_champion", "val_accuracy>=0.4 and class_drop<=0.05"):
        monkeypatch.setenv("TRAIN_PROMOTE_IF", gate)
        quiet = trainctl("check", "--skip-cluster")
        assert quiet.code == 0 and "never compares" not in quiet.text, quiet.text
    # A drop of at most 1 is every drop: it compares with nothing (a red-team pass).
    monkeypatch.setenv("TRAIN_PROMOTE_IF", "val_accuracy>=0.4 and class_drop<=1")
    empty = trainctl("check", "--skip-cluster")
    assert empty.code == 0 and said in empty.out, empty.text


@pytest.mark.parametrize(
    ("gate", "advice"),
    [
        ("recall[1]<=0.1", "recall[1]<=0.1 promotes a worse model over a better one"),
        ("min_class_recall>=0", "min_class_recall>=0 holds for every model"),
        ("val_loss>0.2", "val_loss>0.2 promotes a worse model over a better one"),
        ("val_accuracy>=0", "val_accuracy>=0 holds for every model"),
        (
            "val_accuracy>=0.5 and class_drop<=1",
            "class_drop<=1 holds for every model (no recall falls by more than 1); a drop it "
            "should stop is below 1, e.g. class_drop<=0.05",
        ),
        ("val_accuracy>=0.5 and class_drop<1", None),
        ("val_accuracy>=0.5 and train_loss<=0.5", None),
        # The training record's bounds every checkpoint meets are said too (only val_accuracy
        # and val_loss were: a red-team pass). TRAIN_LR is 0.001 here.
        ("val_accuracy>=0.5 and epoch>=1", "epoch>=1 holds for every model (no epoch is below 1)"),
        ("val_accuracy>=0.5 and epoch>0", "epoch>0 holds for every model (no epoch is below 1)"),
        ("val_accuracy>=0.5 and epoch>=3", None),
        (
            "val_accuracy>=0.5 and epoch_time_s>=0",
            "epoch_time_s>=0 holds for every model (no epoch_time_s is below 0)",
        ),
        (
            "val_accuracy>=0.5 and lr<=1",
            "lr<=1 holds for every model (no checkpoint's lr is above TRAIN_LR=0.001)",
        ),
        ("val_accuracy>=0.5 and lr<0.0005", None),
        ("min_class_f1>=0.5", None),
    ],
)
def test_gate_terms_every_model_meets_or_that_reward_worse_are_warned_of(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, gate: str, advice: str | None
) -> None:
    """They passed `check` as ok, and `train_loss<=0.5` was said to be judged on held-out data
    (found by a red-team pass)."""
    _setup(monkeypatch, tmp_path)
    monkeypatch.setenv("TRAIN_PROMOTE_IF", gate)
    result = trainctl("check", "--skip-cluster")
    assert result.code == 0, result.text
    (line,) = [line for line in result.out.splitlines() if " gate: " in line]
    # A gate of one term is said once (it read `gate: min_class_f1>=0.5: min_class_f1>=0.5`).
    stated = line.split(" gate: ", 1)[1].split("; but ", 1)[0]
    assert stated.startswith(gate) and stated.count(gate) == 1, line
    if advice is None:
        assert line.startswith("ok    gate: "), line
    else:
        assert line.startswith("WARN  gate: ") and line.endswith(f"; but {advice}"), line
    if "train_loss" in gate:
        assert line.endswith("; train_loss: the checkpoint's own training record"), line
