"""The Docker API channel's pure parts: the streamlocal channel-open message and the once-per-node route."""
import struct

from k3doctor.streamlocal import KIND, open_message
from k3doctor.transport import EngineRoute


def ssh_string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">I", len(data)) + data


def test_open_message_is_laid_out_as_openssh_protocol_section_2_4():
    got = open_message(7, 2097152, 32768, "/var/run/docker.sock").asbytes()
    # RFC 4254 5.1 SSH_MSG_CHANNEL_OPEN (90), then PROTOCOL 2.4: socket path, reserved string, reserved uint32
    assert got == (bytes([90]) + ssh_string("direct-streamlocal@openssh.com") + struct.pack(">III", 7, 2097152, 32768)
                   + ssh_string("/var/run/docker.sock") + ssh_string("") + struct.pack(">I", 0))
    assert KIND == "direct-streamlocal@openssh.com"


def test_route_is_streamlocal_until_the_node_refuses_the_first_channel_then_dial_stdio():
    route = EngineRoute(sudo=False)
    assert route.streamlocal
    assert route.refuse("sshd refused a channel to /var/run/docker.sock") is True
    assert not route.streamlocal
    assert route.refuse("refused again") is True  # a second channel in flight falls back too; the first cause kept
    assert route.unreachable("ct13", "docker system dial-stdio did not start: docker: not found") == (
        "Docker engine on ct13 not reachable: sshd refused a channel to /var/run/docker.sock; "
        "then docker system dial-stdio did not start: docker: not found")


def test_route_that_worked_is_kept_a_later_refusal_is_the_error():
    route = EngineRoute(sudo=False)
    route.worked()
    assert route.refuse("sshd refused a channel to /var/run/docker.sock") is False
    assert route.streamlocal and route.refused is None


def test_sudo_nodes_always_use_dial_stdio_and_say_only_its_cause():
    route = EngineRoute(sudo=True)
    assert not route.streamlocal and route.refused is None
    assert route.unreachable("ct17", "docker system dial-stdio did not start: permission denied") == (
        "Docker engine on ct17 not reachable: docker system dial-stdio did not start: permission denied")
