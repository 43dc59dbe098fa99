"""A real S3 server for the object-storage tests, and a client that is not trainctl's.

The server is moto's standalone server (`moto_server`, from .venv-moto: botocore pins
python-dateutil<3, the app's venv has 4), started on 127.0.0.1 once per session (the fixture
is registered by tests/conftest.py; each test module makes buckets of its own names). moto
accepts any credentials; tests/conftest.py sets fake ones so that no test can reach a real
account.

Tests assert what is in the bucket through `Bucket`, which talks to the server with pyarrow's
S3 client configured here, never through app/storage/buckets.py.
"""

from __future__ import annotations

import contextlib
import os
import socket
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from tests.support import background_server, free_port, open_local, server_log_tail, wait_until

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Bucket:
    """One bucket on the test server, read and written with a client of the test's own."""

    endpoint: str
    name: str

    @property
    def fs(self) -> pafs.S3FileSystem:
        host = self.endpoint.removeprefix("http://")
        return pafs.S3FileSystem(
            endpoint_override=host, scheme="http", access_key="testing", secret_key="testing",
            region="us-east-1",
        )  # fmt: skip

    def uri(self, key: str = "") -> str:
        return f"s3://{self.name}/{key}".rstrip("/")

    def keys(self, prefix: str) -> list[str]:
        """Every object key under `prefix`, relative to it."""
        selector = pafs.FileSelector(f"{self.name}/{prefix}", recursive=True, allow_not_found=True)
        found = self.fs.get_file_info(selector)
        cut = len(self.name) + len(prefix) + 2
        return sorted(i.path[cut:] for i in found if i.type == pafs.FileType.File)

    def read(self, key: str) -> bytes:
        with self.fs.open_input_file(f"{self.name}/{key}") as file:
            return file.read()

    def write(self, key: str, data: bytes) -> None:
        with self.fs.open_output_stream(f"{self.name}/{key}") as stream:
            stream.write(data)

    def upload(self, local: Path, prefix: str) -> None:
        for file in sorted(p for p in local.rglob("*") if p.is_file()):
            self.write(f"{prefix}/{file.relative_to(local).as_posix()}", file.read_bytes())


@dataclass
class S3Server:
    endpoint: str

    def bucket(self, name: str) -> Bucket:
        """A new, empty bucket (S3's CreateBucket: a PUT on the bucket's path)."""
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        with open_local(request, timeout=10) as answer:
            assert answer.status == 200
        return Bucket(self.endpoint, name)


@contextlib.contextmanager
def moto_server(home: Path, **extra_env: str) -> Iterator[str]:
    """moto's S3 server on a free port of 127.0.0.1, its endpoint once it answers."""
    binary = os.environ.get("MOTO_BIN") or str(REPO / ".venv-moto" / "bin" / "moto_server")
    if not Path(binary).is_file():
        pytest.skip(f"moto_server not found at {binary} (make setup builds .venv-moto)")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    command = [binary, "-H", "127.0.0.1", "-p", str(port)]
    with background_server(command, home=home, env={**os.environ, **extra_env}) as server:

        def answers() -> bool:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    return True
            assert server.poll() is None, server_log_tail(home)
            return False

        wait_until(answers, timeout=60, what=f"moto S3 server {extra_env or ''}")
        yield endpoint


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with moto_server(tmp_path_factory.mktemp("moto")) as endpoint:
        yield S3Server(endpoint)
