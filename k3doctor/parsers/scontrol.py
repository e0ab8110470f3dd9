"""``scontrol show node NAME``: the node's state flags and its drain/down reason (Slurm 22.05 format).

The multi-line format puts ``State=`` and ``Reason=`` each at the start of a line of their own; the
reason ends with `` [user@timestamp]`` (who set it, when), which is split off.  An output that does not
name the node asked for, has no ``State=``, or a state that is not Slurm's ``BASE+FLAG+...`` form is
not a node record: ParseError, so nobody drains or resumes a node from a misread state.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from k3doctor.parsers import ParseError

_STATE = re.compile(r"[A-Z][A-Z_]*(?:\+[A-Z][A-Z_]*)*\*?")
_SET_BY = re.compile(r" \[(?P<user>[^\[\]@\s]+)@(?P<at>[^\[\]\s]+)\]$")


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str  # base state: IDLE, ALLOCATED, MIXED, DOWN, ...
    flags: frozenset  # DRAIN, NOT_RESPONDING, FAIL, ...
    reason: str | None  # without its [user@timestamp] suffix; None when the node has none
    reason_by: str | None = None  # the user who set the reason

    @property
    def drain_flag(self) -> bool:
        """Drained or draining (Slurm keeps the base state and adds DRAIN)."""
        return "DRAIN" in self.flags


def parse_show_node(text: str, node: str) -> SlurmNode:
    """The record of ``node`` in ``scontrol show node NODE`` output."""
    if not text.endswith("\n"):
        raise ParseError("scontrol output cut short (no final newline)")
    lines = [line.strip() for line in text.splitlines()]
    first = lines[0].split() if lines else []
    if not first or first[0] != f"NodeName={node}":
        raise ParseError(f"scontrol output is not the record of node {node!r}: {text[:80]!r}")
    states = [line[len("State="):].split(" ", 1)[0] for line in lines if line.startswith("State=")]
    if len(states) != 1 or not _STATE.fullmatch(states[0]):
        raise ParseError(f"scontrol output for {node!r} has no single State= of Slurm's form: {states[:2]!r}")
    base, *flags = states[0].rstrip("*").split("+")
    if states[0].endswith("*"):
        flags.append("NOT_RESPONDING")
    reasons = [line[len("Reason="):] for line in lines if line.startswith("Reason=")]
    if len(reasons) > 1:
        raise ParseError(f"scontrol output for {node!r} has {len(reasons)} Reason= lines")
    reason, by = (reasons[0] if reasons else None), None
    if reason is not None:
        set_by = _SET_BY.search(reason)
        if set_by:
            reason, by = reason[:set_by.start()], set_by["user"]
    return SlurmNode(name=node, state=base, flags=frozenset(flags), reason=reason or None, reason_by=by)
