"""The simulated rack: real sshd + dockerd per node, fake hardware from per-node fixture trees.

Each node is an OpenSSH ``sshd`` running in its own mount namespace (``unshare -m``) on its own
loopback address, port 2222.  Inside that namespace the node's tree is bind-mounted over
``/sys/class``, ``/sys/module``, ``/proc/sys/kernel/random/boot_id``, ``/opt``, ``/root`` and
``/usr/bin/dmesg``; ``/dev`` and ``/run`` are fresh tmpfs, ``/dev/shm`` a 128 GiB tmpfs, and the
node's own ``dockerd`` socket is bind-mounted at ``/run/docker.sock``.  Nothing is mounted in the
host's namespace: when a node's processes die, its mounts are gone.

Here: the namespaces, sshd, scenarios and the inventory. Each node's dockerd and our container on it are
``engine.NodeEngines`` (a part of ``Rig``); what the rig needs of the host (binaries, processes, ports) is
``host``; what a node's tree, fake tools and container hold is ``fixtures``, ``tools`` and ``container``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
import psutil
import yaml

from . import mi355x
from . import scenario as scenarios
from .container import LAUNCH_SCRIPT, launch_script
from .engine import CONTAINER, IMAGE, NodeEngines
from .fixtures import DEFAULT_TRAYS, GPUS_PER_NODE, NodeState, clear_tree, node_name, write_tree
from .host import SBIN_PATH, START_TIMEOUT_S, _kill, _listens, _mount_namespace, missing_requirements
from .lifecycle import Started

SSH_PORT = 2222
UNREACHABLE_SUFFIX = 15  # <net>.15 is in known_hosts with nothing listening: for connection-failure tests
# Host paths the namespace hides or replaces: a workdir below them would be invisible to the node.
SHADOWED = ("/sys", "/proc", "/dev", "/run", "/var/run", "/opt", "/root", "/mnt", "/usr/bin/dmesg")


@dataclasses.dataclass
class RigNode:
    index: int  # 1-based
    name: str
    host: str
    port: int
    dir: Path  # the node's part of the rig workdir
    state: NodeState
    ns_pid: int | None = None  # sshd, the first process of the node's mount namespace
    server_pid: int | None = None  # MI355X: the AgentX server process in our container (host PID)

    @property
    def tree(self) -> Path:
        return self.dir / "tree"

    @property
    def tmp(self) -> Path:
        """The node's own $TMPDIR (sshd sets it for every session), so tests can see what was left there."""
        return self.dir / "tmp"

    @property
    def docker_socket(self) -> Path:
        return self.dir / "docker.sock"

    @property
    def root(self) -> Path:
        """The node's ``/`` as the host sees it (for its /dev and /dev/shm, which are not in the tree)."""
        return Path(f"/proc/{self.ns_pid}/root")


class Rig(NodeEngines, Started):
    """A simulated 4 x 4-GPU rack.  See the module docstring; use as a context manager or start()/stop()."""

    def __init__(self, workdir: Path, nodes: int = 4, scenario: str | Path = "healthy",
                 sshd_options: dict[str, tuple[str, ...]] | None = None, platform: str = "gfx1250"):
        if not 1 <= nodes <= len(DEFAULT_TRAYS):
            raise ValueError(f"the rig simulates 1..{len(DEFAULT_TRAYS)} nodes, not {nodes}")
        self.workdir = Path(workdir).resolve()
        self.trays = DEFAULT_TRAYS[:nodes]
        self.scenario = scenario
        self.platform = platform  # the node kind: gfx1250 trays, or MI355X AgentX nodes (mi355x.py)
        # node name -> extra sshd_config lines for it, e.g. {"ct14": ("AllowStreamLocalForwarding no",)}
        self.sshd_options = dict(sshd_options or {})
        self.unreachable_host = ""  # 127.0.N.15, N chosen by start()
        self.identity_file = self.workdir / "id_ed25519"
        self.known_hosts = self.workdir / "known_hosts"
        self.inventory_path = self.workdir / "inventory.yaml"
        self.nodes = [
            RigNode(
                index=i,
                name=node_name(tray),
                host="",  # 127.0.N.1x, N chosen by start()
                port=SSH_PORT,
                dir=self.workdir / node_name(tray),
                state=NodeState(tray=tray, rack_trays=self.trays, platform=platform),
            )
            for i, tray in enumerate(self.trays, start=1)
        ]
        self._sshds: dict[str, subprocess.Popen] = {}  # node name -> sshd, the namespace's first process
        self._dockerds: list[subprocess.Popen] = []
        self._namespaces: dict[str, str] = {}  # node name -> /proc/PID/ns/mnt link text, while sshd lives
        # containerd namespaces must not collide with another rig's when a host containerd is shared
        self._tag = "k3rig-" + hashlib.sha256(str(self.workdir).encode()).hexdigest()[:8]
        self._clients: dict[str, docker.DockerClient] = {}

    # ------------------------------------------------------------------------------------------- lifecycle

    def _check(self) -> None:
        """Refuse to start, before anything is made, where the rig cannot run."""
        missing = missing_requirements()
        if missing:
            raise RuntimeError("the simulated rack needs: " + "; ".join(missing))
        for shadowed in SHADOWED:
            if self.workdir == Path(shadowed) or Path(shadowed) in self.workdir.parents:
                raise ValueError(f"workdir {self.workdir} is under {shadowed}, which the nodes' namespaces replace")
        if len(str(self.nodes[0].docker_socket)) > 100:
            raise ValueError(f"workdir {self.workdir} is too long for unix socket paths below it")
        if self._sshds or self._dockerds:
            raise RuntimeError("rig already started")

    def _start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        states = scenarios.node_states(scenarios.load(self.scenario), self.trays, self.platform)
        for node, state in zip(self.nodes, states, strict=True):
            node.dir.mkdir()
            write_tree(node.tree, state)
            node.state = state
        held = self._reserve_loopback_net()
        try:
            self._write_ssh_files()
            self._write_inventory()
            image_tar = self._write_image_tar()
            dockerds = [self._spawn_dockerd(node) for node in self.nodes]
            self._each(lambda node: self._wait_dockerd(node, dockerds[node.index - 1]))
        finally:
            for sock in held:  # hand the addresses over to sshd
                sock.close()
        # The namespaces are created before any container exists, so no container mount leaks into them.
        sshds = [self._spawn_sshd(node) for node in self.nodes]
        self._each(lambda node: self._clients[node.name].api.import_image_from_file(
            str(image_tar), repository=IMAGE.split(":")[0], tag=IMAGE.split(":")[1]))
        self._each(lambda node: self._wait_sshd(node, sshds[node.index - 1]))
        self._each(self._sync_live)

    def apply(self, scenario: str | Path) -> None:
        """Reset every node to healthy, then apply ``scenario``; live, sshd and dockerd keep running."""
        states = scenarios.node_states(scenarios.load(scenario), self.trays, self.platform)
        self.scenario = scenario

        def apply_node(node: RigNode) -> None:
            node.state = states[node.index - 1]
            clear_tree(node.tree)
            write_tree(node.tree, node.state)
            self._sync_live(node)

        self._each(apply_node)

    def stop(self) -> None:
        """Stop everything the rig started and remove the workdir; safe to call more than once."""
        self._each(self._remove_containers_quietly)
        for client in self._clients.values():
            client.close()
        self._clients.clear()
        for name, sshd in self._sshds.items():
            self._stop_namespace(name, sshd)
        self._sshds.clear()
        for proc in self._dockerds:
            if proc.poll() is None:
                proc.terminate()
        for proc in self._dockerds:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._dockerds.clear()
        # containerd / shims (and what runs under them) -- never this process's ancestors (e.g. a shell
        # running the CLI with --workdir).
        ancestors = {p.pid for p in psutil.Process().parents()}
        _kill(lambda p: p.pid not in ancestors and self._owns(p))
        for node in self.nodes:
            node.ns_pid = None
        if self.workdir.exists():
            self._unmount_leftovers()
            shutil.rmtree(self.workdir)

    # ---------------------------------------------------------------------------------------------- helpers

    def hang_inventory(self, text: str) -> Path:
        """A copy of the inventory in which one all_reduce rank stops at a stage (``NODE[:LOCAL]@STAGE[@once]``,
        k3rig.hang): that node's python, on the host and in its container, is the drill's wrapper. Each call
        is a fresh drill (a once-only hang fires again)."""
        from . import hang  # its command line (python3 -m k3rig.hang) must not find it imported already

        token = os.urandom(4).hex()
        drill, inventory = hang.host_inventory(yaml.safe_load(self.inventory_path.read_text()), text,
                                               self.workdir / f"hang-{token}")
        inside = f"/k3rig-hang-{token}"  # the container's own filesystem (its /tmp is a tmpfs docker cp misses)
        container = self._clients[drill.node].containers.get(CONTAINER)
        if not container.put_archive("/", hang.tar(drill, inside)):
            raise RuntimeError(f"{drill.node}: docker refused the hang drill's files")
        entry = next(e for e in inventory["nodes"] if e["name"] == drill.node)
        entry["tools"]["container_python"] = f"{inside}/python"
        path = self.workdir / f"inventory-hang-{token}.yaml"
        path.write_text(yaml.safe_dump(inventory, sort_keys=False))
        return path

    def pids_matching(self, text: str) -> list[int]:
        """PIDs of this rig's processes whose command line contains ``text``.

        The rig's processes are those in a node's mount namespace (sshd, everything run over SSH)
        and those naming the rig's workdir (dockerd, containerd, shims) -- what stop() kills.
        Other racks on the same host (another rig, a ``k3doctor demo``) are not counted.
        """
        found = []
        for proc in psutil.process_iter(["pid", "cmdline"]):
            try:
                if text in " ".join(proc.info["cmdline"] or ()) and self._owns(proc):
                    found.append(proc.info["pid"])
            except psutil.Error:
                continue
        return found

    def _stop_namespace(self, name: str, sshd: subprocess.Popen) -> None:
        """Kill a node's sessions (incl. hung fakes), then its sshd.

        A namespace id is only unique while the namespace lives -- the kernel reuses it for the next
        one (runc and docker-untar make many).  A stopped sshd keeps the namespace alive and accepts
        nothing while its other members are killed; it goes last.
        """
        namespace = self._namespaces.pop(name, None)
        if sshd.poll() is None:
            sshd.send_signal(signal.SIGSTOP)
            if namespace:
                _kill(lambda p: p.pid != sshd.pid and _mount_namespace(p.pid) == namespace)
            sshd.kill()
        sshd.wait()

    def _owns(self, proc: psutil.Process) -> bool:
        if proc.pid == os.getpid():
            return False
        if _mount_namespace(proc.pid) in self._namespaces.values():
            return True
        return any(arg.startswith(f"{self.workdir}/") or f"{self.workdir}/" in arg for arg in proc.cmdline())

    def _each(self, fn: Callable[[RigNode], object]) -> None:
        with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
            for future in [pool.submit(fn, node) for node in self.nodes]:
                future.result()

    def _run(self, *argv: str | Path) -> None:
        subprocess.run([str(a) for a in argv], check=True, capture_output=True)

    # -------------------------------------------------------------------------------------------------- ssh

    def _reserve_loopback_net(self) -> list[socket.socket]:
        """Pick the first ``127.0.N`` whose node addresses are free and hold them (bound, not listening)
        until sshd takes them, so racks starting at the same time on one host pick different nets."""
        for octet in range(256):
            held: list[socket.socket] = []
            try:
                for node in self.nodes:
                    held.append(socket.socket())
                    held[-1].bind((f"127.0.{octet}.{10 + node.index}", SSH_PORT))
            except OSError:
                for sock in held:
                    sock.close()
                continue
            for node in self.nodes:
                node.host = f"127.0.{octet}.{10 + node.index}"
            self.unreachable_host = f"127.0.{octet}.{UNREACHABLE_SUFFIX}"
            return held
        raise RuntimeError(f"no 127.0.N with free node addresses on port {SSH_PORT} for the rig's sshd")

    def _write_ssh_files(self) -> None:
        self._run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "k3rig", "-f", self.identity_file)
        (self.workdir / "authorized_keys").write_text(self.identity_file.with_suffix(".pub").read_text())
        lines = []
        for name, host in [(n.name, n.host) for n in self.nodes] + [("unreachable", self.unreachable_host)]:
            key = self.workdir / "host_keys" / name
            key.parent.mkdir(exist_ok=True)
            self._run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", key)
            pub = key.with_suffix(".pub").read_text().split()
            lines.append(f"[{host}]:{SSH_PORT} {pub[0]} {pub[1]}\n")
        self.known_hosts.write_text("".join(lines))
        for node in self.nodes:
            node.tmp.mkdir(mode=0o1777, exist_ok=True)
            node.tmp.chmod(0o1777)
            (node.dir / "sshd_config").write_text(
                f"ListenAddress {node.host}:{node.port}\n"
                f"HostKey {self.workdir / 'host_keys' / node.name}\n"
                f"PidFile {node.dir / 'sshd.pid'}\n"
                f"AuthorizedKeysFile {self.workdir / 'authorized_keys'}\n"
                "PermitRootLogin prohibit-password\n"
                "PasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\n"
                "UsePAM no\n"
                "StrictModes no\n"
                "UseDNS no\n"
                "PrintMotd no\n"
                "PrintLastLog no\n"
                "Subsystem sftp internal-sftp\n"
                f"SetEnv TMPDIR={node.tmp}\n"
                + "".join(f"{option}\n" for option in self.sshd_options.get(node.name, ()))
            )

    def _namespace_script(self, node: RigNode) -> str:
        """Shell run by ``unshare -m``: build the node's view of the filesystem, then exec sshd."""
        steps: list[tuple[str, list[str | Path]]] = [("hostname", ["hostname", node.name])]
        steps += [(f"bind {rel}", ["mount", "--bind", node.tree / rel, f"/{rel}"]) for rel in node.state.bind_paths]
        steps.append(("tmpfs /dev", ["mount", "-t", "tmpfs", "-o", "mode=0755,nosuid,size=65536k",
                                     "k3rig-dev", "/dev"]))
        for dev, mode, major, minor in [
            ("null", "0666", 1, 3), ("zero", "0666", 1, 5), ("full", "0666", 1, 7),
            ("random", "0666", 1, 8), ("urandom", "0666", 1, 9), ("tty", "0666", 5, 0),
        ]:
            steps.append((f"mknod /dev/{dev}", ["mknod", "-m", mode, f"/dev/{dev}", "c", str(major), str(minor)]))
        steps.append(("mkdir /dev/pts /dev/shm /dev/dri", ["mkdir", "-m", "0755", "/dev/pts", "/dev/shm", "/dev/dri"]))
        steps.append(("devpts /dev/pts", ["mount", "-t", "devpts", "-o", "newinstance,ptmxmode=0666,mode=0620,gid=5",
                                          "devpts", "/dev/pts"]))
        for link, target in [("ptmx", "pts/ptmx"), ("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                             ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")]:
            steps.append((f"symlink /dev/{link}", ["ln", "-s", target, f"/dev/{link}"]))
        steps.append(("tmpfs /dev/shm", ["mount", "-t", "tmpfs", "-o", "mode=1777,nosuid,nodev,size=128g",
                                         "k3rig-shm", "/dev/shm"]))
        steps.append(("tmpfs /run", ["mount", "-t", "tmpfs", "-o", "mode=0755,nosuid,nodev", "k3rig-run", "/run"]))
        steps.append(("mkdir /run/sshd", ["mkdir", "-m", "0755", "/run/sshd"]))
        sock_targets = ["/run/docker.sock"] + ([] if os.path.islink("/var/run") else ["/var/run/docker.sock"])
        for target in sock_targets:
            steps.append((f"create {target}", ["touch", target]))
            steps.append((f"bind {target}", ["mount", "--bind", node.docker_socket, target]))
        lines = ["fail() { echo \"k3rig: node namespace setup failed at step: $1\" >&2; exit 1; }"]
        lines += [f"{shlex.join(str(a) for a in argv)} || fail {shlex.quote(desc)}" for desc, argv in steps]
        sshd = shutil.which("sshd", path=SBIN_PATH)
        lines.append(shlex.join(["exec", str(sshd), "-D", "-E", str(node.dir / "sshd.log"),
                                 "-f", str(node.dir / "sshd_config")]))
        return "\n".join(lines) + "\n"

    def _spawn_sshd(self, node: RigNode) -> subprocess.Popen:
        with open(node.dir / "namespace.log", "wb") as log:
            proc = subprocess.Popen(
                ["unshare", "-m", "-u", "--propagation", "private", "--",
                 "/bin/sh", "-c", self._namespace_script(node)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        self._sshds[node.name] = proc
        node.ns_pid = proc.pid
        return proc

    def _wait_sshd(self, node: RigNode, proc: subprocess.Popen) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                logs = [(node.dir / f).read_text(errors="replace") for f in ("namespace.log", "sshd.log")
                        if (node.dir / f).exists()]
                raise RuntimeError(f"{node.name}: sshd exited with {proc.returncode}:\n" + "\n".join(logs))
            # Our sshd must own the listening socket: another rack on this host may hold the address.
            if _listens(proc.pid, node.host, node.port):
                socket.create_connection((node.host, node.port), timeout=5).close()
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{node.name}: sshd not listening on {node.host}:{node.port}")
            time.sleep(0.05)
        self._namespaces[node.name] = os.readlink(f"/proc/{proc.pid}/ns/mnt")

    def _unmount_leftovers(self) -> None:
        """Container mounts a crashed dockerd left below the workdir (none after a clean stop)."""
        with open("/proc/self/mountinfo") as f:
            points = [line.split()[4] for line in f]
        for point in sorted((p for p in points if p.startswith(f"{self.workdir}/")), reverse=True):
            subprocess.run(["umount", "-l", point], check=False)

    # ------------------------------------------------------------------------------------------- inventory

    def _write_inventory(self) -> None:
        kind = mi355x.inventory_settings(self.platform, self.nodes[0].state.concurrency) \
            if self.platform in mi355x.KINDS else \
            {"stepping": "B0", "hbm_gib_per_gpu": 432, "gpus_per_node": GPUS_PER_NODE}
        inventory = {
            "cluster": {
                "name": "rig",
                "container": CONTAINER,
                "image": IMAGE,
                **kind,
                "tools": {
                    "amd_smi": "/opt/rocm/bin/amd-smi",
                    "rocm_smi": "/opt/rocm/bin/rocm-smi",
                    "ubench_dir": "/root/ubench/build",
                    **({"squeue": f"/{mi355x.SQUEUE}"} if self.platform in mi355x.KINDS else {}),
                },
                # The nodes' Docker roots are on this machine's disk, which is small and shared; no epcheck
                # image is ever pulled here.
                "checks": {"host-resources": {"docker_root_min_free_gb": 1, "docker_root_warn_free_gb": 0,
                                              "log_min_free_gb": 1},
                           "launch-config": {"launch_script": LAUNCH_SCRIPT}},
            },
            "ssh": {"known_hosts": str(self.known_hosts), "connect_timeout_s": 5, "command_timeout_s": 10},
            "defaults": {"user": "root", "port": SSH_PORT, "identity_file": str(self.identity_file), "sudo": False},
            "nodes": [{"name": n.name, "host": n.host, "data_ip": n.host} for n in self.nodes],
        }
        self.inventory_path.write_text(yaml.safe_dump(inventory, sort_keys=False))
