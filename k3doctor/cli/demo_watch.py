"""``k3doctor demo --watch``: the watch on a simulated rack, with one DP rank stalling while it looks.

Two light nodes of the rig (real sshd per node, faked GPUs: k3rig.light), each serving the rig's ATOM engine fake
(k3rig.model_server: /metrics with per-rank families, /health always ok). A few seconds in, rank 2 of the first
node stops making progress with work still running - its counters frozen, its metrics timestamp fresh, /health
200, the silent fault of reference §31.2 - and the watch names that node and rank once its ``--stall`` is over.
The run is short (the stall threshold is lowered to seconds) and leaves nothing behind.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import click

RANKS = (4, 2)  # DP ranks of the two nodes' engines
STALLED_RANK, STALL_AT_S, STALL_S, INTERVAL_S = 2, 4.0, 6.0, 1.0
ENGINE_PROCESS = r"k3rig[.]model_server --ranks"  # the rig's engines, not a real ATOM's process names


def run_watch_demo() -> int:
    """Stand up the rack and its engines, watch until the stall has been named, tear down; the watch's exit."""
    from k3rig.light import LightRack

    from k3doctor.inventory.load import load_inventory
    from k3doctor.registry import REGISTRY
    from k3doctor.watch import loop
    from k3doctor.watch.node_conditions import Settings
    from k3doctor.watch.render import Sink
    from k3doctor.watch.sources import sources_for

    with tempfile.TemporaryDirectory(prefix="k3doctor-demo-") as tmp:
        click.echo("k3doctor demo: starting a simulated 2-node rack with an engine on each...", err=True)
        engines = []
        try:
            with LightRack(Path(tmp) / "rack", nodes=len(RANKS)) as rack:
                ports, controls = {}, {}
                for (name, _, _), ranks in zip(rack.hosts, RANKS, strict=True):
                    controls[name] = Path(tmp) / f"{name}.json"
                    controls[name].write_text("{}")
                    engines.append(subprocess.Popen(
                        [sys.executable, "-m", "k3rig.model_server", "--ranks", str(ranks), "--control",
                         str(controls[name]), "--lifetime", "300"], stdout=subprocess.PIPE, text=True))
                    ports[name] = int(engines[-1].stdout.readline())
                first = rack.hosts[0][0]
                inv = load_inventory(str(rack.inventory_path), REGISTRY)
                sources = sources_for(inv, metrics_ports=ports, metrics_path="/metrics", read_timeout_s=5,
                                      accept_unknown_hosts=False)
                watch = loop.Watch(sources, Settings(stall_s=STALL_S, engine_process=ENGINE_PROCESS))
                click.echo(f"k3doctor demo: in {STALL_AT_S:g}s dp_rank {STALLED_RANK} of {first} stops making "
                           "progress (requests still running, /health still ok, metrics timestamp fresh)", err=True)
                stall = threading.Timer(STALL_AT_S, controls[first].write_text,
                                        (json.dumps({"stall": [STALLED_RANK]}),))
                stall.start()
                try:
                    return loop.run(watch, Sink("live", sys.stdout), interval_s=INTERVAL_S,
                                    for_s=STALL_AT_S + STALL_S + 4 * INTERVAL_S)
                finally:
                    stall.cancel()
        finally:
            for engine in engines:
                engine.kill()
                engine.wait()
                engine.stdout.close()
