#!/usr/bin/env python3
"""What one SSH connection costs the client and the node, counted by the kernel: OpenSSH's `ssh NODE true` (its
default key exchange, and curve25519 alone) against paramiko's connect as k3doctor makes it, on light nodes.

    sudo PYTHONPATH=rig python3 bench/handshake_cost.py --connections 32

Why (bench/results/fast-tier-table-2026-12-07/README.md, the two floors): on a 2-core box where the client and
the nodes share the CPU, a floor of one `ssh` per node is bound by the CPU its clients and the nodes' sshd spend,
so its ratio to k3doctor is the ratio of those CPU seconds as much as anything a user waits for. Per
connection: the client's CPU (OpenSSH: the `ssh` processes' rusage; paramiko: this process's CPU over its
connects, key loading included) and the node's (its sshd processes and what they reaped). Asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from node_processes import cpu_seconds  # noqa: E402


def node_cpu(rack) -> float:
    return cpu_seconds(rack.pids())


def openssh(rack, hosts: list, kex: str | None) -> float:
    """Client CPU seconds of one `ssh HOST true` per host, one after another (wait4's rusage)."""
    cpu = 0.0
    for host in hosts:
        argv = ["ssh", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={rack.known_hosts}", "-i",
                str(rack.identity_file), "-p", "2222", *(["-o", f"KexAlgorithms={kex}"] if kex else []),
                f"root@{host}", "true"]
        pid = os.posix_spawnp("ssh", argv, os.environ)
        _, status, usage = os.wait4(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, argv
        cpu += usage.ru_utime + usage.ru_stime
    return cpu


def paramiko_connects(rack, hosts: list) -> float:
    """This process's CPU seconds over one paramiko connect + `true` + close per host (k3doctor's client)."""
    import paramiko

    began = time.process_time()
    for host in hosts:
        client = paramiko.SSHClient()
        client.load_host_keys(str(rack.known_hosts))
        client.connect(host, port=2222, username="root", key_filename=str(rack.identity_file),
                       allow_agent=False, look_for_keys=False, timeout=10)
        _, out, _ = client.exec_command("true")
        out.channel.recv_exit_status()
        client.close()
    return time.process_time() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=32, help="per contender and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from k3rig.light import LightRack

    contenders = {"openssh (default kex)": lambda r, h: openssh(r, h, None),
                  "openssh (curve25519-sha256)": lambda r, h: openssh(r, h, "curve25519-sha256"),
                  "paramiko (k3doctor's client)": paramiko_connects}
    got = {name: {"client": [], "node": []} for name in contenders}
    with tempfile.TemporaryDirectory(prefix="k3doctor-handshake-") as tmp:
        rack = LightRack(Path(tmp) / "rack", nodes=args.connections)
        rack.start()
        try:
            hosts = [host for _, host, _ in rack.hosts]
            print(f"{ssh_version()}; paramiko {__import__('paramiko').__version__}; {len(hosts)} light nodes; "
                  f"load before: {os.getloadavg()[0]:.2f}")
            for round_ in range(args.rounds):
                order = list(contenders)[round_ % 3:] + list(contenders)[:round_ % 3]
                for name in order:
                    before = node_cpu(rack)
                    client = contenders[name](rack, hosts)
                    got[name]["client"].append(client / len(hosts))
                    got[name]["node"].append((node_cpu(rack) - before) / len(hosts))
        finally:
            rack.stop()
    print("\n| client | client CPU ms per connection (median of rounds) | node CPU ms per connection |\n|---|---|---|")
    for name, runs in got.items():
        print(f"| {name} | {statistics.median(runs['client']) * 1000:.1f} | {statistics.median(runs['node']) * 1000:.1f} |")
    print(f"\nload after: {os.getloadavg()[0]:.2f}")


def ssh_version() -> str:
    return subprocess.run(["ssh", "-V"], capture_output=True, text=True).stderr.strip()


if __name__ == "__main__":
    main()
