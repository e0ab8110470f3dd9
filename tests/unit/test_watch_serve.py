"""--listen/--web-config (k3doctor/watch/serve.py): node_exporter's web-config read as written or refused in one
line, basic auth by bcrypt. The HTTPS server with a real client is in tests/e2e/test_watch.py."""
from __future__ import annotations

import base64
import socket

import bcrypt
import pytest
import yaml

from k3doctor.watch.serve import Listener, WebConfig, WebConfigError, load_web_config, parse_address
from tests.e2e.cli import k3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def write(tmp_path, doc) -> str:
    path = tmp_path / "web.yml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.mark.parametrize("doc, said", [
    ({"http_server_config": {"http2": True}}, "http_server_config not supported by k3doctor watch"),
    ({"tls_server_config": {"cert_file": "a", "key_file": "b", "cipher_suites": ["x"]}},
     "tls_server_config.cipher_suites not supported"),
    ({"tls_server_config": {"cert_file": "a"}}, "needs cert_file and key_file"),
    ({"tls_server_config": {"cert_file": "nope.crt", "key_file": "nope.key"}}, "No such file or directory"),
    ({"basic_auth_users": {"alice": "plaintext"}}, "basic_auth_users.alice: not a bcrypt hash"),
    (["a", "list"], "expected a mapping"),
    ({1: "x", "z": "y"}, "1, z not supported by k3doctor watch"),  # keys of mixed types
    ({"tls_server_config": {"cert_file": "a", "key_file": "b", "min_version": ["TLS12"]}}, "min_version: one of"),
    ({"basic_auth_users": {"alice": "$2b$10$" + "!" * 53}}, "basic_auth_users.alice: not a bcrypt hash"),
])
def test_a_web_config_not_served_as_written_is_refused_in_one_line(tmp_path, doc, said):
    with pytest.raises(WebConfigError, match=said):
        load_web_config(write(tmp_path, doc))


def test_passwords_are_checked_by_bcrypt_and_remembered(tmp_path):
    hashed = bcrypt.hashpw(b"pa55", bcrypt.gensalt(4)).decode().replace("$2b$", "$2y$")  # htpasswd's prefix
    config = load_web_config(write(tmp_path, {"basic_auth_users": {"alice": hashed}}))
    listener = Listener(f"127.0.0.1:{free_port()}", config)
    try:
        assert listener.allowed(basic("alice", "pa55")) and listener.allowed(basic("alice", "pa55"))
        assert not listener.allowed(basic("alice", "wrong")) and not listener.allowed(basic("bob", "pa55"))
        assert not listener.allowed(None) and not listener.allowed("Basic !!!") and not listener.allowed("Bearer x")
        assert len(listener._checked) == 3  # each user and password checked once
    finally:
        listener.close()
    open_one = Listener(f"[::1]:{free_port()}", WebConfig())
    assert open_one.allowed(None)  # no users: no auth, as node_exporter
    open_one.close()


def test_an_encrypted_key_or_a_listed_client_auth_type_is_one_line_never_a_prompt_or_a_traceback(tmp_path):
    import subprocess

    made = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-days", "1", "-subj", "/CN=k3doctor",
                           "-keyout", str(tmp_path / "key.pem"), "-out", str(tmp_path / "cert.pem"),
                           "-passout", "pass:secret"], capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert made.returncode == 0, made.stderr
    tls = {"cert_file": "cert.pem", "key_file": "key.pem"}
    with pytest.raises(WebConfigError, match="tls_server_config"):
        load_web_config(write(tmp_path, {"tls_server_config": tls}))
    subprocess.run(["openssl", "rsa", "-in", str(tmp_path / "key.pem"), "-passin", "pass:secret", "-out",
                    str(tmp_path / "key.pem")], capture_output=True, timeout=60, check=True)
    with pytest.raises(WebConfigError, match="client_auth_type: one of"):
        load_web_config(write(tmp_path, {"tls_server_config": {**tls, "client_auth_type": ["x"]}}))


def test_a_password_bcrypt_refuses_is_a_refusal_not_a_dropped_connection(tmp_path):
    hashed = bcrypt.hashpw(b"pa55", bcrypt.gensalt(4)).decode()
    listener = Listener(f"127.0.0.1:{free_port()}", load_web_config(write(tmp_path, {"basic_auth_users": {"a": hashed}})))
    try:
        assert not listener.allowed(basic("a", "x" * 100))  # over bcrypt's 72 bytes
    finally:
        listener.close()


def test_connections_beyond_the_bound_are_closed_at_accept_while_slow_ones_hold_theirs(monkeypatch):
    from k3doctor.watch import serve

    monkeypatch.setattr(serve, "MAX_CONNECTIONS", 2)
    listener = Listener(f"127.0.0.1:{free_port()}", WebConfig())
    listener.publish("up 1\n")
    slow = [socket.create_connection(("127.0.0.1", listener.port), timeout=5) for _ in range(2)]
    try:
        for sock in slow:
            sock.sendall(b"GET /metrics HTTP/1.1\r\n")  # never finished: each holds a thread for its timeout
        import time

        end = time.monotonic() + 20
        while listener.server._slots._value and time.monotonic() < end:  # both accepted, each holding its slot
            time.sleep(0.05)
        assert listener.server._slots._value == 0
        with socket.create_connection(("127.0.0.1", listener.port), timeout=5) as third:
            third.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            try:
                answer = third.recv(100)
            except ConnectionResetError:
                answer = b""
            assert answer == b""  # closed, not served and not left waiting
    finally:
        for sock in slow:
            sock.close()
        listener.close()


def test_addresses():
    assert parse_address(":9101") == ("0.0.0.0", 9101) and parse_address("[::1]:9101") == ("::1", 9101)
    for bad in ("9101", "host:", "host:99999", "h:x"):
        with pytest.raises(WebConfigError):
            parse_address(bad)


def test_cli_says_a_bad_listen_setting_in_one_line(tmp_path):
    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes: [{name: n1, host: 127.0.0.1}]\n")
    rc, _, err = k3("watch", "--nodes", inv, "--web-config", write(tmp_path, {}))
    assert rc == 3 and "--web-config configures --listen" in err and "Traceback" not in err
    rc, _, err = k3("watch", "--nodes", inv, "--listen", "127.0.0.1:1", "--web-config",
                    write(tmp_path, {"basic_auth_users": {"a": "b"}}))
    assert rc == 3 and "basic_auth_users.a: not a bcrypt hash" in err and "Traceback" not in err
