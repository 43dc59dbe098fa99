"""Kubernetes names and kubeconfigs, unanswering servers, and signals while joining Ray.

Names given to `logs` and `status` are refused before any connection (no kubeconfig exists
here at all, so reaching one would fail differently). Servers and plugins that never answer
are real sockets and real processes with short, user-settable deadlines.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app import ray_cluster
from tests import parquet_support as data
from tests.hostile.support import assert_refused, trainctl

BAD_NAMES = [
    "../../api/v1/secrets",
    "a/b",
    "UPPER",
    "name\n",
    "-lead",
    "trail-",
    "x" * 64,
    "dot.ted",
    "sp ace",
    "%2e%2e",
    "",
    "ünï",
]


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_logs_refuses_a_bad_rayjob_name_before_any_request(name: str) -> None:
    if "/" in name:  # a path, by the rule both commands state: a run folder, never a request
        assert_refused(trainctl("logs", "--", name), 2, f"run '{name}': no such folder: ", name)
        return
    assert_refused(trainctl("logs", "--", name), 2, "RayJob name", "not a valid Kubernetes name")
    assert_refused(trainctl("status", "--", name), 2, "RayJob name", "not a valid Kubernetes name")


@pytest.mark.parametrize("namespace", BAD_NAMES[:6], ids=repr)
def test_logs_and_status_refuse_a_bad_namespace(namespace: str) -> None:
    assert_refused(trainctl("logs", "job", "-n", namespace), 2, "--namespace")
    assert_refused(trainctl("status", "-n", namespace), 2, "--namespace")


@pytest.mark.parametrize("release", ["a,b=c", "x\n", "app.kubernetes.io/name"], ids=repr)
def test_status_refuses_a_release_that_would_widen_the_selector(release: str) -> None:
    assert_refused(trainctl("status", "--release", release), 2, "--release")


def _kubeconfig(tmp_path: Path, text: str | bytes) -> None:
    path = tmp_path / "kubeconfig"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    os.environ["KUBECONFIG"] = str(path)  # restored by the clean_env fixture's monkeypatch


@pytest.fixture
def kube(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", "")  # registered, so _kubeconfig's change is undone


@pytest.mark.parametrize(
    "text",
    ["apiVersion: v1\nclusters: [\n", "{{ not yaml", b"\xff\xfe\x00binary", "- just\n- a list\n"],
    ids=["unclosed", "template", "binary", "list"],
)
def test_unusable_kubeconfig_exits_4(tmp_path: Path, kube: None, text: str | bytes) -> None:
    _kubeconfig(tmp_path, text)
    assert_refused(trainctl("status"), 4, "kubeconfig")


def _config(server: str, user: str) -> str:
    return f"""apiVersion: v1
kind: Config
current-context: c
clusters: [{{name: k, cluster: {{server: "{server}"}}}}]
contexts: [{{name: c, context: {{cluster: k, user: u, namespace: ml}}}}]
users: [{{name: u, user: {user}}}]
"""


@pytest.fixture
def silent_server() -> Iterator[int]:
    """Accepts connections (the kernel's backlog) and never says a word."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


def _answering(body: bytes, content_type: str) -> type:
    """An HTTP handler answering every GET and POST with 200 and `body`."""
    import http.server

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

        def log_message(self, *args: object) -> None:
            pass

    return Answer


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[int]:
    """An HTTPS API server with a self-signed certificate, answering every request with an
    empty RayJob list."""
    import datetime
    import http.server
    import ssl
    import threading

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )

    body = b'{"apiVersion": "ray.io/v1", "kind": "RayJobList", "items": []}'
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _answering(body, "application/json"))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def test_tls_verification_off_is_said_once_not_warned_on_every_request(
    tmp_path: Path, kube: None, tls_server: int
) -> None:
    """A kubeconfig with insecure-skip-tls-verify made urllib3 print InsecureRequestWarning,
    its source line and its path on every request (a red-team pass): one line says it."""
    import warnings

    from urllib3.exceptions import InsecureRequestWarning

    unverified = _config(f"https://127.0.0.1:{tls_server}", "{token: t}").replace(
        "cluster: {server:", "cluster: {insecure-skip-tls-verify: true, server:"
    )
    _kubeconfig(tmp_path, unverified)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = trainctl("status")
    assert result.code == 0, result.text
    said = "the kubeconfig turns TLS verification off for https://127.0.0.1"
    assert result.err.count(said) == 1, result.err
    assert not [w for w in caught if issubclass(w.category, InsecureRequestWarning)]


def test_silent_api_server_times_out_and_says_it_retries(
    tmp_path: Path, kube: None, monkeypatch: pytest.MonkeyPatch, silent_server: int
) -> None:
    monkeypatch.setenv("TRAINCTL_API_TIMEOUT", "0.3")
    monkeypatch.setenv("TRAINCTL_API_RETRIES", "1")
    _kubeconfig(tmp_path, _config(f"http://127.0.0.1:{silent_server}", "{token: t}"))
    started = time.monotonic()
    result = trainctl("status")
    assert_refused(result, 4, "retrying in 0.3 s (2/2)", "Read timed out")
    assert time.monotonic() - started < 10


@pytest.fixture
def sign_in_page() -> Iterator[int]:
    """What an auth proxy or a load balancer in front of the API answers: 200 and a web page."""
    import http.server
    import threading

    page = _answering(b"<html><title>Sign in</title></html>", "text/html")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


@pytest.mark.parametrize("command", [("status",), ("logs", "train-l4-0a1b2c3d")])
def test_a_web_page_answering_200_is_not_kubernetes(
    tmp_path: Path, kube: None, sign_in_page: int, command: tuple[str, ...]
) -> None:
    """A 200 whose body is no JSON (a sign-in page) was an internal error, exit 1: the
    schedule's CronJob takes 1 for a failed run and never retries it (a red-team pass)."""
    _kubeconfig(tmp_path, _config(f"http://127.0.0.1:{sign_in_page}", "{token: t}"))
    result = trainctl(*command)
    assert_refused(result, 4, "does not look like a Kubernetes API server", "<html><title>Sign")


def test_hanging_exec_credential_plugin_is_stopped(
    tmp_path: Path, kube: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINCTL_API_TIMEOUT", "0.5")
    monkeypatch.setenv("TRAINCTL_API_RETRIES", "0")
    user = (
        "{exec: {apiVersion: client.authentication.k8s.io/v1beta1, command: sleep, "
        'args: ["60"], interactiveMode: Never}}'
    )
    _kubeconfig(tmp_path, _config("https://127.0.0.1:1", user))
    started = time.monotonic()
    result = trainctl("status")
    assert_refused(result, 4, "exec credential plugin sleep gave no answer within 0.5 s")
    assert time.monotonic() - started < 15


@pytest.mark.parametrize("value", ["abc", "-1", "0", "1e9", "nan"])
def test_bad_api_timeout_is_invalid_input(
    tmp_path: Path, kube: None, monkeypatch: pytest.MonkeyPatch, silent_server: int, value: str
) -> None:
    monkeypatch.setenv("TRAINCTL_API_TIMEOUT", value)
    _kubeconfig(tmp_path, _config(f"http://127.0.0.1:{silent_server}", "{token: t}"))
    assert_refused(trainctl("status"), 2, "TRAINCTL_API_TIMEOUT")


# --- joining Ray: a deadline, retries said aloud, SIGTERM and Ctrl-C honoured ------------------
def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


ADDRESS_FORMS = ["127.0.0.1:{port}", "ray://127.0.0.1:{port}", "[::1]:{port}"]


@pytest.fixture(params=ADDRESS_FORMS)
def ray_address_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, request: pytest.FixtureRequest
) -> Path:
    data.good(tmp_path / "data")
    settings = {
        "TRAIN_DATASET": "parquet",
        "TRAIN_MODEL": "cnn",
        "TRAIN_DATA_PATH": str(tmp_path / "data"),
        "TRAIN_STORAGE_PATH": str(tmp_path / "runs"),
        "TRAIN_RUN_NAME": "sig",
        "TRAIN_RAY_ADDRESS": request.param.format(port=_closed_port()),
    }
    for key, value in settings.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(ray_cluster, "RETRY_EVERY_S", 0.2)
    return tmp_path / "runs" / "sig"


def test_unreachable_ray_address_gives_up_at_its_deadline(
    monkeypatch: pytest.MonkeyPatch, ray_address_env: Path
) -> None:
    monkeypatch.setenv("TRAIN_RAY_CONNECT_TIMEOUT", "1")
    started = time.monotonic()
    result = trainctl("train")
    assert_refused(result, 2, "nothing answers at", "TRAIN_RAY_CONNECT_TIMEOUT", "retrying in")
    assert "retrying in 0.2 s (2/" in result.text
    assert time.monotonic() - started < 20
    assert not ray_address_env.exists()


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_while_joining_ray_exits_cleanly(
    monkeypatch: pytest.MonkeyPatch, ray_address_env: Path, signum: int, code: int
) -> None:
    monkeypatch.setenv("TRAIN_RAY_CONNECT_TIMEOUT", "60")
    real = socket.create_connection
    calls = []

    def knock(address: tuple[str, int], timeout: float) -> socket.socket:
        calls.append(address)
        if len(calls) == 2:  # the second knock: the signal arrives while we wait
            os.kill(os.getpid(), signum)
        return real(address, timeout=timeout)

    monkeypatch.setattr(ray_cluster.socket, "create_connection", knock)
    started = time.monotonic()
    result = trainctl("train")
    assert_refused(result, code, "SIGTERM" if code == 143 else "interrupted")
    assert "failed" not in result.err, result.err  # stopped with nothing lost: not a failure
    assert time.monotonic() - started < 20
    assert not ray_address_env.exists()  # nothing half-written


# --- SIGTERM in any other phase: one line, exit 143, nothing half-written -----------------------
def _sigterm_during(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> None:
    real = getattr(module, name)

    def interrupted(*args: object, **kwargs: object) -> object:
        os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, interrupted)


def test_sigterm_while_preparing_data_leaves_no_half_written_dataset(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from app.data import prepare

    _sigterm_during(monkeypatch, prepare, "_write")
    result = trainctl("prepare-data", "--dataset", "synthetic", "--out", str(tmp_path / "d"))
    assert_refused(result, 143, "stopped by SIGTERM")
    assert not (tmp_path / "d").exists()
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []


def test_sigterm_while_rendering_writes_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from app.k8s import render

    _sigterm_during(monkeypatch, render, "render_objects")
    values = tmp_path / "values.yaml"
    values.write_text("nodePools: {cpu: {gpusPerWorker: 0}}\n")
    result = trainctl("render", "--values", str(values), "--out", str(tmp_path / "m"))
    assert_refused(result, 143, "stopped by SIGTERM")
    assert not (tmp_path / "m").exists()


def test_sigterm_while_checking_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from app import preflight

    _sigterm_during(monkeypatch, preflight, "_storage")
    assert_refused(trainctl("check", "--skip-cluster"), 143, "stopped by SIGTERM")


@pytest.mark.parametrize(
    ("server", "user", "warned"),
    [
        ("http://10.255.255.1:6443", "{token: t}", True),
        ("http://10.255.255.1:6443", "{username: a, password: b}", True),
        ("https://10.255.255.1:6443", "{token: t}", False),  # TLS: its own checks apply
        ("http://10.255.255.1:6443", "{}", False),  # nothing secret travels
        ("http://127.0.0.1:8001", "{token: t}", False),  # kubectl proxy: nothing leaves
    ],
    ids=["token", "password", "https", "anonymous", "loopback"],
)
def test_credentials_sent_over_plain_http_are_warned_of(
    tmp_path: Path, kube: None, capsys: pytest.CaptureFixture[str], server: str, user: str,
    warned: bool,
) -> None:  # fmt: skip
    """A bearer token to an http:// API server travels in clear text; the kubeconfig that
    turns TLS verification off was warned of, this was not (a red-team pass)."""
    from app.k8s.cluster import Cluster

    _kubeconfig(tmp_path, _config(server, user))
    Cluster.connect()  # reads the kubeconfig; no request is made
    said = f"sends its credentials to {server} over plain HTTP"
    assert (said in capsys.readouterr().err) is warned
