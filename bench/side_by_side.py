#!/usr/bin/env python3
"""The fast tier side by side: the same reads via plain OpenSSH, Ansible ad-hoc and `k3doctor check`.

    sudo python3 bench/side_by_side.py --rig                      # the simulated 4-node rack (sshd + dockerd)
    sudo python3 bench/side_by_side.py --light 64 --dead 10       # 64 light nodes (sshd only), and 10 % dead
    sudo python3 bench/side_by_side.py --light 256 --dead 10 --only openssh,k3doctor --runs 3

The read set is the fast tier's, taken from the check registry for the inventory's first node. The
contenders, run in turn (interleaved, rotated each round, after one warm-up round):

- ``openssh``: the floor. Every reading as the plain shell command a person would write (``cat`` per file,
  each tool once, ``docker ps``/``docker events``/``docker inspect`` for the engine), all in one
  ``ssh NODE sh -s`` per node, ``--parallel`` nodes at a time (xargs -P).
- ``ansible``: ``ansible all -m shell -a SCRIPT -f PARALLEL`` with the same script (needs ``ansible-core``).
- ``k3doctor``: ``k3doctor check --nodes INVENTORY --format json --parallel PARALLEL``, CLI start to exit.

With ``--dead P`` each contender also runs on an inventory where P % of the nodes are dead (half refuse,
half blackholed), suffix ``+dead``. Printed per contender: wall seconds min/median/max, the median ratio to
the floor (``vs openssh``: per round, pairing the runs of one round), peak RSS of the contender's largest
process, its own CPU seconds (this side), and the CPU seconds the nodes spent per node (sshd sessions
and everything they ran; on the rig also the node's dockerd/containerd). Light nodes share this
machine's cores: their wall time is the total node-side work. Asserts nothing: speed targets live here,
not in timed tests.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from k3doctor.inventory.load import load_inventory  # noqa: E402
from k3doctor.judging.runner import select_checks, specs_of  # noqa: E402
from k3doctor.readings import (  # noqa: E402
    CONTAINER_PID,
    DOCKER_ROOT_DIR,
    Command,
    ContainerInspect,
    Docker,
    EngineFactCommand,
    Exists,
    File,
    Glob,
)
from k3doctor.registry import REGISTRY, load_checks  # noqa: E402
from k3doctor.shell import join, quote  # noqa: E402


def read_set(inventory: Path) -> list:
    """The fast tier's readings on the inventory's first node, in the order k3doctor takes them."""
    load_checks()
    inv = load_inventory(str(inventory))
    checks = [c for c in select_checks(REGISTRY, tier="fast") if c.interaction == "passive"]
    specs = specs_of(checks, inv.nodes[0].settings)
    return list(dict.fromkeys(s for by_name in specs.values() if isinstance(by_name, dict) for s in by_name.values()))


# How a person gets an engine fact in a shell: the docker CLI (k3doctor takes it from the Docker API).
FLOOR_FACTS = {DOCKER_ROOT_DIR: lambda spec: "docker info --format '{{.DockerRootDir}}'",
               CONTAINER_PID: lambda spec: f"docker inspect -f '{{{{.State.Pid}}}}' {quote(spec.container)}"}


def plain_script(specs: list) -> str:
    """The same reads as a plain shell script, one plain command per reading (what the floor runs)."""
    lines = []
    for i, spec in enumerate(specs):
        lines.append(f"echo '== {i}'")
        if isinstance(spec, File):
            lines.append(f"cat -- {quote(spec.path)}")
        elif isinstance(spec, Exists):
            lines.append(f"test -e {quote(spec.path)} && echo present")
        elif isinstance(spec, Glob):
            lines.append(f"p={quote(spec.pattern)}; IFS=; for f in $p; do [ -e \"$f\" ] && cat -- \"$f\"; done; "
                         "IFS=' '")
        elif isinstance(spec, EngineFactCommand):
            lines.append(f"{join(spec.argv)} \"$({FLOOR_FACTS[spec.fact](spec)})\" 2>&1")
        elif isinstance(spec, Command):
            lines.append(f"{join(spec.argv)} 2>&1")
        elif isinstance(spec, Docker):
            lines.append("docker ps -a --no-trunc --format '{{json .}}' 2>&1; "
                         f"docker events --since {int(spec.events_since_s)}s --until 0s --format '{{{{json .}}}}' 2>&1")
        elif isinstance(spec, ContainerInspect):
            lines.append(f"docker inspect -- {quote(spec.container)} 2>&1")
            if spec.launch_script:
                lines.append(f"docker cp {quote(spec.container + ':' + spec.launch_script)} - 2>&1")
    return "\n".join(lines) + "\n"


class Setup:
    """The nodes, their inventories (all alive, and with dead nodes) and how to read the nodes' CPU."""

    def __init__(self, args, workdir: Path):
        self.args, self.workdir, self.rack = args, workdir, None

    def __enter__(self):
        if self.args.rig:
            from k3rig import Rig

            self.rack = Rig(self.workdir / "rack")
            self.rack.start()
            self.ssh = [(n.name, n.host, n.port) for n in self.rack.nodes]
            self.dead = []
            self.inventories = {"": self.rack.inventory_path}
        else:
            from k3rig.light import LightRack

            dead = round(self.args.light * self.args.dead / 100)
            self.rack = LightRack(self.workdir / "rack", nodes=self.args.light, dead=dead)
            self.rack.start()
            self.ssh = [(name, host, 2222) for name, host, _ in self.rack.hosts]
            self.dead = [(name, host, 2222) for name, host in self.rack.dead_hosts]
            self.inventories = {"": self._inventory(self.ssh, "alive")}
            if dead:
                self.inventories["+dead"] = self._inventory(self.ssh[:len(self.ssh) - dead] + self.dead, "dead")
        self.identity, self.known_hosts = self.rack.identity_file, self.rack.known_hosts
        return self

    def _inventory(self, nodes: list, label: str) -> Path:
        inv = yaml.safe_load(self.rack.inventory_path.read_text())
        inv["nodes"] = [{"name": n, "host": h} for n, h, _ in nodes]
        path = self.workdir / f"inventory-{label}.yaml"
        path.write_text(yaml.safe_dump(inv, sort_keys=False))
        return path

    def hosts(self, suffix: str) -> list:
        return self.ssh if not suffix else self.ssh[:len(self.ssh) - len(self.dead)] + self.dead

    def node_cpu_s(self) -> float:
        """CPU seconds so far of the nodes' own processes and what they reaped."""
        pids = self.rack.pids_matching("") if self.args.rig else self.rack.pids()
        total = 0.0
        for pid in pids:
            try:
                t = psutil.Process(pid).cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
            except psutil.Error:
                continue
        return total

    def __exit__(self, *exc):
        self.rack.stop()


def contenders(setup: Setup, script: Path, parallel: int, only: set) -> dict:
    """name -> argv (no shell on this side but where a pipe needs one)."""
    out = {}
    ssh_opts = (f"-o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile={setup.known_hosts} "
                f"-o ConnectTimeout=10 -i {setup.identity}")
    for suffix, inventory in setup.inventories.items():
        hosts = setup.workdir / f"hosts{suffix or '-alive'}.txt"
        hosts.write_text("".join(f"{h} {p}\n" for _, h, p in setup.hosts(suffix)))
        outdir = setup.workdir / "out"
        outdir.mkdir(exist_ok=True)
        if "openssh" in only:
            # `exit 0`: xargs stops everything at a command's exit 255 (ssh's "could not connect")
            each = f'ssh {ssh_opts} -p "$2" root@"$1" sh -s < {script} > {outdir}/"$1" 2>&1; exit 0'
            out["openssh" + suffix] = ["sh", "-c", f"xargs -P {parallel} -n 2 sh -c '{each}' _ < {hosts}"]
        if "ansible" in only and shutil.which("ansible", path=f"{Path(sys.executable).parent}:{os.environ['PATH']}"):
            ini = setup.workdir / f"ansible{suffix or '-alive'}.ini"
            ini.write_text("[nodes]\n" + "".join(f"{n} ansible_host={h} ansible_port={p}\n"
                                                  for n, h, p in setup.hosts(suffix))
                           + "[nodes:vars]\nansible_user=root\n"
                           f"ansible_ssh_private_key_file={setup.identity}\n"
                           "ansible_ssh_common_args='-o StrictHostKeyChecking=yes "
                           f"-o UserKnownHostsFile={setup.known_hosts}'\n"
                           "ansible_python_interpreter=/usr/bin/python3\nansible_remote_tmp=/tmp/.k3bench-ansible\n")
            ansible = shutil.which("ansible", path=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
            # raw: ansible templates its arguments (the script's `docker --format '{{...}}'` is no template);
            # `: ;` first, as an argument that starts with `{` is read as JSON
            out["ansible" + suffix] = [ansible, "all", "-i", str(ini), "-f", str(parallel), "-o", "-m", "shell",
                                       "-a", ": ; {% raw %}" + script.read_text() + "{% endraw %}"]
        if "k3doctor" in only:
            out["k3doctor" + suffix] = [sys.executable, "-m", "k3doctor.cli", "check", "--nodes", str(inventory),
                                        "--format", "json", "--parallel", str(parallel),
                                        "-o", str(outdir / f"k3doctor{suffix}.json")]
    return out


def run_once(argv: list, setup: Setup, env: dict, cwd: Path = REPO) -> dict:
    cpu_before = setup.node_cpu_s()
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"wall": wall, "rc": proc.returncode, "peak_mb": usage.ru_maxrss / 1024,
            "cpu": usage.ru_utime + usage.ru_stime, "node_cpu": setup.node_cpu_s() - cpu_before}


def first_connection(runs: int, env: dict) -> list:
    """Seconds from starting ``k3doctor check`` to its first TCP connection to a node (a listener here)."""
    import socket

    times = []
    with socket.create_server(("127.0.0.1", 0)) as server, tempfile.TemporaryDirectory() as tmp:
        inventory = Path(tmp) / "inventory.yaml"
        inventory.write_text(yaml.safe_dump({"ssh": {"known_hosts": "/dev/null", "connect_timeout_s": 1},
                                             "nodes": [{"name": "n1", "host": "127.0.0.1",
                                                        "port": server.getsockname()[1]}]}))
        for _ in range(runs):
            started = time.monotonic()
            proc = subprocess.Popen([sys.executable, "-m", "k3doctor.cli", "check", "--nodes", str(inventory)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=REPO)
            conn, _ = server.accept()
            times.append(time.monotonic() - started)
            conn.close()
            proc.wait()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--rig", action="store_true", help="the simulated 4-node rack")
    where.add_argument("--light", type=int, metavar="N", help="N light nodes")
    parser.add_argument("--dead", type=float, default=0, metavar="PERCENT", help="also with this share dead (light)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1, help="rounds not counted, first")
    parser.add_argument("--parallel", type=int, default=64)
    parser.add_argument("--only", default="openssh,ansible,k3doctor")
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the nodes on the way out
    env = dict(os.environ, ANSIBLE_HOST_KEY_CHECKING="True", ANSIBLE_LOCAL_TEMP="/tmp/.k3bench-ansible-local",
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the Python contenders run as installed: with their bytecode
    with tempfile.TemporaryDirectory(prefix="k3bench-", dir="/tmp") as tmp, Setup(args, Path(tmp)) as setup:
        specs = read_set(setup.inventories[""])
        script = Path(tmp) / "reads.sh"
        script.write_text(plain_script(specs))
        runs = contenders(setup, script, args.parallel, set(args.only.split(",")))
        nodes = len(setup.ssh)
        print(f"nodes: {nodes} ({'rig' if args.rig else 'light'}), dead: {len(setup.dead)}, readings per node: "
              f"{len(specs)}, parallel {args.parallel}, runs {args.runs} + {args.warmup} warm-up, load before: "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        got = {name: [] for name in runs}
        names = list(runs)
        for round_ in range(args.warmup + args.runs):
            order = names[round_ % len(names):] + names[:round_ % len(names)]
            for name in order:
                figures = run_once(runs[name], setup, env)
                if round_ >= args.warmup:
                    got[name].append(figures)
                print(f"  round {round_}{' (warm-up)' if round_ < args.warmup else ''} {name}: {figures['wall']:.2f}s "
                      f"rc {figures['rc']}", flush=True)
        print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        table(got, nodes, len(setup.dead))
        if "k3doctor" in runs:
            starts = first_connection(args.runs, env)
            print(f"k3doctor CLI start to first connection: min {min(starts):.3f} / median "
                  f"{statistics.median(starts):.3f} / max {max(starts):.3f} s")
        if args.json:
            args.json.write_text(json.dumps({"nodes": nodes, "dead": len(setup.dead), "runs": got}, indent=1))


def table(got: dict, nodes: int, dead: int) -> None:
    print("\n| contender | wall s min / median / max | vs openssh (median of per-round ratios) | peak MB "
          "| own CPU s | node CPU s per node |\n|---|---|---|---|---|---|")
    for name, runs in got.items():
        walls = [r["wall"] for r in runs]
        suffix = "+dead" if name.endswith("+dead") else ""
        floor = got.get("openssh" + suffix) or got.get("openssh")
        ratio = (f"{statistics.median(r['wall'] / f['wall'] for r, f in zip(runs, floor, strict=True)):.2f}x"
                 if floor and not name.startswith("openssh") else "1.00x" if floor else "-")
        alive = nodes - (dead if suffix else 0)
        cpu = statistics.median(r["node_cpu"] for r in runs) / max(alive, 1)
        print(f"| {name} | {min(walls):.2f} / {statistics.median(walls):.2f} / {max(walls):.2f} | {ratio} "
              f"| {max(r['peak_mb'] for r in runs):.0f} | {statistics.median(r.get('cpu', 0) for r in runs):.2f} "
              f"| {cpu:.3f} |")
    if "k3doctor" in got and "ansible" in got:
        ratio = statistics.median(a["wall"] / k["wall"] for a, k in zip(got["ansible"], got["k3doctor"], strict=True))
        print(f"\nansible / k3doctor: {ratio:.2f}x")
    if "k3doctor+dead" in got and "k3doctor" in got:
        pairs = zip(got["k3doctor+dead"], got["k3doctor"], strict=True)
        ratio = statistics.median(d["wall"] / a["wall"] for d, a in pairs)
        print(f"k3doctor with {dead} dead / all alive: {ratio:.2f}x")


if __name__ == "__main__":
    main()
