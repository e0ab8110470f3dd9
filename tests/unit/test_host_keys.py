"""Host keys are verified (issue 9 §7): an unknown key is refused unless the user accepts it for the run,
a changed key always is, and known_hosts is never written. A real SSH handshake against an in-process
paramiko server on 127.0.0.1 (its host key generated here), so the unit suite catches a weakened policy."""
import socket
import threading
import time
from types import SimpleNamespace

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


def trusted_for(name, *files):
    """The keys trust_known_hosts gives a node called ``name`` (port 22) from ``files``."""
    trusted = paramiko.HostKeys()
    hostkeys.trust_known_hosts(trusted, SimpleNamespace(host=name, port=22, host_key_alias=None,
                                                       known_hosts_files=tuple(str(f) for f in files)))
    return dict(trusted.lookup(name) or {})


def line(name, key, marker=""):
    return f"{marker}{name} {key.get_name()} {key.get_base64()}\n"


def test_a_known_hosts_file_is_read_once_until_it_changes(tmp_path, monkeypatch):
    """Every node's connection looks its keys up in the same files: each is parsed once per version of it,
    also when all the nodes connect at once."""
    old, new = paramiko.ECDSAKey.generate(), paramiko.ECDSAKey.generate()
    path = tmp_path / "known_hosts"
    path.write_text(line("a.example", old))
    reads = []
    slowly = hostkeys.read_known_hosts  # a file on a slow disk: the threads arrive while the first one reads

    monkeypatch.setattr(hostkeys, "read_known_hosts", lambda p: reads.append(p) or time.sleep(0.05) or slowly(p))
    threads = [threading.Thread(target=hostkeys.known_hosts_file, args=(str(path),)) for _ in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(reads) == 1 and trusted_for("a.example", path) == {old.get_name(): old}
    # the same name and type again, later in the file: the later line wins, as paramiko's HostKeys.add has it
    path.write_text(line("a.example", old) + line("a.example", new))
    assert trusted_for("a.example", path) == {new.get_name(): new} and len(reads) == 2
    assert trusted_for("b.example", path) == {}


def test_the_first_line_naming_a_host_wins_whether_hashed_or_plain(tmp_path):
    first, second = paramiko.ECDSAKey.generate(), paramiko.ECDSAKey.generate()
    path = tmp_path / "known_hosts"
    path.write_text(line(paramiko.HostKeys.hash_host("n1"), first) + line("n1", second))
    assert trusted_for("n1", path) == {first.get_name(): first}


def test_a_key_revoked_in_one_file_is_trusted_from_none(tmp_path):
    """OpenSSH applies @revoked across every known_hosts file it reads; paramiko would accept a revoked key
    that another file lists for the host without asking any policy."""
    key, spare = paramiko.ECDSAKey.generate(), paramiko.RSAKey.generate(1024)
    system, user = tmp_path / "ssh_known_hosts", tmp_path / "known_hosts"
    system.write_text(line("*", key, "@revoked "))
    user.write_text(line("n1", key) + line("n1", spare))
    assert trusted_for("n1", user, system) == {spare.get_name(): spare}
    assert trusted_for("n1", user) == {key.get_name(): key, spare.get_name(): spare}


@pytest.mark.parametrize("blob", [b"garbage", None])
def test_a_line_whose_key_is_no_key_is_one_clear_error_naming_file_and_line(tmp_path, blob):
    """Base64 that decodes, but to no key of the named type (a damaged line, an RSA key with n < 3): one
    KnownHostsError naming the file and the line, as for bad base64 - not an internal error."""
    import base64

    rsa = paramiko.Message()
    rsa.add_string("ssh-rsa")
    rsa.add_mpint(65537)
    rsa.add_mpint(1)
    text = base64.b64encode(blob or rsa.asbytes()).decode()
    path = tmp_path / "known_hosts"
    path.write_text(f"# a comment\nn1 {'ssh-ed25519' if blob else 'ssh-rsa'} {text}\n")
    with pytest.raises(hostkeys.KnownHostsError, match=rf"cannot use known_hosts file {path}: .*line 2"):
        trusted_for("n1", path)
