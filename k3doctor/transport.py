"""How k3doctor reaches a node: one connection per node, reused by every check.

``SSHTransport`` (paramiko) verifies host keys against known_hosts unless the user opts
out, honours ``~/.ssh/config`` (User, Port, IdentityFile, ProxyJump) and runs every
command under a node-side ``timeout`` so a command that outlives its deadline is killed on
the node, not orphaned. ``LocalTransport`` runs the same commands on this machine.
Both hand out a Docker SDK client that talks to the node's own engine.
"""
from __future__ import annotations

import logging
import os
import select
import socket
import subprocess
import threading
import time
from dataclasses import dataclass

import paramiko

from .readings import CommandReading
from .shell import with_timeout

log = logging.getLogger("k3doctor")
GLOBAL_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"  # pinned system-wide: a mismatch there is a changed key
KILL_GRACE_S = 2.0  # node-side SIGKILL follows SIGTERM after this
CLIENT_GRACE_S = 5.0  # client gives the node this long to report its own kill


class TransportError(Exception):
    """The node could not be reached or refused us; the message says what to do."""


@dataclass
class SSHTarget:
    """Where and how to log in, after merging the inventory with ~/.ssh/config."""

    node: str
    host: str
    port: int = 22
    user: str | None = None
    identity_file: str | None = None
    password: str | None = None  # from an environment variable named in the inventory
    proxy_jump: str | None = None
    ssh_config_path: str | None = None  # where the jump host's own settings are looked up
    known_hosts: str | None = None
    accept_unknown_hosts: bool = False
    connect_timeout_s: float = 10.0

    def __repr__(self):  # never show the password
        return f"SSHTarget({self.user}@{self.host}:{self.port})"


def resolve_ssh_target(node: str, host: str, *, port=None, user=None, identity_file=None,
                       password=None, known_hosts=None, accept_unknown_hosts=False,
                       connect_timeout_s=10.0, ssh_config_path="~/.ssh/config") -> SSHTarget:
    """Inventory values win; ~/.ssh/config fills what the inventory leaves open."""
    cfg = {}
    path = os.path.expanduser(ssh_config_path) if ssh_config_path else None
    try:
        if path and os.path.exists(path):
            cfg = paramiko.SSHConfig.from_path(path).lookup(host)
        port = int(port or cfg.get("port") or 22)
    except (OSError, ValueError, paramiko.ssh_exception.ConfigParseError) as exc:
        raise TransportError(f"cannot use ssh config {path} for {host}: {exc}") from None
    identities = cfg.get("identityfile") or []
    return SSHTarget(
        node=node,
        host=cfg.get("hostname", host),
        port=port,
        user=user or cfg.get("user") or "root",
        identity_file=os.path.expanduser(identity_file) if identity_file else (
            os.path.expanduser(identities[0]) if identities else None),
        password=password,
        proxy_jump=cfg.get("proxyjump"),
        ssh_config_path=ssh_config_path,
        known_hosts=os.path.expanduser(known_hosts) if known_hosts else None,
        accept_unknown_hosts=accept_unknown_hosts,
        connect_timeout_s=connect_timeout_s,
    )


class _AcceptForThisRun(paramiko.MissingHostKeyPolicy):
    """--accept-unknown-hosts: trust an unknown key for this run only; never save it (a changed key
    is still refused by paramiko before any policy is asked)."""

    def missing_host_key(self, client, hostname, key):
        log.warning("accepting unknown host key of %s for this run only: %s %s", hostname, key.get_name(),
                    key.fingerprint if hasattr(key, "fingerprint") else key.get_base64()[:24])
        client.get_host_keys().add(hostname, key.get_name(), key)


class _RevokedHostKey(paramiko.SSHException):
    """The node presented a key that a known_hosts ``@revoked`` line names."""


class _RefuseRevoked(paramiko.MissingHostKeyPolicy):
    """Refuse a revoked key before any other policy may accept it. Revoked keys are left out of the
    known keys, so paramiko always asks the policy about them."""

    def __init__(self, revoked: set, policy: paramiko.MissingHostKeyPolicy):
        self.revoked, self.policy = revoked, policy

    def missing_host_key(self, client, hostname, key):
        if (key.get_name(), key.get_base64()) in self.revoked:
            raise _RevokedHostKey(f"{hostname} {key.get_name()}")
        return self.policy.missing_host_key(client, hostname, key)


def load_known_hosts(host_keys: paramiko.HostKeys, path: str) -> set:
    """Add a known_hosts file's keys to ``host_keys``; returns its revoked keys as (type, base64).

    OpenSSH markers: a ``@revoked`` key is refused for every host (its host pattern is usually
    ``*``, which paramiko cannot match), and is never trusted even if another line lists it;
    ``@cert-authority`` lines are skipped (paramiko does not verify host certificates)."""
    revoked, entries = set(), []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            marker, _, rest = line.partition(" ") if line.startswith("@") else ("", "", line)
            if marker == "@cert-authority":
                continue
            if marker not in ("", "@revoked"):
                raise paramiko.hostkeys.InvalidHostKey(line, ValueError(f"line {number}: unknown marker {marker}"))
            entry = paramiko.hostkeys.HostKeyEntry.from_line(rest.strip(), number)
            if entry is None:  # a key type paramiko does not know: OpenSSH would not use it either
                continue
            if marker:
                revoked.add((entry.key.get_name(), entry.key.get_base64()))
            else:
                entries.append(entry)
    for entry in entries:
        if (entry.key.get_name(), entry.key.get_base64()) not in revoked:
            for name in entry.hostnames:
                host_keys.add(name, entry.key.get_name(), entry.key)
    return revoked


class Transport:
    """Common surface: ``run`` a shell command with a deadline, get a Docker client, close."""

    node: str

    def __init__(self, node: str, *, sudo: bool = False, max_output_bytes: int = 16 << 20):
        self.node = node
        self.sudo = sudo
        self.max_output_bytes = max_output_bytes
        self.round_trips = 0
        self._lock = threading.Lock()

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
        wrapped = with_timeout(command, timeout_s, KILL_GRACE_S)
        if self.sudo:
            wrapped = "sudo -n " + wrapped
        with self._lock:
            self.round_trips += 1
        started = time.monotonic()
        rc, out, err, truncated, client_timeout = self._execute(
            wrapped, stdin, timeout_s + KILL_GRACE_S + CLIENT_GRACE_S)
        if self.sudo and rc == 1 and b"password is required" in err:
            raise TransportError(
                f"sudo on {self.node} wants a password; allow k3doctor's commands with NOPASSWD "
                "or set `sudo: false` for this node")
        return CommandReading(
            command=command, rc=rc, stdout=out, stderr=err,
            timed_out=client_timeout or rc in (124, 137),
            truncated=truncated, duration_s=round(time.monotonic() - started, 3))

    def _execute(self, command, stdin, deadline_s):
        raise NotImplementedError

    def docker(self):
        raise NotImplementedError

    def close(self) -> None:
        pass


class _Capped:
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


class LocalTransport(Transport):
    """This machine, through ``sh -c``: useful for ``k3doctor check`` on the node you are on."""

    def _execute(self, command, stdin, deadline_s):
        proc = subprocess.Popen(["sh", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = proc.communicate(stdin, timeout=deadline_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass
            out, err = proc.communicate()
            timed_out = True
        cap = self.max_output_bytes
        return proc.returncode, out[:cap], err[:cap], len(out) > cap or len(err) > cap, timed_out

    def docker(self):
        import docker

        return docker.from_env(timeout=30)


def _handshake_done(client: paramiko.SSHClient) -> bool:
    """Whether the server got as far as its host key (a silent port times out before: paramiko then
    reports a confusing "No existing session")."""
    transport = client.get_transport()
    return transport is not None and transport.host_key is not None


class SSHTransport(Transport):
    """paramiko connection, opened once; every ``run`` is one exec channel on it."""

    def __init__(self, target: SSHTarget, **kw):
        super().__init__(target.node, **kw)
        self.target = target
        self._client: paramiko.SSHClient | None = None
        self._jump: paramiko.SSHClient | None = None

    def connect(self) -> None:
        if self._client is None:
            sock = None
            if self.target.proxy_jump:
                self._jump, sock = self._open_jump(self.target.proxy_jump)
            self._client = self._login(self.target, sock)

    def _open_jump(self, spec: str):
        """One ProxyJump hop (``user@host:port``), verified like any other host."""
        user, _, hostport = spec.rpartition("@")
        host, _, port = hostport.partition(":")
        hop = resolve_ssh_target(f"{self.node} (jump host)", host, port=port or None, user=user or None,
                                 known_hosts=self.target.known_hosts,
                                 accept_unknown_hosts=self.target.accept_unknown_hosts,
                                 connect_timeout_s=self.target.connect_timeout_s,
                                 ssh_config_path=self.target.ssh_config_path)
        jump = self._login(hop, None)
        try:
            channel = jump.get_transport().open_channel(
                "direct-tcpip", (self.target.host, self.target.port), ("127.0.0.1", 0),
                timeout=self.target.connect_timeout_s)
        except (paramiko.SSHException, OSError) as exc:
            jump.close()
            raise TransportError(f"jump host {hop.host} could not reach {self.target.host}:{self.target.port}: "
                                 f"{exc}") from None
        return jump, channel

    @staticmethod
    def _login(t: SSHTarget, sock) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        files = [t.known_hosts] if t.known_hosts else [os.path.expanduser("~/.ssh/known_hosts"), GLOBAL_KNOWN_HOSTS]
        revoked = set()
        for path in (f for f in files if os.path.exists(f)):
            try:
                revoked |= load_known_hosts(client.get_host_keys(), path)  # never written back
            except (OSError, paramiko.hostkeys.InvalidHostKey) as exc:
                raise TransportError(f"cannot use known_hosts file {path}: {exc}") from None
        client.set_missing_host_key_policy(_RefuseRevoked(
            revoked, _AcceptForThisRun() if t.accept_unknown_hosts else paramiko.RejectPolicy()))
        where = f"{t.user}@{t.host}:{t.port}"
        if t.identity_file and not os.path.isfile(t.identity_file):
            raise TransportError(f"identity file {t.identity_file} for {where} does not exist "
                                 "(identity_file in the inventory or IdentityFile in the ssh config)")
        try:
            client.connect(
                t.host, port=t.port, username=t.user, key_filename=t.identity_file, password=t.password,
                timeout=t.connect_timeout_s, banner_timeout=t.connect_timeout_s,
                auth_timeout=t.connect_timeout_s, channel_timeout=t.connect_timeout_s,
                allow_agent=t.identity_file is None, look_for_keys=t.identity_file is None, sock=sock)
        except paramiko.BadHostKeyException:
            client.close()
            raise TransportError(
                f"host key of {t.host}:{t.port} does NOT match known_hosts ({t.known_hosts or '~/.ssh/known_hosts'})"
                " - refusing to connect; if the node was reinstalled, verify its key and replace the entry "
                f"(ssh-keygen -R '[{t.host}]:{t.port}')") from None
        except _RevokedHostKey as exc:
            client.close()
            raise TransportError(
                f"host key of {t.host}:{t.port} ({exc}) is marked @revoked in known_hosts - "
                "refusing to connect") from None
        except paramiko.AuthenticationException:
            client.close()
            raise TransportError(
                f"authentication refused for {where} (identity file {t.identity_file or 'agent/default keys'});"
                " check the key is in the node's authorized_keys or give password_env") from None
        except paramiko.SSHException as exc:
            handshake = _handshake_done(client)
            client.close()
            if "not found in known_hosts" in str(exc):
                raise TransportError(
                    f"host key of {t.host}:{t.port} is unknown (not in {t.known_hosts or '~/.ssh/known_hosts'});"
                    " add it (ssh-keyscan -p PORT HOST >> known_hosts) after verifying it, or pass"
                    " --accept-unknown-hosts") from None
            if not handshake:
                raise TransportError(
                    f"no SSH handshake from {where} within {t.connect_timeout_s:g}s (sshd hung or overloaded, "
                    "or not an SSH port)") from None
            raise TransportError(f"SSH to {where} failed: {exc}") from None
        except TimeoutError:
            client.close()
            raise TransportError(f"connecting to {where} timed out after {t.connect_timeout_s:g}s") from None
        except (paramiko.ssh_exception.NoValidConnectionsError, ConnectionRefusedError):
            client.close()
            raise TransportError(f"connection refused by {t.host}:{t.port} (no sshd listening?)") from None
        except socket.gaierror as exc:
            client.close()
            raise TransportError(f"cannot resolve host {t.host!r}: {exc.strerror}") from None
        except OSError as exc:
            client.close()
            raise TransportError(f"cannot reach {where}: {exc.strerror or exc}") from None
        return client

    def _channel(self):
        self.connect()
        try:
            return self._client.get_transport().open_session(timeout=self.target.connect_timeout_s)
        except (paramiko.SSHException, OSError, AttributeError) as exc:
            raise TransportError(f"SSH session to {self.node} lost: {exc}") from None

    def _execute(self, command, stdin, deadline_s):
        chan = self._channel()
        out, err = _Capped(self.max_output_bytes), _Capped(self.max_output_bytes)
        timed_out = False
        try:
            chan.exec_command(command)
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
            end = time.monotonic() + deadline_s
            while True:
                while chan.recv_ready():
                    out.add(chan.recv(65536))
                while chan.recv_stderr_ready():
                    err.add(chan.recv_stderr(65536))
                if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                    break
                left = end - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                select.select([chan], [], [], min(left, 0.2))
            rc = chan.recv_exit_status() if not timed_out else None
        except (paramiko.SSHException, OSError) as exc:
            raise TransportError(f"SSH session to {self.node} broke: {exc}") from None
        finally:
            chan.close()
        return rc, out.value(), err.value(), out.truncated or err.truncated, timed_out

    def docker(self):
        from .dockerssh import docker_over_ssh

        self.connect()
        prefix = "sudo -n " if self.sudo else ""

        def open_channel():
            with self._lock:
                self.round_trips += 1
            return self._channel()

        return docker_over_ssh(open_channel, prefix + "docker system dial-stdio")

    def close(self) -> None:
        for client in (self._client, self._jump):
            if client is not None:
                client.close()
        self._client = self._jump = None

