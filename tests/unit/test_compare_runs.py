"""`trainctl compare` on run folders written the way a run and `evaluate` write them (no Ray):
differing settings, figures, accelerator-hours recorded or derived, the newest evaluation's
per-class recall, and the curves' PNG."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from app.evaluation.report import METRICS_FILE, report_files, write_folder
from app.runfolder import folder as run_folder
from tests.hostile.support import assert_refused, trainctl
from tests.support import trainctl_on_a_full_disk

PNG = b"\x89PNG\r\n\x1a\n"


def make_run(
    root: Path,
    name: str,
    *,
    lr: float,
    accuracies: list[float],
    duration_s: float,
    world_size: int = 2,
    extra: dict[str, Any] | None = None,
) -> Path:
    run_dir = root / name
    run_dir.mkdir(parents=True)
    # As a run writes them: the worker group's start, then its epochs (a start forgets the
    # epochs from the one it starts at).
    run_folder.start_attempt(
        run_dir, invocation="i", start_epoch=1, world_size=world_size, restored_from=None
    )
    for epoch, accuracy in enumerate(accuracies, 1):
        run_folder.record_epoch(
            run_dir,
            {"epoch": epoch, "train_loss": 2.0 / epoch, "val_loss": 1.5 / epoch,
             "val_accuracy": accuracy},
        )  # fmt: skip
    best = max(range(len(accuracies)), key=lambda i: accuracies[i])
    summary = {
        "status": "succeeded",
        "run_name": name,
        "epochs_completed": len(accuracies),
        "epochs_target": len(accuracies),
        "metrics": {"val_accuracy": accuracies[-1], "val_loss": 1.5 / len(accuracies)},
        "best": {"metric": "val_accuracy", "val_accuracy": accuracies[best], "epoch": best + 1},
        "duration_s": duration_s,
        "settings": {"run_name": name, "lr": lr, "model": "cnn", "num_workers": "2",
                     "use_gpu": False},
        **(extra or {}),
    }  # fmt: skip
    run_folder.write_summary(run_dir, summary)
    return run_dir


def add_eval(
    run_dir: Path, name: str, recalls: dict[str, float], at: float, data: str = "/data/test"
) -> None:
    metrics = {
        "name": name,
        "time": at,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at)),
        "rows": 10,
        "accuracy": sum(recalls.values()) / len(recalls),
        "macro": {"f1": 0.5},
        "data": {"location": data},
        "per_class": [
            {"class": c, "index": i, "precision": 1.0, "recall": r, "f1": r, "support": 5}
            for i, (c, r) in enumerate(recalls.items())
        ],
    }
    confusion = {"classes": list(recalls), "matrix": None, "most_confused": []}
    write_folder(run_dir / "eval" / name, report_files(metrics, confusion, []), run_dir)


def test_compare_shows_what_differs_side_by_side(tmp_path: Path) -> None:
    a = make_run(tmp_path, "a", lr=0.001, accuracies=[0.5, 0.8, 0.7], duration_s=3600)
    b = make_run(
        tmp_path, "b", lr=0.01, accuracies=[0.6, 0.9], duration_s=1800,
        extra={"accelerator_hours": 0.25},
    )  # fmt: skip
    add_eval(a, "old", {"cat": 0.1, "dog": 0.1}, at=1000.0)
    add_eval(a, "test", {"cat": 0.9, "dog": 0.5}, at=2000.0)
    add_eval(b, "test", {"cat": 0.95, "dog": 0.9}, at=1500.0)
    (a / "eval" / "half").mkdir()  # an evaluation whose metrics.json was never written
    out = tmp_path / "cmp" / "curves.png"

    result = trainctl("compare", str(a), str(b), "--out", str(out), "--json")
    assert result.code == 0, result.text
    found = json.loads(result.out)
    assert found["settings_differing"] == ["lr"]  # run_name names the columns already
    first, second = found["runs"]
    assert (first["run"], second["run"]) == ("a", "b")
    assert first["settings"] == {"lr": 0.001} and second["settings"] == {"lr": 0.01}
    assert first["final"]["val_accuracy"] == 0.7 and first["best"]["val_accuracy"] == 0.8
    assert first["best"]["epoch"] == 2
    # a: derived, 1 h x 2 workers (its last start's world size), on CPUs; b: as recorded.
    assert first["accelerator_hours"] == {
        "hours": 2.0, "source": "derived: duration x 2 worker(s)", "kind": "cpu"
    }  # fmt: skip
    assert second["accelerator_hours"] == {"hours": 0.25, "source": "recorded"}
    assert first["evaluation"]["name"] == "test"  # the newest of a's two
    assert found["per_class_recall"] == {"cat": [0.9, 0.95], "dog": [0.5, 0.9]}
    assert out.read_bytes().startswith(PNG)
    assert found["plot"] == str(out)

    table = trainctl("compare", str(a), str(b), "--out", str(out), "--overwrite")
    assert table.code == 0, table.text
    lines = table.out.splitlines()
    assert lines[0].split() == ["run", "a", "b"]
    assert next(line.split() for line in lines if line.startswith("setting lr")) == [
        "setting",
        "lr",
        "0.001",
        "0.01",
    ]
    hours = next(line for line in lines if line.startswith("accelerator-hours"))
    assert "2.0000 CPU*" in hours and "0.2500" in hours
    recalls = [line.split()[:2] for line in lines if line.startswith("recall")]
    assert recalls == [["recall", "dog"], ["recall", "cat"]]  # the largest spread first
    assert lines[-2].split() == ["curves", str(out)]  # whole, however long the path
    assert lines[-1].startswith("* derived")


def test_compare_writes_compare_png_here_by_default(tmp_path: Path, monkeypatch: Any) -> None:
    a = make_run(tmp_path, "a", lr=0.1, accuracies=[0.5], duration_s=10)
    b = make_run(tmp_path, "b", lr=0.1, accuracies=[0.6], duration_s=10)
    monkeypatch.chdir(tmp_path)
    result = trainctl("compare", str(a), str(b))
    assert result.code == 0, result.text
    assert (tmp_path / "compare.png").read_bytes().startswith(PNG)
    assert not any(line.startswith("setting") for line in result.out.splitlines())


def test_an_eval_folder_needs_its_metrics_to_count(tmp_path: Path) -> None:
    from app.evaluation.report import latest_metrics

    a = make_run(tmp_path, "a", lr=0.1, accuracies=[0.5], duration_s=10)
    assert latest_metrics(a) is None
    add_eval(a, "x", {"cat": 1.0}, at=5.0)
    (a / "eval" / "x" / METRICS_FILE).write_text("{ damaged")
    assert latest_metrics(a) is None


DAMAGED_SUMMARIES = {
    "duration infinite": {"duration_s": float("inf")},
    "duration NaN": {"duration_s": float("nan")},
    "hours past a float": {"accelerator_hours": {"hours": 10**400}},
    "hours NaN": {"accelerator_hours": float("nan")},
    "metrics not an object": {"metrics": "x"},
    "settings not an object": {"settings": ["lr"]},
}


def _strict(constant: str) -> None:
    raise AssertionError(f"--json wrote {constant}, which strict JSON parsers refuse")


def test_damaged_records_are_shown_as_unknown_and_json_stays_strict(tmp_path: Path) -> None:
    good = make_run(tmp_path, "good", lr=0.1, accuracies=[0.5, 0.7], duration_s=60)
    add_eval(good, "valid", {"cat": 0.8, "dog": 0.6}, at=5.0)
    for index, (case, damage) in enumerate(DAMAGED_SUMMARIES.items()):
        bad = make_run(tmp_path, f"bad{index}", lr=0.2, accuracies=[0.4], duration_s=30)
        summary = json.loads((bad / "summary.json").read_text())
        # json.dumps writes NaN and Infinity as Python's json reads them back; 10**400 as digits.
        (bad / "summary.json").write_text(json.dumps({**summary, **damage}))
        add_eval(bad, "valid", {"cat": float("nan"), "dog": 0.5}, at=6.0)
        metrics = json.loads((bad / "eval" / "valid" / METRICS_FILE).read_text())
        metrics["macro"] = "x"
        (bad / "eval" / "valid" / METRICS_FILE).write_text(json.dumps(metrics))
        out = str(tmp_path / f"{index}.png")
        table = trainctl("compare", str(good), str(bad), "--out", out)
        assert table.code == 0 and "internal error" not in table.text, (case, table.text)
        as_json = trainctl("compare", str(good), str(bad), "--out", out, "--overwrite", "--json")
        assert as_json.code == 0, (case, as_json.text)

        json.loads(as_json.out, parse_constant=_strict)


def test_a_run_without_its_settings_record_differs_only_where_the_others_do(
    tmp_path: Path,
) -> None:
    a = make_run(tmp_path, "a", lr=0.1, accuracies=[0.5], duration_s=10)
    b = make_run(tmp_path, "b", lr=0.2, accuracies=[0.6], duration_s=10)
    c = make_run(tmp_path, "c", lr=0.3, accuracies=[0.7], duration_s=10)
    d = make_run(tmp_path, "d", lr=0.4, accuracies=[0.8], duration_s=10)
    for damage, run in (({"settings": "x"}, c), ({}, d)):
        summary = json.loads((run / "summary.json").read_text())
        summary.pop("settings")
        (run / "summary.json").write_text(json.dumps({**summary, **damage}))
    runs = [str(run) for run in (a, b, c, d)]
    result = trainctl("compare", *runs, "--out", str(tmp_path / "p.png"))
    assert result.code == 0, result.text
    settings = [line.split() for line in result.out.splitlines() if line.startswith("setting ")]
    assert settings == [["setting", "lr", "0.1", "0.2", "unknown", "unknown"]], result.out
    both = trainctl("compare", str(c), str(d), "--out", str(tmp_path / "q.png"), "--json")
    assert json.loads(both.out)["settings_differing"] == [], both.out


def test_where_the_runs_or_the_plot_cannot_be_is_refused_before_reading(tmp_path: Path) -> None:
    a = make_run(tmp_path, "a", lr=0.1, accuracies=[0.5], duration_s=10)
    b = make_run(tmp_path, "b", lr=0.2, accuracies=[0.6], duration_s=10)
    (tmp_path / "d.png").mkdir()
    (tmp_path / "link").symlink_to(b)
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "sweep.json").write_text("{}")
    cases = {
        (str(tmp_path / "sweep"),): "a sweep's folder, none of whose trials has started yet",
        ("--out", str(tmp_path / "d.png")): "is a folder; name the PNG file to write",
        ("--out", str(a / "summary.json" / "c.png")): "summary.json: exists but is not a folder",
        (str(a),): "given more than once",
        (str(tmp_path / "link"),): "is a symbolic link",
    }
    for extra, message in cases.items():
        runs = [str(a), *extra] if not extra[0].startswith("--") else [str(a), str(b), *extra]
        result = trainctl("compare", *runs)
        assert result.code == 2 and message in result.text, (extra, result.text)
        assert "Traceback" not in result.text


def test_the_runs_are_shown_on_an_evaluation_they_share(tmp_path: Path) -> None:
    """Each run's newest evaluation put a's valid figures beside b's test figures in one row.
    The name every run has is shown; with none shared, the table says the data differ."""
    a = make_run(tmp_path, "a", lr=0.001, accuracies=[0.5], duration_s=60)
    b = make_run(tmp_path, "b", lr=0.01, accuracies=[0.6], duration_s=60)
    add_eval(a, "test", {"cat": 0.9, "dog": 0.5}, at=2000.0)
    add_eval(a, "valid", {"cat": 0.2, "dog": 0.2}, at=3000.0)  # a's newest, b has none
    add_eval(b, "test", {"cat": 0.95, "dog": 0.9}, at=1500.0)
    out = str(tmp_path / "c.png")
    found = json.loads(trainctl("compare", str(a), str(b), "--out", out, "--json").out)
    assert [r["evaluation"]["name"] for r in found["runs"]] == ["test", "test"]
    assert found["per_class_recall"]["cat"] == [0.9, 0.95]
    table = trainctl("compare", str(a), str(b), "--out", out, "--overwrite").out
    assert "different data" not in table
    c = make_run(tmp_path, "c", lr=0.1, accuracies=[0.7], duration_s=60)
    add_eval(c, "holdout", {"cat": 0.5, "dog": 0.5}, at=4000.0)
    table = trainctl("compare", str(a), str(c), "--out", out, "--overwrite").out
    assert "* the evaluations are of different data (no name every run has)" in table
    # A run stopped before its run-end evaluation has none: it changed what a and b were shown
    # on, to each one's newest (found by a red-team pass).
    d = make_run(tmp_path, "d", lr=0.2, accuracies=[0.1], duration_s=60)
    runs = (str(a), str(b), str(d))
    found = json.loads(trainctl("compare", *runs, "--out", out, "--overwrite", "--json").out)
    assert [r["evaluation"] and r["evaluation"]["name"] for r in found["runs"]] == [
        "test", "test", None
    ]  # fmt: skip


def _setting_row(tmp_path: Path, setting: str, values: dict[str, str]) -> str:
    """`compare`'s row for `setting` between runs a and b, which differ only in it."""
    for name, value in values.items():
        make_run(tmp_path, name, lr=0.001, accuracies=[0.5], duration_s=60,
                 extra={"settings": {"run_name": name, setting: value}})  # fmt: skip
    result = trainctl("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out",
                      str(tmp_path / "c.png"))  # fmt: skip
    assert result.code == 0, result.text
    (row,) = [line for line in result.out.splitlines() if line.startswith(f"setting {setting}")]
    return row


def test_a_long_setting_is_shown_where_the_runs_differ(tmp_path: Path) -> None:
    """`/data/shapes` and `/data/shapes2` were both cut to `/tmp/…/data/sh…`: the row there to
    show a difference showed two equal cells (found by a red-team pass)."""
    paths = {"a": "/srv/team-vision/datasets/shapes", "b": "/srv/team-vision/datasets/shapes2"}
    row = _setting_row(tmp_path, "data_path", paths)
    cells = row.removeprefix("setting data_path").split()
    assert cells == ["…shapes", "…shapes2"], row


def test_a_setting_cut_at_both_ends_shows_where_the_runs_differ(tmp_path: Path) -> None:
    """Two gates were both cut to `…ampion and min_clas…` and `…ampion and recall[s…`: the
    terms that differ hidden past the cell's end (found by a red-team pass)."""
    gates = {"a": "beats_champion and min_class_recall>=0.5",
             "b": "beats_champion and recall[square]>=0.5"}  # fmt: skip
    row = _setting_row(tmp_path, "promote_if", gates)
    assert "…min_class_recall>=" in row and "…recall[square]>=0.5" in row, row


def test_a_gate_that_adds_a_term_is_shown_whole_and_from_its_new_term(tmp_path: Path) -> None:
    """`beats_champion` beside `beats_champion and class_drop<=0.02` read `…pion` and
    `…pion and class_drop…` (a red-team pass)."""
    gates = {"a": "beats_champion", "b": "beats_champion and class_drop<=0.02"}
    row = _setting_row(tmp_path, "promote_if", gates)
    cells = row.removeprefix("setting promote_if").split(None, 1)
    assert cells == ["beats_champion", "…and class_drop<=0.02"], row


def test_a_run_stopped_by_sigterm_is_stopped_as_status_says(tmp_path: Path) -> None:
    """compare showed summary.json's `interrupted` where `trainctl status` and the README say
    `stopped` (found by a red-team pass)."""
    a = make_run(tmp_path, "a", lr=0.001, accuracies=[0.5], duration_s=60)
    b = make_run(tmp_path, "b", lr=0.01, accuracies=[0.6], duration_s=60,
                 extra={"status": "interrupted"})  # fmt: skip
    table = trainctl("compare", str(a), str(b), "--out", str(tmp_path / "c.png")).out
    (row,) = [line for line in table.splitlines() if line.startswith("status")]
    assert row.split()[1:] == ["succeeded", "stopped"], row
    shown = trainctl("status", str(b), "--json")
    assert json.loads(shown.out)["status"] == "stopped", shown.text


def test_an_out_already_there_is_replaced_only_with_overwrite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mistyped --out replaced whatever file was there (a dataset's image) without a word,
    where `predict --out` refuses (found by a red-team pass). The default ./compare.png is
    compare's own, replaced on each comparison."""
    a = make_run(tmp_path, "a", lr=0.001, accuracies=[0.5], duration_s=60)
    b = make_run(tmp_path, "b", lr=0.01, accuracies=[0.6], duration_s=60)
    image = tmp_path / "cat.png"
    image.write_bytes(b"someone's image")
    refused = trainctl("compare", str(a), str(b), "--out", str(image))
    assert refused.code == 2, refused.text
    assert f"--out {str(image)!r}: already exists" in refused.text and "--overwrite" in refused.text
    assert image.read_bytes() == b"someone's image"
    assert trainctl("compare", str(a), str(b), "--out", str(image), "--overwrite").code == 0
    assert image.read_bytes().startswith(PNG)
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        assert trainctl("compare", str(a), str(b)).code == 0
    assert (tmp_path / "compare.png").read_bytes().startswith(PNG)


def test_a_sweeps_folder_stands_for_its_trials_each_named_by_sweep_and_trial(
    tmp_path: Path,
) -> None:
    """`compare runs/nightly` was refused, naming the trials to give one by one; two sweeps'
    trials are all named trial-NNNN, so each is labelled `sweep/trial-NNNN`."""
    sweep = tmp_path / "nightly"
    (sweep / "trials").mkdir(parents=True)
    (sweep / "sweep.json").write_text("{}")
    make_run(sweep / "trials", "trial-0001", lr=0.1, accuracies=[0.5, 0.7], duration_s=10)
    make_run(sweep / "trials", "trial-0002", lr=0.01, accuracies=[0.4, 0.45], duration_s=10)
    (sweep / "trials" / "notes").mkdir()  # not a trial: left out
    (sweep / "trials" / "trial-0003").mkdir()  # not started yet (a sweep still running): too
    base = make_run(tmp_path, "base", lr=0.001, accuracies=[0.6], duration_s=10)
    result = trainctl("compare", str(sweep), str(base), "--json", "--out", str(tmp_path / "c.png"))
    assert result.code == 0, result.text
    shown = json.loads(result.out)
    names = [run["run"] for run in shown["runs"]]
    assert names == ["nightly/trial-0001", "nightly/trial-0002", "base"], shown
    assert "lr" in shown["settings_differing"], shown
    assert (tmp_path / "c.png").read_bytes().startswith(PNG)
    # Alone, a sweep of one trial is one run: the count is said with what it counted.
    (sweep / "trials" / "trial-0002" / "summary.json").unlink()
    (sweep / "trials" / "trial-0002" / "metrics.jsonl").unlink()
    (sweep / "trials" / "trial-0002" / "attempts.jsonl").unlink()
    (sweep / "trials" / "trial-0002").rmdir()
    alone = trainctl("compare", str(sweep))
    assert alone.code == 2 and "(1 given, a sweep's trials counted each)" in alone.text, alone.text
    assert "warning" not in alone.text  # sweep.json names no trial as ended


def test_a_trial_the_sweep_says_ended_without_records_is_said_as_left_out(
    tmp_path: Path,
) -> None:
    """Its records deleted, it was left out without a word, as a trial not started yet is (a
    red-team pass)."""
    sweep = tmp_path / "nightly"
    rows = [{"trial": f"trial-000{n}", "status": "succeeded"} for n in (1, 2, 3)]
    (sweep / "trials").mkdir(parents=True)
    (sweep / "sweep.json").write_text(json.dumps({"trials": rows}))
    make_run(sweep / "trials", "trial-0001", lr=0.1, accuracies=[0.5, 0.7], duration_s=10)
    make_run(sweep / "trials", "trial-0002", lr=0.01, accuracies=[0.4, 0.45], duration_s=10)
    (sweep / "trials" / "trial-0003").mkdir()  # its summary.json and metrics.jsonl deleted
    result = trainctl("compare", str(sweep), "--json", "--out", str(tmp_path / "c.png"))
    assert result.code == 0, result.text
    assert [run["run"] for run in json.loads(result.out)["runs"]] == [
        "nightly/trial-0001", "nightly/trial-0002",
    ]  # fmt: skip
    said = (
        f"trainctl: warning: trial-0003: {sweep}/sweep.json says it succeeded, but its folder "
        "holds no summary.json or metrics.jsonl: left out"
    )
    assert said in result.err, result.text


def test_a_run_given_twice_by_other_spellings_is_refused_and_nothing_there_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`compare ../runs/base base` showed one run twice, side by side (a red-team pass); a
    path to nothing was "not a run folder (no summary.json ...)"."""
    base = make_run(tmp_path / "runs", "base", lr=0.1, accuracies=[0.5], duration_s=10)
    other = make_run(tmp_path / "runs", "other", lr=0.01, accuracies=[0.6], duration_s=10)
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    monkeypatch.setenv("TRAIN_STORAGE_PATH", str(tmp_path / "runs"))
    out = str(tmp_path / "c.png")
    for spelled in ("base", "../runs/./base", str(base)):
        twice = trainctl("compare", "../runs/base", spelled, str(other), "--out", out)
        assert_refused(twice, 2, f"{base}: given more than once; give each run once")
    missing = trainctl("compare", "../runs/nope", str(base), "--out", out)
    assert_refused(missing, 2, "runs/nope: no such folder; give run folders")
    assert "not a run folder" not in missing.text
    afile = trainctl("compare", str(base / "summary.json"), str(base), "--out", out)
    assert_refused(afile, 2, "summary.json: a regular file, not a run folder")


def test_the_trial_a_sweep_exported_is_marked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep's trials side by side did not say which one the sweep exported and judged: a
    reader took the best-looking column for the one shipped (a red-team pass)."""
    sweep = tmp_path / "nightly"
    (sweep / "trials").mkdir(parents=True)
    (sweep / "sweep.json").write_text(json.dumps({"best": {"trial": "trial-0002"}}))
    make_run(sweep / "trials", "trial-0001", lr=0.1, accuracies=[0.5, 0.7], duration_s=10)
    make_run(sweep / "trials", "trial-0002", lr=0.01, accuracies=[0.4, 0.45], duration_s=10)
    base = make_run(tmp_path, "base", lr=0.001, accuracies=[0.6], duration_s=10)
    out = str(tmp_path / "c.png")
    result = trainctl("compare", str(sweep), str(base), "--json", "--out", out, "--overwrite")
    assert result.code == 0, result.text
    assert [run["sweeps_best"] for run in json.loads(result.out)["runs"]] == [False, True, None]
    table = trainctl("compare", str(sweep), str(base), "--out", out, "--overwrite")
    row = next(line for line in table.out.splitlines() if line.startswith("sweep's best"))
    assert row.split()[2:] == ["no", "yes,", "exported"], row
    # Given back as compare labels it (nightly/trial-0002: under TRAIN_STORAGE_PATH), the label
    # was refused as no such folder (a red-team pass).
    monkeypatch.setenv("TRAIN_STORAGE_PATH", str(tmp_path))
    labelled = trainctl(
        "compare", "nightly/trial-0002", str(base), "--json", "--out", out, "--overwrite"
    )
    assert labelled.code == 0, labelled.text
    runs = json.loads(labelled.out)["runs"]
    assert runs[0]["run_dir"] == str(sweep / "trials" / "trial-0002") and runs[0]["sweeps_best"]
    # A trial named by itself is marked too; a sweep that exported none marks every trial no.
    one = trainctl(
        "compare", str(sweep / "trials" / "trial-0002"), str(base), "--json", "--out", out,
        "--overwrite",
    )  # fmt: skip
    assert [run["sweeps_best"] for run in json.loads(one.out)["runs"]] == [True, None], one.text
    (sweep / "sweep.json").write_text(json.dumps({"best": None}))
    none = trainctl("compare", str(sweep), "--json", "--out", out, "--overwrite")
    assert [run["sweeps_best"] for run in json.loads(none.out)["runs"]] == [False, False]
    (sweep / "sweep.json").write_text("{damaged")  # cannot say: not marked, JSON still whole
    damaged = trainctl("compare", str(sweep), "--json", "--out", out, "--overwrite")
    assert [run["sweeps_best"] for run in json.loads(damaged.out)["runs"]] == [None, None]


def test_evaluations_of_one_name_but_other_data_are_not_taken_for_the_same(
    tmp_path: Path,
) -> None:
    """`valid` and `test` are each run's own dataset's: two runs on different datasets were
    shown side by side on `test` with no word that the data differ (a red-team pass). A name
    of the same data for every run is preferred; where none is, the table names the folders."""
    a = make_run(tmp_path, "a", lr=0.001, accuracies=[0.5], duration_s=60)
    b = make_run(tmp_path, "b", lr=0.01, accuracies=[0.6], duration_s=60)
    add_eval(a, "test", {"cat": 0.9, "dog": 0.5}, at=3000.0, data="/data/shapes/test")
    add_eval(b, "test", {"cat": 0.8, "star": 0.5}, at=3000.0, data="/data/shapes-b/test")
    out = str(tmp_path / "c.png")
    table = trainctl("compare", str(a), str(b), "--out", out).out
    assert (
        "* the evaluations are of different data (test is /data/shapes-b/test, "
        "/data/shapes/test): evaluate each run on the same data with one --name to compare them"
    ) in table, table
    add_eval(a, "mine", {"cat": 0.7, "dog": 0.5}, at=1000.0, data="/data/shared")
    add_eval(b, "mine", {"cat": 0.6, "dog": 0.4}, at=1000.0, data="/data/shared")
    found = json.loads(
        trainctl("compare", str(a), str(b), "--out", out, "--overwrite", "--json").out
    )
    assert [r["evaluation"]["name"] for r in found["runs"]] == ["mine", "mine"]
    table = trainctl("compare", str(a), str(b), "--out", out, "--overwrite").out
    assert "different data" not in table, table


def test_a_run_of_one_epoch_is_drawn_in_both_panels(tmp_path: Path) -> None:
    """A run of one epoch (a sweep's trial ASHA stopped at its grace period) is one point: its
    losses were lines without markers, so the loss panel drew nothing of it (a red-team pass).
    A figure no float holds (a hand-edited record) is a gap, not a crash."""
    import matplotlib.pyplot as plt

    from app.evaluation.compare import _read, curves_figure
    from app.runfolder.summary import series
    from app.storage.location import parse_location

    long = make_run(tmp_path, "long", lr=0.1, accuracies=[0.5, 0.7], duration_s=60)
    short = make_run(tmp_path, "short", lr=0.2, accuracies=[0.6], duration_s=30)
    fig = curves_figure([_read(parse_location(p), p.name) for p in (long, short)])
    try:
        acc_ax, loss_ax = fig.axes
        drawn = {line.get_label(): line for ax in (acc_ax, loss_ax) for line in ax.lines}
        for label in ("short", "short validation", "short training"):
            line = drawn[label]
            assert line.get_marker() not in (None, "None", "", " "), label
            assert list(line.get_xdata()) == [1], label
    finally:
        plt.close(fig)
    values = series([{"val_loss": 10**400}, {"val_loss": "x"}, {"val_loss": 0.5}], "val_loss")
    assert [str(v) for v in values] == ["nan", "nan", "0.5"]


def test_classes_past_those_shown_are_said_to_be_in_the_json(tmp_path: Path) -> None:
    """Digits beside a 3-class run: recall rows for 10 of 13 classes, and no word of the other
    three (a red-team pass)."""
    a = make_run(tmp_path, "a", lr=0.001, accuracies=[0.5], duration_s=60)
    b = make_run(tmp_path, "b", lr=0.01, accuracies=[0.6], duration_s=60)
    add_eval(a, "test", {str(d): 0.5 for d in range(10)}, at=1000.0)
    add_eval(b, "test", {"circle": 0.9, "square": 0.8, "triangle": 0.7}, at=1000.0)
    table = trainctl("compare", str(a), str(b), "--out", str(tmp_path / "c.png"))
    assert table.code == 0, table.text
    lines = table.out.splitlines()
    assert len([line for line in lines if line.startswith("recall ")]) == 10
    assert (
        "* recall: the 10 of 13 classes whose recall differs most between the runs; --json has "
        "every class"
    ) in lines, lines
    found = json.loads(trainctl("compare", str(a), str(b), "--out", str(tmp_path / "c.png"),
                                "--overwrite", "--json").out)  # fmt: skip
    assert len(found["per_class_recall"]) == 13


def test_a_run_without_its_summary_yet_is_compared_from_its_epochs(tmp_path: Path) -> None:
    """A run under its first driver has metrics.jsonl but no summary.json: compare showed a
    column of dashes (a red-team pass). Its epochs, last figures and best accuracy are read
    from its epoch records, and its status says there is no summary yet."""
    done = make_run(tmp_path, "done", lr=0.001, accuracies=[0.5, 0.6], duration_s=60)
    live = make_run(tmp_path, "live", lr=0.01, accuracies=[0.4, 0.7, 0.65], duration_s=60)
    (live / "summary.json").unlink()
    result = trainctl("compare", str(done), str(live), "--out", str(tmp_path / "c.png"))
    assert result.code == 0, result.text
    rows = {line.split("  ")[0]: line for line in result.out.splitlines()}
    assert rows["status"].split()[1:] == ["succeeded", "no", "summary", "yet"], rows
    assert rows["epochs"].split()[1:] == ["2/2", "3"], rows
    assert rows["final val_accuracy"].split()[2:] == ["0.6000", "0.6500"], rows
    assert rows["best"].split()[1:] == ["0.6000", "@2", "0.7000", "@2"], rows


def test_a_full_disk_under_the_curves_is_a_failure_naming_out(tmp_path: Path) -> None:
    """It was "internal error: OSError ... please report it" (a red-team pass)."""
    a = make_run(tmp_path, "a", lr=0.1, accuracies=[0.5, 0.6], duration_s=10)
    b = make_run(tmp_path, "b", lr=0.01, accuracies=[0.4, 0.7], duration_s=12)
    png = tmp_path / "curves.png"
    result = trainctl_on_a_full_disk(100, "compare", "--out", str(png), str(a), str(b))
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        "trainctl: failed:",
        f"  - --out {str(png)!r}: could not be written (File too large); give --out a place "
        "with room",
    ]
    assert not png.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]


def test_long_run_names_are_cut_where_they_differ(tmp_path: Path) -> None:
    """Every trial of a sweep (`nightly-sweep/trial-0001`, ...) was shown as
    `nightly-sweep/trial-…`, and runs named alike up to their last characters the same way: the
    columns could not be told apart (a red-team pass)."""
    names = ["shapes-resnet18-nightly-a", "shapes-resnet18-nightly-b", "shapes-resnet18-lr-0.003"]
    runs = [make_run(tmp_path, name, lr=0.1, accuracies=[0.5], duration_s=1) for name in names]
    result = trainctl("compare", *map(str, runs), "--out", str(tmp_path / "c.png"))
    assert result.code == 0, result.text
    (row,) = [line for line in result.out.splitlines() if line.startswith("run ")]
    cells = row.removeprefix("run").split()
    assert cells == ["shapes-r…8-nightly-a", "shapes-r…8-nightly-b", "shapes-r…18-lr-0.003"], row
