"""The AgentX launch of an MI355X rig node in the states a pre-launch gate meets (reference §30, issue 30): the
server running in our container (the rig's own state after ``apply``), the container created with the server as
its command but not started, nothing created yet but the launch script on the node, and the server running as a
bare host process (no Docker: a Slurm + pyxis or bare-metal launch is a process of the host).

Each state is made from the node's current ``NodeState`` (its point and overrides), through the node's real
dockerd and real processes; the next ``Rig.apply`` brings the node back to its scenario (our container is
recreated: the one made here carries no spec label).
"""
from __future__ import annotations

import contextlib
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


@contextlib.contextmanager
def bare(rig, node):
    """The server as a bare host process (no container), its stand-in module and HF cache below the node's
    directory; killed when the block ends."""
    with contextlib.closing(_engine(node)) as engine:
        _drop_ours(node, engine)
    root = node.dir / "bare"
    shutil.rmtree(root, ignore_errors=True)  # a previous state's files (a drafter this state removed) go
    for path, text in node.state.container_files.items():  # the state's own: a drafter it removed stays away
        if not isinstance(text, str):
            continue
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    env = {**container_env(node.state), "HF_HUB_CACHE": str(root / mi355x.HF_CACHE.lstrip("/"))}
    argv = mi355x.server_argv(node.state.concurrency, node.state.launch_args)
    proc = subprocess.Popen(["env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv],
                            cwd=root / mi355x.SERVER_WORKDIR.lstrip("/"), start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while mi355x.SERVER_MODULE not in " ".join(_cmdline(proc.pid)):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"{node.name}: the bare AgentX server did not come up (rc {proc.poll()})")
            time.sleep(0.05)
        node.server_pid = proc.pid
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()
        node.server_pid = None


def _cmdline(pid: int) -> list:
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []
