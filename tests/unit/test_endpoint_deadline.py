"""The HTTP client's deadline holds for the whole exchange, against a real server on 127.0.0.1 that
trickles inside the HTTP framing (status line, header, chunk-size line, chunk extension, endless
`100 Continue`, endless trailers): http.client reads each of these in many recv() calls, so a per-recv
socket timeout never fires."""
import threading
import time
from http.server import ThreadingHTTPServer

import pytest
from k3rig.model_server import FRAMING_TRICKLES, handler_for

from k3doctor.transport.http import EndpointError, parse_endpoint, request

DEADLINE_S = 2.0


@pytest.fixture
def serve():
    servers = []

    def start(mode: str):
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(mode))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return parse_endpoint(f"http://127.0.0.1:{server.server_address[1]}")

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("mode", FRAMING_TRICKLES)
def test_a_server_trickling_inside_the_framing_is_cut_at_the_deadline(serve, mode):
    endpoint = serve(mode)
    started = time.monotonic()
    with pytest.raises(EndpointError, match="within the deadline"):
        request(endpoint, "GET", "/v1/models", deadline=started + DEADLINE_S)
    assert time.monotonic() - started < DEADLINE_S + 1.0


def test_a_healthy_server_still_answers_in_full(serve):
    resp = request(serve("healthy"), "GET", "/v1/models", deadline=time.monotonic() + 10)
    assert resp.status == 200 and resp.json()["data"][0]["id"] == "moonshotai/Kimi-K3"
