"""What every transport offers (run a bounded command, a Docker client, cancel, close) and the error a node
that cannot be reached is reported with."""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from k3doctor.deadline import Deadline, seconds
from k3doctor.shell import with_timeout

if TYPE_CHECKING:  # at run time imported where first used: not needed to open a connection
    from k3doctor.readings import CommandReading
KILL_GRACE_S = 2.0  # node-side SIGKILL follows SIGTERM after this
DOCKER_OP_TIMEOUT_S = 30.0  # one Docker API call at most (and never past the node deadline)
CLIENT_GRACE_S = 5.0  # client gives the node this long to report its own kill
STOP_GRACE_S = 2.0  # clean-up on a node: TERM, this long to go (gather's trap stops its reading), then KILL


# Why a node cannot be read, as ids an alert or a test history keys on: id -> (the step of reaching a node it
# stops, the cause in a few words). The steps are those `check --connect-only` reports, in order.
STEPS = ("tcp", "host key", "auth", "sudo", "read")
CAUSES = {
    "NODE-IDENTITY-FILE": ("auth", "identity file missing"),
    "NODE-DNS": ("tcp", "host name does not resolve"),
    "NODE-REFUSED": ("tcp", "connection refused"),
    "NODE-UNREACHABLE": ("tcp", "no TCP answer"),
    "NODE-KNOWN-HOSTS": ("host key", "known_hosts file unusable"),
    "NODE-HOSTKEY-UNKNOWN": ("host key", "host key unknown"),
    "NODE-HOSTKEY-CHANGED": ("host key", "host key changed"),
    "NODE-HOSTKEY-REVOKED": ("host key", "host key revoked"),
    "NODE-SSH-TIMEOUT": ("host key", "no SSH handshake"),
    "NODE-AUTH-REFUSED": ("auth", "authentication refused"),
    "NODE-SSH-CONFIG": ("tcp", "ssh config unusable"),
    "NODE-JUMP-HOST": ("tcp", "jump host could not reach the node"),
    "NODE-SSH-FAILED": ("auth", "SSH failed"),
    "NODE-SUDO-PASSWORD": ("sudo", "sudo wants a password"),
    "NODE-SESSION-LOST": ("read", "SSH session lost"),
    "NODE-INTERRUPTED": ("read", "interrupted"),
    "NODE-NOT-READ": ("read", "not read"),
    "NODE-NO-RESULT": ("read", "no result"),  # merge: a node without its `k3doctor node` document
}


class TransportError(Exception):
    """The node could not be reached or refused us: ``cause`` (an id of :data:`CAUSES`), the message in this
    node's words, ``summary`` the same in words that name no node (what nodes with one cause share: a report
    groups them by it) and ``fix``, exactly what to do."""

    def __init__(self, message: str, cause: str = "NODE-NOT-READ", summary: str | None = None, fix: str = ""):
        super().__init__(message)
        self.cause, self.summary, self.fix = cause, summary or message, fix

    def within(self, which: str) -> TransportError:
        """The same cause met behind ``which`` (a jump host): said so, fix kept."""
        return TransportError(f"{which}: {self}", self.cause, f"{which}: {self.summary}", self.fix)



class Transport:
    """Common surface: ``run`` a shell command with a deadline, get a Docker client, ``cancel``, close."""

    node: str

    def __init__(self, node: str, *, sudo: bool = False, max_output_bytes: int = 16 << 20):
        self.node = node
        self.sudo = sudo
        self.max_output_bytes = max_output_bytes
        self.round_trips = 0
        self._lock = threading.Lock()
        self._cancelled = threading.Event()
        self._live: dict = {}  # id -> [handle, remote process group or None]: what cancel() must stop

    def connect(self) -> None:
        """Open the connection now, so failures surface once, before any check runs."""

    def run(self, command: str, *, timeout_s: float, stdin: bytes | None = None) -> CommandReading:
        """Run a shell command on the node; it is killed there (with its children) at timeout_s."""
        result = self.run_bytes(command, timeout_s=timeout_s, stdin=stdin)
        result.stdout = result.stdout.decode("utf-8", "replace")
        result.stderr = result.stderr.decode("utf-8", "replace")
        return result

    def run_bytes(self, command: str, *, timeout_s: float, stdin: bytes | None = None) -> CommandReading:
        """``run`` with stdout/stderr left as bytes (the gatherer's frames are byte-counted)."""
        timeout_s = seconds(timeout_s, 30.0)
        wrapped = with_timeout(command, timeout_s, KILL_GRACE_S)
        self._refuse_if_cancelled()
        with self._lock:
            self.round_trips += 1
        started = time.monotonic()
        rc, out, err, truncated, client_timeout = self._execute(
            wrapped, stdin, timeout_s + KILL_GRACE_S + CLIENT_GRACE_S)
        if self.sudo and rc == 1 and b"password is required" in err:
            raise self._sudo_wants_password()
        from k3doctor.readings import CommandReading

        return CommandReading(
            command=command, rc=rc, stdout=out, stderr=err,
            timed_out=client_timeout or rc in (124, 137),
            truncated=truncated, duration_s=round(time.monotonic() - started, 3))

    def _as_user(self, command: str) -> str:
        return "sudo -n " + command if self.sudo else command

    def _sudo_wants_password(self) -> TransportError:
        return TransportError(
            f"sudo on {self.node} wants a password", "NODE-SUDO-PASSWORD", "sudo wants a password",
            "allow the login's commands without a password on the node (a sudoers line `USER ALL=(root) NOPASSWD: "
            "ALL` via `visudo -f /etc/sudoers.d/k3doctor`), or log in as root and set `sudo: false` for this node")

    def _refuse_if_cancelled(self):
        if self._cancelled.is_set():
            raise TransportError(f"{self.node}: interrupted (Ctrl-C); what ran there was stopped", "NODE-INTERRUPTED",
                                 "interrupted (Ctrl-C); what ran there was stopped")

    def _track(self, handle, group=None) -> None:
        with self._lock:
            self._live[id(handle)] = [handle, group]

    def _untrack(self, handle) -> None:
        with self._lock:
            self._live.pop(id(handle), None)

    def cancel(self) -> None:
        """Ctrl-C: stop every command in flight on the node now, with whatever it started there, and
        refuse new ones. Blocked reads return at once; bounded by a few seconds per node."""
        self._cancelled.set()
        with self._lock:
            live = [tuple(entry) for entry in self._live.values()]
        self._stop(live)

    def _stop(self, live: list) -> None:
        raise NotImplementedError

    def _execute(self, command, stdin, deadline_s):
        raise NotImplementedError

    def docker(self, deadline: Deadline):
        raise NotImplementedError

    def close(self) -> None:
        pass


class Capped:
    """Byte sink that keeps at most ``limit`` bytes and remembers whether it dropped any."""

    def __init__(self, limit: int):
        self.limit, self.parts, self.size, self.truncated = limit, [], 0, False

    def add(self, data: bytes):
        room = self.limit - self.size
        if len(data) > room:
            self.truncated = True
            data = data[:max(room, 0)]
        self.parts.append(data)
        self.size += len(data)

    def value(self) -> bytes:
        return b"".join(self.parts)
