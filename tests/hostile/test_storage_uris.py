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
from tests.s3_support import S3Server, moto_server
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
    s3_server: S3Server,
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
    s3_server: S3Server,
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


# --- red team, issue 23 part 5 --------------------------------------------------------------
AWS_SECRET_SHAPE = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # real keys hold '/'


@pytest.mark.parametrize(
    ("endpoint", "needle"),
    [
        ("http://minio:99999", "the port must be a number from 1 to 65535, not '99999'"),
        ("http://minio:abc", "the port must be a number from 1 to 65535, not 'abc'"),
        ("http://minio:0", "the port must be a number from 1 to 65535, not '0'"),
        ("http://minio:9000/bucket", "only scheme, host and port"),
        ("http://minio:9000?x=1", "only scheme, host and port"),
        ("http:/minio:9000", "http:// or https:// URL"),
        ("ftp://minio:9000", "http:// or https:// URL"),
        ("http://mi nio:9000", "without spaces"),
        ("http://:9000", "'' is not a host name"),
    ],
)
def test_an_endpoint_that_cannot_work_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, endpoint: str, needle: str
) -> None:
    monkeypatch.setenv("TRAIN_STORAGE_PATH", "s3://bucket/runs")
    monkeypatch.setenv("TRAIN_STORAGE_ENDPOINT", endpoint)
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, "TRAIN_STORAGE_ENDPOINT=", needle)
    assert "TRAIN_STORAGE_PATH" not in result.text  # the endpoint is to blame, not the path
    assert files_under(tmp_path) == []


@pytest.mark.parametrize("variable", ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"])
@pytest.mark.parametrize("command", [("check", "--skip-cluster"), ("train",)], ids=" ".join)
def test_the_aws_endpoint_variable_without_a_scheme_is_bad_input_not_a_crash(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str, command: tuple[str, ...]
) -> None:
    monkeypatch.setenv("TRAIN_STORAGE_PATH", "s3://bucket/runs")
    monkeypatch.setenv(variable, "minio:9000")  # pyarrow: ArrowInvalid, once "internal error"
    result = trainctl(*command)
    assert_refused(result, 2, f"{variable}='minio:9000'", "http:// or https:// URL")
    assert files_under(tmp_path) == []


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"{bad", "this file is not one"),
        (b'["a list"]', "this file is not one"),
        (None, "No such file or directory"),
    ],
    ids=["not-json", "not-a-key", "missing"],
)
def test_unusable_google_credentials_are_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, content: bytes | None, needle: str
) -> None:
    key = tmp_path / "key.json"
    if content is not None:
        key.write_bytes(content)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    monkeypatch.setenv("TRAIN_STORAGE_PATH", "gs://bucket/runs")
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, "TRAIN_STORAGE_PATH=gs://bucket/runs", "GOOGLE_APPLICATION_CRED")
    assert needle in result.text


LOOKALIKES = [
    " s3://bucket/runs",
    "s3://bucket/runs ",
    "s3:/bucket",
    "s3:\\\\bucket",
    "gs:/b",
    "S3:/bucket",
    "gs:bucket/x",
    "s3//bucket/x",
    "\ts3://bucket",
    "\uff533://bucket/x",
    "gs\uff1a//bucket",
]  # fmt: skip (full-width s, colon)


@pytest.mark.parametrize("variable", ["TRAIN_STORAGE_PATH", "TRAIN_DATA_PATH", "TRAIN_WARM_START"])
@pytest.mark.parametrize("value", LOOKALIKES, ids=repr)
def test_a_uri_lookalike_is_refused_not_made_a_local_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    result = trainctl("check", "--skip-cluster")
    assert_refused(result, 2, f"{variable}=")
    assert any(
        words in result.text
        for words in ("looks like a URI", "leading or trailing spaces", "look-alike characters")
    ), result.text
    assert files_under(tmp_path) == []


@pytest.mark.parametrize("value", LOOKALIKES[2:7], ids=repr)
def test_logs_refuses_a_uri_lookalike_run_or_storage(tmp_path: Path, value: str) -> None:
    assert_refused(trainctl("logs", "--driver", value), 2, "looks like a URI")
    result = trainctl("logs", "--driver", "run", "--storage", value)
    assert_refused(result, 2, "--storage", "looks like a URI")
    assert files_under(tmp_path) == []


URI_VARIABLES = [
    "TRAIN_STORAGE_PATH",
    "TRAIN_DATA_PATH",
    "TRAIN_WARM_START",
    "TRAIN_STORAGE_ENDPOINT",
]


@pytest.mark.parametrize("variable", URI_VARIABLES)
def test_a_secret_with_slashes_in_a_uri_is_never_printed(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    host = "minio:9000" if variable == "TRAIN_STORAGE_ENDPOINT" else "bucket/runs"
    scheme = "http" if variable == "TRAIN_STORAGE_ENDPOINT" else "s3"
    monkeypatch.setenv(variable, f"{scheme}://AKIAIOSFODNN7EXAMPLE:{AWS_SECRET_SHAPE}@{host}")
    for command in (("check", "--skip-cluster"), ("train",)):
        result = trainctl(*command)
        assert_refused(result, 2, variable, "credentials do not belong")
        for part in AWS_SECRET_SHAPE.split("/"):
            assert part not in result.text, result.text


def test_logs_never_prints_a_secret_given_in_storage_or_run(tmp_path: Path) -> None:
    uri = f"s3://AKIAIOSFODNN7EXAMPLE:{AWS_SECRET_SHAPE}@bucket/runs"
    for args in (("logs", "--driver", uri), ("logs", "--driver", "run", "--storage", uri)):
        result = trainctl(*args)
        assert_refused(result, 2, "credentials do not belong")
        for part in AWS_SECRET_SHAPE.split("/"):
            assert part not in result.text, result.text


def test_a_missing_bucket_is_named_not_read_as_no_run_or_no_champion_yet(
    monkeypatch: pytest.MonkeyPatch, s3_server: S3Server
) -> None:
    """A typo in a bucket's name read as "no such run or export folder", and under
    `champion:` as "there is no champion there yet" (found by a red-team pass)."""
    s3_server.bucket("models-here")
    monkeypatch.setenv("TRAIN_STORAGE_ENDPOINT", s3_server.endpoint)
    monkeypatch.setenv("TRAIN_STORAGE_PATH", "s3://modles-here/runs")  # the typo
    missing = "bucket 'modles-here' does not exist (create it, or fix the name)"
    for args in (
        ("predict", "champion:pets", "x.png"),
        ("predict", "s3://modles-here/runs/r1", "x.png"),
        ("predict", "s3://modles-here/runs/r1", "x.png", "--out", "p.csv"),
        ("evaluate", "champion:pets"),
    ):
        result = trainctl(*args)
        assert_refused(result, 2, missing)
        assert "no champion" not in result.text and "no such run" not in result.text
    # The bucket there, nothing in it: said as before.
    monkeypatch.setenv("TRAIN_STORAGE_PATH", "s3://models-here/runs")
    result = trainctl("predict", "champion:pets", "x.png")
    assert_refused(result, 2, "no champion pets (no pointer there)")
    result = trainctl("predict", "s3://models-here/runs/r1", "x.png")
    assert_refused(result, 2, "no such run or export folder")
