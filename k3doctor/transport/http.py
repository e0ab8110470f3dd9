"""A bounded JSON-over-HTTP client for a model server's OpenAI routes (reference §21, §22).

Each request ends by an absolute deadline, not only per socket operation: a server that trickles
one byte a second cannot stretch the gate past its deadline. Bodies are capped, so a runaway
answer cannot fill memory. Only ``http`` and ``https`` URLs are accepted.
"""
from __future__ import annotations

import http.client
import json
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


def request(endpoint: Endpoint, method: str, path: str, payload=None, *, deadline: float) -> Response:
    """One HTTP request that is over by ``deadline`` (a ``time.monotonic()`` value)."""
    started = time.monotonic()

    def remaining() -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise EndpointError(f"{method} {path}: no complete answer within the deadline "
                                f"({time.monotonic() - started:.1f}s)")
        return left

    cls = http.client.HTTPSConnection if endpoint.scheme == "https" else http.client.HTTPConnection
    conn = cls(endpoint.host, endpoint.port, timeout=remaining())
    body = json.dumps(payload).encode() if payload is not None else None
    headers = {"Content-Type": "application/json", "Accept": "application/json"} if body else {}
    try:
        conn.request(method, endpoint.base_path + path, body=body, headers=headers)
        conn.sock.settimeout(remaining())
        resp = conn.getresponse()
        chunks, size = [], 0
        while True:
            if conn.sock is not None:
                conn.sock.settimeout(remaining())
            chunk = resp.read1(CHUNK) if hasattr(resp, "read1") else resp.read(CHUNK)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise EndpointError(f"{method} {path}: answer larger than {MAX_BODY_BYTES >> 20} MiB")
            chunks.append(chunk)
            remaining()
        return Response(resp.status, b"".join(chunks), round(time.monotonic() - started, 3))
    except TimeoutError:
        raise EndpointError(f"{method} {path}: no complete answer within the deadline "
                            f"({time.monotonic() - started:.1f}s)") from None
    except (OSError, http.client.HTTPException) as exc:
        raise EndpointError(f"{method} {path}: {exc.__class__.__name__}: {exc}") from None
    finally:
        conn.close()
