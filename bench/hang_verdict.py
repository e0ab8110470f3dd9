"""Time to verdict on a hang, and each probe stage's healthy time, on the simulated rack (issue 12).

Starts a 4-node rig, then runs the real CLI with the default stage deadlines (only the fault differs):
healthy allreduce-probe (its stage times: the slowest rank per stage), healthy ualoe-fabric, a rank
hung at rendezvous, a hung ubench pair.  The all_reduce runs are the e2e tests' shape (one rank per
node on the host's python) with start_s raised, as they do: on the loaded 2-core box four
`import torch` alone take 12-33 s.  Prints one line per run: wall seconds (CLI start to exit), the
probe's own elapsed_s and its stages or hierarchy runs, status per node.
Usage: python3 bench/hang_verdict.py [WORKDIR] [RUNS]   (run as root; a few minutes per run)
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from k3rig import Rig

AR, UA = "allreduce-probe", "ualoe-fabric"
SHAPE = ["--set", f"{AR}.where=host", "--set", f"{AR}.ranks_per_node=1", "--set", f"{AR}.start_s=150"]


def cli(rig, only, *args, hang=None):
    """``hang``: NODE[:LOCAL_RANK]@STAGE[@once], the rig's hang drill (k3rig.hang)."""
    t0 = time.monotonic()
    inventory = rig.hang_inventory(hang) if hang else rig.inventory_path
    proc = subprocess.run([sys.executable, "-m", "k3doctor.cli", "check", "--nodes", str(inventory),
                           "--only", only, "--format", "json", *args], capture_output=True, text=True,
                          timeout=900, env=dict(os.environ))
    wall = time.monotonic() - t0
    doc = json.loads(proc.stdout) if proc.stdout.strip() else {"results": []}
    return wall, [r for r in doc["results"] if r["check"] == only], proc.stderr[-400:]


def summary(results):
    return ", ".join(f"{r['node'] or 'cluster'} {r['status']}" for r in results)


def main(argv) -> int:
    work = Path(argv[1]) if len(argv) > 1 else Path(tempfile.mkdtemp(prefix="hangbench-"))
    runs = int(argv[2]) if len(argv) > 2 else 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the rig on a kill too
    with Rig(work) as rig:
        hung = rig.nodes[3].name
        for i in range(runs):
            rig.apply("healthy")
            wall, res, err = cli(rig, AR, *SHAPE)
            cluster = next((r for r in res if r["node"] is None), {"evidence": {}})
            print(f"[{i}] {AR} healthy: wall {wall:.1f}s elapsed {cluster['evidence'].get('elapsed_s')}s "
                  f"stages {cluster['evidence'].get('stage_s')} -> {summary(res)} {err if not res else ''}",
                  flush=True)
            wall, res, err = cli(rig, UA)
            print(f"[{i}] {UA} healthy: wall {wall:.1f}s -> {summary(res)} {err if not res else ''}", flush=True)
            rig.apply("healthy")
            wall, res, err = cli(rig, AR, *SHAPE, hang=f"{hung}@rendezvous")
            ev = next((r for r in res if r["node"] is None), {"evidence": {}})["evidence"]
            runs = [(h["run"], h.get("wall_s")) for h in ev.get("hierarchy", [])]
            print(f"[{i}] {AR} rank hung at rendezvous on {hung}: wall {wall:.1f}s elapsed {ev.get('elapsed_s')}s "
                  f"(full run {ev.get('wall_s')}s, then {runs}) -> {summary(res)} {err if not res else ''}", flush=True)
            rig.apply("ualoe-p2p-hang")
            wall, res, err = cli(rig, UA)
            print(f"[{i}] {UA} p2p hang on ct17: wall {wall:.1f}s -> {summary(res)} {err if not res else ''}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
