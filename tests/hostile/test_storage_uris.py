"""Storage and data URIs that cannot work: exit 2 naming the variable, before Ray starts.

Against real S3 servers on 127.0.0.1: moto's (which takes any credentials) for a missing
bucket, and a second one with IAM authentication on, which refuses the fake credentials every
test process has (tests/conftest.py) as AWS refuses a wrong key.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hostile.support import assert_refused, files_under, trainctl
from tests.s3_support import S3Server, moto_server, s3_server  # noqa: F401 - the fixture
from tests.support import free_port

SECRET_IN_URI = "hunter2secret"


@pytest.fixture(scope="module")
def refusing_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An S3 endpoint that checks credentials (moto with IAM auth from the first request)."""
    with moto_server(tmp_path_factory.mktemp("moto-auth"), INITIAL_NO_AUTH_ACTION_COUNT="0") as uri:
        yield uri


@pytest.mark.parametrize(
    ("variable", "value", "needle"),
    [
        ("TRAIN_STORAGE_PATH", "ftp://host/runs", "unknown scheme ftp://"),
        ("TRAIN_STORAGE_PATH", "S3://Bad_Bucket/runs", "is not a bucket name"),
        ("TRAIN_STORAGE_PATH", "s3://bucket/../runs", "'.' and '..' are not allowed"),
        ("TRAIN_DATA_PATH", "hdfs://namenode/data", "unknown scheme hdfs://"),
        ("TRAIN_WARM_START", "s3://bucket/ckpt?versionId=1", "no ?query"),
        ("TRAIN_STORAGE_ENDPOINT", "minio:9000", "http:// or https:// URL"),
    ],
)
def test_a_uri_that_cannot_work_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str, value: str, needle: str
) -> None:
    monkeypatch.setenv(variable, value)
    assert_refused(trainctl("check", "--skip-cluster"), 2, variable, needle)
    assert files_under(tmp_path) == []


def test_credentials_in_a_uri_are_refused_without_being_printed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRAIN_STORAGE_PATH", f"s3://user:{SECRET_IN_URI}@bucket/runs")
    result = trainctl("train")
    assert_refused(result, 2, "TRAIN_STORAGE_PATH", "credentials do not belong in the path")
    assert SECRET_IN_URI not in result.text


def test_a_missing_bucket_stops_train_before_ray_starts(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    s3_server: S3Server,  # noqa: F811
) -> None:
    monkeypatch.setenv("TRAIN_STORAGE_PATH", "s3://no-such-bucket/runs")
    monkeypatch.setenv("TRAIN_STORAGE_ENDPOINT", s3_server.endpoint)
    result = trainctl("train")
    assert_refused(result, 2, "TRAIN_STORAGE_PATH=s3://no-such-bucket/runs", "does not exist")
    assert "Ray" not in result.text
    assert files_under(tmp_path) == []


def test_a_missing_data_bucket_is_named_by_check(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    s3_server: S3Server,  # noqa: F811
) -> None:
    s3_server.bucket("runs-for-check")
    monkeypatch.setenv("TRAIN_STORAGE_PATH", "s3://runs-for-check/runs")
    monkeypatch.setenv("TRAIN_DATASET", "parquet")
    monkeypatch.setenv("TRAIN_DATA_PATH", "s3://no-data-bucket/images")
    monkeypatch.setenv("TRAIN_STORAGE_ENDPOINT", s3_server.endpoint)
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, "ok    storage: s3://runs-for-check/runs writable")
    assert "TRAIN_DATA_PATH=s3://no-data-bucket/images: bucket 'no-data-bucket' does not" in (
        result.text
    )


def test_an_unreachable_endpoint_fails_within_the_retry_budget(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TRAIN_STORAGE_PATH", "s3://bucket/runs")
    monkeypatch.setenv("TRAIN_STORAGE_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    result = trainctl("train")
    assert_refused(result, 2, "TRAIN_STORAGE_PATH=s3://bucket/runs", "cannot be reached")
    assert files_under(tmp_path) == []


def test_refused_credentials_are_reported_without_printing_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, refusing_s3: str
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_IN_URI)
    monkeypatch.setenv("TRAIN_STORAGE_PATH", "s3://bucket/runs")
    monkeypatch.setenv("TRAIN_STORAGE_ENDPOINT", refusing_s3)
    result = trainctl("train")
    assert_refused(result, 2, "TRAIN_STORAGE_PATH=s3://bucket/runs", "refused the credentials")
    assert SECRET_IN_URI not in result.text and "testing" not in result.text
