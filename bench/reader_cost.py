#!/usr/bin/env python3
"""What overlapping a node's readings costs the node: the reader (k3doctor/remote/node_reader.py) with its
readings one after another (``-j1``) and up to N at once, on this machine, counted by the kernel.

    python3 bench/reader_cost.py --rounds 20 --in-flight 4     # sudo: also the processes (proc connector)

The readings are those of the fast tier's node script for a default node (every passive check's files, globs
and host commands; the engine's readings are not the reader's). Here the GPU tools are absent, so each
command is its wrapper and the tool's "not found": the reader's own work and the processes it starts, not the
tools' time. Rounds alternate the two settings; per run, the CPU seconds of the reader and everything it
reaped (``wait4``'s rusage: user + system) and, as root, the processes and programs started (the kernel's
fork and exec events, bench/node_processes.py). Asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from node_processes import NodeProcesses, available  # noqa: E402

from k3doctor.gather.node_script import NODE_READER, KILL_AFTER_S, _reader_words, _steps  # noqa: E402
from k3doctor.inventory.types import Settings  # noqa: E402
from k3doctor.judging.runner import specs_of  # noqa: E402
from k3doctor.readings import Command, Exists, File, Glob  # noqa: E402
from k3doctor.registry import REGISTRY, load_checks  # noqa: E402


def node_records() -> list:
    load_checks()
    passive = [c for c in REGISTRY.ordered() if c.interaction == "passive"]
    specs = [s for got in specs_of(passive, Settings()).values() if isinstance(got, dict) for s in got.values()]
    mine = [s for s in dict.fromkeys(specs) if type(s) in (Command, File, Glob, Exists)]
    return [w for index, spec in _steps(mine, 30.0) for w in _reader_words(index, spec)]


def one_run(records: list, in_flight: int, count: bool) -> dict:
    argv = [sys.executable, "-I", "-S", "-c", NODE_READER, "n0nce", str(4 << 20), "30", f"{KILL_AFTER_S:g}",
            f"-j{in_flight}", *records]
    with NodeProcesses({os.getpid()}) if count else _Nothing() as counted:
        pid = os.posix_spawn(argv[0], argv, os.environ,
                             file_actions=[(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)])
        _, status, usage = os.wait4(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
    return {"cpu": usage.ru_utime + usage.ru_stime, "forks": counted.forks - 1 if count else None,
            "execs": counted.execs if count else None}


class _Nothing:
    forks = execs = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--in-flight", type=int, default=4)
    args = parser.parse_args()
    records = node_records()
    count = os.geteuid() == 0 and available()
    commands = records.count("C")
    print(f"records: {len(records)} words, {commands} commands; load before: {os.getloadavg()[0]:.2f}")
    got: dict = {1: [], args.in_flight: []}
    for round_ in range(args.rounds + 1):
        for bound in (1, args.in_flight) if round_ % 2 else (args.in_flight, 1):
            run = one_run(records, bound, count)
            if round_:  # the first round warms the page cache
                got[bound].append(run)
    print("\n| reads in flight | node CPU s per run min / median / max | processes per run | programs per run |\n"
          "|---|---|---|---|")
    for bound, runs in got.items():
        cpu = [r["cpu"] for r in runs]
        forks = statistics.median(r["forks"] for r in runs) if count else "-"
        execs = statistics.median(r["execs"] for r in runs) if count else "-"
        print(f"| {bound} | {min(cpu):.4f} / {statistics.median(cpu):.4f} / {max(cpu):.4f} | {forks} | {execs} |")
    ratio = statistics.median(b["cpu"] / a["cpu"] for a, b in zip(got[1], got[args.in_flight], strict=True))
    print(f"\nCPU, {args.in_flight} in flight / 1 (median of the per-round ratios): {ratio:.3f}x; "
          f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
