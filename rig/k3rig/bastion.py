"""Bastion sshds for the rig: one node reachable only through a ProxyJump chain.

Each bastion is a real OpenSSH ``sshd`` with its own host key and its own known_hosts file, in a network
namespace of its own; veth pairs link this machine -> bastion 1 -> ... -> bastion N -> the node. The node
is served by one more sshd, started in the node's own mount and UTS namespaces (same tree, same Docker
engine, same hostname as the rig's sshd) but in a network namespace behind the last bastion. Each namespace
knows only its two links and forwards nothing, so the node's address there is reachable from bastion N
only, bastion N from bastion N-1 only, and so on; this machine reaches bastion 1 and nothing behind it.
(The node's usual rig address stays up: the chain is the only route to the *behind* address.)

Every namespace belongs to a holder process started here; ``stop()`` kills the processes in them, and the
namespaces, veths and addresses go with the holders.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

from .lifecycle import Started
from .host import SBIN_PATH, START_TIMEOUT_S, _kill
from .rack import RigNode

NET_PREFIX = "10.250"  # links are /30s of 10.250.N.0/24, N the first /24 this machine does not use
SSHD_PORT = 22


@dataclasses.dataclass
class Hop:
    """One sshd of the chain: where it listens (from the hop before it) and how it is known."""

    name: str
    host: str
    port: int
    dir: Path
    public_key: str = ""  # "ssh-ed25519 AAAA..."

    @property
    def known_hosts(self) -> Path:
        """Its own known_hosts file: its key under ``[host]:port`` (or ``host`` on port 22)."""
        return self.dir / "known_hosts"

    def known_hosts_line(self, name: str | None = None) -> str:
        where = name or (self.host if self.port == 22 else f"[{self.host}]:{self.port}")
        return f"{where} {self.public_key}\n"


class BastionChain(Started):
    """``hops`` bastions in front of ``node``; ``behind`` is the node's sshd behind them.

    ``authorized_keys``: public keys (text) every sshd of the chain accepts for root."""

    def __init__(self, workdir: Path, node: RigNode, authorized_keys: str, hops: int = 2):
        if not 1 <= hops <= 8:
            raise ValueError(f"a chain of 1..8 bastions, not {hops}")
        self.workdir, self.node, self.authorized_keys = Path(workdir).resolve(), node, authorized_keys
        self.bastions = [Hop(f"bastion{i}", "", SSHD_PORT, self.workdir / f"bastion{i}") for i in range(1, hops + 1)]
        self.behind = Hop(f"{node.name}-behind", "", node.port, self.workdir / f"{node.name}-behind")
        self._holders: list[subprocess.Popen] = []  # one per namespace, bastions first, the node's last
        self._sshds: list[subprocess.Popen] = []
        self._net = ""

    def _check(self) -> None:
        """Refuse to start, before anything is made, where the rig cannot run."""
        if self._holders:
            raise RuntimeError("bastion chain already started")

    def _start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._net = _free_net()
        hops = [*self.bastions, self.behind]
        for number, hop in enumerate(hops):
            hop.dir.mkdir()
            hop.host = f"{self._net}.{4 * number + 2}"
            key = hop.dir / "host_key"
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", hop.name, "-f", key)
            hop.public_key = " ".join(key.with_suffix(".pub").read_text().split()[:2])
            hop.known_hosts.write_text(hop.known_hosts_line())
            (hop.dir / "authorized_keys").write_text(self.authorized_keys)
            self._holders.append(_holder(mount=hop is not self.behind))
        for number, holder in enumerate(self._holders):  # link `number` ends in this namespace
            left = self._holders[number - 1].pid if number else None
            _link(f"k3b{self._net.split('.')[2]}l{number}", left, holder.pid, self._net, number)
        for hop, holder in zip(self.bastions, self._holders, strict=False):
            self._sshds.append(self._sshd(hop, self._config(hop, ""), holder.pid, holder.pid))
        node_config = (self.node.dir / "sshd_config").read_text()  # the rig's node settings (TMPDIR, ...)
        node_config = re.sub(r"^(ListenAddress|HostKey|PidFile|AuthorizedKeysFile) .*\n", "", node_config, flags=re.M)
        self._sshds.append(self._sshd(self.behind, self._config(self.behind, node_config), self._holders[-1].pid,
                                      self.node.ns_pid, uts=True))
        for hop, sshd in zip(hops, self._sshds, strict=True):
            self._wait(hop, sshd)

    def _config(self, hop: Hop, base: str) -> Path:
        path = hop.dir / "sshd_config"
        path.write_text(
            f"ListenAddress {hop.host}:{hop.port}\nHostKey {hop.dir / 'host_key'}\nPidFile {hop.dir / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {hop.dir / 'authorized_keys'}\n" + (base or (
                "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                "UsePAM no\nStrictModes no\nUseDNS no\nAllowTcpForwarding yes\n")))
        return path

    @staticmethod
    def _sshd(hop: Hop, config: Path, net_pid: int, mount_pid: int, uts: bool = False) -> subprocess.Popen:
        """sshd in the network namespace of ``net_pid`` and the mount (and UTS) namespace of ``mount_pid``."""
        namespaces = [f"--net=/proc/{net_pid}/ns/net", f"--mount=/proc/{mount_pid}/ns/mnt"]
        namespaces += [f"--uts=/proc/{mount_pid}/ns/uts"] if uts else []
        sshd = shutil.which("sshd", path=SBIN_PATH)
        with open(hop.dir / "sshd.log", "wb") as log:
            return subprocess.Popen(["nsenter", *namespaces, "--", sshd, "-D", "-e", "-f", str(config)],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)

    @staticmethod
    def _wait(hop: Hop, sshd: subprocess.Popen) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (hop.dir / "sshd.pid").exists():
            if sshd.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{hop.name}: sshd did not start: {(hop.dir / 'sshd.log').read_text()[-2000:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Kill every process in the chain's network namespaces (sshds, their sessions), then the holders."""
        namespaces = {_netns(h.pid) for h in self._holders if h.poll() is None} - {None}
        holders = {h.pid for h in self._holders}
        _kill(lambda p: p.pid not in holders and _netns(p.pid) in namespaces)
        for proc in [*self._sshds, *self._holders]:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        self._sshds.clear()
        self._holders.clear()


def ssh_answers(host: str, port: int, timeout_s: float = 3.0) -> bool:
    """Whether an SSH server answers this machine at host:port (its ``SSH-2.0`` banner): the test's
    "no other route". A TCP connect alone proves nothing where a gateway accepts any address."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            return sock.recv(64).startswith(b"SSH-")
    except OSError:
        return False


def _free_net() -> str:
    """The first 10.250.N this machine has no address in (another rack's chain holds its own)."""
    listing = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True, check=True).stdout
    used = {ipaddress.ip_interface(line.split()[3]).network for line in listing.splitlines()}
    for third in range(256):
        net = ipaddress.ip_network(f"{NET_PREFIX}.{third}.0/24")
        if not any(net.overlaps(u) for u in used):
            return f"{NET_PREFIX}.{third}"
    raise RuntimeError(f"no free {NET_PREFIX}.N.0/24 for the bastion links")


def _holder(mount: bool) -> subprocess.Popen:
    """A process that holds a new network namespace (and for a bastion a mount namespace with the /run
    sshd needs); loopback up."""
    setup = "ip link set lo up && "
    if mount:
        setup += "mount -t tmpfs -o mode=0755 k3rig-bastion-run /run && mkdir -m 0755 /run/sshd && "
    proc = subprocess.Popen(["unshare", "-n", *(["-m", "--propagation", "private"] if mount else []), "--",
                             "/bin/sh", "-c", setup + "echo ready && exec sleep infinity"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, text=True)
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        raise RuntimeError(f"bastion namespace setup failed: {line}{proc.stdout.read()[-500:]}")
    return proc


def _link(name: str, left_pid: int | None, right_pid: int, net: str, number: int) -> None:
    """veth ``number``: .4n+1/30 on the left (this machine for link 0), .4n+2/30 in the right namespace."""
    left = ["nsenter", f"--net=/proc/{left_pid}/ns/net", "--"] if left_pid else []
    right = ["nsenter", f"--net=/proc/{right_pid}/ns/net", "--"]
    _run(*left, "ip", "link", "add", name, "type", "veth", "peer", "name", f"{name}r", "netns", str(right_pid))
    _run(*left, "ip", "addr", "add", f"{net}.{4 * number + 1}/30", "dev", name)
    _run(*left, "ip", "link", "set", name, "up")
    _run(*right, "ip", "addr", "add", f"{net}.{4 * number + 2}/30", "dev", f"{name}r")
    _run(*right, "ip", "link", "set", f"{name}r", "up")


def _netns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def _run(*argv) -> None:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))}: {proc.stderr.strip()[-500:]}")
