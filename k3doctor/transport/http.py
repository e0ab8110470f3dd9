"""A bounded JSON-over-HTTP client for a model server's OpenAI routes (reference §21, §22).

Each request ends by an absolute deadline for the whole exchange, not per socket operation:
``http.client`` reads a status line, a header, a chunk-size line, a run of ``100 Continue`` answers or
trailer lines in many ``recv`` calls inside one call of ours, so a socket timeout (per ``recv``) never
fires against a server that trickles a byte every half second. A watchdog shuts the connection's socket
down at the deadline instead, which ends whatever read is in progress. Bodies are capped, so a runaway
answer cannot fill memory. Only ``http`` and ``https`` URLs are accepted.
"""
from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_BODY_BYTES = 4 << 20
CHUNK = 64 << 10


class EndpointError(Exception):
    """The request got no complete HTTP answer (refused, timed out, cut, oversized)."""


@dataclass(frozen=True)
class Endpoint:
    scheme: str
    host: str
    port: int
    base_path: str

    @property
    def label(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass
class Response:
    status: int
    body: bytes
    elapsed_s: float

    def json(self):
        """The body as JSON; EndpointError when it is not."""
        try:
            return json.loads(self.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise EndpointError(f"HTTP {self.status} answer is not JSON ({exc.__class__.__name__}): "
                                f"{self.body[:120]!r}") from None


def parse_endpoint(url: str) -> Endpoint:
    """``http://host:8000`` (a trailing ``/v1`` is allowed) -> Endpoint; ValueError with the reason."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s)://HOST[:PORT] URL")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ValueError(f"{url!r} has an invalid port") from None
    base = parts.path.rstrip("/")
    if base.endswith("/v1"):
        base = base[:-3]
    return Endpoint(parts.scheme, parts.hostname, port, base)


class _Watchdog:
    """Shuts ``conn``'s socket down at ``deadline``: every read in progress (``http.client``'s own loops
    over status line, headers, chunk framing, ``100 Continue`` and trailers included) ends there."""

    def __init__(self, conn, deadline: float):
        self.fired = threading.Event()
        self._conn = conn
        self._timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._cut)
        self._timer.daemon = True
        self._timer.start()

    def _cut(self):
        self.fired.set()
        sock = self._conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # already closed
                pass

    def cancel(self):
        self._timer.cancel()


def request(endpoint: Endpoint, method: str, path: str, payload=None, *, deadline: float) -> Response:
    """One HTTP request whose whole exchange is over by ``deadline`` (a ``time.monotonic()`` value)."""
    started = time.monotonic()

    def late() -> EndpointError:
        return EndpointError(f"{method} {path}: no complete answer within the deadline "
                             f"({time.monotonic() - started:.1f}s)")

    if deadline <= started:
        raise late()
    cls = http.client.HTTPSConnection if endpoint.scheme == "https" else http.client.HTTPConnection
    conn = cls(endpoint.host, endpoint.port, timeout=deadline - started)  # bounds the connect
    watchdog = _Watchdog(conn, deadline)
    body = json.dumps(payload).encode() if payload is not None else None
    headers = {"Content-Type": "application/json", "Accept": "application/json"} if body else {}
    try:
        conn.connect()
        if watchdog.fired.is_set():  # the deadline passed while connecting, before there was a socket to cut
            raise late()
        conn.request(method, endpoint.base_path + path, body=body, headers=headers)
        resp = conn.getresponse()
        chunks, size = [], 0
        while chunk := resp.read1(CHUNK):
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise EndpointError(f"{method} {path}: answer larger than {MAX_BODY_BYTES >> 20} MiB")
            chunks.append(chunk)
        if watchdog.fired.is_set():
            raise late()
        if resp.length:  # the server closed before the Content-Length it announced
            raise EndpointError(f"{method} {path}: answer cut after {size} bytes ({resp.length} missing)")
        return Response(resp.status, b"".join(chunks), round(time.monotonic() - started, 3))
    except (OSError, http.client.HTTPException) as exc:
        if watchdog.fired.is_set() or isinstance(exc, TimeoutError):
            raise late() from None
        raise EndpointError(f"{method} {path}: {exc.__class__.__name__}: {exc}") from None
    finally:
        watchdog.cancel()
        conn.close()
