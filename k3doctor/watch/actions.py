"""What the watch does with its events besides saying them, each opt-in and each said (reference §31.2):
``--silence`` (events a person already knows of are not emitted), ``--webhook`` (webhook.py) and ``--drain``
(Slurm drain of a node with a new hardware FAIL).

Silences act on events only: a silenced condition is still judged, still active in the exit status and the
Prometheus health (an alert rule there is the operator's own), and still counted; its start and its clear are
neither said, nor sent, nor drained on. A silence that ends while its condition is active says nothing then
(the condition started before; the next change of it is said).
"""
from __future__ import annotations

import datetime
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout  # not the builtin TimeoutError before Python 3.11
from dataclasses import dataclass

from k3doctor.fleet import slurm
from k3doctor.parsers.squeue import NODE_NAME
from k3doctor.rules import live
from k3doctor.watch.hardware import RULE_BY_SIGNATURE

_DURATION = re.compile(r"^(?P<n>[0-9]{1,9}(?:\.[0-9]{1,3})?)(?P<unit>[smhd]?)$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_SILENCE = re.compile(r"^(?P<code>[A-Z][A-Z0-9-]{0,63})(?:@(?P<node>[^:@\s]{1,128}))?(?::(?P<until>.+))?$")
# Hardware evidence only (§31.3: a new uncorrectable error or a fatal kernel line is the GPU's, whoever runs on
# it): a stall, a dead engine or an unread node may be the software's or the network's - never a drain.
DRAIN_CODES = frozenset({r.id for r in RULE_BY_SIGNATURE.values() if r.severity == "fail"} | {"RAS-UE-RISING"}
                        | live.DRAIN_CODES)


def parse_duration(text: str) -> float | None:
    """``90``, ``90s``, ``10m``, ``2h``, ``7d`` in seconds (at most a year); None: not a duration."""
    match = _DURATION.match(str(text).strip())
    seconds = float(match.group("n")) * _UNIT[match.group("unit")] if match else 0
    return seconds if 0 < seconds <= 366 * 86400 else None


@dataclass(frozen=True)
class Silence:
    code: str
    node: str | None = None  # None: every node
    until: float | None = None  # unix seconds; None: the whole watch

    def matches(self, event: dict, now: float) -> bool:
        return (event["code"] == self.code and self.node in (None, event["node"])
                and (self.until is None or now < self.until))


def parse_silence(text: str, now: float | None = None) -> Silence:
    """``CODE[@NODE][:UNTIL]``; UNTIL a duration from now (``2h``) or an ISO date-time (UTC unless it has an
    offset). Raises ValueError with the one line to say."""
    now = time.time() if now is None else now
    match = _SILENCE.match(text.strip())
    if not match:
        raise ValueError(f"--silence {text!r}: expected CODE[@NODE][:UNTIL] (e.g. KERNEL-RING-TIMEOUT@n001:2h)")
    until = match.group("until")
    if until is not None:
        seconds = parse_duration(until)
        if seconds is not None:
            until = now + seconds
        else:
            try:
                when = datetime.datetime.fromisoformat(until)
            except ValueError:
                raise ValueError(f"--silence {text!r}: {until!r} is neither a duration (2h) nor an ISO date-time "
                                 "(2026-12-08T06:00Z)") from None
            until = (when if when.tzinfo else when.replace(tzinfo=datetime.timezone.utc)).timestamp()
            if until <= now:
                raise ValueError(f"--silence {text!r}: {match.group('until')} is already past")
    return Silence(match.group("code"), match.group("node"), until)


class Silences:
    """The events not emitted; a clear whose start was silenced is silenced with it (never a lone clear)."""

    def __init__(self, silences=()):
        self.silences = list(silences)
        self.count = 0
        self._held: set = set()  # keys of conditions whose start was silenced

    def keep(self, event: dict) -> bool:
        key = f"{event['code']}|{event['node']}|{event['where']}"
        if event["event"] == "clear" and key in self._held:
            self._held.discard(key)
        elif any(s.matches(event, event["time"]) for s in self.silences):
            if event["event"] == "start":
                self._held.add(key)
        else:
            return True
        self.count += 1
        return False


def drains(event: dict) -> bool:
    """Whether this event drains its node: a new hardware FAIL (kernel log, RAS), never a stall or engine loss."""
    return event["event"] == "start" and event["severity"] == "fail" and event["code"] in DRAIN_CODES


def action_event(event: dict, code: str, severity: str, message: str) -> dict:
    """An ``action`` event: what the watch did about ``event`` (a drain, a bundle of evidence)."""
    return {"time": round(time.time(), 3), "event": "action", "code": code, "node": event["node"],
            "where": event["where"], "severity": severity, "message": message, "section": "§31.2"}


class Drainer:
    """``--drain``: each draining event's node drained in Slurm (k3doctor/fleet/slurm.py, the same calls and
    rules as ``node --slurm-drain``: a node held with someone else's reason keeps it) from one background
    thread, so a slow slurmctld never holds the watch; what was done comes back as ``action`` events."""

    def __init__(self, scontrol=slurm.Scontrol):
        self._scontrol = scontrol
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="k3doctor-drain")
        self._futures: list = []
        self._lock = threading.Lock()
        self.count = 0

    def consider(self, event: dict) -> None:
        if drains(event):
            self._futures.append(self._pool.submit(self._drain, event))

    def _drain(self, event: dict) -> dict | None:
        name = event["node"]
        if not NODE_NAME.fullmatch(name):
            return action_event(event, "SLURM-CALL-FAILED", "unknown",
                                f"{name!r} is not a Slurm node name: not drained")
        reason = slurm.reason_line(f"{event['where'] or 'node'}: {event['message']}", event["code"])
        try:
            scontrol = self._scontrol()
            node = scontrol.show_node(name)
            other = slurm.others_hold(node)
            if other:
                return action_event(event, "SLURM-LEFT-AS-IS", "warn", f"{name} left as it is in Slurm: already "
                                                                       f"{other} with another reason; would drain: "
                                                                       f"{reason}")
            if slurm.ours(node):
                return None  # drained by k3doctor already: its first cause (the root one) stays the reason
            scontrol.drain(name, reason)
        except slurm.SlurmError as exc:
            return action_event(event, "SLURM-CALL-FAILED", "unknown", f"{exc}; Slurm node {name} left as it is")
        with self._lock:
            self.count += 1
        return action_event(event, "SLURM-DRAINED", "fail", f"drained {name} in Slurm: {reason}")

    def done(self, wait_s: float = 0.0) -> list:
        """The action events of the drains finished (waiting up to ``wait_s`` for those in flight)."""
        deadline = time.monotonic() + wait_s
        out, left = [], []
        for future in self._futures:
            try:
                out.append(future.result(timeout=max(0.0, deadline - time.monotonic())))
            except FutureTimeout:
                left.append(future)
        self._futures = left
        return [said for said in out if said is not None]

    def close(self) -> list:
        said = self.done(wait_s=slurm.SLURM_BUDGET_S + 1)
        self._pool.shutdown(wait=False, cancel_futures=True)
        return said


class Actions:
    """Silences first (a silenced event goes nowhere), then the evidence (``--bundle-dir``, evidence.py: started
    before the webhook can page anyone who might restart the engine), the webhook and the drain."""

    def __init__(self, silences: Silences | None = None, webhook=None, drainer: Drainer | None = None,
                 evidence=None):
        self.silences, self.webhook, self.drainer = silences or Silences(), webhook, drainer
        self.evidence = evidence

    def process(self, events: list) -> list:
        kept = [e for e in events if self.silences.keep(e)]
        for event in kept:
            if self.evidence:
                self.evidence.consider(event)
            if self.webhook:
                self.webhook.send(event)
            if self.drainer:
                self.drainer.consider(event)
        return (kept + (self.drainer.done() if self.drainer else [])
                + (self.evidence.done() if self.evidence else []))

    def close(self) -> tuple:
        """(the last action events, the summary's additions)."""
        told = (self.drainer.close() if self.drainer else []) + (self.evidence.close() if self.evidence else [])
        summary = {"silenced": self.silences.count}
        if self.drainer:
            summary["drained"] = self.drainer.count
        if self.evidence:
            summary["bundles"] = self.evidence.count
        if self.webhook:
            summary["webhook"] = self.webhook.close()
        return told, summary
