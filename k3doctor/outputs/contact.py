"""What ``check --connect-only`` prints: per node, each step of reaching it and the tools found; the nodes that
could not be reached once per cause, with its fix (as ``check`` says them, k3doctor/outputs/unread.py)."""
from __future__ import annotations

import time

from k3doctor import __version__
from k3doctor.outputs.text import json_text, one_line, terminal_safe
from k3doctor.outputs.unread import groups_of

SCHEMA = "k3doctor.contact/1"
COLUMNS = ("tcp", "host key", "auth", "sudo", "read")


def render_contacts(contacts: list, fmt: str) -> str:
    """``contacts``: k3doctor/judging/contact.py Contact per node; ``fmt``: json, else a table for people."""
    if fmt == "json":
        return json_text({"schema": SCHEMA, "k3doctor_version": __version__,
                          "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                          "works": all(c.works for c in contacts), "nodes": [c.to_dict() for c in contacts]},
                         indent=2)
    from tabulate import tabulate

    tools = list(dict.fromkeys(name for c in contacts for name in c.found))
    rows = [[one_line(c.node), *(c.steps[s] for s in COLUMNS),
             *(one_line(c.found[t]) if c.found.get(t) else "not found" if c.steps["read"] == "ok" else "-"
               for t in tools)] for c in contacts]
    lines = [tabulate(rows, headers=["node", *COLUMNS, *tools], tablefmt="simple")]
    groups = groups_of({c.node: c.why for c in contacts if c.why})
    for group in groups:
        lines += ["", f"NOT REACHED {group.line(len(contacts))}"] + ([f"  fix: {group.fix()}"] if group.fix() else [])
    no_python = [c.node for c in contacts if c.why is None and not c.found.get("python3")]
    if no_python:
        lines += ["", f"no python3 on {', '.join(no_python)}: the shell takes the readings there (slower), and "
                      "amd-smi (a python program) will not run"]
    works = sum(c.works for c in contacts)
    lines += ["", f"{works} of {len(contacts)} nodes ready for `k3doctor check`"
              + ("" if works == len(contacts) else " - fix the above first")]
    return terminal_safe("\n".join(lines))
