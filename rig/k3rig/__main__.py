"""Stand the simulated rack up by hand: ``python -m k3rig up --workdir /tmp/k3rig --scenario healthy``."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from .fixtures import PLATFORMS
from .rack import Rig
from .scenario import load, scenario_names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m k3rig", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the rack, print the inventory path, run until Ctrl-C")
    up.add_argument("--workdir", type=Path, default=Path("/tmp/k3rig"))
    up.add_argument("--scenario", default="healthy", help="name (see 'scenarios') or path of a YAML file")
    up.add_argument("--nodes", type=int, default=4)
    up.add_argument("--platform", choices=PLATFORMS, default="gfx1250",
                    help="node kind: gfx1250 trays, or an XGMI node (mi355x, mi300x, mi325x: 8 GPUs, the server running)")
    sub.add_parser("scenarios", help="list the scenarios and what each changes")
    args = parser.parse_args(argv)

    if args.command == "scenarios":
        for name in scenario_names():
            print(f"{name:28} {' '.join(load(name).get('description', '').split())}")
        return 0

    # Ctrl-C and kill both run the finally below (SIGINT explicitly: a background job starts with it ignored).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    rig = Rig(args.workdir, nodes=args.nodes, scenario=args.scenario, platform=args.platform)
    started = time.monotonic()
    try:
        rig.start()
        print(f"rack up in {time.monotonic() - started:.1f} s; inventory: {rig.inventory_path}", flush=True)
        first = rig.nodes[0]
        print(f"  ssh -i {rig.identity_file} -o UserKnownHostsFile={rig.known_hosts} -p {first.port} "
              f"root@{first.host}\n  Ctrl-C stops it.", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        rig.stop()


if __name__ == "__main__":
    sys.exit(main())
