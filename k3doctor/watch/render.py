"""How the watch speaks: ``live`` (a terminal: a line per event, nothing while healthy), ``jsonl`` (one event per
line, for log shippers), ``prom`` (Prometheus text exposition, reference §31.2's conventions: one health gauge per
node x GPU/rank with its reason, and ``k3doctor_watch_last_success_timestamp_seconds`` per node), and the one
line node-problem-detector's custom plugin prints (``--once``).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time

from k3doctor.outputs.prom import _Family
from k3doctor.watch.events import Tracker

LABELS = {"fail": "FAIL", "warn": "WARN", "unknown": "UNKNOWN"}
COLORS = {"fail": "\033[31m", "warn": "\033[33m", "unknown": "\033[35m", "clear": "\033[32m", "action": "\033[36m"}


def colored(stream) -> bool:
    """Colour only on a terminal and never with NO_COLOR set (any value, no-color.org)."""
    return "NO_COLOR" not in os.environ and hasattr(stream, "isatty") and stream.isatty()


def live_line(event: dict, color: bool = False) -> str:
    """``HH:MM:SS FAIL  node where  message`` (``ok`` when a condition cleared, ``action`` for what the watch
    did about one: a Slurm drain)."""
    stamp = time.strftime("%H:%M:%S", time.localtime(event["time"]))
    cleared = event["event"] == "clear"
    word = {"clear": "ok", "action": "action"}.get(event["event"]) or LABELS[event["severity"]]
    said = f"cleared: {event['code']}" if cleared else f"{event['code']}: {event['message']}"
    where = event["node"] + (f" {event['where']}" if event["where"] and event["where"] != "node" else "")
    text = f"{stamp} {word:<7} {where}  {said}"
    if color:
        text = f"{COLORS.get(event['event']) or COLORS[event['severity']]}{text}\033[0m"
    return text


def jsonl_line(event: dict) -> str:
    return json.dumps(event, sort_keys=True)


def exposition(tracker: Tracker, nodes: dict) -> str:
    """The watch's state as Prometheus text. ``nodes``: name -> {"up": bool, "last_success": float | None,
    "serving": bool}. Health is 1 for a node with nothing active (one series, target ``node``), else 0 per
    active condition's target with its code as the reason; an unread node has ``k3doctor_watch_up`` 0 and its
    last known conditions, never a health of 1 (UNKNOWN is neither healthy nor unhealthy, §31.2 item 5: alert
    on ``up == 0`` separately)."""
    health = _Family("watch_health", "1 healthy, 0 a condition active on this node x target (GPU, DP rank, engine); "
                                     "reason: its code")
    up = _Family("watch_up", "1 when the node was read in the last interval, 0 when not (its health is then stale)")
    serving = _Family("watch_serving", "1 when the node's engine answered its metrics at least once")
    last = _Family("watch_last_success_timestamp_seconds", "When the node was last read in full (unix seconds)")
    for node, info in sorted(nodes.items()):
        active = [c for c in tracker.of(node) if c.severity != "unknown"]
        for cond in active:
            health.set(0, node=node, target=cond.where or "node", reason=cond.code)
        if not active and info["up"]:
            health.set(1, node=node, target="node", reason="")
        up.set(1 if info["up"] else 0, node=node)
        serving.set(1 if info["serving"] else 0, node=node)
        if info["last_success"]:
            last.set(round(info["last_success"], 3), node=node)
    return "\n".join(line for family in (health, up, serving, last) for line in family.lines()) + "\n"


def write_atomically(path: str, text: str) -> None:
    """node_exporter's textfile collector may read the file at any time: write beside it, then rename."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".k3doctor-watch-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def npd_message(tracker: Tracker, read: int, total: int) -> str:
    """node-problem-detector shows one line: the worst active condition (and how many more), or ok."""
    order = {"fail": 0, "unknown": 1, "warn": 2}
    active = sorted(tracker.active.values(), key=lambda c: (order[c.severity], c.node, c.where))
    if not active:
        return f"ok: {read}/{total} node(s) read, nothing new since the watch started"
    first = active[0]
    more = f" (+{len(active) - 1} more)" if len(active) > 1 else ""
    return f"{LABELS[first.severity]} {first.node} {first.where} {first.code}: {first.message}{more}"[:1000]


class Sink:
    """Where events go as the watch runs, by format; ``prom_file`` is rewritten and ``listener`` (serve.py:
    ``--listen``) given the exposition after every interval."""

    def __init__(self, fmt: str, stream=None, prom_file: str | None = None, listener=None):
        self.fmt, self.stream, self.prom_file, self.listener = fmt, stream or sys.stdout, prom_file, listener
        self.color = fmt == "live" and colored(self.stream)

    def say(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def started(self, nodes: int, interval_s: float, stall_s: float) -> None:
        if self.fmt == "live":
            self.say(f"k3doctor watch: {nodes} node(s), every {interval_s:g}s, stall after {stall_s:g}s; "
                     "quiet while healthy (Ctrl-C ends)")

    def events(self, events: list) -> None:
        for event in events:
            if self.fmt == "live":
                self.say(live_line(event, self.color))
            elif self.fmt == "jsonl":
                self.say(jsonl_line(event))

    def interval(self, tracker: Tracker, nodes: dict) -> None:
        if self.prom_file or self.listener:
            text = exposition(tracker, nodes)
            if self.prom_file:
                write_atomically(self.prom_file, text)
            if self.listener:
                self.listener.publish(text)

    def ended(self, summary: dict, tracker: Tracker, nodes: dict) -> None:
        if self.fmt == "prom":
            self.stream.write(exposition(tracker, nodes))
            self.stream.flush()
        elif self.fmt == "jsonl":
            self.say(jsonl_line({"event": "summary", **summary}))
        else:
            active = ", ".join(f"{c.node} {c.where} {c.code}" for c in tracker.active.values()) or "none"
            self.say(f"k3doctor watch: ended after {summary['duration_s']:.0f}s ({summary['why']}): "
                     f"{summary['intervals']} interval(s), {summary['started']} condition(s) started, "
                     f"{summary['cleared']} cleared; active now: {active}{_actions_said(summary)}")


def _actions_said(summary: dict) -> str:
    """The summary's words on silences, drains and the webhook (only those in use)."""
    out = f"; {summary['silenced']} event(s) silenced" if summary.get("silenced") else ""
    if "bundles" in summary:
        out += f"; {summary['bundles']} triage bundle(s) of evidence written"
    if "drained" in summary:
        out += f"; {summary['drained']} node(s) drained in Slurm"
    hook = summary.get("webhook")
    if hook:
        out += f"; webhook {hook['url']}: {hook['sent']} sent, {hook['dropped']} dropped"
        out += f" (last error: {hook['last_error']})" if hook["dropped"] and hook["last_error"] else ""
    return out
