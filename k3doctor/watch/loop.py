"""The watch's run: every interval, every node read at once (one bounded script each on its own connection),
judged, its events de-duplicated and said; until ``--for`` is over or a stop signal (Ctrl-C, SIGTERM, SIGHUP)
comes, which stops what runs on the nodes (the transports' cancel: nothing of k3doctor stays there) and ends
with a summary. ``--once``: one round against a state file, for node-problem-detector's custom plugin.

Exit status: the watch's verdict when it ended - 0 nothing active, 1 a problem (FAIL or WARN) active, 2 a node
or source unknown (and no problem) - for a run ended by ``--for`` or a stop signal alike (a watch is meant to be
stopped). NPD's contract (reference §31.2): 0 ok, 1 problem, 2 unknown.
"""
from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from k3doctor.watch.actions import Actions
from k3doctor.watch.events import Condition, Tracker
from k3doctor.watch.node_conditions import Settings, judge_node, serving
from k3doctor.watch.render import Sink, npd_message, write_atomically
from k3doctor.watch.sources import Sample

EXIT = {None: 0, "warn": 1, "fail": 1, "unknown": 2}
STATE_VERSION = 1


class Watch:
    """``sources``: node name -> NodeSource; ``states``: node name -> its judge state (JSON)."""

    def __init__(self, sources: dict, settings: Settings, states: dict | None = None, tracker: Tracker | None = None,
                 history=None):
        self.sources, self.settings, self.history = sources, settings, history  # history: evidence.MetricsHistory
        self.states = {name: (states or {}).get(name, {}) for name in sources}
        self.tracker = tracker or Tracker()
        self.up = dict.fromkeys(sources, False)
        self.intervals = 0
        self._pool = ThreadPoolExecutor(max_workers=max(1, min(64, len(sources))), thread_name_prefix="k3doctor-watch")

    def round(self) -> list:
        """Read every node now (in parallel), judge each; the events of this round, in node order."""
        samples = dict(zip(self.sources, self._pool.map(_read, self.sources.values()), strict=True))
        events = []
        for name, sample in samples.items():
            if self.history is not None:
                self.history.add(name, sample)
            found = judge_node(name, self.states[name], sample, self.tracker.of(name), self.settings)
            self.up[name] = sample.problem is None
            events += self.tracker.update(name, found, sample.at)
        self.intervals += 1
        return events

    def nodes(self) -> dict:
        return {name: {"up": self.up[name], "last_success": self.states[name].get("last_success"),
                       "serving": serving(self.states[name])} for name in self.sources}

    def verdict(self) -> int:
        return EXIT[self.tracker.worst()]

    def stop(self) -> None:
        """Stop every read in flight on the nodes (bounded: each transport stops its process groups within a
        few seconds), then close the connections."""
        stoppers = [threading.Thread(target=src.cancel, daemon=True) for src in self.sources.values()]
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join(15)
        self._pool.shutdown(wait=True, cancel_futures=True)
        for src in self.sources.values():
            src.close()


def _read(source) -> Sample:
    """One node's sample; a read that failed in a way its transport did not foresee is that node unread (said
    with the error's type), never the end of a watch that keeps looking for days."""
    try:
        return source.read()
    except Exception as exc:  # noqa: BLE001 -- one node's surprise must not end the watch of every node
        source.close()
        return Sample(source.node, time.time(), f"{type(exc).__name__}: {str(exc) or 'no message'} (connection closed)")


def run(watch: Watch, sink: Sink, *, interval_s: float, for_s: float | None, actions: Actions | None = None) -> int:
    """Watch until ``for_s`` is over (None: until stopped); the exit status of the watch's verdict. ``actions``:
    silences, webhook, drain (actions.py), given every round's events before they are said."""
    actions = actions or Actions()
    started = time.monotonic()
    why = "--for elapsed"
    sink.started(len(watch.sources), interval_s, watch.settings.stall_s)
    try:
        while True:
            begun = time.monotonic()
            sink.events(actions.process(watch.round()))
            sink.interval(watch.tracker, watch.nodes())
            if for_s is not None and time.monotonic() - started >= for_s:
                break
            left = interval_s - (time.monotonic() - begun)
            if for_s is not None:
                left = min(left, for_s - (time.monotonic() - started))
            if left > 0:
                time.sleep(left)
            if for_s is not None and time.monotonic() - started >= for_s:
                break
    except KeyboardInterrupt as stop:
        signum = getattr(stop, "signum", None)
        why = "stopped by " + ("Ctrl-C" if signum is None else f"signal {signum}")
    finally:
        watch.stop()
        said, extra = actions.close()
    sink.events(said)
    summary = {"duration_s": round(time.monotonic() - started, 1), "why": why, "intervals": watch.intervals,
               "started": watch.tracker.counts["start"], "cleared": watch.tracker.counts["clear"],
               "active": [c.to_json() for c in watch.tracker.active.values()], **extra}
    sink.ended(summary, watch.tracker, watch.nodes())
    return watch.verdict()


class StateFileError(ValueError):
    """A --state file that is not this watch's: one line, exit 3."""


def load_state(path: str, nodes: list) -> tuple:
    """(judge states by node, Tracker) from a --state file; a missing file is a first run (baseline)."""
    try:
        with open(path) as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        return {}, Tracker()
    except (OSError, ValueError) as exc:
        raise StateFileError(f"--state {path}: not a k3doctor watch state file ({exc})") from None
    if not isinstance(doc, dict) or doc.get("version") != STATE_VERSION:
        raise StateFileError(f"--state {path}: not a k3doctor watch state file (version {STATE_VERSION})")
    try:
        active = {c.key: c for c in (Condition.from_json(d) for d in doc.get("active", [])) if c.node in nodes}
        states = {name: doc["nodes"][name] for name in nodes if isinstance(doc["nodes"].get(name), dict)}
    except (KeyError, TypeError, AttributeError) as exc:
        raise StateFileError(f"--state {path}: damaged ({exc})") from None
    return states, Tracker(active)


def once(watch: Watch, sink: Sink, state_path: str) -> int:
    """One round for node-problem-detector: judge against the state file, rewrite it, print one line; exit
    0 ok, 1 problem, 2 unknown. The first run (no state file) takes the baseline."""
    try:
        events = watch.round()
    finally:
        watch.stop()
    if sink.fmt == "jsonl":
        sink.events(events)
    sink.interval(watch.tracker, watch.nodes())
    write_atomically(state_path, json.dumps({"version": STATE_VERSION, "nodes": watch.states,
                                             "active": [c.to_json() for c in watch.tracker.active.values()]}))
    if sink.fmt != "jsonl":
        sink.say(npd_message(watch.tracker, sum(watch.up.values()), len(watch.up)))
    return watch.verdict()


def state_dir_ok(path: str) -> bool:
    return os.path.isdir(os.path.dirname(os.path.abspath(path)))
