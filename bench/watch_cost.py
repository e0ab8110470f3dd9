#!/usr/bin/env python3
"""What ``k3doctor watch`` costs over time (issue 36's targets: 64 nodes for 10 minutes, client CPU < 10 % of one
core, client memory flat after the first minute, node-side CPU per interval measured).

    sudo PYTHONPATH=rig python3 bench/watch_cost.py --nodes 64 --minutes 10 --out bench/results/DIR

Light nodes (real sshd per node, faked GPU tree: k3rig.light), one rig engine fake (k3rig.model_server, 4 DP
ranks) whose ``/metrics`` every node reads on itself (the nodes share the host's network: ``--metrics-port``
for all), the watch at its default interval (10 s) with ``--format jsonl`` and a ``--prom-file``. Sampled every
interval: the watch process's CPU (its own and its reaped children's, from the kernel via psutil: utime +
stime), its RSS, the CPU the nodes' processes used (every process in the light nodes' mount namespaces, and
what they reaped: sshd listeners, the watch's sessions and what each interval's script runs) and the box's
load average (``/proc/loadavg``: the box is shared, its load is printed beside every figure). Asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]


def cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


def node_cpu_s(rack) -> float:
    total = 0.0
    for pid in rack.pids():
        try:
            total += cpu_s(psutil.Process(pid))
        except psutil.Error:
            continue
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--interval", type=float, default=10.0)
    ap.add_argument("--out", type=Path, required=True, help="folder for samples.jsonl and summary.txt")
    args = ap.parse_args()
    from k3rig.light import LightRack

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="k3doctor-watch-cost-") as tmp, \
            LightRack(Path(tmp) / "rack", nodes=args.nodes) as rack:
        engine = subprocess.Popen([sys.executable, "-m", "k3rig.model_server", "--ranks", "4", "--lifetime",
                                   str(args.minutes * 60 + 300)], stdout=subprocess.PIPE, text=True)
        port = int(engine.stdout.readline())
        prom = Path(tmp) / "watch.prom"
        argv = [sys.executable, "-m", "k3doctor.cli", "watch", "--nodes", str(rack.inventory_path), "--interval",
                f"{args.interval:g}", "--for", f"{args.minutes * 60:g}s", "--format", "jsonl", "--prom-file",
                str(prom), "--metrics-port", str(port), "--engine-process", "k3rig[.]model_server --ranks"]
        events = open(args.out / "events.jsonl", "w")
        watch = subprocess.Popen(argv, stdout=events, stderr=subprocess.STDOUT, cwd=REPO)
        me = psutil.Process(watch.pid)
        samples, started = [], time.monotonic()
        node0, cpu0 = node_cpu_s(rack), 0.0
        try:
            while watch.poll() is None:
                time.sleep(args.interval)
                try:
                    if me.status() == psutil.STATUS_ZOMBIE:
                        break  # ended: its last figures are the sample before
                    cpu, rss = cpu_s(me), me.memory_info().rss
                except psutil.Error:
                    break
                node = node_cpu_s(rack)
                sample = {"t_s": round(time.monotonic() - started, 1), "client_cpu_s": round(cpu, 3),
                          "client_cpu_pct_of_core": round(100 * (cpu - cpu0) / args.interval, 2),
                          "rss_mib": round(rss / 2**20, 1), "node_cpu_s_interval": round(node - node0, 3),
                          "load": open("/proc/loadavg").read().split()[:3]}
                cpu0, node0 = cpu, node
                samples.append(sample)
                print(json.dumps(sample), flush=True)
        finally:
            rc = watch.wait()
            events.close()
            engine.kill()
            engine.wait()
    (args.out / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    summary = summarize(samples, args, rc)
    (args.out / "summary.txt").write_text(summary)
    print(summary)


def summarize(samples: list, args, rc: int) -> str:
    if not samples:
        return f"no samples (watch exit {rc})\n"
    wall = samples[-1]["t_s"]
    after_1m = [s for s in samples if s["t_s"] > 60]
    rss = [s["rss_mib"] for s in samples]
    node = [s["node_cpu_s_interval"] for s in samples[1:]] or [0.0]
    load = [float(s["load"][0]) for s in samples]
    lines = [f"{args.nodes} nodes, interval {args.interval:g} s, {wall:.0f} s watched, watch exit {rc}",
             f"client CPU: {samples[-1]['client_cpu_s']:.1f} s in {wall:.0f} s = "
             f"{100 * samples[-1]['client_cpu_s'] / wall:.1f} % of one core (first interval, with the connects: "
             f"{samples[0]['client_cpu_pct_of_core']:.1f} %; after: median "
             f"{statistics.median(s['client_cpu_pct_of_core'] for s in samples[1:] or samples):.1f} %, max "
             f"{max(s['client_cpu_pct_of_core'] for s in samples[1:] or samples):.1f} %)",
             f"client RSS MiB: first {rss[0]}, at 1 min {after_1m[0]['rss_mib'] if after_1m else '-'}, "
             f"last {rss[-1]}, max after 1 min {max((s['rss_mib'] for s in after_1m), default='-')}",
             f"node-side CPU per interval (all {args.nodes} nodes): median {statistics.median(node):.2f} s, "
             f"max {max(node):.2f} s = {1000 * statistics.median(node) / args.nodes:.1f} ms per node per interval",
             f"load average (1 min) during the run: min {min(load):.2f}, median {statistics.median(load):.2f}, "
             f"max {max(load):.2f} (2 cores, shared)"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
