"""Faults the rig's scenarios cannot express, injected into one node for the length of a test.

A Docker engine that is stopped, never answers or trickles a byte every few seconds is a real unix
socket (served here) bind-mounted over the node's ``/run/docker.sock`` inside its mount namespace only;
the node's own dockerd is untouched and comes back when the mount is removed. The node's ``docker`` CLI
is watched the same way: a logging wrapper bind-mounted over it in that node's namespace only.
"""
from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import psutil


class FakeEngine:
    """A unix socket that accepts API connections and then never answers (``silent``) or answers one
    byte every ``every_s`` seconds, forever (``trickle``); ``stopped`` is a socket nobody listens on."""

    def __init__(self, path: Path, mode: str, every_s: float = 2.0):
        self.path, self.mode, self.every_s = Path(path), mode, every_s
        self._stop = threading.Event()
        self.connections = 0
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.path.exists():
            self.path.unlink()
        self._sock.bind(str(self.path))
        if mode == "stopped":  # bound and closed: connecting is refused, as after dockerd died
            self._sock.close()
            return
        self._sock.listen(16)
        self._sock.settimeout(0.2)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn):
        with conn:
            if self.mode == "silent":
                self._stop.wait()
                return
            reply = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Slow: " + b"z" * 10**6
            for i in range(len(reply)):  # a header that never ends: every read gets a byte in time
                if self._stop.wait(self.every_s if i > 16 else 0.01):
                    return
                try:
                    conn.sendall(reply[i:i + 1])
                except OSError:
                    return

    def close(self):
        self._stop.set()
        with contextlib.suppress(OSError):
            self._sock.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


@contextlib.contextmanager
def engine_replaced(node, mode: str):
    """Node ``node`` (a RigNode) sees a FakeEngine of ``mode`` at /run/docker.sock while inside."""
    engine = FakeEngine(node.dir / f"engine-{mode}.sock", mode)
    _in_namespace(node, "mount", "--bind", engine.path, "/run/docker.sock")
    try:
        yield engine
    finally:
        _in_namespace(node, "umount", "/run/docker.sock")
        engine.close()


@contextlib.contextmanager
def docker_cli_recorded(node):
    """Every start of the docker CLI on ``node`` (a RigNode) while inside, as one line of its arguments each
    (yields a function returning them): a wrapper bind-mounted over the node's ``docker`` in its mount
    namespace only logs its arguments, then execs the real binary (bind-mounted beside it)."""
    real = shutil.which("docker")
    record, kept, wrapper = node.dir / "docker-cli.log", node.dir / "docker.real", node.dir / "docker-recorder"
    record.write_text("")
    record.chmod(0o666)
    kept.touch()
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {shlex.quote(str(record))}\nexec {shlex.quote(str(kept))} "$@"\n')
    wrapper.chmod(0o755)
    _in_namespace(node, "mount", "--bind", real, kept)
    try:
        _in_namespace(node, "mount", "--bind", wrapper, real)
        try:
            yield lambda: record.read_text().splitlines()
        finally:
            _in_namespace(node, "umount", real)
    finally:
        _in_namespace(node, "umount", kept)


def kill_sessions(rig, node) -> list:
    """SIGKILL the sshd processes serving SSH sessions on ``node`` (not its listener): every connection
    to the node drops at once, as when sshd is killed; the node accepts new ones afterwards."""
    namespace = rig._namespaces[node.name]
    victims = []
    for proc in psutil.process_iter(["pid", "name"]):
        try:
            if (proc.info["name"] == "sshd" and proc.pid != node.ns_pid
                    and os.readlink(f"/proc/{proc.pid}/ns/mnt") == namespace):
                proc.kill()
                victims.append(proc.pid)
        except (psutil.Error, OSError):
            continue
    return victims


def _in_namespace(node, *argv):
    subprocess.run(["nsenter", "-t", str(node.ns_pid), "-m", "--", *map(str, argv)], check=True)


@contextlib.contextmanager
def sudo_user_wanting_password(node, user: str = "k3op"):
    """A real non-root login on ``node`` only (its own /etc/passwd, group, shadow bind-mounted in the
    node's namespace), in group sudo, which Debian's sudoers lets run anything *with its password*.
    It logs in with the rig's key (the rig's authorized_keys must be readable by it)."""
    digest = subprocess.run(["openssl", "passwd", "-6", "-salt", "k3doctor", "never-typed"], check=True,
                            capture_output=True, text=True).stdout.strip()
    groups = [f"{line},{user}" if line.startswith("sudo:") and not line.endswith(":") else
              f"{line}{user}" if line.startswith("sudo:") else line
              for line in Path("/etc/group").read_text().splitlines()]
    files = {
        "/etc/passwd": (Path("/etc/passwd").read_text() + f"{user}:x:4242:4242:k3doctor test:/:/bin/sh\n", 0o644),
        "/etc/group": ("\n".join(groups) + f"\n{user}:x:4242:\n", 0o644),
        "/etc/shadow": (f"{user}:{digest}:20000:0:99999:7:::\n", 0o640),  # only this user's line
    }
    mounted = []
    try:
        for target, (text, mode) in files.items():
            copy = node.dir / f"sudo-user{target.replace('/', '-')}"
            copy.write_text(text)
            copy.chmod(mode)
            _in_namespace(node, "mount", "--bind", copy, target)
            mounted.append(target)
        yield user
    finally:
        for target in reversed(mounted):
            _in_namespace(node, "umount", target)


def leftover_tmp(rig) -> dict:
    """{node: [names]} of k3doctor's scratch directories left in each node's $TMPDIR."""
    return {n.name: names for n in rig.nodes
            if (names := sorted(p.name for p in n.tmp.iterdir() if p.name.startswith("k3doctor.")))}


def node_processes(rig) -> list:
    """(pid, command line) of every process on the rig's nodes but their sshd: on an idle rack, none.
    Everything else in a node's namespace was started over SSH, i.e. by k3doctor in these tests."""
    namespaces = set(rig._namespaces.values())
    found = []
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            if proc.info["name"] != "sshd" and os.readlink(f"/proc/{proc.pid}/ns/mnt") in namespaces:
                found.append((proc.info["pid"], " ".join(proc.info["cmdline"] or ())[:160]))
        except (psutil.Error, OSError):
            continue
    return found


def clear_leftovers(rig) -> None:
    """KILL whatever a test left on the rig's nodes (every process but their sshd) and remove k3doctor's
    scratch directories there: a test that failed because something was left must not fail the next test
    with its leftovers too (a k3doctor the test had to SIGKILL leaves reads with 300 s deadlines)."""
    end = time.monotonic() + 5  # a shell may fork once more between the listing and its KILL
    while (left := node_processes(rig)) and time.monotonic() < end:
        for pid, _ in left:
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()
        time.sleep(0.1)
    for node in rig.nodes:
        for scratch in node.tmp.glob("k3doctor.*"):
            shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def without_python3(node):
    """``node`` (its ``ns_pid`` and ``dir``) without python3, as a minimal OS image is: the node's /usr/bin (and
    so /bin) replaced, in its namespace only, by links to every one of its programs but python3*."""
    real, links = node.dir / "usr-bin", node.dir / "usr-bin-without-python3"
    real.mkdir()
    links.mkdir()
    _in_namespace(node, "mount", "--bind", "/usr/bin", real)
    try:
        for program in Path("/usr/bin").iterdir():  # the same programs the node has (the mount is its own)
            if not program.name.startswith("python3"):
                (links / program.name).symlink_to(real / program.name)
        _in_namespace(node, "mount", "--bind", links, "/usr/bin")
        try:
            yield
        finally:
            _in_namespace(node, "umount", "/usr/bin")
    finally:
        _in_namespace(node, "umount", real)
