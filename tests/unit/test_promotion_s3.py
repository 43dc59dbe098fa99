"""The champion pointer and the export in a bucket (moto's S3 server): one PUT of the whole
object, so concurrent promotions leave one consistent pointer and a reader never sees a torn
one; the export goes up through app/storage and `trainctl predict` reads it from s3://."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from app.evaluation.batch_predict import takes_batch_path
from app.promotion import champion
from app.promotion.step import promote_run
from app.storage.buckets import ObjectPath
from tests.hostile.support import assert_refused, trainctl
from tests.promotion_support import INFO, make_run, settings_for
from tests.s3_support import Bucket, S3Server


@pytest.fixture
def bucket(s3_server: S3Server, request: pytest.FixtureRequest) -> Bucket:
    return s3_server.bucket("promo-" + request.node.name.replace("_", "-")[:30].rstrip("-"))


def test_concurrent_pointer_writers_leave_one_whole_pointer(bucket: Bucket) -> None:
    path = champion.pointer_path(ObjectPath(bucket.uri("runs"), bucket.endpoint), "m")
    payloads = {i: {"version": i, "writer": i, "pad": str(i) * 300_000} for i in range(1, 5)}
    reads: list[dict] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            champion.replace(path, lambda current: payloads[i])
        except BaseException as err:  # reported below: a thread's error is otherwise lost
            errors.append(err)

    def read() -> None:
        while not stop.is_set():
            try:
                pointer = champion.read_pointer(path)  # PointerDamaged on a torn object
            except BaseException as err:
                errors.append(err)
                return
            if pointer:
                reads.append(pointer)

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(i,)) for i in payloads]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join(timeout=120)
    stop.set()
    reader.join(timeout=120)
    assert errors == []
    final = json.loads(bucket.read("runs/champions/m.json"))
    assert final == payloads[final["writer"]]  # one writer's pointer, whole
    assert all(r == payloads[r["writer"]] for r in reads)  # never a mix, never half
    assert bucket.keys("runs/champions") == ["m.json"]  # no temporaries, no lock objects


def test_promotion_and_prediction_on_object_storage(
    bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_run(tmp_path / "local", "r1", 0.9)
    bucket.upload(tmp_path / "local" / "r1", "runs/r1")
    storage = ObjectPath(bucket.uri("runs"), bucket.endpoint)
    settings = settings_for(tmp_path, "r1").model_copy(
        update={"storage_path": storage, "storage_endpoint": bucket.endpoint}
    )
    summary = promote_run(settings, INFO, {"status": "succeeded"})
    assert summary["promoted"] is True, summary["promotion"]
    files = ["model.pt2", "model_card.json", "weights.pt"]
    assert bucket.keys("runs/r1/export") == files
    pointer = json.loads(bucket.read("runs/champions/digits-cnn.json"))
    copy = f"runs/champions/digits-cnn/{pointer['card_sha256']}"
    assert pointer["version"] == 1 and pointer["export"] == bucket.uri(copy)
    assert pointer["run_export"] == bucket.uri("runs/r1/export")
    assert bucket.keys(copy) == files
    assert all(bucket.read(f"{copy}/{f}") == bucket.read(f"runs/r1/export/{f}") for f in files)

    image = tmp_path / "seven.png"
    Image.fromarray(np.full((8, 8), 200, dtype=np.uint8), "L").save(image)
    monkeypatch.setenv("AWS_ENDPOINT_URL", bucket.endpoint)  # how `predict` finds the store
    result = trainctl("predict", bucket.uri("runs/r1"), str(image), "--json", "--top-k", "2")
    assert result.code == 0, result.text
    top = json.loads(result.out)["predictions"][0]["top"]
    assert len(top) == 2 and top[0]["probability"] >= top[1]["probability"]
    # The champion itself, by its pointer in the bucket: the same model, the same figures.
    monkeypatch.setenv("TRAIN_STORAGE_PATH", bucket.uri("runs"))
    monkeypatch.setenv("TRAIN_STORAGE_ENDPOINT", bucket.endpoint)
    named = trainctl("predict", "champion:digits-cnn", str(image), "--json", "--top-k", "2")
    assert named.code == 0, named.text
    assert json.loads(named.out)["predictions"][0]["top"] == top

    # The image in the bucket too: a file named by its URI is classified in this process, as
    # a local one is (it started a Ray for one image), to the same figures.
    bucket.write("images/seven.png", image.read_bytes())
    uri = bucket.uri("images/seven.png")
    assert not takes_batch_path([uri], out=None)
    assert takes_batch_path([bucket.uri("images")], out=None)  # a prefix is listed, on Ray
    remote = trainctl("predict", bucket.uri("runs/r1"), uri, "--json", "--top-k", "2")
    assert remote.code == 0, remote.text
    (found,) = json.loads(remote.out)["predictions"]
    assert found["image"] == uri and found["top"] == top
    missing = trainctl("predict", bucket.uri("runs/r1"), bucket.uri("images/eight.png"))
    assert_refused(missing, 2, f"{bucket.uri('images/eight.png')}: no such object")
    # One slash short: a URI's typo, not a local file that is missing.
    typo = trainctl("predict", bucket.uri("runs/r1"), uri.replace("://", ":/"))
    assert_refused(typo, 2, "looks like a URI but is not one")
    bucket.write("images/odd.png/a.png", image.read_bytes())  # a prefix named like a file
    prefix = trainctl("predict", bucket.uri("runs/r1"), bucket.uri("images/odd.png"))
    assert_refused(prefix, 2, "odd.png: a prefix; end it with / to score every image below it")


def test_check_fails_where_the_s3_client_for_the_pointer_is_missing(
    bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An image without obstore could never move an S3 pointer safely: `check` says so."""
    import sys

    from app.errors import ConfigError
    from app.promotion.check import promotion_check

    storage = ObjectPath(bucket.uri("runs"), bucket.endpoint)
    settings = settings_for(tmp_path, "r").model_copy(
        update={"storage_path": storage, "storage_endpoint": bucket.endpoint}
    )
    assert "no champion yet" in promotion_check(settings)
    monkeypatch.setitem(sys.modules, "obstore", None)  # what `import obstore` finds there
    with pytest.raises(ConfigError) as err:
        promotion_check(settings)
    assert "obstore is not installed" in str(err.value) and "no run could be promoted" in str(
        err.value
    )
