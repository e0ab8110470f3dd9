"""Conditions and the events they make: one event when a condition starts, one when it clears (reference §31.2:
an on-call tool that repeats a finding every interval is muted within the hour, and then misses the next one).

A condition is keyed by (code, node, where): ``where`` is the GPU (``gpu 0000:05:00.0``, ``card2``), the DP rank
(``dp_rank 3``) or ``""`` for the node as a whole. Its severity is ``fail``, ``warn`` or ``unknown`` (a source or
node that could not be read: never healthy, never a fault).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from k3doctor.rules.live import BY_CODE

SEVERITIES = ("fail", "warn", "unknown")


@dataclass(frozen=True)
class Condition:
    """One thing wrong (or unread) on a node, as the judge found it in one sample."""

    code: str
    node: str
    where: str
    severity: str  # fail | warn | unknown
    message: str
    section: str = ""

    @property
    def key(self) -> str:
        return f"{self.code}|{self.node}|{self.where}"

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(doc: dict) -> Condition:
        return Condition(**{k: doc[k] for k in ("code", "node", "where", "severity", "message", "section")})


def live(code: str, node: str, where: str, message: str) -> Condition:
    """A condition of one of the watch's live rule rows (k3doctor/rules/live.py): its severity and section."""
    rule = BY_CODE[code]
    return Condition(code, node, where, rule.severity, message, rule.section)


class Tracker:
    """The conditions now active on every node; ``update`` turns one node's judgement into start/clear events."""

    def __init__(self, active: dict | None = None):
        self.active: dict = dict(active or {})  # key -> Condition
        self.counts = {"start": 0, "clear": 0}

    def update(self, node: str, found: list, now: float | None = None) -> list:
        """Events for ``node``: each condition in ``found`` not active before starts, each active one of this
        node not in ``found`` clears. A condition that changed only its message (a stall that grew longer) is
        still the same condition: no event."""
        now = time.time() if now is None else now
        events, seen = [], set()
        for cond in found:
            seen.add(cond.key)
            if cond.key not in self.active:
                events.append(_event("start", cond, now))
            self.active[cond.key] = cond
        for key, cond in list(self.active.items()):
            if cond.node == node and key not in seen:
                del self.active[key]
                events.append(_event("clear", cond, now))
        for event in events:
            self.counts[event["event"]] += 1
        return events

    def of(self, node: str) -> list:
        return [c for c in self.active.values() if c.node == node]

    def worst(self) -> str | None:
        """fail > unknown > warn over every active condition; None: nothing active."""
        severities = {c.severity for c in self.active.values()}
        for severity in ("fail", "unknown", "warn"):
            if severity in severities:
                return severity
        return None


def _event(kind: str, cond: Condition, now: float) -> dict:
    return {"time": round(now, 3), "event": kind, **cond.to_json()}
