"""``--bundle-dir``: on a stall, the evidence taken before anyone restarts anything (reference §20, §31.2: "on a
stall, take py-spy stacks before anything is restarted") - py-spy stacks of every rank of the stalled node's
engine, the server log's last lines and the metrics history the watch holds - into a triage bundle
(k3doctor/triage/bundle.py: ``k3doctor judge BUNDLE`` judges it again), then the triage verdict (which rank, and
why) said as an ``action`` event.

A capture runs on its own connection to the node from a background thread, so the watch's rounds go on while
py-spy reads; each capture is bounded (the connect by the inventory's timeout, each reading by the gather's
deadline, each dump by ``timeout``) and taken once per stall of a node: the next one is taken after every
stalled rank of that node has cleared. The ranks read are the processes titled ``ATOM::DP<n>TP0`` (ATOM's
ModelRunners, §20) that are engine processes (``--engine-process``) or their descendants: another engine's
ranks on a shared host are not this one's evidence. Nothing is installed: without py-spy on the node the
bundle says so (TRIAGE-NO-PYSPY), with the log and the metrics still in it.
"""
from __future__ import annotations

import collections
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout  # not the builtin TimeoutError before Python 3.11

from k3doctor.gather.node_script import gather
from k3doctor.parsers import ParseError
from k3doctor.parsers.atom_metrics import parse_metrics
from k3doctor.readings import Command, CommandReading, ReadingUnavailable, sh
from k3doctor.shell import quote
from k3doctor.transport.base import TransportError
from k3doctor.watch.actions import action_event

STALL_CODE = "ENGINE-STALLED"
RANK_TITLE = re.compile(r"ATOM::DP(\d{1,4})TP0\b")
READ_TIMEOUT_S, DEADLINE_S, PER_DUMP_S = 40.0, 50.0, 5  # a capture: py-spy of 8 ranks, one after another
LOG_TAIL = 2000  # the server log's last lines (docker logs --tail), as triage reads them
CLOSE_WAIT_S = 10.0  # a watch stopping waits this long for a capture in flight, then stops it
HISTORY_KEEP_S = 300.0  # the metrics history kept per node: the stall's threshold and well before it


class MetricsHistory:
    """Per node, the engine's per-rank figures of the last intervals (engine.by_rank of each page read), for a
    bundle; bounded by time and count (the watch's memory stays flat)."""

    def __init__(self, interval_s: float):
        self.keep = max(2, min(512, int(HISTORY_KEEP_S / max(interval_s, 0.5)) + 1))
        self._by_node: dict = {}
        self._lock = threading.Lock()

    def add(self, node: str, sample) -> None:
        from k3doctor.watch.engine import by_rank

        reading = sample.readings.get("metrics") if sample.problem is None else None
        if not isinstance(reading, CommandReading) or reading.rc != 0 or reading.truncated:
            return
        try:
            ranks = by_rank(parse_metrics(reading.stdout))
        except ParseError:
            return
        with self._lock:
            self._by_node.setdefault(node, collections.deque(maxlen=self.keep)).append(
                {"time": round(sample.at, 3), "ranks": ranks})

    def of(self, node: str) -> list:
        with self._lock:
            return list(self._by_node.get(node, ()))


def rank_pids(ps_text: str, engine_pattern: str) -> dict:
    """{rank: pid} of the ModelRunners that are engine processes or their descendants, from
    ``ps -eo pid=,ppid=,args=``."""
    parent, args = {}, {}
    for row in ps_text.splitlines():
        fields = row.split(None, 2)
        if len(fields) == 3 and fields[0].isdigit() and fields[1].isdigit():
            parent[int(fields[0])], args[int(fields[0])] = int(fields[1]), fields[2]
    engine = re.compile(engine_pattern)

    def of_engine(pid: int) -> bool:
        for _ in range(64):  # a process tree deeper than this is no engine's
            if pid not in args:
                return False
            if engine.search(args[pid]):
                return True
            pid = parent[pid]
        return False

    out = {}
    for pid, line in args.items():
        title = RANK_TITLE.match(line)
        if title and of_engine(pid):
            out[int(title.group(1))] = pid
    return out


def _stacks_command(pids: list, py_spy: str) -> Command:
    """py-spy dumps of ``pids``, one after another, each bounded; the markers triage reads (NO_PYSPY, FAILED)."""
    from k3doctor.triage import NO_PYSPY

    tool = quote(py_spy)
    return sh(f"command -v {tool} >/dev/null 2>&1 || {{ echo {NO_PYSPY}; exit 0; }}; for pid in "
              f"{' '.join(str(p) for p in pids)}; do timeout {PER_DUMP_S} {tool} dump --pid \"$pid\" </dev/null || "
              f'echo "K3DOCTOR-PYSPY-FAILED $pid"; done', READ_TIMEOUT_S)


class Evidence:
    """Captures into ``folder``; ``connect(node name)``: a fresh, unconnected transport to that node (the
    capture's own connection); ``inv``: the inventory (the container whose log is read, the GPUs per node);
    ``log_paths``: node -> the server log's path (else ``docker logs`` of the inventory's container, as triage
    reads it)."""

    def __init__(self, folder: str, connect, inv, history: MetricsHistory, engine_pattern: str,
                 log_paths: dict | None = None, py_spy: str = "py-spy"):
        self.folder, self.connect, self.inv, self.history = folder, connect, inv, history
        self.engine_pattern, self.log_paths, self.py_spy = engine_pattern, log_paths or {}, py_spy
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="k3doctor-evidence")
        self._futures: list = []
        self._stalled: dict = {}  # node -> keys of its stalled ranks now (a capture per node per stall)
        self._live: dict = {}  # node -> the capture's transport, to stop it when the watch stops
        self._lock = threading.Lock()
        self.count = 0

    def consider(self, event: dict) -> None:
        if event["code"] != STALL_CODE:
            return
        keys = self._stalled.setdefault(event["node"], set())
        key = event["where"]
        if event["event"] == "clear":
            keys.discard(key)
        elif event["event"] == "start":
            first = not keys
            keys.add(key)
            if first:
                self._futures.append((event, self._pool.submit(self._capture, event)))

    def _capture(self, event: dict) -> dict:
        node, started = event["node"], time.monotonic()
        transport = self.connect(node)
        with self._lock:
            self._live[node] = transport
        texts, dumps, problems, clock = {}, {}, {}, None
        try:
            transport.connect()
            ps = Command(("ps", "-eo", "pid=,ppid=,args="), READ_TIMEOUT_S)
            got = gather(transport, [ps], command_timeout_s=READ_TIMEOUT_S, deadline_s=DEADLINE_S)
            ranks = rank_pids(got[ps].output("the process table"), self.engine_pattern)
            texts, dumps, problems, clock = self._read(transport, node, ranks)
        except (TransportError, ReadingUnavailable, ParseError, OSError) as exc:
            problems[node] = f"evidence not read: {exc}"
        finally:
            with self._lock:
                self._live.pop(node, None)
            transport.close()
        return self._bundle(event, texts, dumps, problems, clock, time.monotonic() - started)

    def _read(self, transport, node: str, ranks: dict) -> tuple:
        from k3doctor.triage import log_command, log_text, redacted

        node_inv = next(n for n in self.inv.nodes if n.name == node)
        log = log_command(node_inv, LOG_TAIL, self.log_paths.get(node))
        clock = Command(("date", "+%s"))
        specs = [log, clock] + ([_stacks_command(sorted(ranks.values()), self.py_spy)] if ranks else [])
        got = gather(transport, specs, command_timeout_s=READ_TIMEOUT_S, deadline_s=DEADLINE_S)
        texts, dumps, problems = {}, {}, {}
        try:
            texts[node] = log_text(got[log])
        except ReadingUnavailable as exc:  # the log alone: the stacks and the metrics are still evidence
            problems[node] = f"server log: {exc}"
        if ranks:
            try:
                dumps[node] = got[specs[2]].output("the py-spy dumps")
            except ReadingUnavailable as exc:
                problems[f"{node} stacks"] = str(exc)
        else:
            problems[f"{node} stacks"] = (f"no ATOM::DP<n>TP0 process of the engine (--engine-process "
                                          f"{self.engine_pattern!r}) on the node")
        texts, dropped = redacted(texts)
        dumps, dropped_dumps = redacted(dumps)
        problems.update(dropped)
        problems.update({f"{n} stacks": why for n, why in dropped_dumps.items()})
        try:
            now = float(got[clock].output().strip())
        except (ValueError, ReadingUnavailable):
            now = None
        return texts, dumps, problems, now

    def _bundle(self, event: dict, texts: dict, dumps: dict, problems: dict, clock, took_s: float) -> dict:
        from k3doctor.outputs.report import render_json
        from k3doctor.triage import bundle, judge_all, most_likely
        from k3doctor.triage.flow import triage_report
        from k3doctor.triage.rank_logs import Layout

        node = event["node"]
        ranks = [int(m.group(1)) for m in RANK_TITLE.finditer("\n".join(dumps.values()))]
        layout = Layout(nodes=(node,), per_node=max([self.inv.cluster.gpus_per_node or 1, *(r + 1 for r in ranks)]))
        results = judge_all(texts, dumps, layout, now={node: clock} if clock else None, problems=problems)
        report, _ = triage_report(results, layout, took_s)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(event["time"]))
        path = os.path.join(self.folder, f"k3doctor-stall-{node}-{stamp}.tar.gz")
        history = self.history.of(node)
        manifest = {"layout": {"nodes": [node], "per_node": layout.per_node, "stepping": None, "board_gib": None},
                    "now": {node: clock} if clock else None, "problems": problems, "duration_s": round(took_s, 3),
                    "watch": {"event": event, "metrics_history": history}}
        try:
            bundle.write(path, texts=texts, dumps=dumps, manifest=manifest,
                         report_json=render_json(report))
        except OSError as exc:
            return action_event(event, "EVIDENCE-NOT-WRITTEN", "unknown", f"triage bundle not written to {path}: {exc}")
        with self._lock:
            self.count += 1
        first = most_likely(results)
        verdict = first.message if first else "no rank stands out in the stacks or the log"
        read = (f"{len(ranks)} rank stack(s), {len(texts.get(node, '').splitlines())} log line(s), "
                f"{len(history)} metrics interval(s)")
        unread = f"; not read: {'; '.join(problems.values())}" if problems else ""
        return action_event(event, "EVIDENCE-CAPTURED", event["severity"],
                     f"triage bundle {path} ({read}, {took_s:.1f}s): {verdict}{unread}"[:2000])

    def done(self, wait_s: float = 0.0) -> list:
        """The action events of the captures finished (waiting up to ``wait_s`` for those in flight); a capture
        that failed its own way is said as such, never raised into the watch."""
        deadline = time.monotonic() + wait_s
        out, left = [], []
        for event, future in self._futures:
            try:
                out.append(future.result(timeout=max(0.0, deadline - time.monotonic())))
            except FutureTimeout:
                left.append((event, future))
            except Exception as exc:  # noqa: BLE001 -- one capture's bug must not end the watch
                out.append(action_event(event, "EVIDENCE-NOT-WRITTEN", "unknown",
                                        f"evidence not captured: {type(exc).__name__}: {exc}"))
        self._futures = left
        return out

    def close(self) -> list:
        """What finished within CLOSE_WAIT_S; a capture still reading then is stopped on its node."""
        said = self.done(wait_s=CLOSE_WAIT_S)
        with self._lock:
            live = list(self._live.values())
        for transport in live:
            transport.cancel()
        said += self.done(wait_s=5)
        self._pool.shutdown(wait=False, cancel_futures=True)
        return said

