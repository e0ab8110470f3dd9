"""``--listen ADDR [--web-config FILE]``: the watch's Prometheus exposition served over HTTP(S) at ``/metrics``,
configured as node_exporter is (reference §31.2's conventions: Prometheus scrapes it where it already scrapes
node_exporter, with the same web-config file format, exporter-toolkit's):

    tls_server_config: {cert_file, key_file, client_ca_file, client_auth_type, min_version}
    basic_auth_users: {user: bcrypt hash}       # htpasswd -nBC 10 USER, or python3 -c 'import bcrypt; ...'

Paths are relative to the file's folder, as exporter-toolkit reads them. A key this server does not implement
is refused (one line, exit 3), never ignored: a setting an operator wrote for security must hold or say so.
Bounded: every connection under a socket timeout (TLS handshakes in the connection's own thread, so one
silent client holds nothing else up); a password's bcrypt check is remembered for its user and password
(a scrape every 15 s costs one bcrypt, not one a scrape), an unknown user costs the same check as a known one.
"""
from __future__ import annotations

import base64
import hashlib
import os
import socket
import ssl
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import bcrypt
import yaml

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
CONNECTION_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 32  # served at once; more are closed at accept: a slow client holds a thread, never all of them
TLS_KEYS = {"cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version"}
CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "RequestClientCert": ssl.CERT_OPTIONAL,
               "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL, "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
MIN_VERSION = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
# A hash of a password nobody has (cost 10, as htpasswd -B makes): an unknown user is checked against it, so
# the answer's time does not tell which users exist.
DUMMY_HASH = b"$2b$10$pAJ8W.2G/zmO3uuT1.X4zugreXotSqz0L9fflrEJa4kVjVqryaCLG"


class WebConfigError(ValueError):
    """A --web-config or --listen that cannot be served as written: one line, exit 3."""


@dataclass
class WebConfig:
    tls: ssl.SSLContext | None = None
    users: dict = field(default_factory=dict)  # user -> bcrypt hash (bytes)


def parse_address(text: str) -> tuple:
    """``HOST:PORT``, ``:PORT`` (every address) or ``[V6]:PORT`` as (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise WebConfigError(f"--listen {text!r}: expected HOST:PORT, :PORT or [IPv6]:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


def load_web_config(path: str) -> WebConfig:
    """node_exporter's web-config file; WebConfigError names the first thing wrong."""
    try:
        with open(path) as fh:
            doc = yaml.safe_load(fh) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise WebConfigError(f"--web-config {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not isinstance(doc, dict):
        raise WebConfigError(f"--web-config {path}: expected a mapping")
    unknown = sorted(map(str, set(doc) - {"tls_server_config", "basic_auth_users"}))
    if unknown:
        raise WebConfigError(f"--web-config {path}: {', '.join(map(str, unknown))} not supported by k3doctor watch "
                             "(tls_server_config and basic_auth_users are)")
    folder = os.path.dirname(os.path.abspath(path))
    config = WebConfig()
    if doc.get("tls_server_config") is not None:
        config.tls = _tls(doc["tls_server_config"], folder, path)
    users = doc.get("basic_auth_users") or {}
    if not isinstance(users, dict):
        raise WebConfigError(f"--web-config {path}: basic_auth_users must map user names to bcrypt hashes")
    for user, hashed in users.items():
        if not isinstance(hashed, str) or not hashed.startswith(("$2a$", "$2b$", "$2y$")) or len(hashed) != 60:
            raise WebConfigError(f"--web-config {path}: basic_auth_users.{user}: not a bcrypt hash "
                                 "(htpasswd -nBC 10 USER makes one)")
        try:  # bcrypt refuses a malformed salt on every check: said now, not as every scrape dropped
            bcrypt.checkpw(b"", hashed.encode())
        except ValueError:
            raise WebConfigError(f"--web-config {path}: basic_auth_users.{user}: not a bcrypt hash "
                                 "(htpasswd -nBC 10 USER makes one)") from None
        config.users[str(user)] = hashed.encode()
    return config


def _tls(tls, folder: str, path: str) -> ssl.SSLContext:
    if not isinstance(tls, dict):
        raise WebConfigError(f"--web-config {path}: tls_server_config must be a mapping")
    unknown = sorted(map(str, set(tls) - TLS_KEYS))
    if unknown:
        raise WebConfigError(f"--web-config {path}: tls_server_config.{unknown[0]} not supported by k3doctor watch "
                             f"({', '.join(sorted(TLS_KEYS))} are)")
    if not tls.get("cert_file") or not tls.get("key_file"):
        raise WebConfigError(f"--web-config {path}: tls_server_config needs cert_file and key_file")

    def where(name: str) -> str:
        return os.path.join(folder, str(tls[name]))

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    version = tls.get("min_version", "TLS12")
    context.minimum_version = (MIN_VERSION.get(version) if isinstance(version, str) else None) or _bad(
        path, "min_version", ", ".join(MIN_VERSION))
    try:
        # password b"": an encrypted key is an error now, never OpenSSL's pass-phrase prompt blocking the start
        context.load_cert_chain(where("cert_file"), where("key_file"), password=b"")
        auth = tls.get("client_auth_type", "NoClientCert")
        context.verify_mode = CLIENT_AUTH.get(auth) if isinstance(auth, str) and auth in CLIENT_AUTH else _bad(
            path, "client_auth_type", ", ".join(CLIENT_AUTH))
        if tls.get("client_ca_file"):
            context.load_verify_locations(where("client_ca_file"))
        elif context.verify_mode != ssl.CERT_NONE:
            raise WebConfigError(f"--web-config {path}: client_auth_type {auth} needs client_ca_file")
    except (OSError, ssl.SSLError) as exc:
        raise WebConfigError(f"--web-config {path}: tls_server_config: {getattr(exc, 'strerror', None) or exc}") \
            from None
    return context


def _bad(path: str, key: str, allowed: str):
    raise WebConfigError(f"--web-config {path}: tls_server_config.{key}: one of {allowed}")


class Listener:
    """The server, on its own threads; ``publish(text)`` after every interval sets what ``/metrics`` answers."""

    def __init__(self, address: str, config: WebConfig | None = None):
        self.config = config or WebConfig()
        self._text: str | None = None
        self._checked: dict = {}  # (user, sha256 of the password) -> bcrypt's answer
        self._lock = threading.Lock()
        host, port = parse_address(address)
        try:
            self.server = (_Server6 if ":" in host else _Server)((host, port), _handler(self))
        except OSError as exc:
            raise WebConfigError(f"--listen {address}: {exc.strerror or exc}") from None
        if self.config.tls:
            self.server.socket = self.config.tls.wrap_socket(self.server.socket, server_side=True,
                                                             do_handshake_on_connect=False)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="k3doctor-listen", daemon=True)
        self._thread.start()

    def publish(self, text: str) -> None:
        self._text = text

    def allowed(self, header: str | None) -> bool:
        if not self.config.users:
            return True
        try:
            kind, _, value = (header or "").partition(" ")
            user, sep, password = base64.b64decode(value, validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        if kind.lower() != "basic" or not sep:
            return False
        key = (user, hashlib.sha256(password.encode()).hexdigest())
        with self._lock:
            if key in self._checked:
                return self._checked[key]
        hashed = self.config.users.get(user)
        try:
            ok = bcrypt.checkpw(password.encode(), hashed or DUMMY_HASH) and hashed is not None
        except ValueError:  # bcrypt 5 refuses a password over 72 bytes: a 401, not a dropped connection
            ok = False
        with self._lock:
            if len(self._checked) > 1024:  # a guesser fills it: forget, and pay bcrypt again
                self._checked.clear()
            self._checked[key] = ok
        return ok

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, *args, **kwargs):
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(*args, **kwargs)

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request, client_address):
        """A client that failed its TLS handshake or went silent is its own problem: nothing is printed (the
        watch's output is its events), the connection is closed."""


class _Server6(_Server):
    address_family = socket.AF_INET6


def _handler(listener: Listener):
    class Handler(BaseHTTPRequestHandler):
        timeout = CONNECTION_TIMEOUT_S
        server_version, sys_version = "k3doctor-watch", ""

        def do_GET(self):  # noqa: N802 -- http.server's name
            if not listener.allowed(self.headers.get("Authorization")):
                return self._send(401, b"Unauthorized\n", "text/plain; charset=utf-8",
                                  {"WWW-Authenticate": 'Basic realm="k3doctor watch"'})
            if self.path.split("?")[0] != "/metrics":
                return self._send(404, b"k3doctor watch: the exposition is at /metrics\n", "text/plain; charset=utf-8")
            text = listener._text
            if text is None:
                return self._send(503, b"k3doctor watch: no round done yet\n", "text/plain; charset=utf-8")
            return self._send(200, text.encode(), CONTENT_TYPE)

        def _send(self, status: int, body: bytes, ctype: str, headers: dict | None = None):
            self.send_response(status)
            for name, value in {"Content-Type": ctype, "Content-Length": str(len(body)), **(headers or {})}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # the watch's output is its events, never a request log
            pass

    return Handler
