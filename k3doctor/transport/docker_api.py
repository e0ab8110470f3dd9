"""A Docker SDK client that rides on k3doctor's existing SSH connection.

docker-py's own ``ssh://`` support opens a second, separately configured SSH login per
node; this adapter instead takes its API channels from the transport, on the connection it
already verified (straight to the engine socket through sshd, or an exec channel running
``docker system dial-stdio``: transport.py ``EngineRoute``), so host-key policy and the
one-connection-per-node rule hold for Docker traffic too.
"""
from __future__ import annotations

import os
import socket
import threading

import docker
import urllib3
from docker.constants import DEFAULT_DOCKER_API_VERSION
from docker.transport.basehttpadapter import BaseHTTPAdapter
from docker.transport.sshconn import SSHConnectionPool
from docker.utils import version_lt

MIN_API_VERSION = "1.41"  # Docker 20.10; only used to ask the engine which version it speaks


class _Channels:
    """The API channels of one client, opened through the transport. At the deadline they are all closed,
    so a thread blocked on an engine that never answers (or trickles a byte now and then) returns then;
    ``stop()`` gives them back to the transport, which also stops them on the node if the deadline hit."""

    def __init__(self, open_channel, release, deadline, why_dial_stdio=lambda: None):
        self._open, self._release, self._why_dial_stdio = open_channel, release, why_dial_stdio
        self._lock = threading.Lock()
        self._chans: list = []
        self._given_back: list = []  # closed, kept for their stderr
        self.expired = False
        self._timer = threading.Timer(deadline.remaining(), self._expire)
        self._timer.daemon = True
        self._timer.start()

    def open(self, timeout):
        chan = self._open()
        chan.settimeout(timeout)
        with self._lock:
            self._chans.append(chan)
            if not self.expired:
                return chan
        raise ConnectionError("node deadline reached")

    def errors(self) -> str:
        """What ``docker system dial-stdio`` said on stderr (e.g. that the daemon is not running), after why
        it was used where that was a refused channel straight to the engine socket (which has no stderr)."""
        said = []
        with self._lock:
            chans = list(self._chans) + list(self._given_back)
        for chan in chans:
            while chan.recv_stderr_ready():
                said.append(chan.recv_stderr(4096).decode("utf-8", "replace"))
        said, why = " ".join(" ".join(said).split()), self._why_dial_stdio()
        if not (said and why):
            return said[-300:]
        why = f"{why}; then docker system dial-stdio said: "
        return why + said[-max(100, 300 - len(why)):]  # both causes within a message's 300 characters

    def _expire(self):
        with self._lock:
            self.expired = True
            chans = list(self._chans)
        for chan in chans:
            _close(chan)

    def stop(self):
        self._timer.cancel()
        with self._lock:
            chans, self._chans = self._chans, []
            self._given_back += chans
        for chan in chans:
            _close(chan)
            self._release(chan, self.expired)


def _close(chan):
    try:
        chan.close()
    except Exception:  # noqa: BLE001 -- a channel of a dead connection: nothing left to close
        pass


class EngineUnreadable(Exception):
    """The engine could not be asked; the message is what the node said, or what went wrong."""


class ChannelClient(docker.DockerClient):
    """A DockerClient over SSH channels that can say what the node's ``docker`` printed on stderr."""

    def channel_errors(self) -> str:
        return self.api.k3doctor_channels.errors()


class _ChannelConnection(urllib3.connection.HTTPConnection):
    def __init__(self, channels, timeout):
        super().__init__("localhost", timeout=timeout)
        self._channels = channels

    def connect(self):
        self.sock = self._channels.open(self.timeout)


class _ChannelPool(SSHConnectionPool):
    def __init__(self, channels, timeout, maxsize=4):
        super().__init__(ssh_client=None, timeout=timeout, maxsize=maxsize)
        self._channels = channels

    def _new_conn(self):
        return _ChannelConnection(self._channels, self.timeout)


class _ChannelAdapter(BaseHTTPAdapter):
    def __init__(self, channels, timeout):
        super().__init__()
        self._channels = channels
        self._pool = _ChannelPool(channels, timeout)

    def get_connection(self, url, proxies=None):
        return self._pool

    def close(self):
        super().close()
        self._pool.close()
        self._channels.stop()


def docker_over_ssh(open_channel, release, deadline, op_timeout_s: float = 30.0,
                    why_dial_stdio=lambda: None) -> docker.DockerClient:
    """A client whose every API channel comes from ``open_channel()`` (to the engine socket through sshd,
    or ``docker system dial-stdio`` under a node-side timeout), is closed at ``deadline`` at the latest and
    given back on close with ``release(channel, deadline_hit)``; one API call waits at most ``op_timeout_s``.
    ``why_dial_stdio()``: why the channels are dial-stdio ones (None if not, or not for a reason to tell)."""
    timeout = max(0.1, op_timeout_s)
    channels = _Channels(open_channel, release, deadline, why_dial_stdio)
    api = docker.APIClient(base_url="ssh://k3doctor", version=MIN_API_VERSION, timeout=timeout,
                           use_ssh_client=True)  # shell-out mode: builds no second SSH client
    adapter = _ChannelAdapter(channels, timeout)
    api.mount("http+docker://ssh", adapter)
    api.k3doctor_channels = channels
    client = ChannelClient.__new__(ChannelClient)
    client.api = api
    try:
        api._version = negotiate(api.version(api_version=False).get("ApiVersion", MIN_API_VERSION))
    except Exception as exc:
        api.close()
        raise EngineUnreadable(channels.errors() or str(exc).strip().splitlines()[0][:300]) from exc
    except BaseException:
        api.close()
        raise
    return client


class LocalEngineChannel:
    """This machine's engine socket, shaped like a channel: ``close()`` shuts it down first, so a thread
    blocked reading it returns (closing a socket alone does not wake its reader)."""

    def __init__(self, path: str):
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.connect(path)
        except OSError:
            self._sock.close()
            raise

    def __getattr__(self, name):
        return getattr(self._sock, name)

    def recv_stderr_ready(self) -> bool:  # nothing speaks on stderr here
        return False

    def makefile(self, *args, **kwargs):
        """The SDK finds a raw stream's socket (an archive, a log) at ``fp.channel`` on channel-based clients."""
        fp = self._sock.makefile(*args, **kwargs)
        fp.channel = self
        return fp

    def close(self):
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()


def local_engine_socket() -> str | None:
    """The unix socket of this machine's engine (DOCKER_HOST or the default), None for a TCP engine."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    return host[len("unix://"):] if host.startswith("unix://") else None


def negotiate(engine: str) -> str:
    """The newest API version both sides speak (Docker Engine 29+ refuses anything below 1.44)."""
    return engine if version_lt(engine, DEFAULT_DOCKER_API_VERSION) else DEFAULT_DOCKER_API_VERSION
