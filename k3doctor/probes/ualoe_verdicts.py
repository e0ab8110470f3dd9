"""The ualoe-fabric probe's judgement, pure: pair plans, leftovers, kernel-log signatures, figures, blame (§8).

No I/O: the orchestration in :mod:`k3doctor.probes.ualoe` feeds these functions what the
nodes printed; the check module (checks/ualoe.py) owns the parameters and remediation codes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from k3doctor.views.gpu import locate_accid
from k3doctor.parsers.dmesg import find_signatures, parse_log
from k3doctor.parsers.ubench import METRICS, Bandwidth, parse_procs
from k3doctor.probes.collective_figures import finite
from k3doctor.probes.kit import blame, every_pair
from k3doctor.results import PairRate, Status, Verdict, passed, skip
from k3doctor.rules.kernel_log import FABRIC, RULES, SIGNATURES

TOOLS = ("ualoe_p2p.exe", "ualoe_bw.exe")
FABRIC_SIGNATURES = tuple(rule.signature for rule in RULES if rule.remediation == FABRIC)  # the §8 data-path rows


class PlanError(ValueError):
    """A pair plan that names unknown nodes or is not quick / all / a,b;c,d."""


# --------------------------------------------------------------------------------------- pair plans

def plan_pairs(plan: str, nodes: list) -> list:
    """(exporter, importer) pairs for ``quick`` / ``all`` / ``a,b;c,d`` over ``nodes`` (in order).

    ``quick`` is a ring: with three or more nodes every node is in exactly two pairs, so a bad
    node fails both of its pairs and a bad peer only one (§8 coverage strategy). ``all`` is every
    pair once, in the order the kit packs into the fewest rounds (``kit.every_pair``).
    """
    plan = (plan or "").strip()
    if plan == "quick":
        if len(nodes) < 2:
            return []
        if len(nodes) == 2:
            return [(nodes[0], nodes[1])]
        return [(nodes[i], nodes[(i + 1) % len(nodes)]) for i in range(len(nodes))]
    if plan == "all":  # the kit's circle order: its rounds() runs them in n-1 rounds (n even), as allreduce does
        return every_pair(nodes)
    pairs = []
    for item in (p.strip() for p in plan.split(";")):
        names = [n.strip() for n in item.split(",")]
        if len(names) != 2 or not all(names) or names[0] == names[1]:
            raise PlanError(f"pair plan {plan!r}: {item!r} is not two different node names 'a,b' "
                            "(plans: quick, all, or a,b;c,d)")
        unknown = [n for n in names if n not in nodes]
        if unknown:
            raise PlanError(f"pair plan {plan!r}: unknown node(s) {', '.join(unknown)} "
                            f"(inventory: {', '.join(nodes)})")
        pairs.append(tuple(names))
    return pairs


def plan_problem(plan, nodes) -> str | None:
    """What is wrong with a pair plan, checked before the run (``nodes`` None: its shape only)."""
    if not isinstance(plan, str):
        return "a pair plan: quick, all, or a,b;c,d"
    named = [n.strip() for item in plan.split(";") for n in item.split(",")]
    try:
        plan_pairs(plan, named if nodes is None else list(nodes))
    except PlanError as exc:
        return "a pair plan: " + str(exc).split(": ", 1)[-1]
    return None


def stale_tools(text: str) -> list:
    """Leftover ubench 07 processes: argv[0] basename is exactly one of TOOLS.

    Our own shell and its ancestors are skipped.  Only this login's mount namespace counts:
    ubench runs on the host (§8), and nodes that share a PID namespace (the simulated rack)
    are told apart by mount namespace.
    """
    self_mnt, ancestors, procs = parse_procs(text)
    return [p for p in procs if p.tool in TOOLS and p.pid not in ancestors and p.mnt == self_mnt]


def fabric_findings(log: str, marker: str | None) -> list:
    """§8 fabric signatures in the kernel log lines after ``marker`` (the pre-run last line)."""
    lines = log.splitlines()
    if marker and marker in lines:
        lines = lines[len(lines) - lines[::-1].index(marker):]
    text = "".join(line + "\n" for line in lines)  # whole lines, as the capture had them
    if not text.strip():
        return []
    parse_log(log)  # a capture that is not a kernel log raises ParseError
    return [f for f in find_signatures(text, SIGNATURES) if f.signature in FABRIC_SIGNATURES]


@dataclass
class PairOutcome:
    """What one pair's ubench run did, before attribution to a node (``kit.blame``); allreduce-probe's
    ``Outcome`` is one run of a whole set of ranks."""

    exporter: str
    importer: str
    status: Status
    message: str
    evidence: dict = field(default_factory=dict)
    remediation: str | None = None
    gpu: int | None = None
    cards: dict = field(default_factory=dict)  # node -> the card its kernel log names (an AccId, mapped)
    bw: Bandwidth | None = None

    @property
    def pair(self) -> str:
        return f"{self.exporter}<->{self.importer}"


def judge_bandwidth(bw: Bandwidth, floors: dict, reference: dict | None, ref_from: str,
                    warn_pct: float, tcp_max: float) -> tuple:
    """(status, kind, text) for one pair's figures: kind is tcp, floor, reference or ok."""
    figures = bw.as_dict()
    shown = " / ".join(f"{m} {figures[m]:,.1f}" for m in METRICS) + " GB/s"
    if max(figures.values()) <= tcp_max:
        return Status.FAIL, "tcp", (f"{shown}: about TCP speed (~4.5 GB/s), two orders of magnitude below "
                                    "UALoE - traffic silently fell back to TCP (MNNVL not in effect); "
                                    "check NCCL_MNNVL_ENABLE=1")
    low = [f"{m} {figures[m]:,.1f} < {floors[m]:,.0f}" for m in METRICS if figures[m] < floors[m]]
    if low:
        return Status.FAIL, "floor", f"{shown}: below the floor ({'; '.join(low)} GB/s)"
    if reference:
        behind = [f"{m} {100 * (1 - figures[m] / reference[m]):.1f}% below {reference[m]:,.1f}"
                  for m in METRICS if reference.get(m) and figures[m] < reference[m] * (1 - warn_pct / 100)]
        if behind:
            return Status.WARN, "reference", (f"{shown}: more than {warn_pct:g}% below the known-good pair "
                                              f"({ref_from}): {'; '.join(behind)}")
    return Status.PASS, "ok", shown


def same_day_reference(measured: dict) -> tuple:
    """(figures, label) of the best pair of this run, the §8 'known-good pair measured the same day'."""
    if len(measured) < 2:
        return None, None
    pair, bw = max(measured.items(), key=lambda kv: kv[1].bidir)
    return bw.as_dict(), f"same-day best pair {pair}"


def name_fabric_faults(out: PairOutcome, found: dict, accel_ids, gpus_per_node: int) -> None:
    """Add what the kernel logs say to a failed pair (§8): the importer's fabric signatures, each AccId
    mapped to node and card (``accel_ids()`` reads every node's ids, only when needed), and an exporter
    log with no fabric line (HELLO never arrived).  ``found``: node -> signatures, absent when unreadable."""
    imp = found.get(out.importer)
    if not imp:
        if imp is not None:
            out.message += f"; no fabric signature in {out.importer}'s kernel log"
        return
    accel = accel_ids()
    named = []
    for f in imp:
        where = ""
        if f.accid is not None:
            node, card, how = locate_accid(f.accid, accel, gpus_per_node)
            if node is not None:
                out.cards.setdefault(node, card)
                where = f" = {node} GPU card{card} ({how})"
            else:
                where = f" ({how})"
        named.append(f"{f.signature} AccId:{f.accid}{where}" if f.accid is not None else f.signature)
    out.evidence[f"{out.importer}_kernel_log"] = [f.line for f in imp]
    out.message += f"; {out.importer} kernel log: {', '.join(dict.fromkeys(named))}"
    if found.get(out.exporter) == []:
        out.message += (f"; {out.exporter} (exporter) kernel log has no fabric line - HELLO never arrived, "
                        "packets are not crossing the wire")


@dataclass(frozen=True)
class Judging:
    """What a pair's figures are held to (from the check's parameters and the baseline)."""

    floors: dict  # metric -> GB/s
    warn_pct: float
    tcp_max_gbps: float
    reference: dict | None = None  # known-good figures; None: the run's best pair (same day)
    ref_from: str | None = None


def judge_figures(outcomes: list, judging: Judging, codes: dict) -> None:
    """Each measured pair's status, message and code from its figures, in place (§8 judgement order)."""
    reference, ref_from = judging.reference, judging.ref_from
    if reference is None:
        reference, ref_from = same_day_reference({o.pair: o.bw for o in outcomes if o.bw is not None})
    for o in outcomes:
        if o.bw is None:
            continue
        status, kind, text = judge_bandwidth(o.bw, judging.floors, reference, ref_from, judging.warn_pct,
                                             judging.tcp_max_gbps)
        o.status, o.message, o.remediation = status, f"p2p {o.evidence.get('p2p', 'OK')}; {text}", codes.get(kind)
        if ref_from:
            o.evidence["reference"] = {"from": ref_from, "gbps": reference}


_RANK = {Status.PASS: 0, Status.WARN: 1}  # FAIL and ERROR: 2 (no data moved, or no answer)


def pair_figures(ev: dict) -> list:
    """The typed figure of one pair's evidence (its name, ends and GB/s per direction), for the outputs."""
    gbps = ev.get("gbps") if isinstance(ev.get("gbps"), dict) else {}
    return [PairRate(str(ev["pair"]), str(ev["exporter"]), str(ev["importer"]), tuple(
        (str(d), float(v)) for d, v in gbps.items() if finite(v) is not None))]


def attribute(outcomes: list, skipped: dict) -> list:
    """Verdicts placed on nodes: a node that failed every pair it was in (two or more) carries the fault.

    Only FAIL/ERROR pairs make a node faulty; a node slow (WARN) with every peer carries the
    slowness, not a fault.  A failed or slow pair whose nodes each did better with another peer
    points at the path between them; both nodes carry it.  Passing pairs give a PASS on both nodes.
    """
    where = blame({(o.exporter, o.importer): _RANK.get(o.status, 2) for o in outcomes})
    verdicts = [skip(why, node=node) for node, why in skipped.items()]
    for o in outcomes:
        ev = {"pair": o.pair, "exporter": o.exporter, "importer": o.importer, **o.evidence}
        rate = pair_figures(ev)
        if o.status == Status.PASS:
            verdicts += [passed(f"{o.pair}: {o.message}", node=n, gpu=o.gpu, evidence=ev, figures=list(rate))
                         for n in (o.exporter, o.importer)]
            continue
        b = where[(o.exporter, o.importer)]
        peers = ", ".join(b.peers)
        note = {"node": (f" - {b.nodes[0]} was slower than the reference with every peer it was paired with "
                         f"({peers}): the slowness is on {b.nodes[0]}" if o.status == Status.WARN else
                         f" - {b.nodes[0]} failed with every peer it was paired with ({peers}): the fault is on "
                         f"{b.nodes[0]}"),
                "path": (f" - {o.exporter} and {o.importer} each passed with another peer: the fault is on the path "
                         "between them (cabling, switch port), not on either node"),
                "pair": " - only this pair was tested, so the fault cannot be pinned to one node" if b.untested
                else ""}[b.on]
        for node in b.nodes:
            verdicts.append(Verdict(o.status, f"{o.pair}: {o.message}{note}", gpu=o.cards.get(node, o.gpu), node=node,
                                    evidence=ev, remediation=o.remediation, figures=list(rate)))
    return verdicts


def known_good(verdicts) -> dict:
    """Baseline entries (``baseline record --tier deep``): each node's best passing pair and its figures."""
    best = {}
    for v in verdicts:
        gbps = v.evidence.get("gbps") if v.status == Status.PASS and v.node else None
        if gbps and gbps.get("bidir", 0) > best.get(v.node, {}).get("gbps", {}).get("bidir", -1):
            best[v.node] = {"pair": v.evidence.get("pair"), "gbps": gbps}
    return best


def recorded_reference(baseline) -> tuple:
    """The best known-good pair in the baseline, if one was recorded."""
    entries = [e for e in (baseline or {}).values() if isinstance(e, dict) and e.get("gbps")]
    if not entries:
        return None, None
    top = max(entries, key=lambda e: e["gbps"].get("bidir", 0))
    return {k: float(v) for k, v in top["gbps"].items() if k in METRICS}, f"baseline pair {top.get('pair')}"
