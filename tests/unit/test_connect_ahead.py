"""`k3doctor check` connects first and imports later (k3doctor/cli/early.py, k3doctor/judging/connections.py)."""
import socket
import subprocess
import sys
import textwrap
import time

import pytest
import yaml

from k3doctor.cli.early import check_logins


@pytest.mark.parametrize("args, expected", [
    (["check", "--nodes", "inv.yaml"], ("inv.yaml", None, 64, None, False)),
    (["check", "--nodes=inv.yaml", "--parallel", "8", "--connect-timeout=2.5", "--accept-unknown-hosts", "-q",
      "--set", "--nodes=x", "-o", "out.json", "--format", "json"], ("inv.yaml", None, 8, 2.5, True)),
    (["check", "--ansible-inventory", "hosts.ini", "--nodes", "@gpu"], ("@gpu", "hosts.ini", 64, None, False)),
])
def test_checks_connection_options_are_read_as_click_reads_them(args, expected):
    assert check_logins(args) == expected


@pytest.mark.parametrize("args", [
    [], ["list"], ["node", "--nodes", "inv.yaml"], ["check", "--help"], ["check", "-qv", "--nodes", "inv.yaml"],
    ["check", "--nodes"], ["check", "--nodes", "inv.yaml", "--parallel", "many"], ["check", "--no-such", "x"],
    ["check", "extra-word"],
])
def test_anything_uncertain_opens_nothing_ahead(args):
    assert check_logins(args) is None


def run_against_listener(tmp_path, nodes: int, code_before: str = "") -> tuple:
    """`k3doctor check` (in a child python) against ``nodes`` nodes on one listener that accepts and closes
    every connection: (the child's output, connections the listener saw)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        inventory, known_hosts = tmp_path / "inventory.yaml", tmp_path / "known_hosts"
        known_hosts.write_text("")
        inventory.write_text(yaml.safe_dump({
            "ssh": {"known_hosts": str(known_hosts), "connect_timeout_s": 2},
            "nodes": [{"name": f"n{i}", "host": "127.0.0.1", "port": port} for i in range(nodes)]}))
        code = code_before + f"from k3doctor.cli import main\nmain(['check', '--nodes', {str(inventory)!r}, '-q'])\n"
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        server.settimeout(0.2)
        seen, end = 0, time.monotonic() + 60  # a run that hangs fails here, never holds the suite
        while proc.poll() is None and time.monotonic() < end:
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            seen += 1
            conn.close()
        if proc.poll() is None:
            proc.kill()
        out, _ = proc.communicate(timeout=60)
    return out, seen, proc.returncode


def test_the_first_connection_starts_before_the_checks_and_renderers_are_imported(tmp_path):
    """The connecting threads race the main thread's imports; the spy holds each heavy import back (up to 10 s)
    until the first connection is made, so the order the code allows is the order seen, on a busy machine too:
    were a heavy module imported before the connections start, it would be loaded when the first one is made."""
    spy = textwrap.dedent("""
        import socket, sys, threading
        HEAVY = ("click", "k3doctor.registry", "k3doctor.outputs", "k3doctor.api", "k3doctor.gather.node_script",
                 "k3doctor.probes", "paramiko.transport")
        connected = threading.Event()
        _connect = socket.create_connection
        def first(*args, **kw):
            if not connected.is_set():
                heavy = sorted(m for m in HEAVY if m in sys.modules)
                print("loaded at the first connection:", heavy or "nothing heavy", flush=True)
                connected.set()
            return _connect(*args, **kw)
        socket.create_connection = first
        class HoldHeavyImports:
            def find_spec(self, name, path=None, target=None):
                if name in HEAVY:
                    connected.wait(10)
                return None
        sys.meta_path.insert(0, HoldHeavyImports())
    """)
    out, seen, rc = run_against_listener(tmp_path, 1, spy)
    assert "loaded at the first connection: nothing heavy" in out, out
    assert rc == 2 and "n0" in out  # the node's failure is reported as ever


def test_the_run_uses_the_connections_opened_ahead_and_opens_no_second_one(tmp_path):
    out, seen, rc = run_against_listener(tmp_path, 3)
    assert seen == 3, out  # one connection per node: the run took those opened ahead
    assert rc == 2 and all(f"n{i}" in out for i in range(3)), out
