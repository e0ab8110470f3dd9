"""How long `k3doctor node --slurm-drain` takes as a HealthCheckProgram (Slurm kills it at 60 s).

Usage (root, slurm-wlm installed): python3 bench/slurm_health_check.py [RUNS]
Starts a real one-node Slurm cluster (tests/slurm_cluster.py) and runs every passive check of
`k3doctor node` on a rig fixture tree of ct14 (fake GPUs only), through --slurm-drain, RUNS times per case:
healthy hardware, a failing card (drain), and the worst case: a hung dmesg (cut at the per-reading
timeout) together with a hung scontrol (cut at --slurm-timeout). Prints min / median / max seconds.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from k3rig import scenario as scenarios  # noqa: E402
from k3rig.fixtures import DEFAULT_TRAYS, write_tree  # noqa: E402

from tests.slurm_cluster import NODE, SlurmCluster, k3doctor_argv, missing, on_fake_hardware  # noqa: E402

HEALTH_CHECK_KILL_S = 60


def main(runs: int) -> int:
    why = missing()
    if why:
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="k3doctor-bench-slurm-") as tmp:
        base = Path(tmp)
        healthy = scenarios.node_states(scenarios.load("healthy"), DEFAULT_TRAYS)[1]
        failing = scenarios.node_states(scenarios.load("card-unconfigured"), DEFAULT_TRAYS)[1]
        trees = {"healthy": healthy, "failing card": failing,
                 "hung dmesg + hung scontrol": dataclasses.replace(healthy, tools={"dmesg": "hang"})}
        for name, state in trees.items():
            write_tree(base / name.replace(" ", "-"), state)
        hang = base / "bin"
        hang.mkdir()
        (hang / "scontrol").write_text("#!/bin/sh\nexec sleep 300\n")
        (hang / "scontrol").chmod(0o755)
        with SlurmCluster(base / "slurm") as cluster:
            print(f"{'case':28} {'min':>6} {'median':>7} {'max':>6}  (s; Slurm kills at {HEALTH_CHECK_KILL_S} s)")
            for name in trees:
                env = dict(cluster.env)
                if "hung scontrol" in name:
                    env["PATH"] = f"{hang}:{env.get('PATH', os.defpath)}"
                took = []
                for _ in range(runs):
                    argv = k3doctor_argv("node", "--name", "ct14", "--slurm-drain", "--slurm-node", NODE)
                    started = time.monotonic()
                    subprocess.run(on_fake_hardware(base / name.replace(" ", "-"), argv), env=env,
                                   capture_output=True, timeout=120, check=False)
                    took.append(time.monotonic() - started)
                    if cluster.state() != "idle":
                        cluster.back_in_service()
                print(f"{name:28} {min(took):6.1f} {statistics.median(took):7.1f} {max(took):6.1f}")
        shutil.rmtree(base / "bin")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
