"""Host keys are verified (issue 9 §7): an unknown key is refused unless the user accepts it for the run,
a changed key always is, and known_hosts is never written. A real SSH handshake against an in-process
paramiko server on 127.0.0.1 (its host key generated here), so the unit suite catches a weakened policy."""
import socket
import threading

import paramiko
import pytest

from k3doctor.transport import hostkeys
from k3doctor.transport.base import TransportError
from k3doctor.transport.ssh import SSHTransport
from k3doctor.transport.targets import resolve_ssh_target


class AcceptAnyKey(paramiko.ServerInterface):
    def get_allowed_auths(self, username):
        return "publickey"

    def check_auth_publickey(self, username, key):
        return paramiko.AUTH_SUCCESSFUL


@pytest.fixture
def server():
    """(port, host key) of an SSH server that accepts any public key, one connection per test."""
    host_key = paramiko.ECDSAKey.generate()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(30)
    done = threading.Event()

    def serve():
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        transport = paramiko.Transport(conn)
        transport.add_server_key(host_key)
        try:
            transport.start_server(server=AcceptAnyKey())
            done.wait(30)
        except (paramiko.SSHException, EOFError, OSError):
            pass  # the client refused the key and hung up
        finally:
            transport.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], host_key
    done.set()
    listener.close()
    thread.join(10)


def connect(tmp_path, port, known_hosts_text, accept_unknown=False):
    identity = tmp_path / "id_ecdsa"
    paramiko.ECDSAKey.generate().write_private_key_file(str(identity))
    known = tmp_path / "known_hosts"
    known.write_text(known_hosts_text)
    target = resolve_ssh_target("n0", "127.0.0.1", port=port, user="root", identity_file=str(identity),
                                known_hosts=str(known), accept_unknown_hosts=accept_unknown, connect_timeout_s=10,
                                ssh_config_path=None)
    transport = SSHTransport(target)
    try:
        transport.connect()
    finally:
        transport.close()
    return known.read_text()


def entry(port, key):
    return f"[127.0.0.1]:{port} {key.get_name()} {key.get_base64()}\n"


def test_an_unknown_host_key_is_refused_and_not_learnt(tmp_path, server):
    port, _ = server
    with pytest.raises(TransportError, match=r"host key of 127\.0\.0\.1:\d+ is unknown"):
        connect(tmp_path, port, "")
    assert (tmp_path / "known_hosts").read_text() == ""


def test_a_known_host_key_connects(tmp_path, server):
    port, key = server
    assert connect(tmp_path, port, entry(port, key)) == entry(port, key)


def test_accepting_unknown_hosts_trusts_the_key_for_this_run_only(tmp_path, server):
    port, _ = server
    assert connect(tmp_path, port, "", accept_unknown=True) == ""  # connected, nothing written


def test_a_changed_host_key_is_refused_even_when_unknown_keys_are_accepted(tmp_path, server):
    port, _ = server
    other = entry(port, paramiko.ECDSAKey.generate())
    with pytest.raises(TransportError, match="does NOT match known_hosts"):
        connect(tmp_path, port, other, accept_unknown=True)
    assert (tmp_path / "known_hosts").read_text() == other


def test_a_hashed_known_hosts_line_connects(tmp_path, server):
    """HashKnownHosts (Debian's default for ~/.ssh/known_hosts) writes ``|1|salt|hmac`` names."""
    port, key = server
    hashed = f"{paramiko.HostKeys.hash_host(f'[127.0.0.1]:{port}')} {key.get_name()} {key.get_base64()}\n"
    assert connect(tmp_path, port, hashed) == hashed


def test_a_hashed_line_for_another_host_is_not_trusted(tmp_path, server):
    port, key = server
    elsewhere = f"{paramiko.HostKeys.hash_host(f'[127.0.0.1]:{port + 1}')} {key.get_name()} {key.get_base64()}\n"
    with pytest.raises(TransportError, match=r"host key of 127\.0\.0\.1:\d+ is unknown"):
        connect(tmp_path, port, elsewhere)


def test_a_known_hosts_file_is_read_once_until_it_changes(tmp_path):
    """Every node's connection looks its keys up in the same files: each is parsed once per version of it."""
    old, new = paramiko.ECDSAKey.generate(), paramiko.ECDSAKey.generate()
    path = tmp_path / "known_hosts"
    path.write_text(f"a.example {old.get_name()} {old.get_base64()}\n")
    first = hostkeys.known_hosts_file(str(path))
    assert hostkeys.known_hosts_file(str(path)) is first and first.keys_for("a.example") == {old.get_name(): old}
    # the same name and type again, later in the file: the later line wins, as paramiko's HostKeys.add has it
    path.write_text(f"a.example {old.get_name()} {old.get_base64()}\na.example {new.get_name()} {new.get_base64()}\n")
    again = hostkeys.known_hosts_file(str(path))
    assert again is not first and again.keys_for("a.example") == {new.get_name(): new}
    assert again.keys_for("b.example") == {}
