"""Run checks over the nodes: connect in parallel, gather once per node, judge, then probe.

Phase 1 (passive, every tier): per node, in a bounded thread pool, one connection and one
gather of every reading the selected checks declared; node and GPU judges run as soon as
a node's readings are in, each after the prerequisites it ``needs`` (k3doctor/judging/prerequisites.py: where
one failed, its dependants are not evaluated on that node). Phase 2: cluster judges over all nodes'
readings, leaving out the nodes where a prerequisite failed. Phase 3:
active probes (deep tier), in ``after=`` order, only for nodes whose prerequisite checks
passed. A node that cannot be read has one cause (k3doctor/judging/unread.py), its checks an ERROR each that
carries it, and never stops the others.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from k3doctor import platforms, progress
from k3doctor.api import Context, judge_safely
from k3doctor.deadline import seconds
from k3doctor.gather.node_script import gather
from k3doctor.inventory.types import Inventory, Node
from k3doctor.judging.causes import explained
from k3doctor.judging.connections import make_transport
from k3doctor.judging.evaluate import NodeJudge, judge_across, to_results
from k3doctor.judging.prerequisites import busy_rack
from k3doctor.judging.unread import unread, unread_results
from k3doctor.judging.waivers import apply as apply_waivers
from k3doctor.parsers import ParseError
from k3doctor.readings import Readings, ReadingUnavailable, Unavailable
from k3doctor.registry import prerequisites_first
from k3doctor.results import Result, Status, error
from k3doctor.transport.base import TransportError


@dataclass
class RunOptions:
    parallel: int = 64
    connect_timeout_s: float | None = None  # None: the inventory's ssh settings
    command_timeout_s: float | None = None
    node_deadline_s: float | None = None
    accept_unknown_hosts: bool = False
    fix: bool = False
    baseline: dict | None = None  # node -> check -> recorded data
    record: bool = False  # collect baseline records instead of only judging
    replay: tuple | None = None  # ({node: {spec: reading}}, {node: why}) from a saved snapshot
    progress: Callable[[str], None] | None = None
    ahead: object = None  # the nodes' connections opened before the run (k3doctor/judging/connections.py Ahead)
    today: object = None  # the date the inventory's waivers are judged on (None: today, UTC)


@dataclass
class RunReport:
    results: list
    nodes: list
    duration_s: float
    round_trips: dict = field(default_factory=dict)
    unreachable: dict = field(default_factory=dict)  # node -> Unread: why it was not read at all
    readings: dict = field(default_factory=dict)  # node -> {spec: reading}
    platform: str | None = None
    not_for_platform: tuple = ()  # checks selected but not run: they do not apply on this platform
    records: dict = field(default_factory=dict)  # node -> check -> baseline data (record mode)
    notes: list = field(default_factory=list)  # about the run's inputs, not the rack (a waiver that matched nothing)


SKIPPED_HERE = "not run on this node: switched off by the inventory (skip:)"


class _Run:
    """One run's state across its phases: read (and judge) the nodes, judge across them, probe."""

    def __init__(self, inv: Inventory, checks: list, opts: RunOptions, selected: set):
        self.inv, self.checks, self.opts, self.selected = inv, checks, opts, selected
        self.say = opts.progress or (lambda msg: None)
        self.passive = [c for c in checks if c.interaction == "passive"]
        self.command_timeout = seconds(opts.command_timeout_s or inv.ssh.command_timeout_s, 30.0)
        self.deadline = seconds(opts.node_deadline_s or inv.ssh.node_deadline_s, 120.0)
        self.baseline = opts.baseline or {}
        self.interrupted = threading.Event()
        self.transports, self.readings, self.unreachable, self.records = {}, {}, {}, {}
        self.results_by_node, self.specs_by_node = {}, {}
        self.failed_by_node = {}  # node -> prerequisite check -> its blocking results there
        self.facts_by_node = {}  # node -> cluster check -> its each_node Facts there (judging/evaluate.py)

    def read_nodes(self) -> None:
        """Phase 1: every node read in a bounded pool, its node and GPU checks judged as soon as it is in."""
        workers = max(1, min(self.opts.parallel, len(self.inv.nodes)))
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="k3doctor-node")
        try:
            with progress.task("reading nodes", total=len(self.inv.nodes)) as step:
                list(pool.map(lambda node: (self.visit(node), step(node.name)), self.inv.nodes))
        except BaseException:  # Ctrl-C: stop the reads in flight on every node now, not at their deadlines
            self.interrupted.set()
            cancel_all(self.transports)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def visit(self, node: Node) -> None:
        specs_by_check = self.specs_by_node[node.name] = specs_of(self.passive, node.settings)
        try:
            transport, got = self.read(node, specs_by_check)
        except Exception as exc:  # TransportError, or anything else: this node only, never the run
            why = self.unreachable[node.name] = unread(exc)
            self.results_by_node[node.name] = unread_results(node.name, self.checks, why)
            self.say(f"{node.name}: not read ({why.message})")
            return
        progress.mark("read")
        self.readings[node.name] = got
        self.results_by_node[node.name] = self.judge_node(node, transport, got, specs_by_check)
        self.say(f"{node.name}: {len(got)} readings"
                 + (f" in {transport.round_trips} round trip(s)" if transport else ""))

    def read(self, node: Node, specs_by_check: dict) -> tuple:
        """(transport or None when replaying, {spec: reading}) of one node."""
        wanted = [s for specs in specs_by_check.values() if isinstance(specs, dict) for s in specs.values()]
        if self.opts.replay:
            return None, _replayed(node.name, wanted, *self.opts.replay)
        ahead = self.opts.ahead
        if ahead is not None and ahead.opened(node.name):
            transport = self.transports[node.name] = ahead.take(node.name)
        else:
            transport = self.transports[node.name] = make_transport(node, self.inv, self.opts)
        if self.interrupted.is_set():  # Ctrl-C came while this node was being set up
            transport.cancel()
        transport.connect()
        return transport, gather(transport, wanted, command_timeout_s=self.command_timeout, deadline_s=self.deadline,
                                 in_flight=self.inv.ssh.reads_in_flight)

    def judge_node(self, node: Node, transport, got: dict, specs_by_check: dict) -> list:
        """One node's node and GPU checks (prerequisites first), its baseline records; results in check order."""
        judge = NodeJudge(node.name, node.settings, baseline=self.baseline.get(node.name, {}), fix=self.opts.fix)
        self.failed_by_node[node.name], self.facts_by_node[node.name] = judge.failed, judge.facts
        judged = {}
        for chk in prerequisites_first(self.passive):
            if isinstance(specs_by_check[chk.name], Result):  # its reads could not be built for this node
                judged[chk.name] = judge.settle(chk, [replace(specs_by_check[chk.name], node=node.name)])
                continue
            mine = {name: got[spec] for name, spec in specs_by_check[chk.name].items()}
            if self.opts.record and chk.record:
                self.records.setdefault(node.name, {})[chk.name] = _record_safely(
                    chk.record, Readings(mine), judge.context(chk))
            if chk.scope == "cluster" and chk.each_node:  # its part on this node now, beside the other nodes' reads
                judge.take_facts(chk, mine)
            if chk.scope not in ("node", "gpu"):
                continue
            verdicts = judge.verdicts(chk, mine)
            if self.opts.fix and chk.fixer and any(v.status in (Status.FAIL, Status.WARN) for v in verdicts):
                verdicts = _fix_and_rejudge(chk, transport, verdicts, judge.context(chk), specs_by_check[chk.name],
                                            self.command_timeout, self.deadline)
            judged[chk.name] = judge.settle(chk, to_results(chk, node.name, verdicts))
        return [r for chk in self.passive for r in judged.get(chk.name, [])]

    def node_results(self) -> list:
        results = [r for node in self.inv.nodes for r in self.results_by_node.get(node.name, [])]
        if self.opts.baseline is not None:
            results += [Result("baseline", n, Status.WARN, "node is not in the baseline file: drift not checked "
                               "(record it with `k3doctor baseline record` while it is healthy)")
                        for n in self.readings if n not in self.baseline]
        return results

    def run_probes(self, results: list) -> list:
        """Phase 3 (deep tier): each active probe, on the nodes where its prerequisites passed."""
        out = []
        nodes = {n.name: n for n in self.inv.nodes}
        ran = self.selected
        for chk in (c for c in self.checks if c.interaction != "passive"):
            if self.opts.replay:
                out.append(Result(chk.name, None, Status.SKIP, "active probe: not replayable from saved readings"))
                continue
            refusal = busy_rack(chk, results + out)
            if refusal:
                out.append(refusal)
                continue
            blocked = {n: why.message for n, why in self.unreachable.items()}
            for n, node in nodes.items():
                if chk.name in node.settings.skip:
                    blocked.setdefault(n, SKIPPED_HERE)
            for missing in (dep for dep in chk.after if dep not in ran):
                for n in nodes:
                    blocked.setdefault(n, f"prerequisite {missing} was not run")
            for r in results + out:  # a prerequisite not evaluated on a node (SKIP) did not pass there either
                if r.check in chk.after and r.node and r.status in (Status.FAIL, Status.ERROR, Status.SKIP):
                    blocked.setdefault(r.node, f"{r.check} is {r.status.value}")
            ctx = Context(chk, self.inv.cluster, nodes=nodes, transports=self.transports,
                          baseline={n: entry.get(chk.name) for n, entry in self.baseline.items()},
                          blocked=blocked, fix=self.opts.fix,
                          deadline_s=seconds(chk.timeout_s or self.deadline, self.deadline))
            self.say(f"probe {chk.name}: starting")
            with progress.task(f"probe {chk.name}"):
                verdicts = judge_safely(chk.probe, ctx)
            out += to_results(chk, None, verdicts)
            if self.opts.record and chk.record_run:
                for node, entry in (_record_safely(chk.record_run, verdicts, ctx) or {}).items():
                    self.records.setdefault(node, {})[chk.name] = entry
        return out

    def report(self, results: list, started: float) -> RunReport:
        return RunReport(results=results, nodes=[n.name for n in self.inv.nodes],
                         duration_s=round(time.monotonic() - started, 3),
                         round_trips={name: t.round_trips for name, t in self.transports.items()},
                         unreachable=self.unreachable, readings=self.readings, records=self.records)


def run_checks(inv: Inventory, checks: list, opts: RunOptions = None) -> RunReport:
    """Read, judge each node, judge across nodes, probe: the whole run, every phase bounded."""
    started = time.monotonic()
    selected = {c.name for c in checks}  # a probe's prerequisite not for this platform blocks nothing
    checks = [c for c in checks if c.name not in inv.cluster.skip]  # switched off for the whole cluster
    applicable = platforms.applicable(checks, inv.cluster.platform)
    not_for_platform = tuple(c.name for c in checks if c not in applicable)
    run = _Run(inv, applicable, opts or RunOptions(), selected)
    try:
        run.read_nodes()
        results = run.node_results()
        results += judge_cluster(inv, [c for c in run.passive if c.scope == "cluster"], run.readings,
                                 run.specs_by_node, run.failed_by_node, run.baseline, run.facts_by_node)
        results += run.run_probes(results)
    except BaseException:  # Ctrl-C in a probe: whatever it left in flight is stopped on the nodes too
        cancel_all(run.transports)
        raise
    finally:  # also on Ctrl-C: no half-open SSH sessions left behind
        for transport in run.transports.values():
            transport.close()
        if run.opts.ahead is not None:  # connections opened ahead that the run did not take
            run.opts.ahead.close()
    results, notes = apply_waivers(explained(results), inv.waivers, run.opts.today)
    report = run.report(results, started)
    report.notes = notes
    progress.mark("judged")
    report.platform, report.not_for_platform = inv.cluster.platform, not_for_platform
    return report


def judge_cluster(inv: Inventory, cluster: list, readings: dict, specs_by_node: dict, failed_by_node: dict,
                  baseline: dict, facts_by_node: dict | None = None) -> list:
    """Phase 2: each cluster judge over the reachable nodes' readings, leaving out the nodes where a
    prerequisite failed (``failed_by_node``: node -> prerequisite -> its blocking results there).
    ``readings``: node -> {spec: reading}; ``specs_by_node``: node -> check -> {name: spec} (or the
    Result that says why its reads could not be built there); ``facts_by_node``: node -> check -> the
    ``each_node`` part phase 1 took there (what is missing is taken here). Shared by ``check`` and ``merge``."""
    results = []
    for chk in cluster:
        for rack, members in inv.rack_groups():  # each rack on its own (inventory `racks:`)
            built = [n for n in members if n.name in readings and isinstance(specs_by_node[n.name][chk.name], dict)]
            per_node = {n.name: {name: readings[n.name][spec] for name, spec in specs_by_node[n.name][chk.name].items()}
                        for n in built}
            ctx = Context(chk, inv.cluster, nodes={n.name: n for n in built},
                          baseline={n: entry.get(chk.name) for n, entry in baseline.items()})
            facts = {n: got[chk.name] for n, got in (facts_by_node or {}).items() if chk.name in got}
            left_out, verdicts = judge_across(chk, per_node, failed_by_node, ctx, facts)
            placed = to_results(chk, None, verdicts)
            for r in placed:  # a rack-wide result says which rack
                if rack is not None and r.node is None:
                    r.message = f"rack {rack}: {r.message}"
            results += to_results(chk, None, left_out) + placed
    return results


def specs_of(checks: list, settings) -> dict:
    """check name -> its reading specs on one node, or the result that stands for it there: a SKIP where the
    inventory's ``skip:`` switches it off for that node, the ERROR when building its reads failed (a bug in
    a check's ``reads``: that check on that node, never every node)."""
    out = {}
    for chk in checks:
        if chk.name in getattr(settings, "skip", ()):
            out[chk.name] = Result(chk.name, None, Status.SKIP, SKIPPED_HERE)
            continue
        try:
            out[chk.name] = chk.readings_for(settings)
        except Exception as exc:
            out[chk.name] = Result(chk.name, None, Status.ERROR,
                                   f"internal error in check (its readings): {type(exc).__name__}: {exc}")
    return out


def cancel_all(transports: dict, within_s: float = 10.0) -> None:
    """Cancel every node's transport at once (each stops its commands on its node), for at most within_s."""
    threads = [threading.Thread(target=t.cancel, daemon=True, name=f"k3doctor-cancel-{t.node}")
               for t in list(transports.values())]
    for thread in threads:
        thread.start()
    end = time.monotonic() + within_s
    for thread in threads:
        thread.join(max(0.0, end - time.monotonic()))


def _fix_and_rejudge(chk, transport, verdicts, ctx, specs: dict, command_timeout, deadline) -> list:
    """--fix: let the check repair what it named, then judge fresh readings, so the report shows the
    node as it is now (plus what was done), not the state before the repair."""
    done = judge_safely(chk.fixer, transport, verdicts, ctx)
    try:
        got = gather(transport, list(specs.values()), command_timeout_s=command_timeout, deadline_s=deadline)
    except TransportError as exc:
        return verdicts + done + [error(f"could not re-read after --fix: {exc}")]
    return done + judge_safely(chk.judge, Readings({n: got[s] for n, s in specs.items()}), ctx)


def _replayed(node: str, wanted: list, saved: dict, unreachable: dict) -> dict:
    """A node's saved readings; specs the snapshot lacks (newer checks) read as unavailable."""
    if node in unreachable or node not in saved:
        raise TransportError(unreachable.get(node, "node not in the saved readings"))
    got = saved[node]
    return {spec: got.get(spec, Unavailable("not in the saved readings (taken by an older k3doctor?)"))
            for spec in wanted}


def _record_safely(record, seen, ctx):
    """A baseline entry, or the reason it could not be taken (kept in the file, shown on use)."""
    try:
        return record(seen, ctx)
    except (ReadingUnavailable, ParseError) as exc:
        return {"unrecorded": str(exc)}
    except Exception as exc:  # a bug in one check's record must not lose the others'
        return {"unrecorded": f"internal error: {type(exc).__name__}: {exc}"}


def select_checks(registry, *, only=(), skip=(), tier="fast") -> list:
    """The checks a run should do: named ones, else every check of the tier (deep includes fast)."""
    unknown = [n for n in (*only, *skip) if n not in registry.checks]
    if unknown:
        raise KeyError(", ".join(unknown))
    names = set(only) if only else {c.name for c in registry.checks.values()
                                    if tier == "deep" or c.tier == "fast"}
    # An active probe runs only where its prerequisites passed, so they run with it unless skipped by
    # name (then the runner blocks the probe and says why).
    names |= {dep for n in list(names) if registry.checks[n].interaction != "passive"
              for dep in registry.checks[n].after if dep in registry.checks}
    return registry.ordered(names - set(skip))
