#!/usr/bin/env python3
"""`k3doctor check` of this tree and of another revision, interleaved on one simulated rack.

    sudo python3 bench/ab_revisions.py --base main                     # the whole fast tier, 5 rounds
    sudo python3 bench/ab_revisions.py --base HEAD~2 --only host-resources,launch-config --runs 9

Each round runs both, in alternating order, against the same rig (bench/side_by_side.py's setup), so the
load of a shared box moves both alike; printed per revision: wall seconds and the CPU seconds the nodes
spent per node (sshd sessions, what they ran, the nodes' dockerd/containerd), and the median of the
per-round differences. The base revision is exported with `git archive` into a scratch directory, its
checks/ placed as k3doctor/checks so that it imports its own checks, not this tree's. Asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from side_by_side import REPO, Setup, run_once  # noqa: E402


def export(revision: str, into: Path) -> Path:
    """The tree of ``revision`` under ``into``, importable as the k3doctor package from there."""
    into.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", revision], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    shutil.copytree(into / "checks", into / "k3doctor" / "checks")
    return into


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the revision to compare with (e.g. main, HEAD~1)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", help="checks to run (k3doctor check --only); default: the fast tier")
    args = parser.parse_args()
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory(prefix="k3ab-", dir="/tmp") as tmp:
        trees = {"this tree": REPO, args.base: export(args.base, Path(tmp) / "base")}
        with Setup(argparse.Namespace(rig=True, light=None, dead=0), Path(tmp)) as setup:
            argv = [sys.executable, "-m", "k3doctor.cli", "check", "--nodes", str(setup.inventories[""]),
                    "--format", "json", *(["--only", args.only] if args.only else [])]
            print(f"checks: {args.only or 'fast tier'}, rounds: {args.runs} + 1 warm-up, load before: "
                  f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
            got = {name: [] for name in trees}
            for round_ in range(args.runs + 1):
                for name in list(trees)[::1 if round_ % 2 else -1]:
                    figures = run_once(argv, setup, env, cwd=trees[name])
                    if round_:
                        got[name].append(figures)
                    print(f"  round {round_}{' (warm-up)' if not round_ else ''} {name}: {figures['wall']:.2f}s "
                          f"rc {figures['rc']}, node CPU {figures['node_cpu'] / len(setup.ssh):.3f}s per node",
                          flush=True)
            print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            nodes = len(setup.ssh)
    print("\n| revision | wall s min / median / max | node CPU s per node min / median / max |\n|---|---|---|")
    for name, runs in got.items():
        walls, cpu = [r["wall"] for r in runs], [r["node_cpu"] / nodes for r in runs]
        print(f"| {name} | {min(walls):.2f} / {statistics.median(walls):.2f} / {max(walls):.2f} "
              f"| {min(cpu):.3f} / {statistics.median(cpu):.3f} / {max(cpu):.3f} |")
    mine, base = got["this tree"], got[args.base]
    print(f"\nthis tree - {args.base}, median of per-round differences: wall "
          f"{statistics.median(a['wall'] - b['wall'] for a, b in zip(mine, base, strict=True)):+.2f} s, node CPU "
          f"{statistics.median((a['node_cpu'] - b['node_cpu']) / nodes for a, b in zip(mine, base, strict=True)):+.3f}"
          " s per node")


if __name__ == "__main__":
    main()
