#!/usr/bin/env python3
"""The fast tier side by side: the same reads via plain OpenSSH, Ansible ad-hoc and `k3doctor check`.

    sudo python3 bench/side_by_side.py --rig                      # the simulated 4-node rack (sshd + dockerd)
    sudo python3 bench/side_by_side.py --light 64 --dead 10       # 64 light nodes (sshd only), and 10 % dead
    sudo python3 bench/side_by_side.py --light 256 --only floor,k3doctor --runs 3
    sudo python3 bench/side_by_side.py --rig --profile real-node    # GPU tools at real-node time (§31.5)

The reads are those k3doctor itself takes: one `k3doctor check --save-readings` before the rounds, each node's
saved readings made into plain scripts by bench/fair_floor.py. The contenders, run in turn (interleaved,
rotated each round, after one warm-up round), ``--parallel`` nodes at a time (xargs -P):

- ``floor``: the fair floor. Per node ONE plain script over ONE ``ssh NODE sh -s`` doing exactly k3doctor's
  reads there: one ``tail`` over every file and glob, each host command once, the docker CLI for ps, events,
  info and one inspect a container, one ``docker exec`` for every reading inside a container.
- ``per-reading``: the older floor, kept as an extra column: one plain command per reading (a ``cat`` per
  file, a ``docker exec`` per container reading), in one ``ssh NODE sh -s`` per node.
- ``ssh-true``: a bare ``ssh NODE true``: what the connections alone cost.
- ``limit``: per node ONE ``ssh NODE CMD`` running only its slowest single read (timed once on the first node
  before the rounds): the physical limit of a passive check where reads overlap (reference §31.5). The
  ``vs limit`` column divides by max(that round's ``limit``, the CPU the fair floor's reads took on the nodes
  that round / this machine's cores): with many light nodes on few cores, the CPU term binds.
- ``ansible``: ``ansible all -m shell -a SCRIPT -f PARALLEL`` with the fair floor's script (needs ``ansible-core``).
- ``k3doctor``: ``k3doctor check --nodes INVENTORY --format json --parallel PARALLEL``, CLI start to exit.

``--profile real-node`` makes the rig's GPU tools take real-node time (k3rig/latency.py: amd-smi 0.8 s a
call, ``amd-smi static`` 1.5 s, rocm-smi 0.5 s, each query under the node's lock); ``zero`` (default) answers
at once, as the suite does. With ``--dead P`` each contender also runs on an inventory where P % of the
nodes are dead (half refuse, half blackholed), suffix ``+dead``. Printed per contender: wall seconds min/median/max, the median ratio to
the fair floor, to the per-reading floor and to ``ssh true`` (per round, pairing the runs of one round), peak
RSS of the contender's largest process, its own CPU seconds (this side), and the CPU seconds the nodes spent
per node (sshd sessions and everything they ran; on the rig also the node's dockerd/containerd). Light nodes
share this machine's cores: their wall time is the total node-side work. Then k3doctor's run by phase
(``K3DOCTOR_PHASES``: CLI start to the first connection, the last node's readings, every judge done, exit),
and with ``--processes`` the processes and programs each contender starts per node (one more run each,
counted by the kernel: bench/node_processes.py). ``--in-flight N`` adds this tree's k3doctor with
``ssh.reads_in_flight: N`` as ``k3doctor-jN``. ``--before DIR`` adds the k3doctor of another source tree
(e.g. ``git worktree add DIR BASE``) as ``k3doctor-before``, interleaved like the rest. Asserts nothing:
speed targets live here, not in timed tests.
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

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from fair_floor import fair_script, plain_per_reading, saved_specs  # noqa: E402
from node_processes import NodeProcesses, cpu_seconds  # noqa: E402

from k3doctor.readings import Command  # noqa: E402
from k3doctor.shell import join  # noqa: E402


class Setup:
    """The nodes, their inventories (all alive, and with dead nodes) and how to read the nodes' CPU."""

    def __init__(self, args, workdir: Path):
        self.args, self.workdir, self.rack = args, workdir, None
        self.trees = {}  # contender -> the source tree whose k3doctor it runs

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

    def node_pids(self) -> list:
        """The nodes' processes now (on the rig also their dockerd, containerd and shims)."""
        return self.rack.pids_matching("") if self.args.rig else self.rack.pids()

    def node_cpu_s(self) -> float:
        """CPU seconds so far of the nodes' own processes and what they reaped."""
        return cpu_seconds(self.node_pids())

    def __exit__(self, *exc):
        self.rack.stop()


FLOOR = "floor"  # the fair floor: one plain script per node doing exactly k3doctor's reads there
PER_READING = "per-reading"  # the older floor: one plain command per reading
SSH_TRUE = "ssh-true"  # a bare `ssh NODE true`: what one connection costs
LIMIT = "limit"  # per node only its slowest single read, over one ssh: the physical limit


def slowest_read(setup: Setup, specs: list) -> tuple[str, float]:
    """(the shell line, seconds) of the slowest host command among ``specs``, each timed once on the first node
    (files, globs and the engine's reads take milliseconds there; the GPU tools are what a node waits for)."""
    lines = [join(s.argv) for s in dict.fromkeys(specs) if type(s) is Command]
    timing = "".join(f"s=$(date +%s%N); {line} >/dev/null 2>&1; echo $(( $(date +%s%N) - s ))\n" for line in lines)
    name, host, port = setup.ssh[0]
    run = subprocess.run(["ssh", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={setup.known_hosts}", "-i",
                          str(setup.identity), "-p", str(port), f"root@{host}", "sh -s"], input=timing,
                         capture_output=True, text=True, timeout=600, check=True)
    took = [int(ns) / 1e9 for ns in run.stdout.split()]
    at = max(range(len(lines)), key=took.__getitem__)
    return lines[at], took[at]


def write_scripts(setup: Setup, saved: Path) -> dict:
    """kind -> folder of per-host scripts (``HOST.sh``) for the fair floor and the per-reading floor, made
    from the reads each node's saved readings list; a node without saved readings (dead) gets the first's."""
    by_node = saved_specs(str(saved))
    address = {name: host for name, host, _ in setup.ssh + setup.dead}
    first = next(iter(by_node.values()))
    folders = {}
    for kind, make in ((FLOOR, fair_script), (PER_READING, plain_per_reading)):
        folder = folders[kind] = setup.workdir / kind
        folder.mkdir(exist_ok=True)
        for name, host in address.items():
            (folder / f"{host}.sh").write_text(make(by_node.get(name, first)))
    return folders


def contenders(setup: Setup, scripts: dict, parallel: int, only: set, slowest: str) -> dict:
    """name -> argv (no shell on this side but where a pipe needs one)."""
    out = {}
    ssh_opts = (f"-o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile={setup.known_hosts} "
                f"-o ConnectTimeout=10 -i {setup.identity}")
    for suffix, inventory in setup.inventories.items():
        hosts = setup.workdir / f"hosts{suffix or '-alive'}.txt"
        hosts.write_text("".join(f"{h} {p}\n" for _, h, p in setup.hosts(suffix)))
        outdir = setup.workdir / "out"
        outdir.mkdir(exist_ok=True)
        # `exit 0`: xargs stops everything at a command's exit 255 (ssh's "could not connect")
        (setup.workdir / "limit.sh").write_text(slowest + "\n")
        remote = {SSH_TRUE: "true", LIMIT: f"sh -s < {setup.workdir}/limit.sh",
                  FLOOR: f'sh -s < {scripts[FLOOR]}/"$1".sh',
                  PER_READING: f'sh -s < {scripts[PER_READING]}/"$1".sh'}
        for name, command in remote.items():
            if name in only:
                each = f'ssh {ssh_opts} -p "$2" root@"$1" {command} > {outdir}/"$1" 2>&1; exit 0'
                out[name + suffix] = ["sh", "-c", f"xargs -P {parallel} -n 2 sh -c '{each}' _ < {hosts}"]
        ansible = shutil.which("ansible", path=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
        if "ansible" in only and ansible:
            ini = setup.workdir / f"ansible{suffix or '-alive'}.ini"
            ini.write_text("[nodes]\n" + "".join(f"{n} ansible_host={h} ansible_port={p}\n"
                                                  for n, h, p in setup.hosts(suffix))
                           + "[nodes:vars]\nansible_user=root\n"
                           f"ansible_ssh_private_key_file={setup.identity}\n"
                           "ansible_ssh_common_args='-o StrictHostKeyChecking=yes "
                           f"-o UserKnownHostsFile={setup.known_hosts}'\n"
                           "ansible_python_interpreter=/usr/bin/python3\nansible_remote_tmp=/tmp/.k3bench-ansible\n")
            # the fair floor's script (the first node's: the nodes' read sets are alike); raw: ansible templates
            # its arguments (the script's `docker --format '{{...}}'` is no template); `: ;` first, as an
            # argument that starts with `{` is read as JSON
            script = (scripts[FLOOR] / f"{setup.ssh[0][1]}.sh").read_text()
            out["ansible" + suffix] = [ansible, "all", "-i", str(ini), "-f", str(parallel), "-o", "-m", "shell",
                                       "-a", ": ; {% raw %}" + script + "{% endraw %}"]
        trees = {"k3doctor": setup.args.k3doctor_tree, "k3doctor-before": setup.args.before}
        for name, tree in trees.items():
            if "k3doctor" in only and tree:  # the tree's own: `python -m` imports the tree it starts in (cwd)
                setup.trees[name + suffix] = tree
                out[name + suffix] = [sys.executable, "-m", "k3doctor.cli", "check", "--nodes", str(inventory),
                                      "--format", "json", "--parallel", str(parallel),
                                      "-o", str(outdir / f"{name}{suffix}.json")]
        for bound in setup.args.in_flight:  # this tree's k3doctor with ssh.reads_in_flight set
            if "k3doctor" in only:
                name = f"k3doctor-j{bound}{suffix}"
                inv = yaml.safe_load(inventory.read_text())
                inv.setdefault("ssh", {})["reads_in_flight"] = bound
                (setup.workdir / f"{name}.yaml").write_text(yaml.safe_dump(inv, sort_keys=False))
                setup.trees[name] = setup.args.k3doctor_tree
                out[name] = [sys.executable, "-m", "k3doctor.cli", "check", "--nodes",
                             str(setup.workdir / f"{name}.yaml"), "--format", "json", "--parallel", str(parallel),
                             "-o", str(outdir / f"{name}.json")]
    return out


def save_readings(setup: Setup, env: dict, parallel: int) -> Path:
    """One `k3doctor check --save-readings` of the live nodes: the reads the floors are made from, with the
    nodes' real names and addresses (--keep-identifiers), which the floors log in to."""
    saved = setup.workdir / "saved-readings.json"
    subprocess.run([sys.executable, "-m", "k3doctor.cli", "check", "--nodes", str(setup.inventories[""]), "-q",
                    "--parallel", str(parallel), "--save-readings", str(saved),
                    "--keep-identifiers"], stdout=subprocess.DEVNULL,
                   env=env, cwd=REPO, check=False)
    if not saved.exists():
        sys.exit("bench: k3doctor saved no readings (see above)")
    return saved


def run_once(argv: list, setup: Setup, env: dict, cwd: Path = REPO) -> dict:
    """One contender's run: wall, exit status, peak RSS, own CPU, the nodes' CPU; for k3doctor also its phases
    (seconds from the start: first connection, last node read, judged; ``exit`` is the wall time)."""
    marks = setup.workdir / "phases.txt"
    marks.unlink(missing_ok=True)
    if "k3doctor.cli" in argv:
        env = dict(env, K3DOCTOR_PHASES=str(marks))
    cpu_before = setup.node_cpu_s()
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    figures = {"wall": wall, "rc": proc.returncode, "peak_mb": usage.ru_maxrss / 1024,
               "cpu": usage.ru_utime + usage.ru_stime, "node_cpu": setup.node_cpu_s() - cpu_before}
    if marks.exists():
        seen: dict = {}
        for line in marks.read_text().splitlines():
            name, at = line.split()
            seen.setdefault(name, []).append(float(at) - started)
        figures["phases"] = {"connect": min(seen.get("connect", [wall])), "read": max(seen.get("read", [wall])),
                             "judged": max(seen.get("judged", [wall])), "exit": wall}
    return figures


def count_processes(runs: dict, setup: Setup, env: dict) -> None:
    """One more run of each contender (all nodes alive), the processes the nodes started during it counted
    (bench/node_processes.py): per node, the processes (forks) and the programs (execs)."""
    print("\n| contender | processes per node | programs (execs) per node |\n|---|---|---|")
    alive = len(setup.ssh)
    for name, argv in runs.items():
        if name.endswith("+dead"):
            continue
        with NodeProcesses(setup.node_pids()) as counted:
            run_once(argv, setup, env, setup.trees.get(name, REPO))
        print(f"| {name} | {counted.forks / alive:.1f} | {counted.execs / alive:.1f}"
              f"{' (events lost: a floor)' if counted.lost else ''} |")


def phase_table(got: dict) -> None:
    """k3doctor's run by phase (medians over the runs): when the first connection started, the last node's
    readings were in, every judge had run, the process had exited."""
    timed = {name: [r["phases"] for r in runs if "phases" in r] for name, runs in got.items()}
    timed = {name: phases for name, phases in timed.items() if phases}
    if not timed:
        return
    print("\n| k3doctor phase (s from CLI start, median) | first connect | last node read | judged | exit |\n"
          "|---|---|---|---|---|")
    for name, phases in timed.items():
        cells = [f"{statistics.median(p[k] for p in phases):.3f}" for k in ("connect", "read", "judged", "exit")]
        print(f"| {name} | {' | '.join(cells)} |")


def first_connection(runs: int, env: dict, tree: Path = REPO) -> list:
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
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=tree)
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
    parser.add_argument("--only", default=f"{SSH_TRUE},{LIMIT},{FLOOR},{PER_READING},ansible,k3doctor")
    parser.add_argument("--in-flight", type=int, action="append", default=[], metavar="N",
                        help="also run this tree's k3doctor with ssh.reads_in_flight N, as `k3doctor-jN` (repeatable)")
    parser.add_argument("--profile", default="zero", help="the GPU tools' time: zero, or real-node (k3rig.latency)")
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    parser.add_argument("--k3doctor-tree", type=Path, default=REPO, metavar="DIR",
                        help="run the k3doctor of this source tree (e.g. a worktree of an older revision)")
    parser.add_argument("--before", type=Path, default=None, metavar="DIR",
                        help="also run the k3doctor of this tree as `k3doctor-before` (e.g. a worktree of the base)")
    parser.add_argument("--processes", action="store_true",
                        help="then count the processes each contender starts per node (one more run each; root)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the nodes on the way out
    env = dict(os.environ, ANSIBLE_HOST_KEY_CHECKING="True", ANSIBLE_LOCAL_TEMP="/tmp/.k3bench-ansible-local",
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the Python contenders run as installed: with their bytecode
    with tempfile.TemporaryDirectory(prefix="k3bench-", dir="/tmp") as tmp, Setup(args, Path(tmp)) as setup:
        from k3rig import latency

        latency.apply(latency.trees(setup.rack), args.profile)
        saved = save_readings(setup, env, args.parallel)
        scripts = write_scripts(setup, saved)
        first = next(iter(saved_specs(str(saved)).values()))
        slowest, took = slowest_read(setup, first)
        runs = contenders(setup, scripts, args.parallel, set(args.only.split(",")), slowest)
        nodes = len(setup.ssh)
        print(f"nodes: {nodes} ({'rig' if args.rig else 'light'}), dead: {len(setup.dead)}, readings per node: "
              f"{len(first)}, profile {args.profile}, slowest read `{slowest}` {took:.2f} s, parallel "
              f"{args.parallel}, runs {args.runs} + {args.warmup} warm-up, k3doctor's reads in flight: the default, "
              f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        got = {name: [] for name in runs}
        names = list(runs)
        for round_ in range(args.warmup + args.runs):
            order = names[round_ % len(names):] + names[:round_ % len(names)]
            for name in order:
                figures = run_once(runs[name], setup, env, setup.trees.get(name, REPO))
                if round_ >= args.warmup:
                    got[name].append(figures)
                print(f"  round {round_}{' (warm-up)' if round_ < args.warmup else ''} {name}: {figures['wall']:.2f}s "
                      f"rc {figures['rc']}", flush=True)
        print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        table(got, nodes, len(setup.dead))
        phase_table(got)
        if args.processes:
            count_processes(runs, setup, env)
        if "k3doctor" in runs:
            for name, tree in (("k3doctor", args.k3doctor_tree), ("k3doctor-before", args.before)):
                if tree:
                    starts = first_connection(args.runs, env, tree)
                    print(f"{name} CLI start to first connection: min {min(starts):.3f} / median "
                          f"{statistics.median(starts):.3f} / max {max(starts):.3f} s")
        if args.json:
            args.json.write_text(json.dumps({"nodes": nodes, "dead": len(setup.dead), "runs": got}, indent=1))


def _ratio(runs: list, baseline: list | None) -> str:
    """Median of the per-round ratios (the runs of one round paired: a loaded round moves both)."""
    if not baseline:
        return "-"
    return f"{statistics.median(r['wall'] / b['wall'] for r, b in zip(runs, baseline, strict=True)):.2f}x"


def limits(got: dict) -> list | None:
    """Per round, the physical limit: max(the slowest single read over one ssh, the CPU the fair floor's reads
    took on the nodes / this machine's cores), as {"wall": seconds}; None without a ``limit`` contender."""
    if LIMIT not in got:
        return None
    floors = got.get(FLOOR) or [{"node_cpu": 0.0}] * len(got[LIMIT])
    cores = os.cpu_count() or 1
    return [{"wall": max(lim["wall"], floor["node_cpu"] / cores)}
            for lim, floor in zip(got[LIMIT], floors, strict=True)]


def table(got: dict, nodes: int, dead: int) -> None:
    limit = limits(got)
    if limit:
        rounds = " ".join(f"{x['wall']:.2f}" for x in limit)
        print(f"\nphysical limit per round (s): {rounds} (median "
              f"{statistics.median(x['wall'] for x in limit):.2f}; {os.cpu_count()} cores here)")
    print("\n| contender | wall s min / median / max | vs limit | vs fair floor | vs per-reading floor | vs ssh true "
          "| peak MB | own CPU s | node CPU s per node |\n|---|---|---|---|---|---|---|---|---|")
    for name, runs in got.items():
        walls = [r["wall"] for r in runs]
        suffix = "+dead" if name.endswith("+dead") else ""
        ratios = [_ratio(runs, limit if not suffix else None)]
        ratios += [_ratio(runs, got.get(base + suffix) or got.get(base)) for base in (FLOOR, PER_READING, SSH_TRUE)]
        alive = nodes - (dead if suffix else 0)
        cpu = statistics.median(r["node_cpu"] for r in runs) / max(alive, 1)
        print(f"| {name} | {min(walls):.2f} / {statistics.median(walls):.2f} / {max(walls):.2f} | {' | '.join(ratios)} "
              f"| {max(r['peak_mb'] for r in runs):.0f} | {statistics.median(r.get('cpu', 0) for r in runs):.2f} "
              f"| {cpu:.3f} |")
    if "k3doctor" in got and "ansible" in got:
        ratio = statistics.median(a["wall"] / k["wall"] for a, k in zip(got["ansible"], got["k3doctor"], strict=True))
        print(f"\nansible (the fair floor's script) / k3doctor: {ratio:.2f}x")
    if "k3doctor+dead" in got and "k3doctor" in got:
        pairs = zip(got["k3doctor+dead"], got["k3doctor"], strict=True)
        ratio = statistics.median(d["wall"] / a["wall"] for d, a in pairs)
        print(f"k3doctor with {dead} dead / all alive: {ratio:.2f}x")


if __name__ == "__main__":
    main()
