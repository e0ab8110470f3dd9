"""Run checks over the nodes: connect in parallel, gather once per node, judge, then probe.

Phase 1 (passive, every tier): per node, in a bounded thread pool, one connection and one
gather of every reading the selected checks declared; node and GPU judges run as soon as
a node's readings are in, each after the prerequisites it ``needs`` (k3doctor/prerequisites.py: where
one failed, its dependants are not evaluated on that node). Phase 2: cluster judges over all nodes'
readings, leaving out the nodes where a prerequisite failed. Phase 3:
active probes (deep tier), in ``after=`` order, only for nodes whose prerequisite checks
passed. A node that cannot be reached gets one ERROR per check and never stops the others.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from k3doctor import platforms

from . import progress
from .api import Context, judge_safely
from .deadline import seconds
from .gather import gather
from .inventory import Inventory, Node
from .parsers import ParseError
from .prerequisites import Gate, blocking_findings
from .readings import Readings, ReadingUnavailable, Unavailable
from .registry import prerequisites_first
from .results import Result, Status, error
from .transport import LocalTransport, SSHTransport, Transport, TransportError, resolve_ssh_target


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


@dataclass
class RunReport:
    results: list
    nodes: list
    duration_s: float
    round_trips: dict = field(default_factory=dict)
    unreachable: dict = field(default_factory=dict)
    readings: dict = field(default_factory=dict)  # node -> {spec: reading}
    platform: str | None = None
    not_for_platform: tuple = ()  # checks selected but not run: they do not apply on this platform
    records: dict = field(default_factory=dict)  # node -> check -> baseline data (record mode)


def make_transport(node: Node, inv: Inventory, opts: RunOptions) -> Transport:
    if node.transport == "local":
        return LocalTransport(node.name, sudo=node.sudo)
    password = os.environ.get(node.password_env) if node.password_env else None
    target = resolve_ssh_target(
        node.name, node.host, port=node.port, user=node.user, identity_file=node.identity_file,
        password=password, known_hosts=inv.ssh.known_hosts,
        accept_unknown_hosts=opts.accept_unknown_hosts or inv.ssh.accept_unknown_hosts,
        connect_timeout_s=seconds(opts.connect_timeout_s or inv.ssh.connect_timeout_s, 10.0),
        ssh_config_path=inv.ssh.ssh_config)
    return SSHTransport(target, sudo=node.sudo, docker_socket=inv.ssh.docker_socket)


def _to_results(chk, node: str | None, verdicts) -> list:
    return [Result(check=chk.name, node=v.node or node, status=v.status, message=v.message, gpu=v.gpu,
                   evidence=v.evidence, remediation=v.remediation)
            for v in chk.with_default_remediation(verdicts)]


def run_checks(inv: Inventory, checks: list, opts: RunOptions = None) -> RunReport:
    opts = opts or RunOptions()
    selected = {c.name for c in checks}  # a probe's prerequisite not for this platform blocks nothing
    applicable = platforms.applicable(checks, inv.cluster.platform)
    not_for_platform = tuple(c.name for c in checks if c not in applicable)
    checks = applicable
    say = opts.progress or (lambda msg: None)
    started = time.monotonic()
    passive = [c for c in checks if c.interaction == "passive"]
    cluster = [c for c in passive if c.scope == "cluster"]
    active = [c for c in checks if c.interaction != "passive"]
    command_timeout = seconds(opts.command_timeout_s or inv.ssh.command_timeout_s, 30.0)
    deadline = seconds(opts.node_deadline_s or inv.ssh.node_deadline_s, 120.0)
    interrupted = threading.Event()

    transports, readings, unreachable, results_by_node, records, specs_by_node = {}, {}, {}, {}, {}, {}
    failed_by_node = {}  # node -> prerequisite check -> its blocking results there
    baseline = opts.baseline or {}

    def visit(node: Node):
        specs_by_check = specs_by_node[node.name] = specs_of(passive, node.settings)
        wanted = [s for specs in specs_by_check.values() if isinstance(specs, dict) for s in specs.values()]
        try:
            if opts.replay:
                transport, got = None, _replayed(node.name, wanted, *opts.replay)
            else:
                transport = transports[node.name] = make_transport(node, inv, opts)
                if interrupted.is_set():  # Ctrl-C came while this node was being set up
                    transport.cancel()
                transport.connect()
                got = gather(transport, wanted, command_timeout_s=command_timeout, deadline_s=deadline)
        except Exception as exc:  # TransportError, or anything else: this node only, never the run
            why = str(exc) if isinstance(exc, TransportError) else f"{type(exc).__name__}: {exc}"
            unreachable[node.name] = why
            results_by_node[node.name] = [
                Result(c.name, node.name, Status.ERROR, f"node not checked: {why}") for c in checks]
            say(f"{node.name}: unreachable ({why})")
            return
        readings[node.name] = got
        judged, failed = {}, failed_by_node.setdefault(node.name, {})
        for chk in prerequisites_first(passive):
            if isinstance(specs_by_check[chk.name], Result):  # its reads could not be built for this node
                judged[chk.name] = [replace(specs_by_check[chk.name], node=node.name)]
                failed[chk.name] = blocking_findings(chk, judged[chk.name])
                continue
            mine = {name: got[spec] for name, spec in specs_by_check[chk.name].items()}
            ctx = Context(chk, node.settings, node=node.name,
                          baseline=baseline.get(node.name, {}).get(chk.name), fix=opts.fix)
            if opts.record and chk.record:
                records.setdefault(node.name, {})[chk.name] = _record_safely(chk.record, Readings(mine), ctx)
            if chk.scope not in ("node", "gpu"):
                continue
            gate = Gate(chk, failed)
            verdicts = gate.skipped() or gate.per_gpu(judge_safely(chk.judge, Readings(gate.readings(mine)), ctx))
            if opts.fix and chk.fixer and any(v.status in (Status.FAIL, Status.WARN) for v in verdicts):
                verdicts = _fix_and_rejudge(chk, transport, verdicts, ctx, specs_by_check[chk.name],
                                            command_timeout, deadline)
            judged[chk.name] = _to_results(chk, node.name, verdicts)
            failed[chk.name] = blocking_findings(chk, judged[chk.name])
        results_by_node[node.name] = [r for chk in passive for r in judged.get(chk.name, [])]
        say(f"{node.name}: {len(got)} readings" + (f" in {transport.round_trips} round trip(s)" if transport else ""))

    try:
        workers = max(1, min(opts.parallel, len(inv.nodes)))
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="k3doctor-node")
        try:
            with progress.task("reading nodes", total=len(inv.nodes)) as step:
                list(pool.map(lambda node: (visit(node), step(node.name)), inv.nodes))
        except BaseException:  # Ctrl-C: stop the reads in flight on every node now, not at their deadlines
            interrupted.set()
            cancel_all(transports)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

        results = [r for node in inv.nodes for r in results_by_node.get(node.name, [])]
        if opts.baseline is not None:
            results += [Result("baseline", n, Status.WARN, "node is not in the baseline file: drift not checked "
                               "(record it with `k3doctor baseline record` while it is healthy)")
                        for n in readings if n not in baseline]
        nodes = {n.name: n for n in inv.nodes}
        results += judge_cluster(inv, cluster, readings, specs_by_node, failed_by_node, baseline)
        for chk in active:
            if opts.replay:
                results.append(Result(chk.name, None, Status.SKIP, "active probe: not replayable from saved readings"))
                continue
            blocked = dict(unreachable)
            ran = selected
            for missing in (dep for dep in chk.after if dep not in ran):
                for n in nodes:
                    blocked.setdefault(n, f"prerequisite {missing} was not run")
            for r in results:  # a prerequisite not evaluated on a node (SKIP) did not pass there either
                if r.check in chk.after and r.node and r.status in (Status.FAIL, Status.ERROR, Status.SKIP):
                    blocked.setdefault(r.node, f"{r.check} is {r.status.value}")
            ctx = Context(chk, inv.cluster, nodes=nodes, transports=transports,
                          baseline={n: entry.get(chk.name) for n, entry in baseline.items()},
                          blocked=blocked, fix=opts.fix, deadline_s=seconds(chk.timeout_s or deadline, deadline))
            say(f"probe {chk.name}: starting")
            with progress.task(f"probe {chk.name}"):
                verdicts = judge_safely(chk.probe, ctx)
            results += _to_results(chk, None, verdicts)
            if opts.record and chk.record_run:
                for node, entry in (_record_safely(chk.record_run, verdicts, ctx) or {}).items():
                    records.setdefault(node, {})[chk.name] = entry
    except BaseException:  # Ctrl-C in a probe: whatever it left in flight is stopped on the nodes too
        cancel_all(transports)
        raise
    finally:  # also on Ctrl-C: no half-open SSH sessions left behind
        for transport in transports.values():
            transport.close()
    return RunReport(results=results, nodes=[n.name for n in inv.nodes],
                     duration_s=round(time.monotonic() - started, 3),
                     round_trips={name: t.round_trips for name, t in transports.items()},
                     unreachable=unreachable, readings=readings, records=records,
                     platform=inv.cluster.platform, not_for_platform=not_for_platform)


def judge_cluster(inv: Inventory, cluster: list, readings: dict, specs_by_node: dict, failed_by_node: dict,
                  baseline: dict) -> list:
    """Phase 2: each cluster judge over the reachable nodes' readings, leaving out the nodes where a
    prerequisite failed (``failed_by_node``: node -> prerequisite -> its blocking results there).
    ``readings``: node -> {spec: reading}; ``specs_by_node``: node -> check -> {name: spec} (or the
    Result that says why its reads could not be built there). Shared by ``check`` and ``merge``."""
    results = []
    for chk in cluster:
        for rack, members in inv.rack_groups():  # each rack on its own (inventory `racks:`)
            results += _judge_rack(chk, rack, inv.cluster, [n for n in members if n.name in readings], readings,
                                   specs_by_node, failed_by_node, baseline)
    return results


def _judge_rack(chk, rack, settings, reachable: list, readings, specs_by_node, failed_by_node, baseline) -> list:
    built = [n for n in reachable if isinstance(specs_by_node[n.name][chk.name], dict)]
    gates = {n.name: Gate(chk, failed_by_node.get(n.name, {})) for n in built}
    evaluated = [n for n in built if not gates[n.name].whole]
    results = []
    for n in built:  # a node left out says so once
        results += _to_results(chk, n.name, gates[n.name].skipped())
    per_node = {n.name: Readings(gates[n.name].readings(
        {name: readings[n.name][spec] for name, spec in specs_by_node[n.name][chk.name].items()}))
        for n in evaluated}
    ctx = Context(chk, settings, nodes={n.name: n for n in evaluated},
                  baseline={n: entry.get(chk.name) for n, entry in baseline.items()})
    verdicts = _to_results(chk, None, judge_safely(chk.judge, per_node, ctx)) if evaluated else []
    for r in verdicts:  # a rack-wide result says which rack
        if rack is not None and r.node is None:
            r.message = f"rack {rack}: {r.message}"
    return results + verdicts


def specs_of(checks: list, settings) -> dict:
    """check name -> its reading specs on one node, or the ERROR when building them failed there
    (a bug in a check's ``reads``: that check on that node, never every node)."""
    out = {}
    for chk in checks:
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
