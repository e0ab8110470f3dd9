"""The Docker API channel's pure parts: the streamlocal channel-open message and the once-per-node route."""
import struct

from k3doctor.transport.ssh import EngineRoute
from k3doctor.transport.streamlocal import KIND, open_message


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


def test_with_a_docker_socket_every_node_command_asks_that_engine_too(tmp_path):
    """ssh.docker_socket: the docker CLI a node command starts (the container's exec, its logs) talks to the
    engine the API channel reads, not the CLI's default; the path stays one shell word."""
    import subprocess

    from k3doctor.transport.ssh import SSHTransport
    from k3doctor.transport.targets import resolve_ssh_target

    target = resolve_ssh_target("n1", "127.0.0.1", known_hosts="/dev/null")
    odd = "/run/it's a dir/docker.sock"
    marker = tmp_path / "ran"
    sent = SSHTransport(target, docker_socket=odd)._announced(f"sh -c 'echo \"$DOCKER_HOST\"; touch {marker}'")
    out = subprocess.run(["sh", "-c", sent], capture_output=True, text=True, timeout=30)
    assert out.stdout == f"unix://{odd}\n" and marker.exists()
    plain = SSHTransport(target)._announced("sh -c 'echo \"${DOCKER_HOST-unset}\"'")
    assert subprocess.run(["sh", "-c", plain], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin"}).stdout == "unset\n"
