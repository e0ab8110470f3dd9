"""A run's connections to its nodes: how each is made (``make_transport``) and opening them ahead of the run.

``k3doctor check`` opens its nodes' SSH connections first thing (``Ahead``), before it loads the checks,
probes and renderers: the TCP connects and handshakes (the nodes' sshd work, the network's round trips) are
under way while this side imports the rest. The run then takes each node's connection as it is, or the
failure it met, instead of opening its own; what it does not take is closed. This module imports only what
opening a connection needs (the inventory, the transports), so that it can start before anything else.
"""
from __future__ import annotations

import os
import threading
from collections import deque

from k3doctor.deadline import seconds
from k3doctor.inventory.load import Inventory, Node
from k3doctor.transport.base import Transport
from k3doctor.transport.ssh import SSHTransport
from k3doctor.transport.targets import resolve_ssh_target


def make_transport(node: Node, inv: Inventory, opts) -> Transport:
    """The node's transport, not yet connected; ``opts``: a RunOptions (its accept_unknown_hosts and
    connect_timeout_s)."""
    if node.transport == "local":
        from k3doctor.transport.local import LocalTransport

        return LocalTransport(node.name, sudo=node.sudo)
    password = os.environ.get(node.password_env) if node.password_env else None
    target = resolve_ssh_target(
        node.name, node.host, port=node.port, user=node.user, identity_file=node.identity_file,
        password=password, known_hosts=inv.ssh.known_hosts,
        accept_unknown_hosts=opts.accept_unknown_hosts or inv.ssh.accept_unknown_hosts,
        connect_timeout_s=seconds(opts.connect_timeout_s or inv.ssh.connect_timeout_s, 10.0),
        ssh_config_path=inv.ssh.ssh_config)
    return SSHTransport(target, sudo=node.sudo, docker_socket=inv.ssh.docker_socket)


class Logins:
    """What opening the connections depends on besides the inventory (RunOptions' part of it)."""

    def __init__(self, accept_unknown_hosts: bool = False, connect_timeout_s: float | None = None):
        self.accept_unknown_hosts, self.connect_timeout_s = accept_unknown_hosts, connect_timeout_s


class Ahead:
    """Every SSH node of ``inv`` connecting now, ``parallel`` at a time, in inventory order, on daemon
    threads (a run that ends early never waits for them). ``key``: what they were opened for; the run uses
    them only when its own inventory and options come to the same (``matches``)."""

    def __init__(self, inv: Inventory, logins: Logins, parallel: int, key: tuple):
        self.inv, self.key, self._logins = inv, key, logins
        self._lock = threading.Lock()
        self._closed = False
        self._transports, self._failed, self._taken = {}, {}, set()
        self._done = {node.name: threading.Event() for node in inv.nodes if node.transport == "ssh"}
        self._queue = deque(node for node in inv.nodes if node.transport == "ssh")
        for number in range(max(1, min(parallel, len(self._queue)))):
            threading.Thread(target=self._connect_next, name=f"k3doctor-connect-{number}", daemon=True).start()

    def _connect_next(self) -> None:
        while True:
            try:
                node = self._queue.popleft()
            except IndexError:
                return
            transport = None
            try:
                transport = self._transports[node.name] = make_transport(node, self.inv, self._logins)
                transport.connect()
            except Exception as exc:  # TransportError, or a bug: the run reads it as that node's failure
                self._failed[node.name] = exc
            with self._lock:
                if self._closed and node.name not in self._taken and transport is not None:
                    transport.close()
            self._done[node.name].set()

    def matches(self, inv: Inventory, key: tuple) -> bool:
        """Whether these connections are the ones the run would open: the same inventory text, options and
        logins (an inventory file replaced between the two reads, or options read otherwise, do not match)."""
        return (key == self.key and inv.text == self.inv.text and inv.ssh == self.inv.ssh
                and [_login(n) for n in inv.nodes] == [_login(n) for n in self.inv.nodes])

    def opened(self, name: str) -> bool:
        """Whether the node's connection is opened here (a local node's is not)."""
        return name in self._done

    def take(self, name: str) -> Transport:
        """The node's connected transport, now the run's, once its connect ended (each ends by its connect
        timeout); the failure it met is raised (the transport, if made, is the run's to close)."""
        self._done[name].wait()
        with self._lock:
            self._taken.add(name)
            transport = self._transports.get(name)
        if name in self._failed:
            if transport is not None:
                transport.close()
            raise self._failed[name]
        return transport

    def close(self) -> None:
        """Close every connection the run did not take (one still connecting is closed when it is done)."""
        with self._lock:
            self._closed = True
            left = [t for name, t in self._transports.items() if name not in self._taken and self._done[name].is_set()]
        for transport in left:
            transport.close()


def _login(node: Node) -> tuple:
    return (node.name, node.host, node.port, node.user, node.identity_file, node.password_env, node.sudo,
            node.transport)


def connect_ahead(spec: str | None, ansible_inventory: str | None, *, parallel: int, key: tuple,
                  logins: Logins) -> Ahead | None:
    """Start connecting to the nodes ``--nodes`` / ``--ansible-inventory`` name, or None where that is not
    for now: no SSH node, an inventory that does not load as it is (the run then says why, exit 3), or a
    ``password_env`` not set (the same). Check parameters are not validated here (the checks are not loaded
    yet): the run validates them, and closes these connections if the inventory is refused."""
    if spec is None or ansible_inventory or "@" in spec or os.path.isdir(os.path.expanduser(spec)):
        return None  # this machine; an Ansible inventory is read once (ansible-inventory takes a while)
    from k3doctor.inventory.load import load_inventory, load_nodes, unset_password_variables

    path = os.path.expanduser(spec)
    try:  # a k3doctor inventory file (an Ansible one does not load as one), or a node set
        inv = load_inventory(spec, None, fast=True) if os.path.isfile(path) else load_nodes(spec, None, None)
    except Exception:  # noqa: BLE001 -- whatever it is, the run's own read of it reports it
        return None
    if unset_password_variables(inv) or not any(n.transport == "ssh" for n in inv.nodes):
        return None
    return Ahead(inv, logins, parallel, key)
