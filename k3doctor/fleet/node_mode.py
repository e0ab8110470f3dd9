"""``k3doctor node``: the checks of this machine, read locally (no SSH), for an engine to carry.

When a fleet outgrows one machine's fan-out, an existing engine (Slurm ``srun``, Ansible, ClusterShell)
runs ``k3doctor node --json`` on every node and ``k3doctor merge`` joins what comes back (see
k3doctor/fleet/merge.py). A node's document holds its node- and GPU-scope results, judged on the node, and
the readings of the cluster-scope checks as a saved copy keeps them (k3doctor/redaction.py: secrets
stay on the node), which ``merge`` judges across nodes exactly as ``check`` does.

Passive checks only, every read bounded by a deadline below Slurm's 60 s HealthCheckProgram kill.
"""
from __future__ import annotations

import hashlib
import os
import time
from dataclasses import replace

from k3doctor import __version__
from k3doctor.gather import snapshot
from k3doctor.inventory.load import localhost_inventory
from k3doctor.inventory.schema import node_name_problem
from k3doctor.inventory.types import Inventory
from k3doctor.judging.runner import RunOptions, RunReport, run_checks, specs_of
from k3doctor.outputs.text import json_text

SCHEMA = "k3doctor.node/1"
COMMAND_TIMEOUT_S = 20.0  # per reading, at most (the inventory's ssh.command_timeout_s when lower)
NODE_DEADLINE_S = 40.0  # every read of the node, at most: well inside Slurm's 60 s HealthCheckProgram kill


class NodeSelectionError(ValueError):
    """The inventory has no node of that name (one line, exit 3)."""


def this_node(inv: Inventory | None, name: str | None) -> Inventory:
    """A one-node inventory of this machine, read through the local transport: ``name``'s entry of
    ``inv`` (its settings, tools and check parameters; default: the entry named as this machine's hostname,
    or its first label), else this machine under ``name`` (default: its hostname) with the default settings."""
    if name is not None and node_name_problem(name):
        raise NodeSelectionError(f"--name: {node_name_problem(name)}")
    if inv is None:
        local = localhost_inventory()
        if name:
            local.nodes[0].name = name
        return local
    hostname = os.uname().nodename
    names = (name,) if name else (hostname, hostname.split(".")[0])  # ct13.example.org is ct13 too
    mine = [n for wanted in names for n in inv.nodes if n.name == wanted][:1]
    name = name or hostname
    if not mine:
        raise NodeSelectionError(f"{name!r} is not a node of {inv.path} (name it with --name; nodes: "
                                 f"{', '.join(n.name for n in inv.nodes[:8])}{' ...' if len(inv.nodes) > 8 else ''})")
    return replace(inv, nodes=[replace(mine[0], transport="local")])


def inventory_digest(inv: Inventory) -> str | None:
    """sha256 of the inventory text a node ran with (None: none, this machine's defaults); ``merge``
    refuses results taken with another inventory than its own."""
    return hashlib.sha256(inv.text.encode("utf-8")).hexdigest() if inv.text else None


def run_node(inv: Inventory, checks: list, *, command_timeout_s=None, node_deadline_s=None, progress=None) -> RunReport:
    """The passive checks on this machine: node and GPU judges, and the cluster judges over this node alone
    (its own view: a wedged GPU in its kernel log, too little RAM); each read ends by its deadline."""
    timeout = command_timeout_s or min(inv.ssh.command_timeout_s, COMMAND_TIMEOUT_S)
    deadline = node_deadline_s or min(inv.ssh.node_deadline_s, NODE_DEADLINE_S)
    return run_checks(inv, checks, RunOptions(parallel=1, command_timeout_s=timeout, node_deadline_s=deadline,
                                              progress=progress))


def node_document(report: RunReport, inv: Inventory, checks: list, overrides=()) -> str:
    """One line of JSON (schema ``k3doctor.node/1``): the node's own results and the saved copy of the
    readings its cluster-scope checks need. The cluster judges' results over this node alone are not in
    it: ``merge`` judges those across every node."""
    node = inv.nodes[0].name
    own = {c.name for c in checks if c.scope in ("node", "gpu")}
    cluster = specs_of([c for c in checks if c.scope == "cluster" and c.interaction == "passive"],
                       inv.nodes[0].settings)
    cluster_specs = {spec for specs in cluster.values() if isinstance(specs, dict) for spec in specs.values()}
    got = report.readings.get(node, {})
    doc = {
        "schema": SCHEMA,
        "k3doctor_version": __version__,
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "duration_s": report.duration_s,
        "node": node,
        "inventory_sha256": inventory_digest(inv),
        "overrides": list(overrides),
        "checks": [c.name for c in checks],
        "error": str(report.unreachable[node]) if node in report.unreachable else None,
        "results": [r.to_dict() for r in report.results if r.check in own],
        "readings": snapshot.encode_readings({s: v for s, v in got.items() if s in cluster_specs}),
    }
    return json_text(doc, separators=(",", ":"), default=str)

