"""Cross-node torch.distributed all_reduce + all-to-all probe (reference §20, §19, with §13, §16-§18, §28).

The wide-EP launch dies - or hangs for 25 minutes - in ncclCommInitRank or the first
collective when a node's platform, the fabric between two nodes, or RCCL's intermittent
init hang gets in the way. This probe answers the same question in a few minutes with the
recipe's own stack (the container's python, torch and RCCL, its NCCL_* environment): one
rank per GPU on every node, rendezvous at node 0's data-plane address, each stage timed
under its own deadline, a known sum verified, bus bandwidth measured like nccl-tests.
Then the expert all-to-all (§19/§26: dispatch + combine, small per-step messages) at
EP-dispatch sizes, each rank checking what it received. Sweeps are timed on the GPU
(events around a captured graph of back-to-back calls), so small messages measure the
fabric, not Python's launches.
When it fails it re-runs per node and per node pair to say which of the three it was.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from k3doctor.api import Param, Status, check, error, fail, human_bytes, passed, remediation, skip, warn, whole_number
from k3doctor.probes.allreduce import MIN_DEADLINE_S, diagnose
from k3doctor.probes.allreduce_runs import STAGES, Member, Plan
from k3doctor.probes.collective_figures import (
    ALL_REDUCE,
    ALL_TO_ALL,
    WIRE_BYTES_PER_TOKEN,
    byte_sizes,
    ep_dispatch_sizes,
    geometric,
    with_sweep_figures,
)

DEADLINE_S = 240  # well under the 5 minutes a user will wait for a pre-launch answer (§20: cold start ~25 min)

NODE_FAULT = remediation("ALLREDUCE-NODE-FAULT", "all_reduce fails on one node by itself (platform fault)", """
The probe fails with only this node's ranks taking part, so no fabric is involved: the
collective never completes on this node's own GPUs. §20: when a one-rank run passes but
two or four local ranks time out with `last completed work: -1`, the collective kernel
never ran - a platform fault below ATOM; no recipe flag will move it (not NCCL_MNNVL_ENABLE,
not NCCL_CUMEM_ENABLE, not P2P_LEVEL). Read the stage and error in the evidence:
`start` errors (fewer GPUs visible than gpus_per_node, HIP errors) point at the driver
and container devices (§5, §13: /dev/kfd, /dev/dri); a hang in `init`/`warmup` points at
the GPUs or their links. Check this node's kernel log (§10), reload amdgpu or reset the
tray (§11), and re-run `k3doctor check --only allreduce-probe` before launching.
""")

FABRIC = remediation("ALLREDUCE-FABRIC", "all_reduce fails across nodes that each pass alone (fabric)", """
Every node passes the probe alone; the failure needs two nodes (a pair, or one node with
every peer). That is the cross-node path: run the UALoE fabric probe on the named nodes
(`k3doctor check --only ualoe-fabric --pairs A,B`, §8) and read their kernel logs for
fabric signatures (§10). Also check what RCCL is told: NCCL_MNNVL_ENABLE=1 and
NCCL_CUMEM_ENABLE=1 (§16, §28: with CUMEM 0 every collective failed at ncclCommInitRank
on 2 nodes), and NCCL/GLOO/MORI_SOCKET_IFNAME naming the data-plane NIC that carries the
inventory address (§18) - the env each rank saw is in the evidence. "Fails only at full
scale" (every pair passes) points at the fabric's shared resources (vPOD, §7) or at a
rendezvous over the wrong NIC.
""")

INIT_HANG = remediation("ALLREDUCE-INIT-HANG", "intermittent hang: passed on retry", """
The full probe failed once (usually stuck in ncclCommInitRank - stage `init`), then every
node and node pair passed and the full probe passed on retry. §20: ncclCommInitRank hangs
intermittently with no known fix; the remedy is a retry. Launching is reasonable, but a
wrapper that retries the launch must allow the full cold-start budget (>= 25 min) or it
kills healthy loads; if a launch stops at `load RCCL version` with a CPU spinning ~110%,
that is this hang - take a py-spy stack of the ModelRunner, then restart it.
""")

WRONG_SUM = remediation("ALLREDUCE-WRONG-SUM", "a collective returned wrong data (data corruption)", """
Ranks read back an all_reduce sum other than w(w+1)/2, or an all-to-all chunk whose bytes are
not what its sender wrote (the evidence's `wrong` lists rank - and for all-to-all the sending
rank `src` - message bytes, how many elements were wrong, a sample and the expected value). That is silent data
corruption, not a hang: a model served on it answers garbage without any error. It is never
the intermittent ncclCommInitRank hang (§20) that a retry fixes, so a run that summed right
when re-run does not clear it. Do not launch. Run the UALoE fabric probe on every pair
(`k3doctor check --only ualoe-fabric --pairs all`, §8: p2p correctness), read the kernel logs
for fabric and GPU signatures (§10), recover the nodes (§11), and re-run
`k3doctor check --only allreduce-probe` several times before launching.
""")

SLOW = remediation("ALLREDUCE-SLOW", "collective bus bandwidth below its floor or latency above its ceiling", """
The probe completed with correct data, but at a size with a configured limit the figure
missed it in every one of `repeats` attempts: busbw below `busbw_floor_gbs` (all_reduce) or
`alltoall_busbw_floor_gbs`, or latency above `latency_max_us` / `alltoall_latency_max_us`
(GB/s or us by message size in bytes; within warn_band of the limit is a warning), or the
same against a recorded baseline. Figures are timed on the GPU (`timer`), as nccl-tests does,
so a small-message latency miss is the fabric or RCCL's protocol choice, not the launcher.
An all-to-all that is slow while all_reduce is not points at the expert-dispatch path
(§19: the all-to-all of dispatch/combine is the second-largest cost). A multi-node busbw near
~4.5 GB/s is RCCL's silent TCP fallback: NCCL_MNNVL_ENABLE must be 1 (§16), with
NCCL_CUMEM_ENABLE=1 (§28). Otherwise compare with `ualoe-fabric` bandwidth of the node
pairs (§8) and check the rack is free (§3): another job on the fabric halves what you see.
""")

LEFTOVER = remediation("ALLREDUCE-LEFTOVER", "probe processes still alive after cleanup", """
k3doctor killed every process carrying the probe run's token, but some are still there
(the evidence lists node and PIDs) - usually a rank stuck in uninterruptible sleep inside
the GPU driver. They hold GPU memory and ports 29801+. Check them with
`ps -o pid,stat,wchan,args -p PID`; a `D` state that does not clear needs a driver reload or
tray reset (§11) before the launch.
""")

class ParamError(ValueError):
    """What the parameters and the nodes' settings ask together cannot be run (a range whose min is above its
    max, more ranks than a node has); each parameter on its own was checked when the inventory was read."""


def floors_of(raw, name: str = "busbw_floor_gbs", unit: str = "GB/s") -> dict:
    if not isinstance(raw, dict):
        raise ParamError(f"allreduce-probe.{name} must map message bytes to {unit}, got {raw!r}")
    try:
        return {int(k): float(v) for k, v in raw.items()}
    except (TypeError, ValueError):
        raise ParamError(f"allreduce-probe.{name} must map message bytes to {unit}, got {raw!r}") from None


def _whole(default: int, least: int = 0) -> Param:
    """A count, a port or a byte size: a whole number from ``least``, up to what its name allows."""
    return Param(default, validate=whole_number(least))


def _float32_bytes(value, nodes) -> str | None:
    """min_bytes: the sweep starts at a whole number of float32 elements (0: the default start)."""
    return None if float(value).is_integer() and value % 4 == 0 else "a whole multiple of 4 (float32 elements)"


def _limits_problem(value, nodes) -> str | None:
    """A floor or ceiling table: message bytes (a whole number, as YAML keys may be strings) -> a number >= 0."""
    try:
        floors_of(value)
    except ParamError:
        return "a mapping of message bytes to a number"
    if any(isinstance(v, bool) or not 0 <= float(v) < float("inf") for v in value.values()):
        return "a mapping of message bytes to a number >= 0"
    return None


PARAMS = {
    # container: `docker exec -i <container>` (§13); host: the host's python
    "where": Param("container", choices=("container", "host")),
    # auto: nccl (RCCL on ROCm) when torch sees a GPU, else gloo
    "backend": Param("auto", choices=("auto", "nccl", "gloo")),
    "ranks_per_node": _whole(0),  # 0: gpus_per_node
    "port": _whole(29801, 1),  # first rendezvous port; each run of the hierarchy takes the next one (§17)
    "min_bytes": Param(0, minimum=0, validate=_float32_bytes),  # 0: 1 MiB on GPUs, 4 KiB on gloo
    "max_bytes": _whole(0),  # 0: 4 GiB on GPUs, 1 MiB on gloo
    "step_factor": _whole(2, 2),
    "iters": _whole(20, 1),
    "warmup_iters": _whole(5),
    # the stage deadlines (STAGES), each at least a second:
    "start_s": Param(45, minimum=1),  # process start incl. `import torch` and GPU context
    "rendezvous_s": Param(20, minimum=1),  # an arrived rank waits this long for the others: healthy 0.7-4.1 s
    # on the loaded 2-core rig (the spread of the ranks' `import torch`), 5x margin (bench/hang_verdict.py)
    "init_s": Param(45, minimum=1),  # communicator init + first tiny all_reduce (§20's probe uses 45 s)
    "warmup_s": Param(30, minimum=1),
    "sweep_s": Param(90, minimum=1),
    "alltoall_s": Param(90, minimum=1),  # the all-to-all sweep (its own stage: a hang there is named `alltoall`)
    # auto/graph: GPU events around a captured graph of the N calls (nccl/RCCL), host clock on gloo;
    # events: GPU events around N eager calls (the fallback where capture fails); host: the host clock
    "timer": Param("auto", choices=("auto", "graph", "events", "host")),
    "alltoall": True,  # also sweep all_to_all_single (wide-EP dispatch/combine, §19)
    # ep: tokens x wire bytes per token (§19); bytes: min..max bytes like alltoall_perf
    "alltoall_sizes": Param("ep", choices=("ep", "bytes")),
    # §19: 14,336 / 7,168+256 / 3,584+256 bytes per token
    "alltoall_wires": Param(["bf16", "fp8", "fp4"], validate=lambda v, nodes: _wires_problem(v)),
    "alltoall_min_tokens": _whole(0),  # per-rank tokens, 0: 16 on GPUs, 1 on gloo
    "alltoall_max_tokens": _whole(0),  # 0: 8192 on GPUs, 16 on gloo
    "alltoall_min_bytes": _whole(0),  # alltoall_sizes=bytes; 0: 64 KiB on GPUs, 4 KiB on gloo
    "alltoall_max_bytes": _whole(0),  # 0: 4 GiB on GPUs, 1 MiB on gloo
    # uneven: each rank sends a different share to each peer (routed tokens)
    "alltoall_splits": Param("even", choices=("even", "uneven")),
    "deadline_s": Param(DEADLINE_S, minimum=MIN_DEADLINE_S),  # the whole probe, hierarchy included (>= 1 run)
    "busbw_floor_gbs": Param({}, validate=_limits_problem),  # all_reduce {bytes: GB/s}; none: reported, not judged
    "latency_max_us": Param({}, validate=_limits_problem),  # all_reduce {bytes: us per call}, for small messages
    "alltoall_busbw_floor_gbs": Param({}, validate=_limits_problem),  # all-to-all {bytes: GB/s}
    "alltoall_latency_max_us": Param({}, validate=_limits_problem),  # all-to-all {bytes: us}
    # with `k3doctor baseline record --tier deep`: floor = recorded busbw x (1 - drop)
    "baseline_drop": Param(0.2, minimum=0),
    "baseline_min_bytes": _whole(1 << 20),  # from here up a baseline sets busbw floors, below it latency ceilings
    # latency ceiling = recorded latency x (1 + rise): small messages are noisier
    "baseline_latency_rise": Param(0.5, minimum=0),
    "warn_band": Param(0.1, minimum=0),
    "repeats": _whole(2, 1),  # attempts while a figure is below its floor (noisy results)
    "hierarchy": True,  # on failure, re-run per node and per node pair
}

_DEFAULT_SIZES = {"gpu": (1 << 20, 4 << 30), "cpu": (4 << 10, 1 << 20)}
_DEFAULT_A2A_BYTES = {"gpu": (64 << 10, 4 << 30), "cpu": (4 << 10, 1 << 20)}
_DEFAULT_A2A_TOKENS = {"gpu": (16, 8192), "cpu": (1, 16)}
_OPS = {ALL_REDUCE: ("busbw_floor_gbs", "latency_max_us"), ALL_TO_ALL: ("alltoall_busbw_floor_gbs",
                                                                       "alltoall_latency_max_us")}
_NAMES = {ALL_REDUCE: "all_reduce", ALL_TO_ALL: "all-to-all"}


@dataclass(frozen=True)
class Limits:
    """What a passing sweep is held to, per collective and message size."""

    busbw: dict = field(default_factory=dict)  # op -> {bytes: GB/s floor}
    latency: dict = field(default_factory=dict)  # op -> {bytes: us ceiling}

    @classmethod
    def of(cls, value) -> Limits:
        """A plain {bytes: GB/s} is the all_reduce busbw floors (the probe's original setting)."""
        return value if isinstance(value, cls) else cls(busbw={ALL_REDUCE: dict(value)})

    def __bool__(self) -> bool:
        return any(self.busbw.values()) or any(self.latency.values())

    def evidence(self) -> dict:
        return {f"{op}_{kind}": {str(k): v for k, v in table[op].items()}
                for kind, table in (("busbw_floor_gbs", self.busbw), ("latency_max_us", self.latency))
                for op in table if table[op]}


def _wires_problem(wires) -> str | None:
    """alltoall_wires: a non-empty list of §19's wire formats."""
    if not wires or any(w not in WIRE_BYTES_PER_TOKEN for w in wires):
        return f"a non-empty list of wire formats of {', '.join(WIRE_BYTES_PER_TOKEN)} (§19)"
    return None


def _a2a_sizes(ctx, kind: str, factor: int) -> tuple:
    """The all-to-all sweep for ``kind`` (gpu or cpu): EP-dispatch shaped or plain bytes."""
    if not ctx.param("alltoall"):
        return ()
    mode = ctx.param("alltoall_sizes")
    if mode == "bytes":
        lo = int(ctx.param("alltoall_min_bytes")) or _DEFAULT_A2A_BYTES[kind][0]
        hi = int(ctx.param("alltoall_max_bytes")) or _DEFAULT_A2A_BYTES[kind][1]
        if hi < lo:
            raise ParamError(f"allreduce-probe alltoall sizes {lo}..{hi}: min above max")
        return byte_sizes(lo, hi, factor)
    wires = ctx.param("alltoall_wires")
    lo = int(ctx.param("alltoall_min_tokens")) or _DEFAULT_A2A_TOKENS[kind][0]
    hi = int(ctx.param("alltoall_max_tokens")) or _DEFAULT_A2A_TOKENS[kind][1]
    if hi < lo:
        raise ParamError(f"allreduce-probe alltoall tokens {lo}..{hi}: min above max")
    return ep_dispatch_sizes(lo, hi, factor, wires)


def build_plan(ctx, participants: list) -> tuple:
    """The full-scale plan from the params and each node's settings."""
    deadlines = {s: float(ctx.param(f"{s}_s")) for s in STAGES}
    factor = int(ctx.param("step_factor"))
    lo, hi = int(ctx.param("min_bytes")), int(ctx.param("max_bytes"))
    ranges = {k: (lo or d[0], hi or d[1]) for k, d in _DEFAULT_SIZES.items()}
    for a, b in ranges.values():
        if b < a:
            raise ParamError(f"allreduce-probe sizes {a}..{b}: min_bytes above max_bytes")
    backend, timer, splits = ctx.param("backend"), ctx.param("timer"), ctx.param("alltoall_splits")
    members = []
    for name in participants:
        node, settings = ctx.nodes[name], ctx.node_settings(name)
        where = settings.param("where")
        launcher = (("docker", "exec", "-i", settings.container, settings.tools["container_python"])
                    if where == "container" else (settings.tools["python"],))
        ranks = int(settings.param("ranks_per_node") or settings.gpus_per_node)
        members.append(Member(name, node.address, ranks, launcher))
    plan = Plan(label="full", members=tuple(members), port=int(ctx.param("port")),
                backend=backend, sizes_gpu=geometric(*ranges["gpu"], factor),
                sizes_cpu=geometric(*ranges["cpu"], factor), a2a_gpu=_a2a_sizes(ctx, "gpu", factor),
                a2a_cpu=_a2a_sizes(ctx, "cpu", factor), a2a_splits=splits, timer=timer,
                iters=int(ctx.param("iters")),
                warmup_iters=int(ctx.param("warmup_iters")),
                deadlines=deadlines)
    return plan


_ROWS = {ALL_REDUCE: "sizes", ALL_TO_ALL: "alltoall"}  # where an Outcome and its evidence keep each sweep


def _rows(source, op: str) -> list:
    """The sweep rows of ``op`` from an Outcome or from its evidence dict."""
    key = _ROWS[op]
    return (source.get(key) if isinstance(source, dict) else getattr(source, key)) or []


def record_busbw(verdicts, ctx) -> dict:
    """Baseline entry of a passing run: busbw and latency per size and collective, under every node."""
    for v in verdicts:
        if v.status == Status.PASS and v.node is None and v.evidence.get("sizes"):
            entry = {"world": v.evidence["world"], "nodes": v.evidence["nodes"]}
            for op in _ROWS:
                rows = _rows(v.evidence, op)
                figures = {"busbw_gbs": {str(r["bytes"]): r["busbw_gbs"] for r in rows},
                           "time_us": {str(r["bytes"]): r["time_us"] for r in rows}}
                if op == ALL_REDUCE:  # at the top level, where baselines recorded before all-to-all have it
                    entry.update(figures)
                elif rows:
                    entry["alltoall"] = figures
            return {node: entry for node in v.evidence["nodes"]}
    return {}


def _recorded(baseline, world: int, op: str, metric: str) -> dict:
    """{bytes: value} that a baseline of the same world size recorded for ``op``; {} when none."""
    for entry in (baseline or {}).values():
        if not isinstance(entry, dict) or entry.get("world") != world:
            continue
        table = entry if op == ALL_REDUCE else entry.get("alltoall")
        if isinstance(table, dict) and isinstance(table.get(metric), dict):
            return {int(k): float(v) for k, v in table[metric].items()}
    return {}


def merged_floors(floors: dict, baseline, world: int, drop: float, min_bytes: int, op: str = ALL_REDUCE) -> dict:
    """Inventory floors, raised to recorded busbw x (1 - drop) where a baseline of the same world size exists."""
    out = dict(floors)
    for size, value in _recorded(baseline, world, op, "busbw_gbs").items():
        if size >= min_bytes:
            out[size] = max(out.get(size, 0.0), round(value * (1 - drop), 3))
    return out


def merged_ceilings(ceilings: dict, baseline, world: int, rise: float, below_bytes: int,
                    op: str = ALL_REDUCE) -> dict:
    """Inventory latency ceilings, lowered to recorded latency x (1 + rise) below ``below_bytes``."""
    out = dict(ceilings)
    for size, value in _recorded(baseline, world, op, "time_us").items():
        if size < below_bytes:
            limit = round(value * (1 + rise), 2)
            out[size] = min(out.get(size, limit), limit)
    return out


def limits_of(ctx, world: int) -> Limits:
    """Every busbw floor and latency ceiling the inventory and the baseline set, per collective."""
    drop, rise = float(ctx.param("baseline_drop")), float(ctx.param("baseline_latency_rise"))
    split = int(ctx.param("baseline_min_bytes"))
    busbw, latency = {}, {}
    for op, (floor_name, ceiling_name) in _OPS.items():
        busbw[op] = merged_floors(floors_of(ctx.param(floor_name), floor_name), ctx.baseline, world, drop, split, op)
        latency[op] = merged_ceilings(floors_of(ctx.param(ceiling_name), ceiling_name, "us"), ctx.baseline, world,
                                      rise, split, op)
    return Limits(busbw=busbw, latency=latency)


def judge_figures(outcome, limits, band: float) -> list:
    """(status, op, metric, size, got, limit) for every limit a figure misses; an unmeasured size is an error."""
    limits = Limits.of(limits)
    out = []
    for op in (ALL_REDUCE, ALL_TO_ALL):
        rows = {row["bytes"]: row for row in _rows(outcome, op)}
        for metric, table, low_is_bad in (("busbw", limits.busbw, True), ("latency", limits.latency, False)):
            for size, limit in sorted(table.get(op, {}).items()):
                if size not in rows:
                    out.append(("error", op, metric, size, None, limit))
                    continue
                got = rows[size]["busbw_gbs" if metric == "busbw" else "time_us"]
                missed = got < limit if low_is_bad else got > limit
                near = got < limit * (1 + band) if low_is_bad else got > limit / (1 + band)
                if missed or near:
                    out.append(("fail" if missed else "warn", op, metric, size, got, limit))
    return out


def _figures(outcome) -> str:
    stages = ", ".join(f"{s} {outcome.stage_s[s]:.1f}s" for s in STAGES if s in outcome.stage_s)
    parts = []
    for op, verified in ((ALL_REDUCE, "sum verified"), (ALL_TO_ALL, "data verified")):
        rows = _rows(outcome, op)
        if not rows:
            continue
        top, small = max(rows, key=lambda r: r["bytes"]), min(rows, key=lambda r: r["bytes"])
        parts.append(f"{_NAMES[op]} busbw {top['busbw_gbs']:.2f} GB/s (algbw {top['algbw_gbs']:.2f}) at "
                     f"{human_bytes(top['bytes'])}, {small['time_us']:.1f} us at {human_bytes(small['bytes'])}, "
                     f"{verified} at {len(rows)} size(s)")
    timed = f" ({outcome.timer} timing)" if outcome.timer else ""
    return (f"{' and '.join(_NAMES[op] for op in _OPS if _rows(outcome, op)) or 'all_reduce'} over "
            f"{outcome.world} rank(s) on {len(outcome.nodes)} node(s), {outcome.backend}{timed}: "
            f"{'; '.join(parts) or 'no sizes'}; stages {stages}")


@check("allreduce-probe", title="torch.distributed all_reduce and all-to-all across every node, bounded and GPU-timed",
       scope="cluster", tier="deep", interaction="active", after=("ualink-state", "fabric-domain", "rack-free"),
       exclusive=("rack-free",),
       timeout_s=DEADLINE_S, remediation=(NODE_FAULT, FABRIC, INIT_HANG, WRONG_SUM, SLOW, LEFTOVER), params=PARAMS,
       record_run=record_busbw)
def allreduce_probe(ctx):
    """§20: a bounded all_reduce over every node, then node/pair attribution when it fails."""
    verdicts = [skip(f"not probed: {why}", node=name) for name, why in ctx.blocked.items() if name in ctx.nodes]
    participants = [n for n in ctx.nodes if n not in ctx.blocked and n in ctx.transports]
    if not participants:
        return verdicts + [skip("no node may take part in the all_reduce probe")]
    try:
        plan = build_plan(ctx, participants)
        floors = limits_of(ctx, plan.world)
        band = float(ctx.param("warn_band"))
        repeats = int(ctx.param("repeats"))
        deadline = float(ctx.param("deadline_s"))
    except ParamError as exc:
        return verdicts + [error(str(exc))]

    def good_enough(outcome):
        return not judge_figures(outcome, floors, band)

    diag = diagnose(plan, ctx.transports, deadline, repeats=repeats, good_enough=good_enough,
                    hierarchy=bool(ctx.param("hierarchy")))
    return with_sweep_figures(verdicts + conclude(diag, floors, band))


def conclude(diag, floors: dict, band: float) -> list:
    """Verdicts from a diagnosis: figures (PASS/WARN/FAIL), the failure and its attribution, cleanup."""
    full = diag.final
    every = diag.attempts + diag.subruns
    out = []
    common = {"elapsed_s": diag.elapsed_s, "attempts": len(diag.attempts),
              "run_ids": [o.run_id for o in every]}
    for o in every:
        for node, what in o.residue.items():
            if isinstance(what, list):
                out.append(fail(f"processes of probe run {o.run_id} still alive after cleanup: pids {what}",
                                node=node, evidence={"run_id": o.run_id, "pids": what}, remediation=LEFTOVER))
            else:
                out.append(error(f"could not confirm cleanup of probe run {o.run_id}: {what}", node=node,
                                 evidence={"run_id": o.run_id}))
    if full.setup_error:
        return out + [error(f"all_reduce probe {full.describe()}", evidence={**common, **full.evidence()})]
    if full.not_started:
        hint = (" - the probe needs a python with torch: where: container uses tools.container_python inside "
                "the container (§13), where: host uses tools.python")
        return out + [error(f"all_reduce probe could not start on {node}: {why}{hint}", node=node,
                            evidence={**common, **full.evidence()}) for node, why in full.not_started.items()]
    if full.ok:
        return out + _figure_verdicts(diag, common, floors, band)
    kinds = [f.kind for f in diag.findings]
    code = _CODES.get(kinds[0]) if kinds else None
    if full.wrong and code in (INIT_HANG, None):  # a wrong sum unattributed to a node or link is still corruption
        code = WRONG_SUM
    conclusion = "; ".join(f.message for f in diag.findings) or "not attributed (hierarchy off)"
    evidence = {**common, **full.evidence(), "hierarchy": [o.evidence() for o in diag.subruns]}
    make = warn if kinds == ["intermittent"] and not full.wrong else fail  # corruption never ends as a WARN
    out.append(make(f"all_reduce probe {full.describe()}; every rank was stopped -> {conclusion}",
                    evidence=evidence, remediation=code))
    for f in diag.findings:
        if f.kind in ("node", "node-fabric", "pair"):
            out += [fail(f.message, node=n, evidence=f.evidence, remediation=_CODES[f.kind]) for n in f.nodes]
    return out


_CODES = {"node": NODE_FAULT, "node-fabric": FABRIC, "pair": FABRIC, "scale": FABRIC, "intermittent": INIT_HANG,
          "wrong-sum": WRONG_SUM, "unresolved": INIT_HANG}


def _figure_verdicts(diag, common: dict, floors, band: float) -> list:
    full, limits = diag.final, Limits.of(floors)
    problems = judge_figures(full, limits, band)
    evidence = {**common, **full.evidence(), "floors_gbs": {str(k): v for k, v in limits.busbw.get(ALL_REDUCE,
                                                                                                   {}).items()},
                "limits": limits.evidence(),
                "attempt_busbw": [{str(r["bytes"]): r["busbw_gbs"] for r in o.sizes} for o in diag.attempts]}
    if not problems:
        note = "" if limits else " (no busbw floor configured: figures reported, not judged)"
        return [passed(_figures(full) + note, evidence=evidence)]
    out = []
    for status, op, metric, size, got, limit in problems:
        name = f"{_NAMES[op]} {'busbw' if metric == 'busbw' else 'latency'}"
        if status == "error":
            out.append(error(f"{name} {'floor' if metric == 'busbw' else 'ceiling'} set for {human_bytes(size)}, "
                             "which the sweep did not measure", evidence=evidence))
            continue
        make = fail if status == "fail" else warn
        if metric == "busbw":
            what = (f"{name} {got:.2f} GB/s at {human_bytes(size)} is below "
                    f"{'the floor' if status == 'fail' else 'floor + warn band'} ({limit:g} GB/s)")
        else:
            what = (f"{name} {got:.1f} us at {human_bytes(size)} is above "
                    f"{'the ceiling' if status == 'fail' else 'ceiling - warn band'} ({limit:g} us)")
        out.append(make(f"{what} in {len(diag.attempts)} attempt(s); {_figures(full)}", evidence=evidence,
                        remediation=SLOW))
    return out
