"""The run folder's operations on an S3 bucket (a real moto server on 127.0.0.1), checked with
the tests' own S3 client, and the pure parts (naming, error wording) without a server."""

from __future__ import annotations

import hashlib
import pickle
import time
from pathlib import Path

import pytest
import torch

from app.runfolder import checkpoint_names, checkpoints
from app.runfolder import folder as run_folder
from app.storage import reading
from app.storage.buckets import ObjectPath, check_endpoint, check_uri, locate
from app.storage.deadline import DeadlineExceeded, call_with_deadline
from app.storage.location import append_line, describe_store_error, rename_dir, upload_tree
from tests.s3_support import Bucket, S3Server


@pytest.fixture
def bucket(s3_server: S3Server, request: pytest.FixtureRequest) -> Bucket:
    name = "unit-" + request.node.name.replace("_", "-")[:40].rstrip("-").lower()
    return s3_server.bucket(name)


def _root(bucket: Bucket) -> ObjectPath:
    return ObjectPath(bucket.uri("runs/r1"), bucket.endpoint)


def test_object_paths_name_like_pathlib_and_pickle_without_a_client() -> None:
    path = ObjectPath(check_uri("s3://bkt/runs//r1/"), "http://minio:9000")
    assert str(path) == "s3://bkt/runs/r1"
    assert str(path / "logs" / "attempt-1") == "s3://bkt/runs/r1/logs/attempt-1"
    assert (path.name, str(path.parent), path.bucket) == ("r1", "s3://bkt/runs", "bkt")
    assert str(path.with_name("r2")) == "s3://bkt/runs/r2"
    assert str(path.at("bkt/other/key")) == "s3://bkt/other/key"
    copy = pickle.loads(pickle.dumps(path))
    assert (copy, copy.endpoint) == (path, "http://minio:9000")
    assert b"S3FileSystem" not in pickle.dumps(path)  # each process builds its own client


@pytest.mark.parametrize(
    ("error", "says"),
    [
        ("AWS Error NO_SUCH_BUCKET during ListObjectsV2", "bucket 'bkt' does not exist"),
        ("AWS Error ACCESS_DENIED during HeadObject operation", "refused the credentials"),
        ("AWS Error INVALID_ACCESS_KEY_ID during PutObject", "refused the credentials"),
        ("AWS Error NETWORK_CONNECTION during HeadBucket: curlCode: 7", "cannot be reached"),
        ("google::cloud::Status(PERMISSION_DENIED): HTTP status 403", "refused the credentials"),
        # Anything else is the store's answer, said with the store it came from.
        (
            "AWS Error RESOURCE_NOT_FOUND during HeadBucket operation: No response body.",
            "answered RESOURCE_NOT_FOUND; check TRAIN_STORAGE_ENDPOINT",
        ),
    ],
)
def test_store_errors_are_described_by_kind(error: str, says: str) -> None:
    line = describe_store_error(ObjectPath("s3://bkt/runs"), "TRAIN_STORAGE_PATH", OSError(error))
    assert line.startswith("TRAIN_STORAGE_PATH=s3://bkt/runs: ")
    assert says in line


def test_jsonl_records_append_and_the_summary_is_replaced_in_a_bucket(bucket: Bucket) -> None:
    root = _root(bucket)
    run_folder.record_epoch(root, {"epoch": 1, "train_loss": 1.0})
    run_folder.record_epoch(root, {"epoch": 2, "train_loss": 0.5})
    append_line(root / "metrics.jsonl", "{half a line")  # a damaged line is skipped, not fatal
    assert [r["epoch"] for r in run_folder.epochs(root)] == [1, 2]
    run_folder.write_summary(root, {"status": "running"})
    run_folder.write_summary(root, {"status": "succeeded"})
    assert bucket.read("runs/r1/summary.json").startswith(b'{\n  "status": "succeeded"')
    assert bucket.keys("runs/r1") == ["metrics.jsonl", "summary.json"]  # no temporaries left


def _checkpoint(tmp: Path, epoch: int, accuracy: float) -> Path:
    folder = tmp / checkpoint_names.dir_name(epoch)
    checkpoints.write_checkpoint(
        folder,
        model_state={"w": torch.full((2,), float(epoch))},
        train_state={"epoch": epoch, "step": epoch * 10},
        epoch=epoch,
        metrics={"val_accuracy": accuracy},
    )
    return folder


def test_checkpoints_scan_quarantine_and_prune_in_a_bucket(bucket: Bucket, tmp_path: Path) -> None:
    root = _root(bucket)
    for epoch, accuracy in ((1, 0.9), (2, 0.5), (3, 0.7), (4, 0.6)):
        upload_tree(_checkpoint(tmp_path, epoch, accuracy), root / checkpoint_names.dir_name(epoch))
    weights = "runs/r1/checkpoint_epoch_0004/model.pt"
    bucket.write(weights, bucket.read(weights)[:50])

    scan = checkpoints.scan(root)
    assert [ref.epoch for ref in scan.good] == [3, 2, 1]
    [(bad, why)] = scan.bad
    assert bad == root / "checkpoint_epoch_0004" and "model.pt does not match" in why
    moved = checkpoints.quarantine(bad, why)
    assert moved == root / "corrupt_checkpoint_epoch_0004"
    model_state, train_state = checkpoints.load_train_state(scan.good[0].path)
    assert train_state["epoch"] == 3 and model_state["w"].tolist() == [3.0, 3.0]

    removed = checkpoints.prune(root, keep=2, metric="val_accuracy")
    assert removed == [root / "checkpoint_epoch_0002"]  # epoch 1 is best, epoch 3 newest
    folders = {key.split("/")[0] for key in bucket.keys("runs/r1")}
    assert folders == {
        "checkpoint_epoch_0001",
        "checkpoint_epoch_0003",
        "corrupt_checkpoint_epoch_0004",
    }
    assert b"does not match" in bucket.read("runs/r1/corrupt_checkpoint_epoch_0004/UNUSABLE.txt")
    assert len(bucket.read("runs/r1/corrupt_checkpoint_epoch_0004/model.pt")) == 50


def test_reading_hashes_and_bounds_a_bucket_object_as_a_local_file(
    bucket: Bucket, tmp_path: Path
) -> None:
    """sha256_of and read_bounded, the storage package's readers, answer alike for both kinds
    (a digest over more than one read chunk; the bound; a missing file)."""
    data = bytes(range(256)) * ((reading.HASH_CHUNK >> 8) + 3)
    local = tmp_path / "blob.bin"
    local.write_bytes(data)
    remote = _root(bucket) / "blob.bin"
    remote.write_bytes(data)
    assert reading.sha256_of(remote) == reading.sha256_of(local) == hashlib.sha256(data).hexdigest()
    for path in (local, remote):
        assert reading.read_bounded(path, None, len(data)) == data
        with pytest.raises(ValueError, match=f"over the {len(data) - 1:,} allowed"):
            reading.read_bounded(path, None, len(data) - 1)
        with pytest.raises(FileNotFoundError):
            reading.read_bounded(path.with_name("missing.bin"), None, 10)
        with pytest.raises(FileNotFoundError):
            reading.sha256_of(path.with_name("missing.bin"))


def test_an_image_folder_in_a_bucket_is_listed_and_read_as_on_a_volume(
    bucket: Bucket, tmp_path: Path
) -> None:
    """folder_listing and folder_images ask the storage package, not the path's type: the same
    classes, files and pixels from either kind; the split-folder hint names the parent."""
    import numpy as np
    from PIL import Image

    from app.data.folder_images import load_images
    from app.data.folder_listing import list_folder
    from app.errors import ConfigError

    local = tmp_path / "pets"
    for index, (split, name) in enumerate([("train", "cat"), ("train", "dog"), ("valid", "cat")]):
        (local / split / name).mkdir(parents=True)
        Image.new("RGB", (12, 10), (index * 60, 0, 0)).save(local / split / name / f"{index}.png")
    remote = ObjectPath(bucket.uri("data/pets"), bucket.endpoint)
    upload_tree(local, remote)
    on_volume, in_bucket = list_folder(local), list_folder(remote)
    assert in_bucket == on_volume and in_bucket.class_names == ("cat", "dog")
    paths = [path for path, _ in in_bucket.train + in_bucket.valid]
    assert np.array_equal(load_images(remote, paths, 8), load_images(local, paths, 8))
    for root in (local / "train", remote / "train"):
        with pytest.raises(ConfigError, match="is itself a split folder: did you mean"):
            list_folder(root)


def test_rename_dir_in_a_bucket_replaces_the_target(bucket: Bucket) -> None:
    root = _root(bucket)
    (root / "a" / "x.txt").write_text("new")
    (root / "b" / "stale.txt").write_text("old")
    rename_dir(root / "a", root / "b")
    assert bucket.keys("runs/r1") == ["b/x.txt"]


def test_gs_uris_get_pyarrows_gcs_client_and_s3_endpoints_their_scheme() -> None:
    import pyarrow.fs as pafs

    from app.settings import TrainSettings
    from app.storage.buckets import filesystem

    settings = TrainSettings(
        storage_path="gs://team-runs/vision", data_path="s3://data/cifar",
        storage_endpoint="http://minio.minio:9000",
    )  # fmt: skip
    assert isinstance(settings.run_dir.fs, pafs.GcsFileSystem)
    assert str(settings.run_dir) == "gs://team-runs/vision/digits-resnet18"
    s3 = filesystem("s3", "http://minio.minio:9000")
    assert isinstance(s3, pafs.S3FileSystem)
    assert "minio.minio:9000" in repr(s3.__reduce__())


# --- endpoints, look-alikes, deadlines (no server) ------------------------------------------
@pytest.mark.parametrize(
    ("value", "normal"),
    [
        ("http://minio:9000", "http://minio:9000"),
        ("HTTPS://s3.example.com/", "https://s3.example.com"),
        ("http://[::1]:9000", "http://[::1]:9000"),
        ("http://10.0.0.5", "http://10.0.0.5"),
    ],
)
def test_a_good_endpoint_is_normalised(value: str, normal: str) -> None:
    assert check_endpoint(value) == normal


@pytest.mark.parametrize(
    "value",
    ["minio:9000", "http://minio:65536", "http://minio:-1", "http://minio:９０", "http://minio:",
     "http://a@minio", "http://minio/x", "http://mi_nio", " http://minio", "http://[::1"],
)  # fmt: skip
def test_a_bad_endpoint_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match=r"http:// or https:// URL|credentials"):
        check_endpoint(value)


@pytest.mark.parametrize("value", ["s3:/b", "s3:\\b", "gs:b", "S3//b", " runs", "runs\n"])
def test_lookalikes_are_refused_and_plain_paths_kept(value: str) -> None:
    with pytest.raises(ValueError, match=r"looks like a URI|spaces"):
        locate(value)
    assert locate("./s3:odd-but-local") == Path("s3:odd-but-local")
    assert locate("runs/a b") == Path("runs/a b")


def test_a_deadline_returns_results_raises_errors_and_gives_up() -> None:
    assert call_with_deadline(lambda: 7, 1, "seven") == 7
    with pytest.raises(ZeroDivisionError):
        call_with_deadline(lambda: 1 / 0, 1, "division")
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded, match=r"sleeper: no answer within 0\.3 s"):
        call_with_deadline(lambda: time.sleep(5), 0.3, "sleeper")
    assert time.monotonic() - started < 1


def test_a_client_that_gives_up_first_has_met_the_deadline() -> None:
    """The clients a deadline wraps time out from the same budget: on a loaded machine curl's
    stall timer fired first, and a bucket listing that stalled ended with pyarrow's raw OSError
    instead of the listing's own message (which names the folder and what to do)."""
    curl = OSError(
        "When listing objects under key 'pets/train/' in bucket 'data': AWS Error "
        "NETWORK_CONNECTION during ListObjectsV2 operation: curlCode: 28, Timeout was reached"
    )
    for error in (curl, TimeoutError("timed out"), OSError("DEADLINE_EXCEEDED: gcs")):

        def give_up(error: Exception = error) -> None:
            raise error

        with pytest.raises(DeadlineExceeded, match=r"s3://data/pets: no answer within 5 s"):
            call_with_deadline(give_up, 5, "s3://data/pets")
    refused = OSError("AWS Error ACCESS_DENIED during ListObjectsV2 operation")

    def deny() -> None:
        raise refused

    with pytest.raises(OSError) as raised:  # any other error is the client's own, as it was
        call_with_deadline(deny, 5, "s3://data/pets")
    assert raised.value is refused


def test_a_store_error_never_carries_a_secret_with_slashes() -> None:
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    err = OSError(f"AWS Error UNKNOWN during GetObject on http://AKIA:{secret}@minio:9000/b")
    line = describe_store_error(ObjectPath("s3://bkt/runs"), "TRAIN_STORAGE_PATH", err)
    assert all(part not in line for part in secret.split("/")), line
