"""A rig node's Docker engine and our ATOM container on it (reference §13, §14, §17): starting the node's dockerd,
the container's run options, and keeping what runs in it (files, environment, launch script, rank processes,
listeners, devices, the logs tmpfs) in step with the node's state. ``NodeEngines`` is the rack's (``rack.Rig``)
part that does it; the rack owns the namespaces, sshd and the inventory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker
import psutil
import requests

from . import mi355x
from .container import LAUNCH_SCRIPT, container_env, container_tar, launch_script, listener_commands, rank_commands
from .fixtures import CONTAINER_FILES_ROOT, GPUS_PER_NODE, LOG_DIR, NodeState
from .host import SBIN_PATH, START_TIMEOUT_S, _accepts, _mknod, _named_processes

if TYPE_CHECKING:
    from .rack import RigNode

IMAGE = "rocm/fw-bringup:gfx1250-atom-20260918-ep8"
CONTAINER = "k3ep16"
# Our container, as close to the validated `docker run` (reference §13) as a host without GPUs allows:
# no --device /dev/kfd,/dev/dri (the host has none) and no /mnt/k3:/models bind. The real image ships
# its own python + torch; here the host's /usr (read-only) stands in for them, so the all_reduce probe's
# default path (`docker exec -i k3ep16 python3 -`) runs for real.
CONTAINER_RUN: dict[str, Any] = dict(
    entrypoint=["sleep"],
    command=["infinity"],
    volumes={"/usr": {"bind": "/usr", "mode": "ro"}, "/etc/ld.so.cache": {"bind": "/etc/ld.so.cache", "mode": "ro"}},
    tmpfs={"/tmp": ""},
    network_mode="host",
    ipc_mode="host",
    pid_mode="host",
    shm_size="128g",
    cap_add=["SYS_PTRACE", "SYS_ADMIN"],
    security_opt=["seccomp=unconfined"],
    group_add=["39", "105"],
)
SPEC_LABEL = "k3rig.spec"  # digest of our container's run options, env, log and processes
KFD_DEVICE = os.makedev(510, 0)  # /dev/kfd gets a dynamic major on real hosts
DRM_MAJOR = 226


def connect_engine(sock: Path, timeout_s: float, exited: Callable[[], str | None],
                   ping_timeout_s: float = 5.0) -> docker.DockerClient:
    """A client of the Docker engine at ``sock`` once an API ping has succeeded, within ``timeout_s``.

    The socket file exists before dockerd accepts on it (connect: ConnectionRefused), and the
    client's constructor already asks the engine for its API version: both are retried, each
    attempt bounded by ``ping_timeout_s``. ``exited()`` returns why the engine is gone, if it is."""
    deadline = time.monotonic() + timeout_s
    last = "no socket yet"
    while True:
        why = exited()
        if why:
            raise RuntimeError(why)
        if sock.exists():
            client = None
            try:
                client = docker.DockerClient(base_url=f"unix://{sock}", timeout=ping_timeout_s)
                client.ping()
                client.api.timeout = 60  # the engine answers: normal calls get the usual limit
                return client
            except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
                last = f"{type(exc).__name__}: {exc}"
                if client is not None:
                    client.close()
        if time.monotonic() > deadline:
            raise TimeoutError(f"the Docker engine did not answer on {sock} within {timeout_s:g} s ({last})")
        time.sleep(0.1)


def _container_pids(container) -> list[int]:
    """Host PIDs of the processes in ``container`` (`docker top`)."""
    top = container.top()
    return [int(row[top["Titles"].index("PID")]) for row in top.get("Processes") or []]


def _server_pid(container) -> int | None:
    """The server module's process in ``container`` (its whole argv read from /proc: `docker top` cuts the
    command column at ps's width)."""
    for pid in _container_pids(container):
        try:
            if mi355x.SERVER_MODULE in psutil.Process(pid).cmdline():
                return pid
        except psutil.Error:
            continue
    return None


class NodeEngines:
    """The per-node Docker engine and our container, as part of ``rack.Rig`` (its ``workdir``, ``nodes``, ``_tag``,
    ``_clients``, ``_dockerds`` and ``_run``)."""

    def _write_image_tar(self) -> Path:
        """A one-binary root filesystem (static busybox as sh, sleep, ...) for ``docker import``."""
        path = self.workdir / "image.tar"
        with tarfile.open(path, "w") as tar:
            tar.add(shutil.which("busybox", path=SBIN_PATH), arcname="bin/busybox")
            # sleep for the entrypoint; the rest for what checks run in the container with `docker exec` (§2, §14).
            links = {f"bin/{applet}": "busybox" for applet in ("sh", "sleep", "stat", "ls", "wc", "grep", "env", "rm")}
            links.update({"lib": "usr/lib", "lib64": "usr/lib64"})  # merged-/usr layout for the bound host /usr
            for name, target in links.items():
                link = tarfile.TarInfo(name)
                link.type, link.linkname = tarfile.SYMTYPE, target
                tar.addfile(link)
        return path

    def _spawn_dockerd(self, node: RigNode) -> subprocess.Popen:
        d = node.dir / "docker"
        d.mkdir()
        (d / "daemon.json").write_text("{}\n")  # not the host's /etc/docker/daemon.json
        argv = [
            "dockerd", "--config-file", d / "daemon.json", "--data-root", d / "data", "--exec-root", d / "exec",
            "-H", f"unix://{node.docker_socket}", "--pidfile", d / "dockerd.pid",
            "--bridge=none", "--iptables=false", "--ip-forward=false", "--ip-masq=false",
            # A host containerd (if one runs) is shared: keep each engine in its own containerd namespace.
            "--containerd-namespace", f"{self._tag}-{node.name}",
            "--containerd-plugins-namespace", f"{self._tag}-{node.name}-plugins",
            "--shutdown-timeout", "2",
        ]
        with open(d / "dockerd.log", "wb") as log:
            proc = subprocess.Popen([str(a) for a in argv], stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self._dockerds.append(proc)
        return proc

    def _wait_dockerd(self, node: RigNode, proc: subprocess.Popen) -> None:
        def exited() -> str | None:
            if proc.poll() is None:
                return None
            log = (node.dir / "docker" / "dockerd.log").read_text(errors="replace")
            return f"{node.name}: dockerd exited with {proc.returncode}:\n{log[-4000:]}"

        self._clients[node.name] = connect_engine(node.docker_socket, START_TIMEOUT_S, exited)

    def _remove_containers(self, node: RigNode, keep: str | None = None) -> None:
        client = self._clients.get(node.name)
        if client is None:
            return
        for container in client.containers.list(all=True):
            if container.name != keep:
                self._remove_container(node, container)

    @staticmethod
    def _remove_container(node: RigNode, container) -> None:
        """Remove a container; on an MI355X node first kill what was `docker exec`-ed into it (the server):
        the container shares the host's PID namespace, so removing it kills its first process only."""
        if node.state.platform in mi355x.KINDS and container.status == "running":
            for pid in _container_pids(container):
                try:
                    psutil.Process(pid).kill()
                except psutil.Error:
                    pass
        container.remove(force=True)

    def _remove_containers_quietly(self, node: RigNode) -> None:
        """For stop(): an engine that is already gone leaves its containers to the process sweep."""
        try:
            self._remove_containers(node)
        except Exception:  # noqa: BLE001 -- any failure here only means "nothing to remove through the API"
            pass

    def _sync_live(self, node: RigNode) -> None:
        """Bring the parts of a node that are not in its tree (/dev, /dev/shm, containers) to node.state."""
        state = node.state
        dev = node.root / "dev"
        _mknod(dev / "kfd", KFD_DEVICE, state.dev_kfd and state.amdgpu_loaded)
        for c in range(state.gpus):  # DRM nodes exist where the tree has the sysfs device
            for name, minor in ((f"card{c}", c), (f"renderD{128 + c}", 128 + c)):
                present = (node.tree / "sys/class/drm" / name).is_dir()
                _mknod(dev / "dri" / name, os.makedev(DRM_MAJOR, minor), present)
        for stale in (dev / "shm").iterdir():
            stale.unlink()
        for name in state.shm:
            (dev / "shm" / name).write_bytes(b"\0" * 4096)

        self._sync_logs_tmpfs(node)

        client = self._clients[node.name]
        self._remove_containers(node, keep=CONTAINER)
        run = self._our_run_options(node)
        ours = client.containers.list(all=True, filters={"name": f"^{CONTAINER}$"})
        if ours and ours[0].labels.get(SPEC_LABEL) != run["labels"][SPEC_LABEL]:
            # run options, env and log cannot change on a container: run it again
            self._remove_container(node, ours[0])
            ours = []
        fresh = not ours or ours[0].status != "running"
        if not ours:
            client.containers.run(IMAGE, name=CONTAINER, detach=True, **run)
        elif ours[0].status != "running":
            ours[0].start()
        self._sync_container_files(client.containers.get(CONTAINER), state)
        self._sync_launch(node, client.containers.get(CONTAINER), start_processes=fresh)
        for spec in state.containers:
            image = spec.get("image", IMAGE)
            if not client.images.list(name=image):
                client.images.get(IMAGE).tag(image)
            create = client.containers.run if spec["state"] == "running" else client.containers.create
            kwargs = {"detach": True} if spec["state"] == "running" else {}
            create(image, ["sleep", "infinity"], name=spec["name"], network_mode="none", **kwargs)

    def _sync_logs_tmpfs(self, node: RigNode) -> None:
        """The log directory as a small tmpfs of its own, filled up, when the state asks: a real full file
        system (mounted in the node's namespace only; a previous one is unmounted first)."""
        target = f"/{LOG_DIR}"
        enter = ["nsenter", f"--mount=/proc/{node.ns_pid}/ns/mnt", "--"]
        with open(f"/proc/{node.ns_pid}/mountinfo") as f:
            if any(line.split()[4] == target for line in f):
                self._run(*enter, "umount", "-l", target)
        spec = node.state.logs_tmpfs
        if not spec:
            return
        self._run(*enter, "mount", "-t", "tmpfs", "-o", f"mode=0755,size={spec['size_mib']}m", "k3rig-logs", target)
        line = b"[aiter] fmoe_g1u1 tuned kernel not found, falling back to default\n"  # an unquieted AITER log
        with open(node.root / LOG_DIR / "k3ep16-serve.log", "wb") as log:
            for _ in range(spec["used_mib"]):
                log.write((line * (2**20 // len(line) + 1))[: 2**20])
    def _our_run_options(self, node: RigNode) -> dict[str, Any]:
        """Our container's ``docker run`` keywords on this node: CONTAINER_RUN plus the validated
        environment (§16), fake GPU device nodes, the read-only model bind (§13), an entrypoint that
        prints the state's server log on stderr first (its ``docker logs``), and the state's overrides;
        labelled with a digest of everything, so a changed scenario recreates it."""
        devices = node.dir / "devices"
        (devices / "dri").mkdir(parents=True, exist_ok=True)
        (node.dir / "models").mkdir(exist_ok=True)
        _mknod(devices / "kfd", KFD_DEVICE, True)
        for c in range(node.state.gpus):
            _mknod(devices / "dri" / f"card{c}", os.makedev(DRM_MAJOR, c), True)
            _mknod(devices / "dri" / f"renderD{128 + c}", os.makedev(DRM_MAJOR, 128 + c), True)
        run: dict[str, Any] = {
            **CONTAINER_RUN, "environment": container_env(node.state),
            "devices": [f"{devices}/kfd:/dev/kfd:rwm", f"{devices}/dri:/dev/dri:rwm"],
            "volumes": {**CONTAINER_RUN["volumes"], str(node.dir / "models"): {"bind": "/models", "mode": "ro"}},
        }
        if node.state.container_log:
            run.update(entrypoint=["sh", "-c", 'printf %s "$1" >&2; exec sleep infinity', "k3rig",
                                   node.state.container_log], command=None)
        if node.state.platform in mi355x.KINDS:  # the AgentX image's WORKDIR: its server module and lmcache live there
            run["working_dir"] = mi355x.SERVER_WORKDIR
        run.update(node.state.container_run)
        digest = json.dumps([run, node.state.atom_ranks, node.state.listeners, self._server_argv(node)],
                            sort_keys=True, default=str)
        run["labels"] = {SPEC_LABEL: hashlib.sha256(digest.encode()).hexdigest()[:16]}
        return run

    def _sync_launch(self, node: RigNode, container, start_processes: bool) -> None:
        """The launch script in the container (§17); on a fresh container also this node's ATOM rank
        processes and port holders, waited for until they show."""
        if node.state.platform in mi355x.KINDS:
            return self._start_agentx_server(node, container, start_processes)
        rank = (node.index - 1) * GPUS_PER_NODE
        text = launch_script(node.state, rank, self.nodes[0].host)
        if not container.put_archive("/", container_tar({LAUNCH_SCRIPT: text})):
            raise RuntimeError(f"{node.name}: docker refused the launch script")
        if not start_processes:
            return
        for argv in rank_commands(node.state, rank) + listener_commands(node.state, node.host):
            container.exec_run(argv, detach=True)
        ranks = node.state.atom_ranks is not None
        titles = {f"ATOM::DP{rank + i}TP0" for i in range(GPUS_PER_NODE)} if ranks else set()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (_named_processes(titles) >= titles and all(_accepts(node.host, p) for p in node.state.listeners)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{node.name}: ATOM rank processes / port holders did not come up")
            time.sleep(0.1)

    @staticmethod
    def _server_argv(node: RigNode) -> list[str] | None:
        state = node.state
        return mi355x.server_argv(state.concurrency, state.launch_args) if state.platform in mi355x.KINDS else None

    def _start_agentx_server(self, node: RigNode, container, start_processes: bool) -> None:
        """MI355X (§30): the ATOM server itself runs in our container, with exactly the point's environment,
        as a process whose argv is the real one (a stand-in `atom.entrypoints.openai_server` module that
        sleeps); waited for until it shows."""
        if not start_processes:
            return
        pairs = [f"{k}={v}" for k, v in container_env(node.state).items()]
        argv = self._server_argv(node)
        container.exec_run(["env", "-i", *pairs, *argv], workdir=mi355x.SERVER_WORKDIR, detach=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (pid := _server_pid(container)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{node.name}: the AgentX server process did not come up; in the container "
                                   f"{container.top().get('Processes')}")
            time.sleep(0.1)
        node.server_pid = pid

    @staticmethod
    def _sync_container_files(container, state: NodeState) -> None:
        """Our container's ``docker cp``-ed files (§2, §14) become exactly ``state.container_files``."""
        result = container.exec_run(["rm", "-rf", CONTAINER_FILES_ROOT])
        if result.exit_code != 0:
            raise RuntimeError(f"{state.name}: cannot empty {CONTAINER_FILES_ROOT} in {CONTAINER}: {result.output!r}")
        if not container.put_archive("/", container_tar(state.container_files)):
            raise RuntimeError(f"{state.name}: docker refused the container files archive")
