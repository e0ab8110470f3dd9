"""UALoE fabric data path between node pairs: ubench 07_ualoe p2p + bandwidth (reference §8)."""
from __future__ import annotations

from k3doctor.api import Param, check, remediation, whole_number
from k3doctor.parsers.ubench import METRICS
from k3doctor.probes import ualoe
from k3doctor.probes.ualoe_verdicts import Judging, known_good, plan_problem, recorded_reference

P2P = remediation("UALOE-P2P", "fabric p2p between two nodes failed or produced no result", """
ubench 07 could not share memory across the fabric between the pair named in the report (§8).
`accel_state` reading `active` is not enough: a whole rack once read active while no pair
exchanged a packet. The report quotes the importer's kernel log: `IMPORT: NPA-RSP timeout
from remote AccId:<n>`, `HELLO: Send failed`, `LSDMA PIO error`, `XA import failed` are fabric
faults; the AccId is mapped to node and GPU (§6: tray = AccId // 4 + 1; the card via each
card's ualink/accel_id). An empty exporter kernel log next to a failing importer means packets
are not crossing the wire - check the UALink switch ports/cabling of that tray and the data-
plane interface (§4, §18), then reload amdgpu (`modprobe ifoe` first) or reset the tray (§11).
`[FATAL] ualoe_p2p.cpp:49 hipMemSetAccess(...) -> invalid argument` is in fab_import: the
remote handle was imported, making it accessible failed - a fabric fault, not a local
allocation problem. A node that fails with every peer carries the fault; a pair that fails
while both nodes pass with other peers points at the path between them.
Re-run: `k3doctor check --only ualoe-fabric --pairs a,b`.
""")

TCP = remediation("UALOE-TCP-FALLBACK", "fabric bandwidth is TCP speed (~4.5 GB/s)", """
About 4.5 GB/s instead of ~11,000 GB/s bidirectional means the traffic silently fell back to
TCP: MNNVL/UALoE was not in effect (§8). Check `NCCL_MNNVL_ENABLE=1` in the environment of
the test and of the serving container (§16), that ifoe is loaded and every card reads
`active` (§6), and that the pair is in one fabric domain (same PPOD_ID and VPOD_ID, §7).
""")

SLOW = remediation("UALOE-SLOW", "fabric bandwidth below the floor or the known-good pair", """
Healthy B0 pairs after perf_setup read ~5,780 read / ~6,220 write / ~10,960 bidir GB/s with
< 0.5% spread (V6, §8). Judge against a known-good pair measured the same day: by default
the best pair of the run; pin one with `checks: {ualoe-fabric: {reference_gbps: {read: ..,
write: .., bidir: ..}}}` in the inventory (copy the `gbps` evidence of a healthy run). A slow
pair: confirm perf_setup ran on both trays (menu D, §5), that nothing else uses the GPUs
(aggregate mode takes every GPU, §3), and compare the lane bitmaps (§6) - a partially trained
link shows a bitmap that differs from its peers. A node slower than the reference with every
peer carries the slowness; one slow pair between nodes that are fast with other peers points
at the path between them.
""")

STALE = remediation("UALOE-STALE", "leftover ubench 07 processes on the node", """
A `ualoe_bw.exe listen` whose peer died never exits and keeps its port and device memory;
the next round then fails silently (no table, no error) (§8 pitfall 2). Kill it by PID:
`k3doctor check --only ualoe-fabric --fix`, or by hand: `ps -eo pid,args | awk
'$2 ~ /(^|\\/)ualoe_(bw|p2p)\\.exe$/ {print $1}' | xargs -r kill`. Never `pkill -f ualoe`: it
matches your own shell.
""")


@check("ualoe-fabric", title="UALoE fabric p2p + bandwidth between node pairs (ubench 07)", scope="node-pair",
       tier="deep", interaction="active", after=("ualink-state", "fabric-domain", "rack-free"),
       exclusive=("rack-free",), remediation=(P2P, TCP, SLOW, STALE),
       record_run=lambda verdicts, ctx: known_good(verdicts),
       params={
           "pairs": Param("quick", validate=plan_problem),  # quick (ring: every node in two pairs), all,
           # or a,b;c,d
           # GPU index used on both sides; -1: all GPUs, aggregate mode (§8 pitfall 1)
           "gpu": Param(0, minimum=-1, validate=whole_number()),
           "p2p_port": Param(55559, validate=whole_number()),
           "bw_port": Param(55560, validate=whole_number()),
           "listen_timeout_s": 15.0,  # exporter/listener must listen within this
           "p2p_timeout_s": 25.0,  # no RESULT line by then: FAIL (a bad link hangs, §8); healthy p2p takes
           # seconds (§8 "Correctness (seconds)"; < 1 s per pair on the rig), so a hung pair is named in ~1/2 min
           "bw_timeout_s": 180.0,  # no bandwidth table by then: FAIL
           "min_read_gbps": 1500.0,  # absolute floors (early V3/V4 rack: 2029 / 3192 / 3986)
           "min_write_gbps": 1500.0,
           "min_bidir_gbps": 3000.0,
           "tcp_fallback_max_gbps": 50.0,  # every figure at or below: TCP fallback (~4.5 GB/s, §8)
           # known-good pair {read, write, bidir}; empty: baseline, else the run's best
           "reference_gbps": Param({}, validate=lambda ref, nodes: _reference_problem(ref)),
           "warn_pct": 5.0,  # WARN when a figure is this far below the reference (V6 spread < 0.5%)
       })
def ualoe_fabric(ctx):
    """§8: `active` is necessary, not sufficient - only traffic proves the fabric (V5/V6).

    A bad link hangs rather than errors, so every stage has a deadline, the kernel log is read
    on failure, and every process this probe started is killed by PID before it returns.
    """
    return ualoe.run(ctx, build_config(ctx), judging_of(ctx))


_CODES = {"p2p": P2P, "stale": STALE, "tcp": TCP, "floor": SLOW, "reference": SLOW}


def build_config(ctx) -> ualoe.Config:
    """The probe's run settings: this check's parameters, and each node's own ubench build directory."""
    return ualoe.Config(plan=ctx.param("pairs"),
                        ubench_dir={n: ctx.node_settings(n).tools["ubench_dir"] for n in ctx.nodes},
                        gpu=int(ctx.param("gpu")), p2p_port=int(ctx.param("p2p_port")),
                        bw_port=int(ctx.param("bw_port")), listen_timeout_s=float(ctx.param("listen_timeout_s")),
                        p2p_timeout_s=float(ctx.param("p2p_timeout_s")),
                        bw_timeout_s=float(ctx.param("bw_timeout_s")), gpus_per_node=ctx.settings.gpus_per_node,
                        codes=_CODES)


def _reference_problem(ref) -> str | None:
    """reference_gbps: figures of a known-good pair, by metric, as ubench prints them (GB/s)."""
    if any(k not in METRICS or isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf")
           for k, v in ref.items()):
        return f"a mapping of {', '.join(METRICS)} to GB/s numbers"
    return None


def judging_of(ctx) -> Judging:
    """Floors, warn band and the known-good reference: the inventory's reference_gbps, else the baseline's."""
    ref = ctx.param("reference_gbps")
    if ref:
        reference, ref_from = {k: float(v) for k, v in ref.items()}, "reference_gbps from the inventory"
    else:
        reference, ref_from = recorded_reference(ctx.baseline)
    return Judging(floors={m: float(ctx.param(f"min_{m}_gbps")) for m in METRICS},
                   warn_pct=float(ctx.param("warn_pct")),
                   tcp_max_gbps=float(ctx.param("tcp_fallback_max_gbps")), reference=reference, ref_from=ref_from)
