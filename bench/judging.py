#!/usr/bin/env python3
"""Judging at scale (issue 35 item 3): the time from the last node's readings to the last verdict, for N nodes.

    python3 bench/judging.py --nodes 256 --rounds 5        # the figure issue 35's target is about (<= 0.4 s)
    python3 bench/judging.py --nodes 256 --profile 25      # cProfile's top 25 by cumulative time

The readings are a field corpus file's (default tests/field/rig-healthy: four rig nodes as `check
--save-readings` took them) given to N nodes, each node its own decoded copy (nothing shared between nodes
that a real run would not share), judged by the run's own path (``run_checks`` replaying them: every node's
node and GPU checks, then the cluster checks). Prints, per round, the whole judging (both phases, one after
another here; in a run the node phase overlaps the other nodes' reads) and the cluster phase alone: what a
user waits for after the last node is read. Asserts nothing.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from k3doctor.cli.options import load_plugins  # noqa: E402
from k3doctor.gather.snapshot import decode_readings, saved_inventory  # noqa: E402
from k3doctor.judging import runner  # noqa: E402
from k3doctor.judging.runner import RunOptions, run_checks, select_checks  # noqa: E402
from k3doctor.registry import REGISTRY  # noqa: E402

SEED = REPO / "tests" / "field" / "rig-healthy.readings.json"


def scaled(seed: Path, nodes: int) -> tuple:
    """(inventory, {node: {spec: reading}}): the seed's nodes given round-robin to ``nodes`` nodes."""
    doc = json.loads(seed.read_text())
    names = list(doc["nodes"])
    head, _, tail = doc["inventory"].partition("\nnodes:\n")
    rows = "".join(f"- name: n{i}\n  host: 10.{i >> 8}.{i & 255}.1\n  data_ip: 10.{i >> 8}.{i & 255}.1\n"
                   for i in range(nodes))
    text = head + "\nnodes:\n" + rows
    saved = {f"n{i}": decode_readings(doc["nodes"][names[i % len(names)]]) for i in range(nodes)}
    return saved_inventory(text, saved, str(seed)), saved


def one_round(seed: Path, nodes: int, profile: cProfile.Profile | None) -> tuple:
    """((wall, CPU) seconds of the whole judging, (wall, CPU) seconds of its cluster phase) of one replayed run.
    The CPU seconds (the process's; the cluster phase's thread's) are what a shared, loaded box moves least."""
    inv, saved = scaled(seed, nodes)
    checks = select_checks(REGISTRY)
    phase = []
    cluster_phase = runner.judge_cluster

    def timed(*args):
        began, cpu = time.perf_counter(), time.thread_time()
        try:
            return cluster_phase(*args)
        finally:
            phase.append((time.perf_counter() - began, time.thread_time() - cpu))

    runner.judge_cluster = timed  # run_checks calls it by its module name
    try:
        started, cpu = time.perf_counter(), time.process_time()
        if profile:
            profile.enable()
        report = run_checks(inv, checks, RunOptions(replay=(saved, {}), parallel=1))
        if profile:
            profile.disable()
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    finally:
        runner.judge_cluster = cluster_phase
    assert len(report.nodes) == nodes
    return (wall, cpu), phase[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=Path, default=SEED, help="a readings file (default: %(default)s)")
    parser.add_argument("--profile", type=int, metavar="TOP", help="profile one round, print the top TOP")
    args = parser.parse_args()
    load_plugins()
    if args.profile:
        prof = cProfile.Profile()
        one_round(args.seed, args.nodes, prof)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(args.profile)
        return
    got = [one_round(args.seed, args.nodes, None) for _ in range(args.rounds)]
    print(f"judging {args.nodes} nodes' readings ({args.seed.name}), {args.rounds} rounds:")
    for label, part in (("whole judging (node + cluster phase)", 0), ("cluster phase (after the last read)", 1)):
        for kind, index in (("wall", 0), ("CPU", 1)):
            values = [got_[part][index] for got_ in got]
            print(f"  {label}, {kind}: median {statistics.median(values):.3f} s, min {min(values):.3f}, "
                  f"max {max(values):.3f}")


if __name__ == "__main__":
    main()
