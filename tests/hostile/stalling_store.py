"""A store that answers the first "is anyone there" request and then holds every other one
open without a word, so a client's wait is inside its own S3 client. It notes when each held
request came and when the client gave up on it, by the monotonic clock."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class Stalls:
    """What the stalling store saw: for each request it held, when it came and when the
    client gave up on it (closed its connection), by the monotonic clock."""

    endpoint: str = ""
    held: list[tuple[float, float | None]] = field(default_factory=list)


# An empty bucket, as S3 lists one: what a probe of the bucket reads before any object.
EMPTY_LISTING = (
    b'<?xml version="1.0" encoding="UTF-8"?>'
    b'<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
    b"<Name>b</Name><KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys>"
    b"<IsTruncated>false</IsTruncated></ListBucketResult>"
)


def _answer(request: bytes, buckets: bool) -> bytes | None:
    """The reply to a request the store answers, None for one it holds: `HEAD /`, and with
    `buckets` a bucket's own requests (HEAD /<bucket>, its listing): only objects stall."""
    line = request.split(b"\r\n", 1)[0].split(b" ")
    method, target = (line[0], line[1]) if len(line) > 1 else (b"", b"")
    path, _, query = target.partition(b"?")
    if method == b"HEAD" and path == b"/":
        return b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    if not buckets or path.strip(b"/").count(b"/") or path == b"/":
        return None
    if method == b"HEAD":
        return b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    if method == b"GET" and b"list-type" in query:
        return (
            b"HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\n"
            + f"Content-Length: {len(EMPTY_LISTING)}\r\n\r\n".encode()
            + EMPTY_LISTING
        )
    return None


@contextlib.contextmanager
def stalling_store(*, buckets: bool = False) -> Iterator[Stalls]:
    """Answers `HEAD /` with 200 (and with `buckets`, a bucket's own requests: it exists and is
    empty), then holds every other request open without a word, noting when the client gives
    up on it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    stalls = Stalls(f"http://127.0.0.1:{server.getsockname()[1]}")
    conns: list[socket.socket] = []
    stop = threading.Event()

    def hold(conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            conn.settimeout(0.2)
            request = b""
            while not stop.is_set() and not request:
                with contextlib.suppress(TimeoutError):
                    request = conn.recv(4096)
            while (reply := _answer(request, buckets)) is not None:
                conn.sendall(reply)
                request = b""
                while not stop.is_set() and not request:  # the same connection, kept alive
                    with contextlib.suppress(TimeoutError):
                        request = conn.recv(4096)
                if not request:
                    return
            index = len(stalls.held)
            stalls.held.append((time.monotonic(), None))
            while not stop.is_set():  # never answer; b"" is the client closing
                try:
                    if conn.recv(4096) == b"":
                        stalls.held[index] = (stalls.held[index][0], time.monotonic())
                        return
                except TimeoutError:
                    continue

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            conns.append(conn)
            threading.Thread(target=hold, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield stalls
    finally:
        stop.set()
        thread.join(2)
        for conn in conns:
            conn.close()
        server.close()
