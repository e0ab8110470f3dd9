"""Pure judgement of ATOM server logs: per rank, then across ranks (reference §2, §10, §17, §19–§25).

Input: every rank's parsed lines (``parsers.atom_log``, read for ``rules.triage.SHAPES``) and the layout (node i
holds ranks ``ranks_per_node * i`` …). Output: ``(step, Verdict)`` pairs, most specific cause first. The per-rank
rules are rows (``k3doctor.rules.triage``); here are what applies them (to a rank, to a log's lines that name no
rank) and the cross-rank judgement (§20: the missing participant, the RCCL init hang). The orchestration (reading
the logs) lives in ``k3doctor.triage``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from k3doctor.registry import remediation
from k3doctor.results import Verdict, fail, passed
from k3doctor.rules import triage as rows
from k3doctor.rules.triage_signals import last_text as _last
from k3doctor.rules.triage_signals import stage_of

STEPS = ("triage-collective", "triage-stacks", "triage-startup", "triage-kv", "triage-config", "triage-fatal")

MISSING = remediation("TRIAGE-MISSING-PARTICIPANT", "one rank did not join a collective the others timed out in", """
N-1 ranks timed out waiting (`_sync_dp_state failed: Timed out waiting …ms`, watchdog timeouts) and one
rank never logged it: that rank is the one that stopped (reference §20; seen as the rank at 98.6 % KV
usage under prefix caching). Take py-spy stacks of its ModelRunner (`ATOM::DP<n>TP0`) before killing
anything, then check its node (`k3doctor check` on it, kernel log) and relaunch; at utilization 0.94 it
was not seen again.""")
RCCL_HANG = remediation("TRIAGE-RCCL-INIT-HANG", "startup stopped at `load RCCL version` (ncclCommInitRank)", """
The log stops at `load RCCL version` with the CPU spinning ~110 %: `ncclCommInitRank` hangs, intermittently
and with no known fix (reference §20). It looks identical to a bad fabric: rule the fabric out once
(`k3doctor check --nodes inv.yaml --tier deep --only ualoe-fabric,allreduce-probe`), then retry the
launch. If it hangs every time, the fault is below ATOM (minimal all_reduce probe, §20).""")


@dataclass(frozen=True)
class Layout:
    """Where ranks live: node i of ``nodes`` holds ranks ``per_node * i`` … ``per_node * (i + 1) - 1``."""

    nodes: tuple
    per_node: int = 4
    stepping: str | None = None  # A0 / B0, site information (§1)
    board_gib: int | None = None  # declared HBM per GPU (288 / 432, §12)
    experts_local: int = 56  # §19, EP16
    experts_global: int = 896
    stall_s: float = 1800.0  # §20: cold starts up to ~25 min
    drafter_stall_s: float = 120.0  # §25: a healthy prefetch finishes in < 1 s
    first_gpu_kfd_node: int = 2  # §29: KFD topology lists the CPU agents first (GPU nodes 2-5 on a gfx1250 tray)

    def outside(self, rank: int) -> bool:
        """True for a rank no node of a known layout holds (``EngineCore_DP999`` on 4 nodes of 4 GPUs)."""
        return bool(self.nodes) and rank // self.per_node >= len(self.nodes)

    def node_of(self, rank: int) -> str | None:
        """The node holding ``rank``: its name, ``node<i>`` by position when no layout names the nodes, None
        for a rank outside a known layout (never an invented node)."""
        index = rank // self.per_node
        if index < len(self.nodes):
            return self.nodes[index]
        return None if self.nodes else f"node{index}"

    def where(self, rank: int) -> str:
        """The node holding ``rank`` for a message, or that it is outside the layout."""
        if self.outside(rank):
            return (f"outside the layout: {len(self.nodes)} node(s) x {self.per_node} GPUs hold ranks "
                    f"0-{len(self.nodes) * self.per_node - 1}")
        return self.node_of(rank)


class RankLines(list):
    """One rank's lines as triage keeps them (``triage.group_lines``): a sample per signal kind, and in
    ``counts`` how many lines of each kind there were in all."""

    def __init__(self, lines=(), counts=None):
        super().__init__(lines)
        self.counts = dict(counts or {})


def _at(layout: Layout, rank: int, verdict: Verdict) -> Verdict:
    """The finding put on the rank's node and GPU (a GPU the finding named itself stays, §29 ROCr node-N)."""
    verdict.node = layout.node_of(rank)
    if layout.outside(rank) or verdict.gpu is None:
        verdict.gpu = None if layout.outside(rank) else rank % layout.per_node
    verdict.evidence.setdefault("rank", rank)
    if layout.outside(rank) and layout.where(rank) not in verdict.message:
        verdict.message += f" (rank {rank} is {layout.where(rank)})"
    return verdict


def _of(lines, kind):
    return [ln for ln in lines if ln.has(kind)]


def judge_collectives(ranks: dict, layout: Layout) -> list:
    """§20: the missing participant of a timed-out collective, and the `load RCCL version` stall."""
    out = []
    timed_out = {r for r, lines in ranks.items() if _of(lines, "sync_dp_timeout") or _of(lines, "watchdog_timeout")}
    if timed_out and len(ranks) > 1:
        missing = sorted(set(ranks) - timed_out)
        if missing and len(missing) < len(ranks):
            for r in missing:
                usage = _of(ranks[r], "kv_usage")
                ev = {"timed_out_ranks": sorted(timed_out), "last_line": _last(ranks[r])}
                if usage:
                    ev["kv_usage_pct"] = float(usage[-1].signals["kv_usage"]["pct"])
                out.append(("triage-collective", _at(layout, r, fail(
                    f"rank {r} ({layout.where(r)}) is the missing participant: {len(timed_out)} of {len(ranks)} "
                    f"ranks timed out in a collective it never joined; its last line: {ev['last_line']!r}",
                    evidence=ev, remediation=MISSING))))
    stages = {r: stage_of(lines) for r, lines in ranks.items()}
    stuck = sorted(r for r, lines in ranks.items() if lines and lines[-1].has("rccl_load")
                   and stages[r] == "rccl-init")
    if stuck and not timed_out:
        moved_on = sorted(r for r, s in stages.items() if s not in ("start", "rccl-init"))
        scope = (f"while ranks {moved_on} moved on" if moved_on else "on every rank")
        for r in stuck:
            out.append(("triage-collective", _at(layout, r, fail(
                f"rank {r} ({layout.where(r)}) stopped at `load RCCL version` {scope}: ncclCommInitRank hang; "
                "rule out the fabric once (deep tier), then retry", evidence={"last_line": _last(ranks[r])},
                remediation=RCCL_HANG))))
    return out


@dataclass
class CameUp:
    """Where the server said it came up (`Application startup complete`; its lines name no rank): the newest time
    stamp of such a line anywhere, and per log the number of its last such line - what tells whether a line of a
    rank came before it."""

    at: float | None = None
    lines: dict = field(default_factory=dict)  # log -> line number

    def saw(self, line) -> None:
        """Note a serving line, as the lines are read."""
        self.lines[line.source] = line.lineno
        if line.ts is not None and (self.at is None or line.ts > self.at):
            self.at = line.ts

    def after(self, line) -> bool:
        """Whether the server said it came up after ``line``: stamped later, or further down the same log."""
        return (self.at is not None and line.ts is not None and self.at > line.ts) or \
            self.lines.get(line.source, 0) > line.lineno


@dataclass(frozen=True)
class RankView:
    """What a log rule may read about one rank (or about the lines of one log that name no rank): its lines, the
    layout, how long its log has been quiet (seconds, None when unknown) and whether the server is up (then a quiet
    rank is idle, not stalled), and when it came up last."""

    lines: list
    layout: Layout
    age: float | None
    serving: bool
    came_up: CameUp | None = None


# The rules that read single lines: they also judge the lines of a log that name no rank.
LINE_RULES = tuple(rule for rule in rows.RULES if not rule.whole_rank)


def judge_rank(rank: int, lines: list, layout: Layout, now: float | None, serving: bool = False,
               rules: tuple = rows.RULES, came_up: CameUp | None = None) -> list:
    """(step, Verdict) for every rule of ``rules`` this rank's own lines fire. ``serving``: the server is up
    (then a quiet rank is idle, not stalled)."""
    age = (now - lines[-1].ts) if (now is not None and lines and lines[-1].ts is not None) else None
    view = RankView(lines, layout, age, serving, came_up)
    return [(rule.step, _at(layout, rank, verdict)) for rule in rules if (verdict := rule.judge(view)) is not None]


def judge_source(source: str | None, node: str | None, lines: list, layout: Layout, serving: bool = False,
                 came_up: CameUp | None = None) -> list:
    """(step, Verdict) for every line rule the lines of one log that name no rank fire (aiperf's and the launcher's
    lines, uvicorn's; all of a node's log without rank markers), put on the log's node: ``node`` (None: the log
    names no node, said in the message). The log is named in the evidence."""
    view = RankView(lines, layout, None, serving, came_up)
    out = []
    for rule in LINE_RULES:
        verdict = rule.judge(view)
        if verdict is None:
            continue
        verdict.node, verdict.gpu = node, verdict.gpu if node is not None else None
        verdict.evidence.setdefault("log", source)
        if node is None:
            verdict.message += f" (in log {source}, which names no rank and no node of the layout)"
        out.append((rule.step, verdict))
    return out


def judge(ranks: dict, layout: Layout, now: float | dict | None = None, serving: bool | None = None,
          came_up: CameUp | None = None, sources: dict | None = None) -> list:
    """All findings, the cross-rank ones first (they name the rank at fault), then per rank, then per log for
    its lines that name no rank (``sources``: {log: (its node or None, lines)}). ``now``: one clock for all, or
    each node's own clock ({node: epoch seconds}, as read live). ``serving``: the server came up (its lines need
    not name a rank); by default, whether a rank's lines say so; ``came_up``: where it said so."""
    found = judge_collectives(ranks, layout)
    stages = {r: stage_of(lines) for r, lines in ranks.items()}
    serving = "serving" in stages.values() if serving is None else serving
    for rank in sorted(ranks):  # each rank's age against its own node's clock (one clock ahead moves no other)
        found += judge_rank(rank, ranks[rank], layout, now.get(layout.node_of(rank)) if isinstance(now, dict)
                            else now, serving, came_up=came_up)
    for source, (node, lines) in sorted((sources or {}).items(), key=lambda item: str(item[0])):
        found += judge_source(source, node, lines, layout, serving, came_up)
    if not ranks:
        return found
    if not any(step == "triage-startup" for step, _ in found):
        summary = ", ".join(f"{s}: {sum(1 for v in stages.values() if v == s)}" for s in dict.fromkeys(stages.values()))
        found.append(("triage-startup", passed(f"{len(ranks)} rank(s) read; stages {summary}",
                                               evidence={"stages": {str(r): s for r, s in sorted(stages.items())}})))
    return found
