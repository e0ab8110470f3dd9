"""Run allreduce-probe on this machine only, past the rack prerequisites, and write its verdicts as JSON.

The CLI runs an active probe only where ualink-state, fabric-domain and rack-free passed; a
GPU box that is not a gfx1250 tray (an NVIDIA bench host) has none of their sysfs or amd-smi,
so the bench calls the registered check itself - the same params, plan, launcher, local
transport, cleanup and verdicts the CLI would use - on a one-node inventory.
Usage: python3 bench/probe_direct.py INVENTORY OUT.json [PARAM=VALUE ...]  (values are YAML)
"""
from __future__ import annotations

import json
import sys

import yaml

from k3doctor.inventory.load import parse_inventory
from k3doctor.judging.runner import Context
from k3doctor.registry import REGISTRY, load_checks
from k3doctor.transport.local import LocalTransport

CHECK = "allreduce-probe"


def main(argv: list) -> int:
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    load_checks()
    with open(argv[1]) as fh:
        inv = parse_inventory(fh.read(), registry=REGISTRY)
    chk = REGISTRY.checks[CHECK]
    params = {}
    for item in argv[3:]:
        name, _, value = item.partition("=")
        params[name] = yaml.safe_load(value)
    for settings in [inv.cluster] + [n.settings for n in inv.nodes]:
        settings.checks.setdefault(CHECK, {}).update(params)
    ctx = Context(chk, inv.cluster, nodes={n.name: n for n in inv.nodes},
                  transports={n.name: LocalTransport(n.name) for n in inv.nodes})
    verdicts = chk.probe(ctx)
    doc = {"results": [{"check": CHECK, "node": v.node, "status": v.status.value, "message": v.message,
                        "evidence": v.evidence, "remediation": v.remediation} for v in verdicts]}
    with open(argv[2], "w") as fh:
        json.dump(doc, fh, indent=1)
    for v in verdicts:
        print(f"{v.status.value} {v.node or 'cluster'} [{v.remediation}] {v.message}")
    return 0 if all(v.status.value in ("PASS", "WARN") for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
