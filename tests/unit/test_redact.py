"""The one redaction rule, on the credential shapes that reach trainctl for real."""

from __future__ import annotations

import pytest

from app.redact import redact, redact_text, redact_uri

# The shape of a real AWS secret access key: 40 characters of base64, '/' and '+' included.
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        (f"s3://AKIAIOSFODNN7EXAMPLE:{AWS_SECRET}@bucket/runs", "s3://***@bucket/runs"),
        ("ray://admin:hunter2@head.example:10001", "ray://***@head.example:10001"),
        ("https://user:p@ss/w@rd@mlflow.example/api", "https://***@mlflow.example/api"),
        ("https://token@mlflow.example", "https://***@mlflow.example"),
        # Look-alikes are refused as paths, and the refusal echoes them.
        (f"s3:/AKIAIOSFODNN7EXAMPLE:{AWS_SECRET}@bucket/x", "s3:/***@bucket/x"),
        ("s3:\\\\user:hunter2@bucket", "s3:\\\\***@bucket"),
        ("https://mlflow.example/?token=abc123&x=1", "https://mlflow.example/?token=***&x=1"),
        (
            "https://b.s3.amazonaws.com/k?X-Amz-Signature=f00d&X-Amz-Credential=AKIA%2F1",
            "https://b.s3.amazonaws.com/k?X-Amz-Signature=***&X-Amz-Credential=***",
        ),
    ],
)
def test_credentials_are_masked(uri: str, shown: str) -> None:
    assert redact_uri(uri) == shown
    assert "hunter2" not in redact_uri(uri) and AWS_SECRET not in redact_uri(uri)


@pytest.mark.parametrize(
    "uri",
    [
        "s3://bucket/runs/run@2",
        "http://minio.local:9000",
        "http://minio.local:9000/path",
        "gs://bucket/a/b",
        "/mnt/shared/runs",
        "file:///tmp/x",
    ],
)
def test_uris_without_credentials_are_unchanged(uri: str) -> None:
    assert redact_uri(uri) == uri


def test_text_and_structures() -> None:
    line = f"could not reach s3://AKIA:{AWS_SECRET}@bucket/x: 'http://u:pw@h:1/' refused"
    assert redact_text(line) == "could not reach s3://***@bucket/x: 'http://***@h:1/' refused"
    nested = {"a": [f"s3://K:{AWS_SECRET}@b"], "b": 3, "c": ("x",)}
    assert redact(nested) == {"a": ["s3://***@b"], "b": 3, "c": ("x",)}


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        (f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}", "AWS_SECRET_ACCESS_KEY=***"),
        (f'{{"aws_secret_access_key": "{AWS_SECRET}"}}', '{"aws_secret_access_key": "***"}'),
        ("export MLFLOW_TRACKING_TOKEN=dapi0123456789abcdef", "export MLFLOW_TRACKING_TOKEN=***"),
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig", "Authorization: Bearer ***"),
        ("password: hunter2, user: bob", "password: ***, user: bob"),
        ("Authorization: token ghp_0123456789abcdef", "Authorization: token ***"),
        ('"Proxy-Authorization": "Token ghp_0123456789ab"', '"Proxy-Authorization": "Token ***"'),
        ("authorization=token ghp_0123456789abcdef", "authorization=token ***"),
    ],
)
def test_credential_assignments_in_log_lines_are_masked(line: str, shown: str) -> None:
    assert redact_text(line) == shown


def test_ordinary_log_lines_are_left_alone() -> None:
    for line in (
        "max_tokens=512 tokenizer: bpe val_loss: 0.5",
        "epoch 1/2  train_loss 0.9462  val_acc 94.41%  8.2s/epoch",
        "Reporting training result 1: TrainingReport(checkpoint=None, metrics={'epoch': 1})",
        # The bare word `token` is not an auth scheme outside an Authorization header.
        "step 3: token embeddings 1234abcd5678ef90 loaded",
        "vocab: token 0123456789abcdef maps to id 42",
    ):
        assert redact_text(line) == line


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "text",
    [
        "a" * 200_000 + ":",  # a scheme-like run that never becomes a URI
        "password" * 25_000,  # a key-like run that is never assigned
        "s3://b/k?" + "a" * 200_000 + "=1",  # a query name that never names a secret
        "a:" * 100_000,
    ],
    ids=["scheme-run", "key-run", "query-run", "colons"],
)
def test_long_foreign_text_is_redacted_in_linear_time(text: str) -> None:
    """Run-folder files, logs and API answers are foreign text of any length: a pattern that
    rescans a long name-like run from every position took minutes on 100 kB (the timeout is
    the deadline, far above the linear time)."""
    assert redact_text(text) == text  # nothing secret in it, and it comes back


def test_a_long_key_name_still_hides_its_value() -> None:
    assert redact_text("x" * 100 + "_password=hunter2") == "x" * 100 + "_password=***"
    masked = redact_text("h" * 100 + "ttps://user:pw@host/p?api_token=abc")
    assert "pw@" not in masked and "abc" not in masked


PEM = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n"
GITHUB = "ghp_" + "a1B2" * 9
HF = "hf_" + "Zq9x" * 9


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (PEM, "***\n"),
        (
            f"TRAIN_MODEL_NAME='{PEM}': must be 1-64 letters",
            "TRAIN_MODEL_NAME='***\n': must be 1-64 letters",
        ),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIE... (cut)", "***"),  # no END line: all of it
        (f"name {GITHUB} refused", "name *** refused"),
        (f"TRAIN_RUN_NAME='{HF}'", "TRAIN_RUN_NAME='***'"),
        ("key AKIAIOSFODNN7EXAMPLE given", "key *** given"),
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig", "***"),
    ],
)
def test_credentials_known_by_their_form_are_masked_wherever_they_stand(
    text: str, shown: str
) -> None:
    """A red-team pass: `render --set-file train.model_name=key.pem` quoted the whole private
    key in its refusal, into a CI log; the chart's schema already refuses these forms by name
    (app/k8s/names.py KNOWN_CREDENTIAL), and now no message shows them."""
    assert redact_text(text) == shown
    assert redact_text("sk-learn and hf_hub and AKIA alone") == "sk-learn and hf_hub and AKIA alone"
