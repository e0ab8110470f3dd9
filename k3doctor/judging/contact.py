"""``k3doctor check --connect-only``: reach every node and say, per node, what works - the step before a first check.

Each node in parallel, each step bounded: the login as ``check`` opens it (the key file, the TCP port, the host
key, authentication: the step that stopped it is its cause id's, k3doctor/transport/base.py ``CAUSES``), then
one command, under ``sudo -n`` where the node has ``sudo: true``, that names the node's python3 (the reader
takes every reading in one python3 process where the node has it; without it the shell takes them, and amd-smi,
a python program, will not run) and the GPU tools the inventory names (``cluster.tools``). Nothing is changed
on a node, and a node that cannot be reached says its cause and fix as ``check`` does.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from k3doctor.deadline import seconds
from k3doctor.inventory.types import Inventory, Node
from k3doctor.judging.connections import make_transport
from k3doctor.judging.unread import unread
from k3doctor.results import Unread
from k3doctor.shell import quote
from k3doctor.transport.base import CAUSES, STEPS, TransportError

TOOLS = ("amd_smi", "rocm_smi")  # the GPU tools a node's checks read, by their inventory key


@dataclass
class Contact:
    """What works on one node: each step ``ok``, ``FAILED`` or ``-`` (not tried), what was found, or why not."""

    node: str
    steps: dict = field(default_factory=dict)  # step (STEPS) -> ok | FAILED | - | n/a
    found: dict = field(default_factory=dict)  # python3, amd-smi, rocm-smi -> its path, or None
    why: Unread | None = None

    @property
    def works(self) -> bool:
        """Whether ``check`` can read the node (without python3 it can, the slower way)."""
        return self.why is None

    def to_dict(self) -> dict:
        return {"node": self.node, "steps": self.steps, "found": self.found,
                **(self.why.to_dict() if self.why else {})}


def _names(tools: dict) -> dict:
    """tool name (amd-smi) -> how the node's checks call it (an absolute path, or a name on PATH)."""
    return {"python3": "python3", **{key.replace("_", "-"): tools[key] for key in TOOLS if tools.get(key)}}


def found_script(tools: dict) -> str:
    """One line per tool: its name, then where the node has it (empty: not found)."""
    lines = []
    for name, path in _names(tools).items():
        look = f"[ -x {quote(path)} ] && echo {quote(path)}" if path.startswith("/") else f"command -v {quote(path)}"
        lines.append(f"printf '%s %s\\n' {quote(name)} \"$({look} 2>/dev/null)\"")
    return "\n".join(lines)


def contact(node: Node, inv: Inventory, opts) -> Contact:
    """Reach ``node`` step by step; ``opts``: a RunOptions (its connect and command timeouts)."""
    out = Contact(node.name, dict.fromkeys(STEPS, "-"), dict.fromkeys(_names(node.settings.tools)))
    if node.transport == "local":
        out.steps.update({"tcp": "n/a", "host key": "n/a", "auth": "n/a"})
    if not node.sudo:
        out.steps["sudo"] = "n/a"
    transport = None
    try:
        transport = make_transport(node, inv, opts)
        if node.transport != "local":
            transport.connect()  # the key file, then the TCP probe, the host key, the login: the cause says which
            out.steps.update({"tcp": "ok", "host key": "ok", "auth": "ok"})
        timeout = seconds(opts.command_timeout_s or inv.ssh.command_timeout_s, 30.0)
        said = transport.run(found_script(node.settings.tools), timeout_s=timeout)
        if said.rc != 0 or said.timed_out:
            raise TransportError(f"a plain `sh` command failed on {node.name} (exit {said.rc}): "
                                 f"{said.stderr.strip()[-200:] or 'no message'}", "NODE-NOT-READ",
                                 "a plain `sh` command failed", "log in by hand and see what the shell says")
        out.steps.update({"sudo": "ok" if node.sudo else "n/a", "read": "ok"})
        for line in said.stdout.splitlines():
            name, _, path = line.partition(" ")
            out.found[name] = path.strip() or None
    except Exception as exc:  # the step it stopped at FAILED, the ones after it not tried
        out.why = unread(exc)
        step = CAUSES.get(out.why.cause, ("read",))[0]
        if out.why.cause != "NODE-IDENTITY-FILE":  # the steps before it passed (a missing key file: none tried)
            out.steps.update({earlier: "ok" for earlier in STEPS[:STEPS.index(step)] if out.steps[earlier] == "-"})
        out.steps[step] = "FAILED"
    finally:
        if transport is not None:
            transport.close()
    return out


def contact_all(inv: Inventory, opts) -> list:
    """Every node of ``inv`` reached (``opts.parallel`` at a time), in inventory order."""
    with ThreadPoolExecutor(max_workers=max(1, min(opts.parallel, len(inv.nodes))),
                            thread_name_prefix="k3doctor-contact") as pool:
        return list(pool.map(lambda node: contact(node, inv, opts), inv.nodes))
