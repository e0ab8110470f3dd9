"""A Docker SDK client that rides on k3doctor's existing SSH connection.

docker-py's own ``ssh://`` support opens a second, separately configured SSH login per
node; this adapter instead opens an exec channel running ``docker system dial-stdio`` on
the connection the transport already verified, so host-key policy and the one-connection-
per-node rule hold for Docker traffic too.
"""
from __future__ import annotations

import docker
import urllib3
from docker.constants import DEFAULT_DOCKER_API_VERSION
from docker.transport.basehttpadapter import BaseHTTPAdapter
from docker.transport.sshconn import SSHConnectionPool
from docker.utils import version_lt

MIN_API_VERSION = "1.41"  # Docker 20.10; only used to ask the engine which version it speaks


class _ChannelConnection(urllib3.connection.HTTPConnection):
    def __init__(self, open_channel, command, timeout):
        super().__init__("localhost", timeout=timeout)
        self._open_channel, self._command = open_channel, command

    def connect(self):
        chan = self._open_channel()
        chan.settimeout(self.timeout)
        chan.exec_command(self._command)
        self.sock = chan


class _ChannelPool(SSHConnectionPool):
    def __init__(self, open_channel, command, timeout, maxsize=4):
        super().__init__(ssh_client=None, timeout=timeout, maxsize=maxsize)
        self._open_channel, self._command = open_channel, command

    def _new_conn(self):
        return _ChannelConnection(self._open_channel, self._command, self.timeout)


class _ChannelAdapter(BaseHTTPAdapter):
    def __init__(self, open_channel, command, timeout):
        super().__init__()
        self._pool = _ChannelPool(open_channel, command, timeout)

    def get_connection(self, url, proxies=None):
        return self._pool

    def close(self):
        super().close()
        self._pool.close()


def docker_over_ssh(open_channel, command: str, timeout: int = 30) -> docker.DockerClient:
    api = docker.APIClient(base_url="ssh://k3doctor", version=MIN_API_VERSION, timeout=timeout,
                           use_ssh_client=True)  # shell-out mode: builds no second SSH client
    api.mount("http+docker://ssh", _ChannelAdapter(open_channel, command, timeout))
    api._version = negotiate(api.version(api_version=False).get("ApiVersion", MIN_API_VERSION))
    client = docker.DockerClient.__new__(docker.DockerClient)
    client.api = api
    return client


def negotiate(engine: str) -> str:
    """The newest API version both sides speak (Docker Engine 29+ refuses anything below 1.44)."""
    return engine if version_lt(engine, DEFAULT_DOCKER_API_VERSION) else DEFAULT_DOCKER_API_VERSION
