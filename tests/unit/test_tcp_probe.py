"""The TCP reachability probe before the SSH handshake: real sockets on loopback."""
import socket

import pytest

from k3doctor.transport.base import TransportError
from k3doctor.transport.ssh import SSHTransport, probe_tcp
from k3doctor.transport.targets import SSHTarget


@pytest.fixture
def blackholed_port():
    """A port whose SYNs go unanswered: a listener with a full accept queue (Linux drops the SYN), as a
    node behind a DROP rule or a powered-off host looks from here."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port), timeout=5)  # takes the one queue slot
    yield port
    filler.close()
    server.close()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens once it is closed


def test_a_listening_port_hands_over_its_connected_socket():
    with socket.create_server(("127.0.0.1", 0)) as server:
        sock = probe_tcp("127.0.0.1", server.getsockname()[1], 2)
        try:
            assert sock.getpeername() == server.getsockname()
        finally:
            sock.close()


def test_a_closed_port_is_refused_at_once():
    port = closed_port()
    with pytest.raises(TransportError, match=rf"^connection refused by 127\.0\.0\.1:{port} \(no sshd listening\?\)$"):
        probe_tcp("127.0.0.1", port, 2)


def test_a_blackholed_port_is_unreachable_within_the_probe_bound(blackholed_port):
    with pytest.raises(TransportError) as caught:
        probe_tcp("127.0.0.1", blackholed_port, 0.5)
    assert str(caught.value).startswith(f"unreachable: no TCP answer from 127.0.0.1:{blackholed_port} within 0.5s")
    assert "\n" not in str(caught.value)


def test_an_unresolvable_host_says_so():
    with pytest.raises(TransportError, match="cannot resolve host 'no-such-node.invalid'"):
        probe_tcp("no-such-node.invalid", 22, 2)


def test_the_transport_probes_before_the_handshake_and_never_waits_the_connect_timeout(blackholed_port, monkeypatch):
    monkeypatch.setattr("k3doctor.transport.ssh.PROBE_TIMEOUT_S", 0.5)
    target = SSHTarget(node="dead", host="127.0.0.1", port=blackholed_port, known_hosts="/dev/null",
                       connect_timeout_s=30)
    transport = SSHTransport(target)
    with pytest.raises(TransportError, match="^unreachable: no TCP answer from .* within 0.5s"):
        transport.connect()  # the 30 s connect timeout would name the SSH connect instead
    assert transport.round_trips == 0
