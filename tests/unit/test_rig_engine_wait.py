"""The rig waits for a Docker engine by an API ping that succeeds, bounded (issue 9 §6).

A real unix socket plays the engine's start-up: the socket file exists (bound) but nothing accepts
yet, so a connect is refused - what dockerd's socket does for a moment after it appears - and only
then does a minimal Docker API (``/version``, ``/_ping``) start to answer on it.
"""
import json
import socketserver
import threading
import time
from http.server import BaseHTTPRequestHandler

import pytest
from k3rig.engine import connect_engine


class FakeEngineAPI(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 -- http.server's naming
        path = self.path.split("?")[0]
        if path.endswith("/_ping"):
            body, kind = b"OK", "text/plain"
        elif path.endswith("/version"):
            body, kind = json.dumps({"ApiVersion": "1.41", "Version": "24.0.0"}).encode(), "application/json"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Engine(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@pytest.fixture
def engine(tmp_path):
    """(socket path, start accepting) with the socket bound but not listening: connects are refused."""
    server = Engine(str(tmp_path / "docker.sock"), FakeEngineAPI, bind_and_activate=False)
    server.server_bind()
    accepting = threading.Event()

    def accept():
        server.server_activate()
        accepting.set()
        threading.Thread(target=server.serve_forever, daemon=True).start()

    yield tmp_path / "docker.sock", accept, accepting
    if accepting.is_set():
        server.shutdown()
    server.server_close()


def test_a_socket_that_exists_but_refuses_is_waited_for_until_a_ping_succeeds(engine):
    sock, accept, accepting = engine
    threading.Timer(1.0, accept).start()  # the socket file is there from the start, refusing
    client = connect_engine(sock, timeout_s=30, exited=lambda: None)
    try:
        assert accepting.is_set() and client.ping() is True
        assert client.api.timeout == 60
    finally:
        client.close()


def test_an_engine_that_never_accepts_is_a_bounded_timeout_naming_the_refusal(engine):
    sock, _, _ = engine
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"did not answer on .*docker.sock within 2 s \(.*(Connection|refused)"):
        connect_engine(sock, timeout_s=2, exited=lambda: None, ping_timeout_s=1)
    assert time.monotonic() - started < 2 + 1 + 10  # deadline + one attempt + margin for a loaded machine


def test_an_engine_that_exited_is_reported_at_once(tmp_path):
    with pytest.raises(RuntimeError, match="dockerd exited with 1"):
        connect_engine(tmp_path / "never.sock", timeout_s=60, exited=lambda: "ct13: dockerd exited with 1")
