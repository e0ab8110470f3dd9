"""allreduce-probe's all-to-all sweep and device-timed figures: transcripts -> outcome, params, limits, verdicts.

Transcripts use the worker's own events (``K3PROBE {json}``); the worker runs for real in
test_allreduce_local.py and the rig e2e tests/e2e/test_collectives.py.
"""
from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from k3doctor.inventory.load import InventoryError, parse_inventory
from k3doctor.judging.runner import Context
from k3doctor.probes.allreduce import Member, NodeRun, Outcome, Plan, analyse
from k3doctor.probes.collective_figures import ep_dispatch_sizes
from k3doctor.registry import REGISTRY, load_checks
from k3doctor.remote.allreduce_worker import STAGES
from k3doctor.results import Status

load_checks()
from k3doctor.checks.allreduce import (  # noqa: E402
    Limits,
    ParamError,
    build_plan,
    conclude,
    judge_figures,
    limits_of,
    record_busbw,
)

AR = (1 << 20, 2 << 20)
A2A = ep_dispatch_sizes(16, 32, 2, ["fp4"])  # 61440 and 122880 bytes per rank
DEADLINES = {s: 30 for s in STAGES}


def plan(a2a=A2A, splits="even") -> Plan:
    return Plan(label="full", members=(Member("a", "10.0.0.1", 2, ("python3",)), Member("b", "10.0.0.2", 2,
                                                                                         ("python3",))),
                port=29801, backend="auto", sizes_gpu=AR, sizes_cpu=AR, iters=5, warmup_iters=1,
                deadlines=dict(DEADLINES), a2a_gpu=a2a, a2a_cpu=a2a, a2a_splits=splits)


def line(**event) -> str:
    return "K3PROBE " + json.dumps(event)


def rank_lines(rank, stages=STAGES):
    out = []
    for stage in stages:
        extra = {"backend": "nccl"} if stage == "start" else {}
        out += [line(ev="begin", rank=rank, stage=stage), line(ev="end", rank=rank, stage=stage, dur=1.0, **extra)]
    return out


def size_lines(timer="cuda-graph", a2a=A2A, ar_us=20.0, a2a_us=10.0):
    out = [line(ev="size", rank=0, op="all_reduce", bytes=b, time_us=ar_us, host_us=ar_us * 3, timer=timer)
           for b in AR]
    out += [line(ev="size", rank=0, op="all_to_all", bytes=b, time_us=a2a_us, host_us=a2a_us * 4, timer=timer,
                 shape=label, splits="even") for b, _, label in a2a]
    return out


def runs(body_a, body_b, rc=0) -> dict:
    def node(name, ranks, body):
        text = "\n".join([line(ev="agent", node=name, ranks=ranks, pid=1)] + body) + "\n"
        return NodeRun(name, rc=rc, stdout=text, cleanup={"killed": [], "left": []})
    return {"a": node("a", [0, 1], body_a), "b": node("b", [2, 3], body_b)}


def healthy(**kw) -> dict:
    done = [line(ev="done", rank=r) for r in range(4)]
    return runs(rank_lines(0) + rank_lines(1) + size_lines(**kw) + done[:2], rank_lines(2) + rank_lines(3) + done[2:])


def test_device_timed_rows_carry_nccl_tests_figures_for_both_collectives():
    o = analyse(plan(), "r1", healthy(), 9.0)
    assert o.ok and o.timer == "cuda-graph" and o.stage_s["alltoall"] == 1.0
    ar = o.sizes[0]  # 1 MiB in 20 us on 4 ranks: algbw 52.43, busbw x 2(n-1)/n = 1.5
    assert (ar["time_us"], ar["algbw_gbs"], ar["busbw_gbs"]) == (20.0, 52.429, 78.643)
    assert (ar["host_time_us"], ar["host_busbw_gbs"]) == (60.0, 26.214)
    a2a = o.alltoall[0]  # 61440 B in 10 us: algbw 6.144, busbw x (n-1)/n = 0.75
    assert (a2a["bytes"], a2a["algbw_gbs"], a2a["busbw_gbs"], a2a["shape"]) == (61440, 6.144, 4.608, "16 tok fp4")
    assert o.evidence()["alltoall"] == o.alltoall and o.evidence()["timer"] == "cuda-graph"


def test_host_timed_rows_have_one_figure_and_launch_bound_rows_are_marked():
    o = analyse(plan(), "r1", healthy(timer="host"), 9.0)
    assert o.ok and o.timer == "host" and "host_time_us" not in o.sizes[0]
    o = analyse(plan(), "r1", healthy(timer="cuda-events (launch-bound)"), 9.0)
    assert o.ok and o.timer == "cuda-events" and all(r["launch_bound"] for r in o.sizes + o.alltoall)


def test_rank_hung_in_the_all_to_all_is_named_with_its_stage():
    body_b = rank_lines(2) + rank_lines(3, STAGES[:-1]) + [
        line(ev="begin", rank=3, stage="alltoall"),
        line(ev="killed", rank=3, stage="alltoall", by="agent", why="stage deadline")]
    body_a = rank_lines(0, STAGES[:-1]) + rank_lines(1, STAGES[:-1]) + size_lines(a2a=())[:2] + [
        line(ev="begin", rank=r, stage="alltoall") for r in (0, 1)] + [
        line(ev="fail", rank=r, stage="alltoall", error="stage deadline of 30s exceeded (rank watchdog)")
        for r in (0, 1)]
    o = analyse(plan(), "r1", runs(body_a, body_b, rc=1), 40.0)
    assert not o.ok and o.stage == "alltoall" and o.missing == [3] and o.missing_nodes == ["b"]
    assert "stopped in stage `alltoall`" in o.describe() and "rank 3 (b) never completed it" in o.describe()


def test_all_to_all_data_that_reached_the_wrong_rank_is_corruption_in_its_stage():
    bad = line(ev="wrong", op="all_to_all", rank=2, src=1, bytes=122880, wrong=30720, sample=7, expected=4)
    r = healthy()
    r["b"].stdout += bad + "\n"
    o = analyse(plan(), "r1", r, 9.0)
    assert not o.ok and o.stage == "alltoall"
    assert o.wrong == [{"rank": 2, "src": 1, "bytes": 122880, "wrong": 30720, "sample": 7, "expected": 4}]
    assert "wrong all-to-all data on 4 rank(s) on 2 node(s): (rank, from rank, bytes) [(2, 1, 122880)]" in o.describe()
    [v] = conclude(SimpleNamespace(final=o, attempts=[o], subruns=[], findings=[], elapsed_s=9.0), {}, 0.1)
    assert (v.status, v.remediation) == (Status.FAIL, "ALLREDUCE-WRONG-SUM")


def test_all_to_all_sizes_missing_from_a_run_fail_it():
    r = healthy()
    r["a"].stdout = "\n".join(x for x in r["a"].stdout.splitlines() if "122880" not in x) + "\n"
    o = analyse(plan(), "r1", r, 9.0)
    assert not o.ok and o.stage == "alltoall" and o.errors[-1] == "1 of 2 all_to_all sizes reported"


def test_a_size_report_without_a_usable_time_is_an_unread_size_never_a_figure():
    r = healthy()
    r["a"].stdout = r["a"].stdout.replace('"time_us": 10.0', '"time_us": 0.0', 1)
    o = analyse(plan(), "r1", r, 9.0)
    assert not o.ok and len(o.alltoall) == 1 and "unreadable size report" in o.errors[-1]
    assert "time 0.0 s is not a positive finite number" in o.errors[-1]


def test_smoke_subset_keeps_one_size_of_each_collective():
    small = plan().subset(["a"], "node a", 29900, smoke=True)
    assert small.sizes_gpu == AR[:1] and small.a2a_gpu == A2A[:1] and small.a2a_splits == "even"
    spec = plan(splits="uneven").spec(plan().members[0], 100)
    assert spec["a2a_gpu"] == [list(s) for s in A2A] and spec["a2a_splits"] == "uneven" and spec["timer"] == "auto"


# --- the check ------------------------------------------------------------------------

INVENTORY = """
cluster:
  gpus_per_node: 2
nodes:
  - {name: n1, host: 10.0.0.1}
  - {name: n2, host: 10.0.0.2}
"""


def ctx_for(baseline=None, **params):
    inv = parse_inventory(INVENTORY, registry=REGISTRY)
    chk = REGISTRY.checks["allreduce-probe"]
    for settings in [inv.cluster] + [n.settings for n in inv.nodes]:
        settings.checks.setdefault(chk.name, {}).update(params)
    return Context(chk, inv.cluster, nodes={n.name: n for n in inv.nodes}, baseline=baseline)


def test_default_plan_sweeps_ep_dispatch_sizes_at_every_wire_format():
    p = build_plan(ctx_for(), ["n1", "n2"])
    assert len(p.a2a_gpu) == 30 and len(p.a2a_cpu) == 15  # 16..8192 / 1..16 tokens x bf16, fp8, fp4
    assert p.a2a_gpu[0] == (16 * 14336, 14336, "16 tok bf16") and p.a2a_gpu[-1] == (8192 * 3840, 3840, "8192 tok fp4")
    assert p.a2a_cpu[0] == (14336, 14336, "1 tok bf16") and p.timer == "auto" and p.a2a_splits == "even"
    p = build_plan(ctx_for(alltoall_sizes="bytes", alltoall_splits="uneven", timer="events"), ["n1", "n2"])
    assert [s[0] for s in p.a2a_gpu] == [64 << 10 << i for i in range(17)] and p.a2a_gpu[-1] == (4 << 30, 1, "")
    assert p.a2a_splits == "uneven" and p.timer == "events"
    p = build_plan(ctx_for(alltoall=False), ["n1", "n2"])
    assert p.a2a_gpu == () and p.a2a_cpu == ()


@pytest.mark.parametrize("params, message", [
    ({"alltoall_min_tokens": 64, "alltoall_max_tokens": 32}, "tokens 64..32: min above max"),
])
def test_bad_collective_params_are_clear_errors(params, message):
    with pytest.raises(ParamError, match=re.escape(message)):
        build_plan(ctx_for(**params), ["n1", "n2"])


@pytest.mark.parametrize("params, message", [
    ({"alltoall_s": 0}, "allreduce-probe.alltoall_s: expected a number in [1, 86400], got 0"),
    ({"alltoall_max_tokens": 8.5}, "allreduce-probe.alltoall_max_tokens: expected a whole number >= 0, got 8.5"),
    ({"alltoall_busbw_floor_gbs": {"4096": True}}, "expected a mapping of message bytes to a number >= 0"),
])
def test_bad_collective_params_are_refused_when_the_inventory_is_read(params, message):
    with pytest.raises(InventoryError, match=re.escape(message)):
        parse_inventory(INVENTORY.replace("  gpus_per_node: 2\n", "  gpus_per_node: 2\n  checks: {allreduce-probe: "
                                          + json.dumps(params) + "}\n"), registry=REGISTRY)


def outcome_with(ar: dict, a2a: dict) -> Outcome:
    return Outcome(label="full", run_id="r", nodes=["a", "b"], world=2, ok=True, wall_s=5.0, backend="nccl",
                   timer="cuda-graph", stage_s={"start": 2.0},
                   sizes=[{"bytes": b, "time_us": us, "algbw_gbs": bw, "busbw_gbs": bw} for b, (us, bw) in ar.items()],
                   alltoall=[{"bytes": b, "time_us": us, "algbw_gbs": bw, "busbw_gbs": bw / 2, "shape": ""}
                             for b, (us, bw) in a2a.items()])


def diag(o):
    return SimpleNamespace(final=o, attempts=[o], subruns=[], findings=[], elapsed_s=5.0)


def test_latency_ceilings_and_all_to_all_floors_pass_warn_fail():
    o = outcome_with({1 << 20: (20.0, 52.0)}, {61440: (12.0, 5.0), 1 << 30: (9000.0, 119.0)})
    limits = Limits(busbw={"all_to_all": {1 << 30: 50.0}}, latency={"all_reduce": {1 << 20: 25.0},
                                                                    "all_to_all": {61440: 15.0}})
    [v] = conclude(diag(o), limits, 0.1)
    assert v.status == Status.PASS and "no busbw floor configured" not in v.message
    assert "all_reduce and all-to-all over 2 rank(s) on 2 node(s), nccl (cuda-graph timing)" in v.message
    assert "all-to-all busbw 59.50 GB/s (algbw 119.00) at 1 GiB, 12.0 us at 60 KiB" in v.message
    assert v.evidence["limits"] == {"all_to_all_busbw_floor_gbs": {str(1 << 30): 50.0},
                                    "all_reduce_latency_max_us": {str(1 << 20): 25.0},
                                    "all_to_all_latency_max_us": {"61440": 15.0}}
    [v] = conclude(diag(o), Limits(latency={"all_reduce": {1 << 20: 21.0}}), 0.1)
    assert v.status == Status.WARN and "all_reduce latency 20.0 us at 1 MiB is above ceiling - warn band" in v.message
    verdicts = conclude(diag(o), Limits(busbw={"all_to_all": {1 << 30: 60.0}}, latency={"all_to_all": {61440: 10.0}}),
                        0.1)
    assert [(v.status, v.remediation) for v in verdicts] == [(Status.FAIL, "ALLREDUCE-SLOW")] * 2
    assert "all-to-all busbw 59.50 GB/s at 1 GiB is below the floor (60 GB/s)" in verdicts[0].message
    assert "all-to-all latency 12.0 us at 60 KiB is above the ceiling (10 us)" in verdicts[1].message
    assert judge_figures(o, Limits(latency={"all_to_all": {4096: 1.0}}), 0.1) == [
        ("error", "all_to_all", "latency", 4096, None, 1.0)]


def test_baseline_records_both_collectives_and_sets_floors_above_and_ceilings_below_the_split():
    o = outcome_with({1 << 20: (20.0, 52.0), 64 << 20: (400.0, 167.0)}, {61440: (12.0, 5.0), 4 << 20: (60.0, 70.0)})
    entry = record_busbw(conclude(diag(o), {}, 0.1), None)
    assert entry["a"]["alltoall"] == {"busbw_gbs": {"61440": 2.5, str(4 << 20): 35.0},
                                      "time_us": {"61440": 12.0, str(4 << 20): 60.0}}
    limits = limits_of(ctx_for(baseline=entry, latency_max_us={1 << 20: 25.0}), 2)
    assert limits.busbw == {"all_reduce": {1 << 20: 41.6, 64 << 20: 133.6}, "all_to_all": {4 << 20: 28.0}}
    # below baseline_min_bytes (1 MiB) a baseline sets latency ceilings (recorded x 1.5), from it up busbw floors
    assert limits.latency == {"all_reduce": {1 << 20: 25.0}, "all_to_all": {61440: 18.0}}
    lower = limits_of(ctx_for(baseline=entry, alltoall_latency_max_us={61440: 10.0, 4096: 3.0}), 2)
    assert lower.latency["all_to_all"] == {61440: 10.0, 4096: 3.0}  # an inventory ceiling under the baseline's stays
    assert limits_of(ctx_for(baseline=entry), 4) == Limits(busbw={"all_reduce": {}, "all_to_all": {}},
                                                           latency={"all_reduce": {}, "all_to_all": {}})
    slow = outcome_with({1 << 20: (20.0, 52.0), 64 << 20: (400.0, 167.0)}, {61440: (30.0, 2.0),
                                                                           4 << 20: (60.0, 70.0)})
    [v] = conclude(diag(slow), limits, 0.1)
    assert v.status == Status.FAIL and "all-to-all latency 30.0 us at 60 KiB is above the ceiling (18 us)" in v.message
