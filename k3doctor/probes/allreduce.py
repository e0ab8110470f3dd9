"""Launch the all_reduce probe on every node, watch it, kill it, and say what failed (§20).

One *run* is one torch.distributed world: ``allreduce_worker.py`` is sent as source over
stdin to each member node (``docker exec -i <container> python3 -`` or the host's python),
one rank per GPU, rendezvous at the first member's data-plane address (§18). Several runs
can go at once (the per-node and per-pair rounds of the hierarchy), each with its own run
id and port. Whatever happens - success, a hang, a transport error, Ctrl-C - every node of
every run gets a cleanup that kills what still carries the run's token, and the cleanup's
own report (killed / left) goes into the evidence.

What a run's transcripts mean is judged in k3doctor/probes/allreduce_runs.py (pure: ``K3PROBE`` lines in,
an :class:`Outcome` out); :func:`attribute` here turns the hierarchy's outcomes into findings.
"""
from __future__ import annotations

import json
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path

from k3doctor import progress
from k3doctor.probes.allreduce_runs import Member, NodeRun, Outcome, Plan, analyse, probe_events
from k3doctor.probes.kit import Finding, carriers, pair_rounds
from k3doctor.remote.allreduce_worker import AGENT_KILL_GRACE_S, TOKEN_PREFIX
from k3doctor.shell import join
from k3doctor.transport.base import TransportError

WORKER_SOURCE = (Path(__file__).parents[1] / "remote" / "allreduce_worker.py").read_bytes()
CLEANUP_TIMEOUT_S = 20.0
# A node whose ranks only ran out of their stage's time says little by itself: the ranks of the other nodes
# wait in the same collective and reach their own deadline a moment later (their watchdog polls every 0.2 s,
# their stages began a little apart), and a rank stopped where its watchdog cannot run is killed by its
# agent AGENT_KILL_GRACE_S after that. Cleaning those nodes up at once would cut off what names the rank at
# fault, so they get this long first.
PEERS_GRACE_S = AGENT_KILL_GRACE_S + 1.0

# --- launching ------------------------------------------------------------------------------

def _command(member: Member, *args) -> str:
    return join([*member.launcher, "-", *args])


def _cleanup(transport, member: Member, run_id: str) -> dict:
    try:
        reading = transport.run(_command(member, "--cleanup", run_id), timeout_s=CLEANUP_TIMEOUT_S,
                                stdin=WORKER_SOURCE)
    except TransportError as exc:
        return {"error": str(exc)}
    events = [e for e in probe_events(reading.stdout) if e.get("ev") == "cleanup"]
    if not events:
        tail = (reading.stderr or reading.stdout).strip()[-300:]
        return {"error": f"cleanup did not report (rc {reading.rc}): {tail}", "rc": reading.rc}
    return {"killed": events[-1].get("killed", []), "left": events[-1].get("left", [])}


def _run_node(transport, member: Member, plan: Plan, run_id: str, limit_s: float) -> NodeRun:
    command = _command(member, TOKEN_PREFIX + run_id, json.dumps(plan.spec(member, limit_s)))
    try:
        reading = transport.run(command, timeout_s=limit_s, stdin=WORKER_SOURCE)
    except TransportError as exc:
        return NodeRun(member.node, error=str(exc))
    return NodeRun(member.node, rc=reading.rc, stdout=reading.stdout, stderr=reading.stderr,
                   timed_out=reading.timed_out)


def launch(plans: list, transports: dict, limits: list | None = None) -> list:
    """Run the plans at once (their nodes must not overlap); always clean up every node.

    As soon as one node of a run fails, the run's other nodes still going are cleaned up too, so a
    rank that crashed at start does not leave the others waiting out their rendezvous deadline; where
    the node's ranks only ran out of time, PEERS_GRACE_S later.
    """
    limits = limits or [p.limit_s() for p in plans]
    run_ids = [uuid.uuid4().hex[:16] for _ in plans]
    started = time.monotonic()
    pool = ThreadPoolExecutor(max_workers=2 * sum(len(p.members) for p in plans) or 1,
                              thread_name_prefix="k3probe")
    results = [dict() for _ in plans]
    walls = [0.0 for _ in plans]
    early = {}  # fail fast: cleanups started while a run's other nodes were still going
    due, cleaned = {}, set()  # run -> when its nodes still going are cleaned up; the runs already cleaned up
    try:
        pending = {pool.submit(_run_node, transports[m.node], m, plan, run_ids[i], limits[i]): (i, m)
                   for i, plan in enumerate(plans) for m in plan.members}
        while pending:
            now = time.monotonic()
            done, _ = wait(pending, timeout=min([1.0] + [max(at - now, 0) for at in due.values()]),
                           return_when=FIRST_COMPLETED)
            for future in done:
                i, member = pending.pop(future)
                run = future.result()
                results[i][member.node] = run
                walls[i] = time.monotonic() - started
                if (run.error or run.rc != 0) and i not in cleaned:
                    at = time.monotonic() + (PEERS_GRACE_S if _ran_out_of_time(run) else 0)
                    due[i] = min(due.get(i, at), at)
            for i in [i for i, at in due.items() if at <= time.monotonic()]:
                del due[i]
                cleaned.add(i)
                for m in plans[i].members:
                    if m.node not in results[i]:
                        early[(i, m.node)] = pool.submit(_cleanup, transports[m.node], m, run_ids[i])
    finally:
        final = {(i, m.node): pool.submit(_cleanup, transports[m.node], m, run_ids[i])
                 for i, plan in enumerate(plans) for m in plan.members}
        for (i, node), future in final.items():
            report = future.result()
            first = early[(i, node)].result() if (i, node) in early else {}
            report["killed"] = first.get("killed", []) + report.get("killed", [])
            results[i].setdefault(node, NodeRun(node, error="interrupted")).cleanup = report
        pool.shutdown(wait=True)
    return [analyse(plan, run_ids[i], results[i], round(walls[i], 2)) for i, plan in enumerate(plans)]


def _ran_out_of_time(run: NodeRun) -> bool:
    """Whether every failure of the node's ranks was a stage deadline (their watchdog's, or their agent's kill)."""
    failures = [e for e in probe_events(run.stdout) if e.get("ev") in ("fail", "killed")]
    return not run.error and bool(failures) and all(
        e.get("ev") == "killed" or e.get("by") == "watchdog" for e in failures)


# --- the hierarchy (§20): node alone, node pairs, retry -----------------------------------

def attribute(full: Outcome, singles: dict, pairs: dict, retry: Outcome | None,
              not_run: str | None = None) -> list:
    """Separate a platform fault on a node from a cross-node fabric fault from an intermittent hang."""
    findings = []
    for node, o in singles.items():
        if not o.ok:
            findings.append(Finding("node", (node,), f"platform fault on {node}: the probe fails on {node} "
                                    f"alone ({o.describe()})", {"alone": o.evidence()}))
    if findings:
        return findings
    failed = {pair: o for pair, o in pairs.items() if not o.ok}
    blamed = carriers({pair: 0 if o.ok else 1 for pair, o in pairs.items()})
    for n, peers in blamed.items():
        findings.append(Finding("node-fabric", (n,), f"cross-node fault at {n}: every node passes alone, "
                                f"but {n} fails with every peer ({', '.join(peers)})",
                                {"pairs": {"+".join(p): o.evidence() for p, o in failed.items() if n in p}}))
    for pair, o in failed.items():
        if not set(pair) & blamed.keys():
            findings.append(Finding("pair", pair, f"cross-node fabric between {pair[0]} and {pair[1]}: each "
                                    f"passes alone and with other peers, together they fail ({o.describe()})",
                                    {"pair": o.evidence()}))
    if findings:
        return findings
    also = ", and so did every node and node pair" if len(full.nodes) > 1 else ""
    if retry is not None and retry.ok and full.wrong:  # corruption that comes and goes is still corruption
        return [Finding("wrong-sum", tuple(full.nodes), f"intermittent wrong all_reduce sum: the full probe summed "
                        f"right when re-run{also} - data corruption, not the ncclCommInitRank hang",
                        {"retry": retry.evidence()})]
    if retry is not None and retry.ok:
        message = f"intermittent: the full probe failed in `{full.stage}`, then passed when re-run{also}"
        if full.stage == "init":
            message += " - the intermittent ncclCommInitRank hang (§20)"
        return [Finding("intermittent", tuple(full.nodes), message, {"retry": retry.evidence()})]
    if retry is not None:
        return [Finding("scale", tuple(full.nodes),
                        f"fails at full scale only: every node and pair passes, the full probe failed again "
                        f"({retry.describe()})", {"retry": retry.evidence()})]
    return [Finding("unresolved", tuple(full.nodes), "every node and pair passed, but the full-scale failure "
                    f"could not be re-tested ({not_run or 'no retry'})")]


# --- the whole probe: full run, repeats, hierarchy -----------------------------------------

MIN_ROUND_S = 15.0  # a hierarchy round with less time than this left is not started
RESERVE_S = 10.0  # kept back for the last round's cleanup
MIN_DEADLINE_S = MIN_ROUND_S + RESERVE_S  # the full run's round plus the reserve


@dataclass
class Diagnosis:
    attempts: list  # full-scale outcomes, in order
    findings: list = field(default_factory=list)
    subruns: list = field(default_factory=list)  # hierarchy outcomes, in order
    not_run: str | None = None  # why the hierarchy stopped early
    elapsed_s: float = 0.0

    @property
    def final(self) -> Outcome:
        return self.attempts[-1]


def diagnose(plan: Plan, transports: dict, deadline_s: float, **kw) -> Diagnosis:
    """Full probe (repeated while its figures fall short), then, if it failed, the hierarchy."""
    clock = kw.get("clock", time.monotonic)
    t0 = clock()
    diag = _diagnose(plan, transports, deadline_s, t0=t0, **kw)
    diag.elapsed_s = round(clock() - t0, 2)
    return diag


def _diagnose(plan, transports, deadline_s, *, t0, repeats=1, good_enough=None, hierarchy=True, run=launch,
              clock=time.monotonic) -> Diagnosis:
    ports = iter(range(plan.port, plan.port + 1000))

    def left() -> float:
        return deadline_s - (clock() - t0) - RESERVE_S

    def go(plans: list, first: bool = False) -> list | None:
        limit = min(max(p.limit_s() for p in plans), left())
        if limit < MIN_ROUND_S and not first:
            return None
        progress.note(f"allreduce-probe: {', '.join(p.label for p in plans)} (at most {limit:.0f}s)")
        return run(plans, transports, [limit] * len(plans))

    if deadline_s < MIN_DEADLINE_S:
        raise ValueError(f"deadline of {deadline_s:g}s is under the {MIN_DEADLINE_S:g}s one run needs")
    # the first run is owed its round even when the clock has moved on since t0 (deadline_s == MIN_DEADLINE_S)
    diag = Diagnosis(attempts=go([replace(plan, port=next(ports))], first=True))
    while diag.final.ok and len(diag.attempts) < repeats and not (good_enough and good_enough(diag.final)):
        again = go([replace(plan, port=next(ports))])
        if again is None:
            break
        diag.attempts += again
    full = diag.final
    if full.ok or full.setup_error or full.not_started or not hierarchy:
        return diag
    if full.stage == "start":  # a rank that cannot even start is a fault of its own node
        for node in full.missing_nodes or sorted({full.node_by_rank[r] for r in full.errors if r >= 0}):
            why = "; ".join(f"rank {r}: {e}" for r, e in full.errors.items() if full.node_by_rank.get(r) == node)
            diag.findings.append(Finding("node", (node,), f"platform fault on {node}: {why or 'rank never started'}"))
        return diag
    smoke = full.stage not in ("warmup", "sweep", "alltoall")  # later stages need the sizes that failed
    singles_plans = [plan.subset([n], f"node {n}", next(ports), smoke) for n in plan.nodes]
    singles = go(singles_plans)
    if singles is None:
        diag.not_run = "no time left for the per-node runs"
        diag.findings.append(Finding("unresolved", tuple(plan.nodes), diag.not_run))
        return diag
    diag.subruns += singles
    by_node = dict(zip(plan.nodes, singles, strict=True))
    good = [n for n in plan.nodes if by_node[n].ok]
    pairs = {}
    if len(good) == len(plan.nodes):
        for round_ in pair_rounds(good) if len(good) > 2 else []:
            outcomes = go([plan.subset(p, f"pair {p[0]}+{p[1]}", next(ports), smoke) for p in round_])
            if outcomes is None:
                diag.not_run = "no time left for every node pair"
                break
            diag.subruns += outcomes
            pairs.update(zip(round_, outcomes, strict=True))
    retry = None
    if len(good) == len(plan.nodes) and not any(not o.ok for o in pairs.values()) and not diag.not_run:
        if len(plan.nodes) == 1:
            retry = singles[0]  # one node: its run alone is the retry
        else:
            again = go([replace(plan, port=next(ports))])
            if again is None:
                diag.not_run = "no time left to retry the full probe"
            else:
                retry = again[0]
                diag.subruns.append(retry)
    diag.findings = attribute(full, by_node, pairs, retry, diag.not_run)
    return diag
