"""Promotions racing for one champion, for real: threads released together run the promotion
step's own compare-and-swap (app/promotion/step.py move_champion, with its real gate and task
check) against a real volume (flock) and against moto's S3 server (If-Match through obstore),
many rounds. Whatever the interleaving, every promoted run decided against the pointer it
replaced: the versions are 1..k with no gap or repeat, each one names the run of the version
before it, each beats it, and the last one is the best of the round. No Ray; the candidates'
exports are made once (torch.export) and raced in every round under a new TRAIN_MODEL_NAME."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from app.promotion import champion
from app.promotion.step import move_champion
from app.runfolder import checkpoints
from app.storage.buckets import ObjectPath
from tests.promotion_support import INFO, make_run, settings_for
from tests.s3_support import Bucket, S3Server

ACCURACIES = (0.61, 0.74, 0.68, 0.83)  # four pools finishing together, in no particular order


Candidates = list[tuple[str, Any, Any]]


@pytest.fixture(scope="module")
def candidates(tmp_path_factory: pytest.TempPathFactory) -> Candidates:
    """(run name, best checkpoint, its export) for each accuracy, in one storage folder:
    exported once for the module."""
    from app.export.build import export_best

    storage = tmp_path_factory.mktemp("candidates")
    found = []
    for index, accuracy in enumerate(ACCURACIES):
        name = f"pool-{index}"
        run_dir = make_run(storage, name, accuracy, seed=index)
        best = checkpoints.scan(run_dir).good[0]
        found.append((name, best, export_best(settings_for(storage, name), INFO, best)))
    return found


def _race(settings: list[Any], candidates: Candidates) -> list[dict[str, Any]]:
    """Every candidate's promotion record, all released at once."""
    start = threading.Barrier(len(candidates))
    records: list[dict[str, Any]] = [{} for _ in candidates]
    errors: list[BaseException] = []

    def promote(index: int) -> None:
        _, best, export = candidates[index]
        try:
            start.wait(timeout=60)
            move_champion(settings[index], INFO, best, export, records[index])
        except BaseException as err:  # reported below: a thread's error is otherwise lost
            errors.append(err)

    threads = [threading.Thread(target=promote, args=(i,)) for i in range(len(candidates))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == [] and not any(t.is_alive() for t in threads), errors
    return records


def _assert_no_lost_update(records: list[dict[str, Any]], pointer: dict[str, Any]) -> None:
    by_version = {r["version"]: r for r in records if "version" in r}
    assert sorted(by_version) == list(range(1, len(by_version) + 1)), records  # no gap, no twin
    assert len(by_version) == sum("version" in r for r in records)
    for version, record in by_version.items():
        if version > 1:  # decided against the pointer the previous winner wrote, and beat it
            before = by_version[version - 1]
            assert record["champion_before"] == _run_of(before), records
            assert record["value"] > before["value"], records
    best = max(ACCURACIES)
    assert pointer["value"] == best and pointer["version"] == len(by_version), (pointer, records)
    for record in records:  # the losers were judged against a champion at least as good
        if "version" not in record:
            assert record["champion_value"] >= record["value"], record


def _run_of(record: dict[str, Any]) -> str:
    return f"pool-{ACCURACIES.index(record['value'])}"


def test_racing_promotions_on_a_volume_lose_no_update(
    tmp_path: Path, candidates: Candidates
) -> None:
    for round_ in range(25):
        name = f"race-{round_}"
        settings = [settings_for(tmp_path, run, model_name=name) for run, _, _ in candidates]
        records = _race(settings, candidates)
        pointer = json.loads((tmp_path / "champions" / f"{name}.json").read_text())
        _assert_no_lost_update(records, pointer)
        copy = Path(pointer["export"])  # the winner's immutable copy, whole
        assert sorted(p.name for p in copy.iterdir()) == [
            "model.pt2",
            "model_card.json",
            "weights.pt",
        ]
    leftovers = [p for p in (tmp_path / "champions").rglob("*.tmp")]
    assert leftovers == []


@pytest.fixture
def bucket(s3_server: S3Server, request: pytest.FixtureRequest) -> Bucket:
    return s3_server.bucket("race-" + request.node.name.replace("_", "-")[:30].rstrip("-"))


def test_racing_promotions_in_s3_lose_no_update(
    bucket: Bucket, tmp_path: Path, candidates: Candidates
) -> None:
    for run, best, _ in candidates:
        bucket.upload(best.path.parent, f"runs/{run}")
    storage = ObjectPath(bucket.uri("runs"), bucket.endpoint)
    for round_ in range(12):
        name = f"race-{round_}"
        settings = [
            settings_for(tmp_path, run, model_name=name).model_copy(
                update={"storage_path": storage, "storage_endpoint": bucket.endpoint}
            )
            for run, _, _ in candidates
        ]
        records = _race(settings, candidates)
        pointer = json.loads(bucket.read(f"runs/champions/{name}.json"))
        _assert_no_lost_update(records, pointer)
        assert champion.read_pointer(champion.pointer_path(storage, name)) == pointer
        copy = f"runs/champions/{name}/{pointer['card_sha256']}"
        assert bucket.keys(copy) == ["model.pt2", "model_card.json", "weights.pt"]


def test_reruns_of_one_run_racing_all_report_the_pointers_version(
    tmp_path: Path, candidates: Candidates
) -> None:
    """Three drivers of one run reach the compare-and-swap together (each exported: here the
    same export): one writes v1, the others find that checkpoint already champion against the
    pointer read inside it, so each of their summaries says v1, as the pointer does."""
    run, best, export = candidates[0]
    for round_ in range(25):
        name = f"reruns-{round_}"
        records = _race(
            [settings_for(tmp_path, run, model_name=name)] * 3, [(run, best, export)] * 3
        )
        pointer = json.loads((tmp_path / "champions" / f"{name}.json").read_text())
        assert pointer["version"] == 1 and pointer["run_name"] == run
        assert sorted(r["reason"] for r in records) == [
            "already the champion",
            "already the champion",
            "no champion yet",
        ]
        assert all(r["version"] == 1 for r in records)
        assert {r["export"]["card_sha256"] for r in records} == {pointer["card_sha256"]}
