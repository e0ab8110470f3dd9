"""Where live ranks are stuck, from py-spy stacks of their ModelRunner processes (reference §20).

EngineCore always waits on a queue, so the ModelRunner (`ATOM::DP<n>TP0`) is the process to read: a
healthy load sits idle in `as_completed`; a collective hang is stopped in `ncclCommInitRank` (or a mori
dispatch); spinning in the scheduler is a KV allocation problem. Ranks whose stack differs from the
majority are named: on a 16-rank hang the odd one is usually the cause.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from k3doctor.registry import remediation
from k3doctor.results import fail, passed, warn

_RANK = re.compile(r"ATOM::DP(\d{1,3})TP0\b")


@dataclass(frozen=True)
class StackRule:
    name: str
    frames: re.Pattern  # matched against "function (file)" of every frame of the main thread
    needs_active: bool
    healthy: bool
    remediation: str | None


COLLECTIVE = remediation("TRIAGE-COLLECTIVE-HANG", "ranks are stopped inside a collective", """
py-spy shows the ModelRunner stopped in `ncclCommInitRank` (or `synchronize` <- `communicator_pynccl.__init__`
<- `init_model_parallel_group`) or inside a mori dispatch: a collective hang (reference §20). A hang at init
that comes and goes is the ncclCommInitRank hang: rule the fabric out once (deep tier), then retry; one that
repeats every time is below ATOM (minimal all_reduce probe, §20).""")
SCHEDULER = remediation("TRIAGE-SCHEDULER-SPIN", "a rank spins in the scheduler", """
A ModelRunner busy in the scheduler with no progress is a KV allocation problem (reference §20): read its
KV usage in the server log (`k3doctor triage`), and consider --gpu-memory-utilization 0.94 or less prefix
caching.""")
ODD_STACK = remediation("TRIAGE-ODD-STACK", "one rank's stack differs from all the others", """
The other ranks agree on where they are; this one is elsewhere (reference §20). It is usually the rank
the others wait for: read its node's kernel log and its own last log lines before killing anything.""")
NO_PYSPY = remediation("TRIAGE-NO-PYSPY", "py-spy is not installed on the node", """
py-spy is not in the image and need not be (reference §20): install it on the host
(`pip install py-spy`, a static binary) and run `k3doctor triage --stacks` again; it reads the
ModelRunner by its host PID (visible with --pid host) without changing the container. k3doctor never
installs it for you.""")

RULES = (
    StackRule("collective-init", re.compile(r"ncclCommInitRank|communicator_pynccl|init_model_parallel_group"),
              False, False, COLLECTIVE),
    StackRule("mori-dispatch", re.compile(r"mori\S*\)|\bdispatch\w* \(\S*mori"), False, False, COLLECTIVE),
    StackRule("scheduler", re.compile(r"schedul\w* \(|\(\S*scheduler\S*\)"), True, False, SCHEDULER),
    StackRule("idle-as-completed", re.compile(r"\bas_completed \("), False, True, None),
)


def rank_of(command: str) -> int | None:
    m = _RANK.search(command)
    return int(m.group(1)) if m else None


def classify(proc) -> str:
    """The first rule whose frames appear in the process's main (first) thread; "other" otherwise."""
    thread = proc.threads[0]
    frames = [f"{fn} ({path})" for fn, path, _ in thread.frames]
    for rule in RULES:
        if (not rule.needs_active or thread.state == "active") and any(rule.frames.search(f) for f in frames):
            return rule.name
    return "other"


def judge_stacks(procs: list, layout) -> list:
    """(step, Verdict) pairs: classes a rule calls unhealthy, then ranks off the majority."""
    by_rank = {}
    for proc in procs:
        rank = rank_of(proc.command)
        if rank is not None:
            by_rank[rank] = (classify(proc), proc)
    if not by_rank:
        return []
    rules = {r.name: r for r in RULES}
    counts = Counter(cls for cls, _ in by_rank.values())
    majority, seen = counts.most_common(1)[0]
    out = []
    for rank, (cls, proc) in sorted(by_rank.items()):
        top = " <- ".join(fn for fn, _, _ in proc.threads[0].frames[:3])
        evidence = {"rank": rank, "stack": top, "class": cls, "pid": proc.pid}
        rule = rules.get(cls)
        verdict = None
        if rule and not rule.healthy:
            verdict = fail(f"rank {rank} ({layout.where(rank)}) stopped in {cls}: {top}", evidence=evidence,
                           remediation=rule.remediation)
        elif cls != majority and seen > 1:
            verdict = warn(f"rank {rank} ({layout.where(rank)}) is in {cls} while {seen} ranks are in {majority}: "
                           f"{top}", evidence=evidence, remediation=ODD_STACK)
        if verdict:
            verdict.node = layout.node_of(rank)
            verdict.gpu = None if layout.outside(rank) else rank % layout.per_node
            out.append(("triage-stacks", verdict))
    if not out:
        out.append(("triage-stacks", passed(f"{len(by_rank)} ModelRunner stack(s): {dict(counts)}")))
    return out
