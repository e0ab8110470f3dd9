"""How k3doctor reaches a node: one connection per node, reused by every check.

``SSHTransport`` (paramiko) verifies host keys against known_hosts at every hop unless the user
opts out, reads ``~/.ssh/config`` as OpenSSH does (sshconfig.py: HostName, User, Port, IdentityFile,
ProxyJump chains, known_hosts files, HostKeyAlias, Include, Match), uses ssh-agent keys, and runs every
command under a node-side ``timeout`` so a command that outlives its deadline is killed on
the node, not orphaned. ``LocalTransport`` runs the same commands on this machine.
Both hand out a Docker SDK client that talks to the node's own engine.
"""
from __future__ import annotations

import logging
import select
import socket
import threading
import time

# isort: off
from k3doctor.transport import lazy_imports  # noqa: F401  (first: paramiko itself is imported at the first handshake, see there)
import paramiko
# isort: on

from k3doctor import localfiles, progress
from k3doctor.deadline import Deadline, seconds
from k3doctor.shell import quote, with_timeout
from k3doctor.transport.base import (
    DOCKER_OP_TIMEOUT_S,
    KILL_GRACE_S,
    STOP_GRACE_S,
    Capped,
    Transport,
    TransportError,
)
from k3doctor.transport.streamlocal import open_streamlocal
from k3doctor.transport.targets import SSHTarget, files_said

log = logging.getLogger("k3doctor")
PID_MARK = b"@k3doctor-pid "  # first stderr line of every SSH command: the process group to stop on Ctrl-C
# Stops process groups (and their leaders, in case a group does not exist yet). `timeout` forwards the
# TERM to its group; gather's trap stops its in-flight reading and removes its scratch directory.
STOP_SCRIPT = "g='{targets}'; kill -TERM $g 2>/dev/null; sleep {grace}; kill -KILL $g 2>/dev/null; exit 0"
DEFAULT_DOCKER_SOCKET = "/var/run/docker.sock"  # the engine's API socket unless the inventory names another
# The TCP reachability probe before the SSH handshake: a live node answers a SYN in well under a second
# (this allows two SYN retransmits, at 1 s and 3 s); a dead or filtered one costs this, not the connect timeout.
PROBE_TIMEOUT_S = 3.0



def probe_tcp(host: str, port: int, timeout_s: float) -> socket.socket:
    """The node's SSH port, connected within ``timeout_s`` (bounded separately from the SSH handshake), as
    the socket the handshake then runs on (the probe costs the node no extra connection). A node that is
    down, blackholed or refusing is one TransportError naming which, before any SSH is tried."""
    where = f"{host}:{port}"
    progress.mark("connect")
    try:
        return socket.create_connection((host, port), timeout=seconds(timeout_s, PROBE_TIMEOUT_S))
    except ConnectionRefusedError:
        raise refused(host, port) from None
    except TimeoutError:
        raise TransportError(f"unreachable: no TCP answer from {where} within {timeout_s:g}s (node down, or the "
                             "port filtered?); SSH was not tried", "NODE-UNREACHABLE",
                             f"no TCP answer within {timeout_s:g}s (node down, or the port filtered?)",
                             _check_address(host, port)) from None
    except socket.gaierror as exc:
        raise unresolved(host, exc) from None
    except OSError as exc:
        raise TransportError(f"unreachable: cannot reach {where}: {exc.strerror or exc}", "NODE-UNREACHABLE",
                             f"cannot reach the node: {exc.strerror or exc}", _check_address(host, port)) from None


def _check_address(host: str, port: int) -> str:
    return (f"check the node is up and that {host}:{port} is its SSH address (`nc -vz {host} {port}` from here): "
            "host/port in the inventory, or HostName/Port in the ssh config")


def refused(host: str, port: int) -> TransportError:
    return TransportError(f"connection refused by {host}:{port} (no sshd listening?)", "NODE-REFUSED",
                          "connection refused (no sshd listening?)",
                          f"start sshd on the node (`systemctl start ssh` on its console), or correct its address "
                          f"(now {host}:{port}): host/port in the inventory, or HostName/Port in the ssh config")


def unresolved(host: str, exc: socket.gaierror) -> TransportError:
    return TransportError(f"cannot resolve host {host!r}: {exc.strerror}", "NODE-DNS",
                          f"host name does not resolve ({exc.strerror})",
                          f"correct host in the inventory or HostName in the ssh config (`getent hosts {host}`)")


def _handshake_done(client: paramiko.SSHClient) -> bool:
    """Whether the server got as far as its host key (a silent port times out before: paramiko then
    reports a confusing "No existing session")."""
    transport = client.get_transport()
    return transport is not None and transport.host_key is not None


class SSHTransport(Transport):
    """paramiko connection, opened once; every ``run`` is one exec channel on it."""

    def __init__(self, target: SSHTarget, *, docker_socket: str | None = None, **kw):
        super().__init__(target.node, **kw)
        self.target = target
        self._client: paramiko.SSHClient | None = None
        self._jumps: list = []  # jump host logins, first hop first
        self.docker_socket = docker_socket  # the node's engine socket; None: the default (and docker's own)
        self._engine_route = EngineRoute(self.sudo)

    def connect(self) -> None:
        if self._client is None:
            sock, hops = None, self.target.jumps
            for number, hop in enumerate(hops, 1):  # each hop verified like any other host, in its own timeout
                which = f"jump host {number} of {len(hops)}"
                try:
                    self._jumps.append(self._login(hop, sock))
                except TransportError as exc:
                    self.close()
                    raise exc.within(which) from None
                sock = self._tunnel(self._jumps[-1], hop, hops[number] if number < len(hops) else self.target, which)
            try:
                self._client = self._login(self.target, sock)
            except TransportError:
                self.close()
                raise

    def _tunnel(self, jump: paramiko.SSHClient, hop: SSHTarget, to: SSHTarget, which: str):
        """A direct-tcpip channel from ``hop`` to the next login, opened within the connect timeout."""
        try:
            return jump.get_transport().open_channel(
                "direct-tcpip", (to.host, to.port), ("127.0.0.1", 0), timeout=hop.connect_timeout_s)
        except (paramiko.SSHException, OSError) as exc:
            self.close()
            raise TransportError(f"{which} {hop.host}:{hop.port} could not reach {to.host}:{to.port}: "
                                 f"{exc or 'no answer'}", "NODE-JUMP-HOST",
                                 f"{which} {hop.host}:{hop.port} could not reach the node: {exc or 'no answer'}",
                                 f"check that {to.host}:{to.port} is the node's SSH address as the jump host sees "
                                 "it (HostName/Port in the ssh config, host/port in the inventory)") from None

    @staticmethod
    def _login(t: SSHTarget, sock) -> paramiko.SSHClient:
        where = f"{t.user}@{t.host}:{t.port}"
        if t.identity_file:
            try:
                why = localfiles.not_regular(t.identity_file)
            except OSError as exc:
                why = "does not exist" if isinstance(exc, FileNotFoundError) else f"cannot be read ({exc.strerror})"
            if why:
                raise TransportError(
                    f"identity file {t.identity_file} for {where} {why} "
                    "(identity_file in the inventory or IdentityFile in the ssh config)", "NODE-IDENTITY-FILE",
                    f"identity file {t.identity_file} {why}",
                    f"point identity_file (the inventory's defaults: or the node's entry) or IdentityFile (ssh "
                    f"config) at the key the nodes accept, or make one (`ssh-keygen -t ed25519 -f "
                    f"{t.identity_file}`) and install it on each node (`ssh-copy-id -i {t.identity_file}.pub -p {t.port} "
                    f"{t.user}@HOST`)")
        if sock is None:  # a jump host's channel is already connected; a direct node is probed first
            sock = probe_tcp(t.host, t.port, min(t.connect_timeout_s, PROBE_TIMEOUT_S))
        from k3doctor.transport import hostkeys  # paramiko's import starts here, after the probe (lazy_imports)

        client = paramiko.SSHClient()
        try:
            revoked = hostkeys.trust_known_hosts(client.get_host_keys(), t)
        except hostkeys.KnownHostsError as exc:
            sock.close()
            raise TransportError(str(exc), "NODE-KNOWN-HOSTS", str(exc),
                                 "correct ssh.known_hosts in the inventory (or UserKnownHostsFile in the ssh "
                                 "config)") from None
        client.set_missing_host_key_policy(hostkeys.RefuseRevoked(
            revoked, hostkeys.AcceptForThisRun() if t.accept_unknown_hosts else paramiko.RejectPolicy()))
        try:
            client.connect(
                t.host, port=t.port, username=t.user, key_filename=t.identity_file, password=t.password,
                timeout=t.connect_timeout_s, banner_timeout=t.connect_timeout_s,
                auth_timeout=t.connect_timeout_s, channel_timeout=t.connect_timeout_s,
                allow_agent=t.use_agent, look_for_keys=t.look_for_keys, sock=sock)
        except paramiko.BadHostKeyException:
            client.close()
            raise TransportError(
                f"host key of {t.host}:{t.port} does NOT match known_hosts ({files_said(t)}) - refusing to connect",
                "NODE-HOSTKEY-CHANGED", f"host key does NOT match known_hosts ({files_said(t)})",
                "only if the node was reinstalled: check its new key's fingerprint on its console (`ssh-keygen -lf "
                f"/etc/ssh/ssh_host_ed25519_key.pub`) against `ssh-keyscan -p {t.port} {t.host} | ssh-keygen -lf -`,"
                f" then `ssh-keygen -R '[{t.host}]:{t.port}'` and add the new one; otherwise do not connect") from None
        except hostkeys.RevokedHostKey as exc:
            client.close()
            raise TransportError(
                f"host key of {t.host}:{t.port} ({exc}) is marked @revoked in known_hosts - "
                "refusing to connect", "NODE-HOSTKEY-REVOKED", "host key is marked @revoked in known_hosts",
                "give the node a new host key (its admin), then verify and add it") from None
        except paramiko.AuthenticationException:
            client.close()
            key = t.identity_file or "agent/default keys"
            raise TransportError(
                f"authentication refused for {where} (identity file {key})", "NODE-AUTH-REFUSED",
                f"authentication refused for {t.user} (identity file {key})",
                f"install the key on the node (`ssh-copy-id -i {t.identity_file or '~/.ssh/id_ed25519'}.pub -p "
                f"{t.port} {t.user}@{t.host}`), or correct user/identity_file in the inventory (User/IdentityFile "
                "in the ssh config), or give the node a password_env") from None
        except paramiko.SSHException as exc:
            handshake = _handshake_done(client)
            client.close()
            if "not found in known_hosts" in str(exc):
                raise TransportError(
                    f"host key of {t.host}:{t.port} is unknown (not in {files_said(t)})", "NODE-HOSTKEY-UNKNOWN",
                    f"host key unknown (not in {files_said(t)})",
                    f"check its fingerprint (`ssh-keyscan -p {t.port} {t.host} | ssh-keygen -lf -`) against the "
                    "node's own (`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` on its console), then "
                    f"`ssh-keyscan -H -p {t.port} {t.host} >> {(t.known_hosts_files or ('~/.ssh/known_hosts',))[0]}`"
                    " (or, for a first look only, --accept-unknown-hosts)") from None
            if not handshake:
                raise TransportError(
                    f"no SSH handshake from {where} within {t.connect_timeout_s:g}s (sshd hung or overloaded, "
                    "or not an SSH port)", "NODE-SSH-TIMEOUT",
                    f"no SSH handshake within {t.connect_timeout_s:g}s (sshd hung or overloaded, or not an SSH port)",
                    f"check sshd on the node, or raise ssh.connect_timeout_s (--connect-timeout)") from None
            raise TransportError(f"SSH to {where} failed: {exc}", "NODE-SSH-FAILED", f"SSH failed: {exc}") from None
        except TimeoutError:
            client.close()
            raise TransportError(f"connecting to {where} timed out after {t.connect_timeout_s:g}s", "NODE-SSH-TIMEOUT",
                                 f"connecting timed out after {t.connect_timeout_s:g}s",
                                 "check sshd on the node, or raise ssh.connect_timeout_s (--connect-timeout)") from None
        except (paramiko.ssh_exception.NoValidConnectionsError, ConnectionRefusedError):
            client.close()
            raise refused(t.host, t.port) from None
        except socket.gaierror as exc:
            client.close()
            raise unresolved(t.host, exc) from None
        except OSError as exc:
            client.close()
            raise TransportError(f"cannot reach {where}: {exc.strerror or exc}", "NODE-UNREACHABLE",
                                 f"cannot reach the node: {exc.strerror or exc}", _check_address(t.host, t.port)) from None
        return client

    def _channel(self):
        self._refuse_if_cancelled()
        self.connect()
        try:
            return self._client.get_transport().open_session(timeout=self.target.connect_timeout_s)
        except (paramiko.SSHException, OSError, EOFError, AttributeError) as exc:  # EOFError: see _execute
            raise TransportError(f"SSH session to {self.node} lost: {str(exc) or 'connection closed'}",
                                 "NODE-SESSION-LOST") from None

    def _announced(self, command: str) -> str:
        """The command as sent: it first names its process group on stderr (for cancel), then becomes
        ``command`` (a ``timeout``, which leads that group). With ``ssh.docker_socket`` set, every ``docker``
        CLI the command starts (an exec into the container, its logs) asks that engine too, as the API does."""
        engine = ""
        if self.docker_socket:
            engine = f"DOCKER_HOST={quote('unix://' + self.docker_socket)}; export DOCKER_HOST; "
        announce = f"echo {PID_MARK.decode().strip()} $$ >&2; exec "
        return self._as_user(f"sh -c {quote(engine + announce + command)}")

    def _execute(self, command, stdin, deadline_s):
        chan = self._channel()
        out, err = Capped(self.max_output_bytes), Capped(self.max_output_bytes)
        head = _PidLine(err)
        timed_out = cancelled = False
        self._track(chan)
        try:
            chan.exec_command(self._announced(command))
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
            end = time.monotonic() + deadline_s
            while True:
                while chan.recv_ready():
                    out.add(chan.recv(65536))
                while chan.recv_stderr_ready():
                    if head.add(chan.recv_stderr(65536)):
                        self._track(chan, head.group)
                if self._cancelled.is_set():
                    cancelled = True
                    break
                if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                    break
                left = end - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                select.select([chan], [], [], min(left, 0.2))
            rc = chan.recv_exit_status() if not (timed_out or cancelled) else None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            # paramiko raises a bare EOFError in the caller's thread when a write to a reset connection fails
            # (Packetizer.write_all): a lost node, like the others - never the end of a long-running watch
            raise TransportError(f"SSH session to {self.node} broke: {str(exc) or 'connection closed'}",
                                 "NODE-SESSION-LOST") from None
        finally:
            self._untrack(chan)
            chan.close()
        head.flush()
        if timed_out and head.group:  # the node missed its own deadline: stop what is left there
            self._stop([(None, head.group)])
        self._refuse_if_cancelled()
        if rc == -1:  # closed without an exit status: the connection went away under the command
            raise TransportError(f"SSH connection to {self.node} lost while a command ran (sshd killed or "
                                 "node down?); what it started there ends at its node-side deadline", "NODE-SESSION-LOST")
        return rc, out.value(), err.value(), out.truncated or err.truncated, timed_out

    def _stop(self, live):
        """Close the channels (blocked reads return) and stop their process groups on the node."""
        for chan, _ in live:
            if chan is not None:
                try:
                    chan.close()
                except (paramiko.SSHException, OSError, EOFError):
                    pass
        groups = sorted({group for _, group in live if group})
        if not groups or self._client is None:
            return
        script = STOP_SCRIPT.format(targets=" ".join(f"-{g} {g}" for g in groups), grace=f"{STOP_GRACE_S:g}")
        try:
            chan = self._client.get_transport().open_session(timeout=min(self.target.connect_timeout_s, 5.0))
            chan.exec_command(self._as_user(f"sh -c {quote(script)}"))
            end = time.monotonic() + STOP_GRACE_S + 3
            while not chan.exit_status_ready() and time.monotonic() < end:
                time.sleep(0.05)
            chan.close()
        except (paramiko.SSHException, OSError, EOFError, AttributeError) as exc:
            log.warning("could not stop k3doctor's processes on %s: %s", self.node, exc)

    def docker(self, deadline: Deadline):
        """A Docker SDK client on this connection, bounded by ``deadline`` (see dockerssh). Its API channels
        go straight to the engine socket through sshd (streamlocal.py: nothing runs on the node, so at the
        deadline there is no node-side process to stop: closing the channel here ends it), else, where the
        node's sshd refused that or the node is ``sudo: true`` (``EngineRoute``), through ``docker system
        dial-stdio`` under a node-side ``timeout`` ending then, stopped on the node when the deadline hit."""
        from k3doctor.transport.docker_api import docker_over_ssh

        self.connect()

        def open_channel():
            left = deadline.remaining()
            if left <= 0:
                raise TransportError(f"Docker engine on {self.node} not read: the node deadline was reached")
            with self._lock:
                self.round_trips += 1
            if self._engine_route.streamlocal:
                chan = self._streamlocal_channel(min(left, self.target.connect_timeout_s))
                if chan is not None:
                    return chan
            return self._dial_stdio_channel(left)

        def release(chan, deadline_hit):
            with self._lock:
                _, group = self._live.pop(id(chan), (None, None))
            if deadline_hit and group:  # the engine kept it busy: stop dial-stdio on the node now
                self._stop([(None, group)])

        return docker_over_ssh(open_channel, release, deadline,
                               op_timeout_s=min(DOCKER_OP_TIMEOUT_S, deadline.remaining()),
                               why_dial_stdio=lambda: self._engine_route.refused)

    def _streamlocal_channel(self, timeout_s: float):
        """A channel to the engine socket, or None where this node's sshd refused the first one (the route
        then falls back to dial-stdio for the rest of the run)."""
        self._refuse_if_cancelled()
        path = self.docker_socket or DEFAULT_DOCKER_SOCKET
        try:
            chan = open_streamlocal(self._client.get_transport(), path, timeout_s)
        except paramiko.ChannelException as exc:
            said = f"sshd refused a channel to {path} ({exc.text}: forwarding off, or the socket not usable by " \
                   f"{self.target.user})"
            if self._engine_route.refuse(said):
                return None
            raise TransportError(f"Docker engine on {self.node}: {said}") from None
        except (paramiko.SSHException, OSError, EOFError, AttributeError) as exc:  # no answer, or connection gone
            raise TransportError(f"Docker engine on {self.node} not reached: {exc or 'SSH session lost'}") from None
        self._engine_route.worked()
        self._track(chan)
        return chan

    def _dial_stdio_channel(self, left: float):
        """An exec channel running ``docker system dial-stdio`` under a node-side timeout ending in ``left``."""
        chan = self._channel()
        self._track(chan)
        dial = "exec docker " + (f"-H {quote('unix://' + self.docker_socket)} " if self.docker_socket else "")
        try:
            # exec: docker is timeout's own child, so its KILL follows if docker outlives the TERM
            chan.exec_command(self._announced(with_timeout(dial + "system dial-stdio", left, KILL_GRACE_S)))
            head = _PidLine(None)
            end = time.monotonic() + min(left, self.target.connect_timeout_s)
            while head.group is None and not head.done and time.monotonic() < end:
                if chan.recv_stderr_ready():
                    head.add(chan.recv_stderr(4096))
                elif chan.exit_status_ready():
                    break
                else:
                    time.sleep(0.01)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            self._untrack(chan)
            chan.close()
            raise TransportError(f"SSH session to {self.node} broke: {str(exc) or 'connection closed'}",
                                 "NODE-SESSION-LOST") from None
        if head.group is None:
            self._untrack(chan)
            message = head.text() or "no answer"
            chan.close()
            if self.sudo and "password is required" in message:
                raise self._sudo_wants_password()
            raise TransportError(self._engine_route.unreachable(
                self.node, f"docker system dial-stdio did not start: {message}"))
        self._track(chan, head.group)
        return chan

    def close(self) -> None:
        for client in [self._client, *reversed(self._jumps)]:
            if client is not None:
                client.close()
        self._client, self._jumps = None, []


class EngineRoute:
    """Which way one node's Docker API channels go, decided once per node per run: straight to the engine
    socket through sshd (streamlocal) unless the node is ``sudo: true`` (the socket is root's there) or its
    sshd refused the first such channel; then through ``docker system dial-stdio``. A route that worked
    is kept: a later refusal is the engine gone, not a reason to switch."""

    def __init__(self, sudo: bool):
        self._lock = threading.Lock()
        self.sudo = sudo
        self.refused = None  # what sshd said, once it refused the first streamlocal channel
        self._worked = False

    @property
    def streamlocal(self) -> bool:
        return not self.sudo and self.refused is None

    def worked(self) -> None:
        with self._lock:
            self._worked = True

    def refuse(self, why: str) -> bool:
        """sshd refused a streamlocal channel: True when the route is (now) dial-stdio, False when streamlocal
        had worked on this node (then the refusal is the error)."""
        with self._lock:
            if self._worked:
                return False
            self.refused = self.refused or why
            return True

    def unreachable(self, node: str, dial_said: str) -> str:
        """The message when dial-stdio failed too: both causes, as the node's sshd and docker said them."""
        tried = f"{self.refused}; then " if self.refused else ""
        return f"Docker engine on {node} not reachable: {tried}{dial_said}"


class _PidLine:
    """Splits the PID_MARK line off the front of a command's stderr; the rest goes to ``sink``."""

    def __init__(self, sink):
        self.sink, self.buf, self.group, self.done = sink, b"", None, False

    def add(self, data: bytes) -> bool:
        """Feed stderr; True once, when the process group became known."""
        if self.done:
            self._keep(data)
            return False
        self.buf += data
        line, sep, rest = self.buf.partition(b"\n")
        if not sep and len(self.buf) < 64:
            return False
        self.done = True
        if sep and line.startswith(PID_MARK) and line[len(PID_MARK):].strip().isdigit():
            self.group, self.buf = int(line[len(PID_MARK):]), rest
        self.flush()
        return self.group is not None

    def _keep(self, data: bytes):
        if self.sink is not None:
            self.sink.add(data)
        else:
            self.buf += data[:4096]

    def flush(self):
        if self.sink is not None and self.buf:
            self.sink.add(self.buf)
            self.buf = b""

    def text(self) -> str:
        return self.buf.decode("utf-8", "replace").strip()[-300:]
