#!/usr/bin/env python3
"""Where the watch's memory goes over time (issue 36: memory flat after the first minute).

    sudo python3 bench/watch_memory.py MINUTES

64 light nodes and one engine fake, the watch's rounds run in this process every 10 s (loop.Watch, as the CLI
builds it), Python's own allocations traced (tracemalloc) from the first minute on. Printed per round: RSS and
the traced MiB since the snapshot; at the end the largest growths with their tracebacks. RSS growing while
the traced allocations do not is the allocator's or C's (OpenSSL), not the watch keeping objects. Asserts
nothing.
"""
from __future__ import annotations

import gc
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "rig"), str(REPO)]


def rss_mib() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096 >> 20


def main() -> None:
    from k3rig.light import LightRack

    from k3doctor.inventory.load import load_inventory
    from k3doctor.registry import REGISTRY
    from k3doctor.watch import loop
    from k3doctor.watch.node_conditions import Settings
    from k3doctor.watch.sources import sources_for

    minutes = float(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="watch-memory-") as tmp, LightRack(Path(tmp) / "rack", nodes=64) as rack:
        engine = subprocess.Popen([sys.executable, "-m", "k3rig.model_server", "--ranks", "4", "--lifetime", "900"],
                                  stdout=subprocess.PIPE, text=True)
        port = int(engine.stdout.readline())
        inv = load_inventory(str(rack.inventory_path), REGISTRY)
        sources = sources_for(inv, metrics_ports={"*": port}, metrics_path="/metrics", read_timeout_s=5,
                              accept_unknown_hosts=False)
        watch = loop.Watch(sources, Settings(engine_process=r"k3rig[.]model_server --ranks 4 --lifetime 900"))
        started, snapshot = time.monotonic(), None
        try:
            while time.monotonic() - started < minutes * 60:
                begun = time.monotonic()
                watch.round()
                if snapshot is None and time.monotonic() - started > 60:
                    gc.collect()
                    tracemalloc.start(25)
                    snapshot = tracemalloc.take_snapshot()
                    print("snap at", round(time.monotonic() - started), "rss", rss_mib(), flush=True)
                traced = tracemalloc.get_traced_memory()[0] >> 20 if snapshot else "-"
                print(round(time.monotonic() - started), "rss", rss_mib(), "traced", traced, flush=True)
                time.sleep(max(0.0, 10 - (time.monotonic() - begun)))
            gc.collect()
            if snapshot is not None:
                for stat in tracemalloc.take_snapshot().compare_to(snapshot, "traceback")[:6]:
                    print(stat.size_diff >> 10, "KiB", stat.count_diff, "blocks")
                    for line in stat.traceback.format()[-12:]:
                        print("   ", line)
        finally:
            watch.stop()
            engine.kill()
            engine.wait()


if __name__ == "__main__":
    main()
