#!/usr/bin/env python3
"""Figures for the fast tier: wall-clock time of a full `k3doctor check` and SSH round trips per node.

    sudo python3 bench/fast_tier.py                 # stands up the simulated 4-node rack
    python3 bench/fast_tier.py --nodes inv.yaml     # a real rack (read-only fast tier)

Prints figures; asserts nothing (speed targets live here, not in timed tests).
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


def one_run(inventory: Path) -> tuple[float, dict, str]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "k3doctor.cli", "check", "--nodes", str(inventory),
                           "--format", "json"], capture_output=True, text=True)
    wall = time.monotonic() - started
    doc = json.loads(proc.stdout)
    return wall, {n["name"]: n["round_trips"] for n in doc["nodes"]}, doc["verdict"]


def measure(inventory: Path, runs: int) -> None:
    walls, trips, verdicts = [], {}, set()
    for _ in range(runs):
        wall, trips, verdict = one_run(inventory)
        walls.append(wall)
        verdicts.add(verdict)
    print(f"inventory: {inventory}")
    print(f"runs: {runs}  verdicts: {', '.join(sorted(verdicts))}")
    print(f"wall clock (CLI start to exit, s): min {min(walls):.2f}  median {statistics.median(walls):.2f}"
          f"  max {max(walls):.2f}")
    print("round trips per node (exec channels, incl. Docker API): "
          + ", ".join(f"{n}={t}" for n, t in trips.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=Path, help="inventory of a real rack (default: the simulated rack)")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if args.nodes:
        measure(args.nodes, args.runs)
        return
    from k3rig import Rig

    with tempfile.TemporaryDirectory(prefix="k3bench-") as tmp:
        started = time.monotonic()
        with Rig(Path(tmp)) as rig:
            print(f"rig start: {time.monotonic() - started:.1f}s")
            measure(rig.inventory_path, args.runs)


if __name__ == "__main__":
    main()
