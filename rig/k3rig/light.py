"""Light nodes: many simulated nodes on one machine, for fan-out at 64..256+ nodes (bench/, 18-tray tests).

A light node is a real OpenSSH ``sshd`` on its own loopback address (``127.N.a.b:2222``) that sees the fake
hardware tree of a rig node (sysfs, amd-smi, rocm-smi, dmesg, /proc/meminfo: ``fixtures.write_tree``)
bind-mounted in a mount namespace, like the full rig's nodes, but has no Docker engine: Docker readings are
errors there. Nodes of the same tray share one namespace (and one tree), so 256 nodes cost 18 namespaces
and 256 sshd listeners; the start takes seconds. Each node's work runs in its own sshd sessions, so the
CPU a run costs the nodes is what the namespaces' processes (``pids()``) used and reaped.

``dead`` extra nodes answer no SSH: half refuse (nothing listens), half are blackholed (a listener whose
accept queue is full drops every SYN, as a powered-off node or a DROP rule does).
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil
import yaml

from . import scenario as scenarios
from .fixtures import BIND_PATHS, GPUS_PER_NODE, node_name, write_tree
from .lifecycle import Started
from .host import SBIN_PATH, _accepts, _kill, _mount_namespace, missing_requirements

SSH_PORT = 2222
RACK_TRAYS = tuple(range(1, 19))  # a full rack of this family: 18 trays (reference §4)
START_TIMEOUT_S = 120


class LightRack(Started):
    """``nodes`` light nodes (trays 1..18 over and over) plus ``dead`` unreachable ones; a context manager."""

    def __init__(self, workdir: Path, nodes: int = 64, dead: int = 0):
        if not 1 <= nodes <= 250 * 250:
            raise ValueError(f"1..62500 light nodes, not {nodes}")
        self.workdir = Path(workdir).resolve()
        self.count, self.dead_count = nodes, dead
        self.identity_file = self.workdir / "id_ed25519"
        self.known_hosts = self.workdir / "known_hosts"
        self.inventory_path = self.workdir / "inventory.yaml"
        self.hosts: list[tuple[str, str, int]] = []  # (name, address, tray) of the live nodes
        self.dead_hosts: list[tuple[str, str]] = []  # (name, address): refused, then blackholed
        self._leaders: list[subprocess.Popen] = []  # one per tray: the namespace's first process
        self._namespaces: set[str] = set()
        self._blackholes: list[socket.socket] = []  # listeners and the connections filling their queues
        self._restarted: list[subprocess.Popen] = []  # sshds started again by start_sshd

    def _check(self) -> None:
        """Refuse to start, before anything is made, where the rig cannot run."""
        missing = [m for m in missing_requirements() if "docker" not in m and "containerd" not in m
                   and "runc" not in m and "busybox" not in m]
        if missing:
            raise RuntimeError("light nodes need: " + "; ".join(missing))

    def _start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        total = self.count + self.dead_count
        net, held = self._reserve_net(total)
        addresses = [f"127.{net}.{1 + i // 250}.{1 + i % 250}" for i in range(total)]
        self.hosts = [(f"n{i + 1:03d}-{node_name(RACK_TRAYS[i % len(RACK_TRAYS)])}", addresses[i],
                       RACK_TRAYS[i % len(RACK_TRAYS)]) for i in range(self.count)]
        self.dead_hosts = [(f"dead{i + 1:03d}", addresses[self.count + i]) for i in range(self.dead_count)]
        self._write_ssh_files()
        trays = sorted({tray for _, _, tray in self.hosts})
        states = {s.tray: s for s in scenarios.node_states(scenarios.load("healthy"), RACK_TRAYS)}
        for tray in trays:
            tree = self.workdir / f"tray{tray}" / "tree"
            write_tree(tree, states[tray])
            (tree.parent / "tmp").mkdir(mode=0o1777)
            (tree.parent / "tmp").chmod(0o1777)
        for sock in held:  # hand the addresses over
            sock.close()
        for _, address in self.dead_hosts[self.dead_count // 2:]:
            self._blackholes += _blackhole(address, SSH_PORT)
        for tray in trays:
            self._spawn(tray, [(name, host) for name, host, t in self.hosts if t == tray])
        self._write_inventory()
        deadline = time.monotonic() + START_TIMEOUT_S
        for leader in self._leaders:
            self._namespaces.add(_wait_namespace(leader, deadline))
        for name, host, _ in self.hosts:
            while not _accepts(host, SSH_PORT):
                if time.monotonic() > deadline or any(p.poll() is not None or _exited_child(p.pid)
                                                      for p in self._leaders):
                    raise RuntimeError(f"light node {name} ({host}) did not start: see {self.workdir}/*/sshd-*.log")
                time.sleep(0.05)

    def stop(self) -> None:
        """Stop every sshd and session of the light nodes, close the blackholes, remove the workdir."""
        for leader in self._leaders:
            if leader.poll() is None:
                leader.send_signal(signal.SIGSTOP)  # keeps the namespace id unique while its members die
        if self._namespaces:
            _kill(lambda p: p.pid not in {q.pid for q in self._leaders}
                  and _mount_namespace(p.pid) in self._namespaces)
        for leader in self._leaders:
            if leader.poll() is None:
                leader.kill()
            leader.wait()
        for sshd in self._restarted:
            if sshd.poll() is None:
                sshd.kill()
            sshd.wait()
        self._leaders.clear()
        self._restarted.clear()
        self._namespaces.clear()
        for sock in self._blackholes:
            sock.close()
        self._blackholes.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def namespace_pid(self, name: str) -> int:
        """A process in the mount namespace of node ``name`` (its tray's: shared with the tray's other nodes), for
        ``nsenter -t PID -m``: what is mounted there is what that tray's sessions see."""
        tray = next(t for n, _, t in self.hosts if n == name)
        return self._leaders[sorted({t for _, _, t in self.hosts}).index(tray)].pid

    def stop_sshd(self, name: str) -> None:
        """Stop node ``name``'s sshd, as an admin would: its address then refuses connections."""
        config, listeners = f"sshd-{name}.conf", set(self.listener_pids())
        _kill(lambda p: p.pid in listeners and any(arg.endswith(config) for arg in p.cmdline()))

    def start_sshd(self, name: str) -> None:
        """Start node ``name``'s sshd again (after ``stop_sshd`` or ``live_faults.cut_sshd``): the node coming
        back, with the same address, host key and tree (its tray's namespace, entered with ``nsenter``)."""
        host, tray = next((h, t) for n, h, t in self.hosts if n == name)
        tray_dir = self.workdir / f"tray{tray}"
        sshd = shutil.which("sshd", path=SBIN_PATH)
        self._restarted.append(subprocess.Popen(
            ["nsenter", "-t", str(self.namespace_pid(name)), "-m", "--", sshd, "-D", "-E",
             str(tray_dir / f"sshd-{name}.log"), "-f", str(tray_dir / f"sshd-{name}.conf")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _accepts(host, SSH_PORT):
            if time.monotonic() > deadline or self._restarted[-1].poll() is not None:
                raise RuntimeError(f"light node {name} ({host}): sshd did not start again: "
                                   f"see {tray_dir}/sshd-{name}.log")
            time.sleep(0.05)

    def listener_pids(self) -> list[int]:
        """The nodes' sshd listeners: the namespaces' first children, and those started again."""
        return [pid for leader in self._leaders for pid in _children(leader.pid)] + [
            sshd.pid for sshd in self._restarted if sshd.poll() is None]

    def pids(self) -> list[int]:
        """Every process of the light nodes now: the namespaces' members (sshds, sessions, what they run)."""
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and _mount_namespace(int(entry)) in self._namespaces:
                found.append(int(entry))
        return found

    # ------------------------------------------------------------------------------------------ internals

    def _reserve_net(self, total: int) -> tuple[int, list[socket.socket]]:
        """The first ``127.N`` whose node addresses are all free, held (bound, not listening) until the sshds
        take them, so light racks starting at the same time pick different nets."""
        for net in range(200, 255):
            held: list[socket.socket] = []
            try:
                for i in range(total):
                    held.append(socket.socket())
                    held[-1].bind((f"127.{net}.{1 + i // 250}.{1 + i % 250}", SSH_PORT))
                return net, held
            except OSError:
                for sock in held:
                    sock.close()
        raise RuntimeError("no free 127.N net for light nodes")

    def _write_ssh_files(self) -> None:
        for key in (self.identity_file, self.workdir / "host_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "k3light", "-f", key],
                           check=True, capture_output=True)
        (self.workdir / "authorized_keys").write_text(self.identity_file.with_suffix(".pub").read_text())
        kind, key = (self.workdir / "host_key.pub").read_text().split()[:2]
        hosts = [h for _, h, _ in self.hosts] + [h for _, h in self.dead_hosts]
        self.known_hosts.write_text("".join(f"[{host}]:{SSH_PORT} {kind} {key}\n" for host in hosts))

    def _sshd_config(self, tray_dir: Path, name: str, host: str) -> Path:
        path = tray_dir / f"sshd-{name}.conf"
        path.write_text(
            f"ListenAddress {host}:{SSH_PORT}\nHostKey {self.workdir / 'host_key'}\nPidFile none\n"
            f"AuthorizedKeysFile {self.workdir / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nUseDNS no\n"
            "PrintMotd no\nPrintLastLog no\nMaxStartups 1000\nMaxSessions 100\n"
            f"SetEnv TMPDIR={tray_dir / 'tmp'}\n")
        return path

    def _spawn(self, tray: int, nodes: list[tuple[str, str]]) -> None:
        """One mount namespace for a tray's nodes: its tree over the node paths, a fresh /dev (with the GPU
        device nodes) and /run, then one sshd per node."""
        tray_dir = self.workdir / f"tray{tray}"
        tree = tray_dir / "tree"
        lines = ["set -e"]
        lines += [shlex.join(["mount", "--bind", str(tree / rel), f"/{rel}"]) for rel in BIND_PATHS]
        lines += ["mount -t tmpfs -o mode=0755,size=65536k k3light-dev /dev",
                  "mknod -m 0666 /dev/null c 1 3; mknod -m 0666 /dev/zero c 1 5; mknod -m 0666 /dev/urandom c 1 9",
                  "mkdir -m 0755 /dev/shm /dev/dri /dev/pts; mknod -m 0666 /dev/kfd c 510 0",
                  "mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts /dev/pts; ln -s pts/ptmx /dev/ptmx",
                  "mount -t tmpfs -o mode=1777,size=1g k3light-shm /dev/shm",
                  "mount -t tmpfs -o mode=0755 k3light-run /run; mkdir -m 0755 /run/sshd"]
        lines += [f"mknod -m 0666 /dev/dri/card{c} c 226 {c}" for c in range(GPUS_PER_NODE)]
        sshd = shutil.which("sshd", path=SBIN_PATH)
        for name, host in nodes:
            config = self._sshd_config(tray_dir, name, host)
            lines.append(shlex.join([sshd, "-D", "-E", str(tray_dir / f"sshd-{name}.log"), "-f", str(config)]) + " &")
        lines.append("exec sleep infinity")  # the namespace outlives a node's stopped sshd: start_sshd enters it
        with open(tray_dir / "namespace.log", "wb") as log:
            self._leaders.append(subprocess.Popen(
                ["unshare", "-m", "--propagation", "private", "--", "/bin/sh", "-c", "\n".join(lines)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def _write_inventory(self) -> None:
        inventory = {
            "cluster": {"name": "light", "container": "k3ep16", "stepping": "B0", "hbm_gib_per_gpu": 432,
                        "gpus_per_node": GPUS_PER_NODE,
                        "tools": {"amd_smi": "/opt/rocm/bin/amd-smi", "rocm_smi": "/opt/rocm/bin/rocm-smi"}},
            "ssh": {"known_hosts": str(self.known_hosts), "connect_timeout_s": 10, "command_timeout_s": 30},
            "defaults": {"user": "root", "port": SSH_PORT, "identity_file": str(self.identity_file)},
            "nodes": [{"name": n, "host": h} for n, h, _ in self.hosts] + [{"name": n, "host": h}
                                                                           for n, h in self.dead_hosts],
        }
        self.inventory_path.write_text(yaml.safe_dump(inventory, sort_keys=False))


def _blackhole(host: str, port: int) -> list[socket.socket]:
    """A listener on host:port whose one accept-queue slot is taken: the kernel drops further SYNs."""
    server = socket.socket()
    server.bind((host, port))
    server.listen(0)
    return [server, socket.create_connection((host, port), timeout=5)]


def _wait_namespace(leader: subprocess.Popen, deadline: float) -> str:
    """The namespace of a tray's leader once its mounts are done (its first sshd runs)."""
    while not _children(leader.pid):
        if leader.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"light-node namespace {leader.args} failed (exit {leader.poll()})")
        time.sleep(0.05)
    return _mount_namespace(leader.pid)


def _exited_child(pid: int) -> bool:
    """A leader's sshd that exited (a zombie: the leader, once it is ``sleep``, reaps none): a node that did not
    start. Before that the leader is the shell, whose mounts are its children for a moment too."""
    try:
        leader = psutil.Process(pid)
        return leader.name() == "sleep" and any(c.status() == psutil.STATUS_ZOMBIE for c in leader.children())
    except psutil.Error:
        return False


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(p) for p in fh.read().split()]
    except OSError:
        return []

