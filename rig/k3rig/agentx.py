"""The AgentX launch of an MI355X rig node in the states a pre-launch gate meets (reference §30, issue 30): the
server running in our container (the rig's own state after ``apply``), the container created with the server as
its command but not started, nothing created yet but the launch script on the node, and the server running as a
bare host process, and as Slurm + pyxis/enroot leaves it (a host process whose root is the image's: no Docker).

Each state is made from the node's current ``NodeState`` (its point and overrides), through the node's real
dockerd and real processes; the next ``Rig.apply`` brings the node back to its scenario (our container is
recreated: the one made here carries no spec label).
"""
from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import docker
import psutil
import yaml

from . import mi355x
from .container import container_env

LAUNCH_SCRIPT = "/opt/agentx/launch.sh"  # under the node's bind-mounted /opt
START_TIMEOUT_S = 30.0


def _engine(node) -> docker.DockerClient:
    return docker.DockerClient(base_url=f"unix://{node.docker_socket}", timeout=30)


def _drop_ours(node, engine) -> None:
    """Our container gone, and the server `docker exec`-ed into it (it shares the host's PID namespace)."""
    if node.server_pid:
        with contextlib.suppress(psutil.Error):
            psutil.Process(node.server_pid).kill()
        node.server_pid = None
    for c in engine.containers.list(all=True, filters={"name": "^k3ep16$"}):
        c.remove(force=True)


def host_cache(node) -> Path:
    """The node's directory mounted at the container's HF cache (§30 mounts the cache from the host), holding the
    state's own cache files: a drafter the state removed stays away. A path of the host, which the node's dockerd
    and its sshd see alike."""
    root = node.dir / "hf-hub-cache"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    prefix = mi355x.HF_CACHE.rstrip("/") + "/"
    for path, text in node.state.container_files.items():
        if isinstance(text, str) and path.startswith(prefix):
            target = root / path[len(prefix):]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
    return root


def created(rig, node) -> None:
    """Our container created with the server as its command, the point's environment and the HF cache mounted from
    the node, never started: what `docker create` (or compose, before `up`) leaves for a gate to read."""
    with contextlib.closing(_engine(node)) as engine:
        image = engine.containers.get("k3ep16").attrs["Config"]["Image"]
        _drop_ours(node, engine)
        engine.containers.create(image, mi355x.server_argv(node.state.concurrency, node.state.launch_args),
                                 name="k3ep16", environment=container_env(node.state),
                                 working_dir=mi355x.SERVER_WORKDIR, network_mode="host",
                                 volumes={str(host_cache(node)): {"bind": mi355x.HF_CACHE, "mode": "ro"}})


def script_text(state, image: str, cache: Path) -> str:
    """The launch script a harness runs (§30: exports, then the server in the AgentX image, the HF cache mounted
    from the node with `-v HOST:CONTAINER`): what `cluster.launch_script` names."""
    env = {k: v for k, v in container_env(state).items()
           if k != "HIP_VISIBLE_DEVICES"}  # the runner copies ROCR_VISIBLE_DEVICES, not the script
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    run = ["docker", "run", "--rm", "--network=host", "-v", f"{cache}:{mi355x.HF_CACHE}:ro",
           *(w for k in env for w in ("-e", k)), image]
    argv = mi355x.server_argv(state.concurrency, state.launch_args)
    return "#!/bin/bash\nset -euo pipefail\n" + exports + " ".join(map(shlex.quote, run + argv)) + "\n"


def script_only(rig, node) -> Path:
    """Nothing created on the node yet, the launch script at LAUNCH_SCRIPT (the HF cache it mounts on the node);
    returns an inventory naming it."""
    with contextlib.closing(_engine(node)) as engine:
        image = engine.containers.get("k3ep16").attrs["Config"]["Image"]
        _drop_ours(node, engine)
    path = node.tree / LAUNCH_SCRIPT.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script_text(node.state, image, host_cache(node)))
    return inventory_with(rig, launch_script=LAUNCH_SCRIPT)


def inventory_with(rig, **cluster) -> Path:
    inv = yaml.safe_load(rig.inventory_path.read_text())
    inv["cluster"].update(cluster)
    out = rig.workdir / "inventory-launch.yaml"
    out.write_text(yaml.safe_dump(inv, sort_keys=False))
    return out


def _write_files(root: Path, state) -> None:
    """The state's container files below ``root`` (a previous state's go: a drafter this state removed stays
    away)."""
    shutil.rmtree(root, ignore_errors=True)
    for path, text in state.container_files.items():
        if isinstance(text, str):
            target = root / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)


@contextlib.contextmanager
def _serving(node, command: list, cwd, what: str):
    """The AgentX server started by ``command`` as a host process (no container engine); its pid once its argv
    is the server's; killed when the block ends."""
    with contextlib.closing(_engine(node)) as engine:
        _drop_ours(node, engine)
    proc = subprocess.Popen(command, cwd=cwd, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while mi355x.SERVER_MODULE not in " ".join(_cmdline(proc.pid)):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"{node.name}: the {what} AgentX server did not come up (rc {proc.poll()})")
            time.sleep(0.05)
        node.server_pid = proc.pid
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()
        node.server_pid = None


@contextlib.contextmanager
def bare(rig, node):
    """The server as a bare host process (no container), its stand-in module and HF cache below the node's
    directory; killed when the block ends."""
    root = node.dir / "bare"
    _write_files(root, node.state)
    env = {**container_env(node.state), "HF_HUB_CACHE": str(root / mi355x.HF_CACHE.lstrip("/"))}
    argv = mi355x.server_argv(node.state.concurrency, node.state.launch_args)
    with _serving(node, ["env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv],
                  root / mi355x.SERVER_WORKDIR.lstrip("/"), "bare") as pid:
        yield pid


# What srun exports into the step beside the sbatch script's own variables (one task on one node).
SLURM_ENV = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "agentx", "SLURM_STEP_ID": "0", "SLURM_PROCID": "0",
             "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_NUM_NODES": "1",
             "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
HOST_TREE = ("usr", "etc", "bin", "lib", "lib64", "sbin")  # bound (or linked) into the rootfs for its python


@contextlib.contextmanager
def pyxis(rig, node):
    """The server as `srun --container-image` leaves it under Slurm + pyxis/enroot (issue 30 item 3): a host
    process - no container engine - in a mount namespace of its own whose root is the unpacked image (enroot's
    rootfs under its data path), with the job's environment (the script's exports and srun's SLURM_*); its HF
    cache is a path of that root, seen from the host through /proc/<pid>/root.

    Simulated: `unshare --mount` and chroot (enroot pivot_roots; /proc/<pid>/root, /proc/<pid>/environ and the argv
    read the same from the host), the host's /usr and /etc bound read-only into the rootfs in place of an unpacked
    squashfs image. Not simulated: slurmstepd as its parent and the job's cgroup (the reader reads neither), and
    enroot's user namespace (a rootless container's /proc/<pid>/root is read by the node's root as here)."""
    rootfs = node.dir / "enroot" / "pyxis_agentx"
    _write_files(rootfs, node.state)
    binds = []
    for name in HOST_TREE:
        host = Path("/") / name
        if host.is_symlink():
            (rootfs / name).symlink_to(os.readlink(host))
        elif host.is_dir():
            (rootfs / name).mkdir(parents=True, exist_ok=True)
            binds.append(f"mount --bind {host} {rootfs / name} && mount -o remount,bind,ro {rootfs / name}")
    env = {**container_env(node.state), **SLURM_ENV}  # HF_HUB_CACHE: the path inside the image's root
    argv = mi355x.server_argv(node.state.concurrency, node.state.launch_args)
    inside = f"cd {mi355x.SERVER_WORKDIR} && exec " + shlex.join(["env", "-i", *(f"{k}={v}" for k, v in env.items()),
                                                                  *argv])
    enter = " && ".join([*binds, f"exec chroot {rootfs} /bin/sh -c {shlex.quote(inside)}"])
    with _serving(node, ["unshare", "--mount", "--propagation", "private", "sh", "-c", enter], rootfs,
                  "pyxis") as pid:
        yield pid


def _cmdline(pid: int) -> list:
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []
