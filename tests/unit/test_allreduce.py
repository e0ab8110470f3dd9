"""allreduce-probe judgement: transcripts -> outcome, hierarchy attribution, params, verdicts.

Transcripts are built from the worker's own event vocabulary (``K3PROBE {json}`` lines),
so these tests pin the launcher's reading of what the worker prints; the worker itself
runs for real in test_allreduce_local.py.
"""
from __future__ import annotations

import json
import re
import time
from types import SimpleNamespace

import pytest

from k3doctor.inventory.load import parse_inventory
from k3doctor.inventory.types import InventoryError
from k3doctor.judging.runner import Context
from k3doctor.probes.allreduce import (
    MIN_DEADLINE_S,
    Finding,
    Member,
    NodeRun,
    Outcome,
    Plan,
    analyse,
    attribute,
    diagnose,
    pair_rounds,
)
from k3doctor.registry import REGISTRY, load_checks
from k3doctor.results import Status

load_checks()
from k3doctor.checks.allreduce import (  # noqa: E402
    ParamError,
    build_plan,
    conclude,
    floors_of,
    merged_floors,
    record_busbw,
)

STAGES = ("start", "rendezvous", "init", "warmup", "sweep")
DEADLINES = {"start": 45, "rendezvous": 30, "init": 45, "warmup": 30, "sweep": 90}


def plan(nodes=("a", "b"), ranks=2, sizes=(1 << 20, 2 << 20)) -> Plan:
    return Plan(label="full", members=tuple(Member(n, f"10.0.0.{i + 1}", ranks, ("python3",))
                                            for i, n in enumerate(nodes)),
                port=29801, backend="auto", sizes_gpu=tuple(sizes), sizes_cpu=tuple(sizes), iters=5,
                warmup_iters=1, deadlines=dict(DEADLINES))


def line(**event) -> str:
    return "K3PROBE " + json.dumps(event)


def healthy_rank(rank, stages=STAGES, backend="nccl"):
    out = []
    for i, stage in enumerate(stages):
        extra = {"backend": backend, "env": {"NCCL_CUMEM_ENABLE": "1"}} if stage == "start" else {}
        out += [line(ev="begin", rank=rank, stage=stage),
                line(ev="end", rank=rank, stage=stage, dur=1.0 + i + rank / 10, **extra)]
    return out


def transcript(node, ranks, body, rc=0, **kw) -> NodeRun:
    lines = [line(ev="agent", node=node, ranks=list(ranks), pid=1)] + body
    return NodeRun(node, rc=rc, stdout="\n".join(lines) + "\n", cleanup={"killed": [], "left": []}, **kw)


def sizes_lines(sizes, algbw=100.0):
    return [line(ev="size", rank=0, bytes=s, time_us=s / algbw / 1e3, algbw=algbw) for s in sizes]


def test_healthy_run_reports_busbw_like_nccl_tests_and_slowest_stage():
    p = plan()
    a = transcript("a", [0, 1], healthy_rank(0) + healthy_rank(1) + sizes_lines(p.sizes_gpu)
                   + [line(ev="done", rank=0), line(ev="done", rank=1)])
    b = transcript("b", [2, 3], healthy_rank(2) + healthy_rank(3) + [line(ev="done", rank=2), line(ev="done", rank=3)])
    o = analyse(p, "r1", {"a": a, "b": b}, 12.0)
    assert o.ok and o.stage is None and o.backend == "nccl"
    assert [row["busbw_gbs"] for row in o.sizes] == [150.0, 150.0]  # 100 * 2*(4-1)/4
    assert o.stage_s["start"] == pytest.approx(1.3) and o.stage_s["sweep"] == pytest.approx(5.3)
    assert o.env == {"a": {"NCCL_CUMEM_ENABLE": "1"}, "b": {"NCCL_CUMEM_ENABLE": "1"}}


def test_rendezvous_hang_names_the_rank_and_node_that_never_arrived():
    p = plan()
    fail = "[rendezvous] not every rank arrived"
    a = transcript("a", [0, 1], healthy_rank(0, STAGES[:1]) + healthy_rank(1, STAGES[:1]) + [
        line(ev="begin", rank=0, stage="rendezvous"), line(ev="missing", rank=0, stage="rendezvous", ranks=[3]),
        line(ev="fail", rank=0, stage="rendezvous", error=fail),
        line(ev="fail", rank=1, stage="rendezvous", error=fail)], rc=1)
    b = transcript("b", [2, 3], healthy_rank(2, STAGES[:1]) + healthy_rank(3, STAGES[:1]) + [
        line(ev="fail", rank=2, stage="rendezvous", error=fail),
        line(ev="killed", rank=3, stage="rendezvous", by="agent", why="stage deadline")], rc=1)
    o = analyse(p, "r1", {"a": a, "b": b}, 40.0)
    assert not o.ok and o.stage == "rendezvous"
    assert o.missing == [3] and o.missing_nodes == ["b"] and o.killed == [3]
    assert "rank 3 (b) never arrived" in o.describe()


def test_master_that_never_opened_the_store_is_the_missing_one():
    p = plan(ranks=1)
    a = transcript("a", [0], [line(ev="killed", rank=0, stage="start", by="agent", why="stage deadline")], rc=1)
    b = transcript("b", [1], healthy_rank(1, STAGES[:1]) + [
        line(ev="fail", rank=1, stage="rendezvous", error="cannot reach the rendezvous store")], rc=1)
    o = analyse(p, "r1", {"a": a, "b": b}, 50.0)
    assert o.stage == "start" and o.missing == [0] and o.missing_nodes == ["a"]


def test_init_hang_of_every_rank_names_them_all():
    p = plan()
    runs = {}
    for node, ranks in (("a", [0, 1]), ("b", [2, 3])):
        body = []
        for r in ranks:
            body += healthy_rank(r, STAGES[:2]) + [line(ev="begin", rank=r, stage="init"),
                                                   line(ev="fail", rank=r, stage="init", error="stage deadline")]
        runs[node] = transcript(node, ranks, body, rc=1)
    o = analyse(p, "r1", runs, 80.0)
    assert o.stage == "init" and o.missing == [0, 1, 2, 3] and o.missing_nodes == ["a", "b"]
    assert "never completed it" in o.describe()


def test_agent_that_never_started_and_missing_torch_are_setup_problems():
    p = plan()
    ok = transcript("a", [0, 1], healthy_rank(0) + healthy_rank(1))
    gone = NodeRun("b", rc=127, stderr="sh: 1: python3: not found\n", cleanup={"error": "x", "rc": 127})
    o = analyse(p, "r1", {"a": ok, "b": gone}, 1.0)
    assert o.not_started == {"b": "exit status 127: sh: 1: python3: not found"} and not o.ok
    assert o.residue == {}  # python cannot run there, so nothing of the run can be left
    lost = NodeRun("b", error="SSH session to b broke", cleanup={"error": "SSH session to b lost"})
    o = analyse(p, "r1", {"a": ok, "b": lost}, 1.0)
    assert o.not_started == {"b": "SSH session to b broke"} and o.residue == {"b": "SSH session to b lost"}
    no_torch = transcript("b", [2, 3], [line(ev="fail", rank=2, stage="start",
                                             error="ModuleNotFoundError: No module named 'torch'")], rc=1)
    o = analyse(p, "r1", {"a": ok, "b": no_torch}, 1.0)
    assert o.setup_error and "torch is not importable" in o.setup_error


def test_wrong_sum_and_cut_lines():
    p = plan(nodes=("a",), ranks=1, sizes=(4096,))
    body = healthy_rank(0) + sizes_lines([4096]) + [
        line(ev="wrong", rank=0, bytes=4096, wrong=12, sample=2.0, expected=1.0), line(ev="done", rank=0),
        'K3PROBE {"ev":"size","rank":0,"by']  # killed mid-line: ignored
    o = analyse(p, "r1", {"a": transcript("a", [0], body)}, 3.0)
    assert not o.ok and o.wrong == [{"rank": 0, "bytes": 4096, "wrong": 12, "sample": 2.0, "expected": 1.0}]
    assert len(o.sizes) == 1 and "wrong all_reduce sum" in o.describe()


def test_torch_failure_text_is_classified_per_node():
    p = plan(nodes=("a",), ranks=1)
    stderr = ("[rank0]:[E1206 10:00:00.000000000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective "
              "operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=45000) "
              "ran for 45001 milliseconds before timing out.\n")
    run = transcript("a", [0], healthy_rank(0, STAGES[:2]) + [line(ev="fail", rank=0, stage="init", error="x")],
                     rc=1, stderr=stderr)
    o = analyse(p, "r1", {"a": run}, 50.0)
    assert o.torch_failure == {"a": "watchdog_timeout"}


def sweep_runs(p: Plan, wrong_nodes=()) -> dict:
    """Every rank of ``p`` completes every stage; ranks on ``wrong_nodes`` read a wrong sum at the largest size."""
    runs = {}
    for node, ranks in p.ranks_of().items():
        body = []
        for r in ranks:
            body += healthy_rank(r) + (sizes_lines(p.sizes_gpu) if r == 0 else [])
            if node in wrong_nodes:
                body.append(line(ev="wrong", rank=r, bytes=p.sizes_gpu[-1], wrong=7, sample=1.0, expected=10.0))
            body.append(line(ev="done", rank=r))
        runs[node] = transcript(node, ranks, body)
    return runs


def test_wrong_sum_fails_the_sweep_so_the_hierarchy_reruns_every_size():
    p = plan()
    o = analyse(p, "r1", sweep_runs(p, wrong_nodes=("b",)), 5.0)
    assert not o.ok and o.stage == "sweep" and o.missing == []
    assert "wrong all_reduce sum" in o.describe() and "(2, 2097152), (3, 2097152)" in o.describe()


def test_wrong_sum_in_the_first_tiny_all_reduce_is_a_wrong_sum_not_an_init_hang():
    p = plan(nodes=("a",))
    body = []
    for r in (0, 1):
        body += healthy_rank(r, STAGES[:2]) + [line(ev="begin", rank=r, stage="init"), line(
            ev="fail", rank=r, stage="init", error="first all_reduce summed to 2.0, expected 3.0")]
    o = analyse(p, "r1", {"a": transcript("a", [0, 1], body, rc=3)}, 5.0)
    assert o.stage == "init" and [(w["rank"], w["bytes"], w["sample"]) for w in o.wrong] == [(0, 4, 2.0), (1, 4, 2.0)]
    assert "wrong all_reduce sum" in o.describe()
    [f] = attribute(o, {"a": outcome(True)}, {}, outcome(True))
    assert f.kind == "wrong-sum" and "ncclCommInitRank hang (§20)" not in f.message


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
def test_pair_rounds_cover_every_pair_once_with_disjoint_rounds(n):
    nodes = [f"n{i}" for i in range(n)]
    rounds = pair_rounds(nodes)
    pairs = [p for r in rounds for p in r]
    assert sorted(pairs) == sorted((a, b) for i, a in enumerate(nodes) for b in nodes[i + 1:])
    for r in rounds:
        members = [x for p in r for x in p]
        assert len(members) == len(set(members))
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)


def outcome(ok, nodes=("a",), stage=None) -> Outcome:
    return Outcome(label="x", run_id="r", nodes=list(nodes), world=len(nodes), ok=ok, wall_s=1.0, stage=stage)


FULL = outcome(False, ("a", "b", "c", "d"), stage="init")


def test_attribute_node_fault_wins_over_everything():
    singles = {"a": outcome(True), "b": outcome(False, ("b",), "init"), "c": outcome(True), "d": outcome(True)}
    f = attribute(FULL, singles, {}, None)
    assert [(x.kind, x.nodes) for x in f] == [("node", ("b",))]
    assert f[0].message.startswith("platform fault on b")


def test_attribute_bad_node_fails_every_pair_bad_link_only_one():
    singles = {n: outcome(True, (n,)) for n in "abcd"}
    pairs = {(x, y): outcome(True, (x, y)) for x, y in pair_rounds(list("abcd"))[0] + pair_rounds(list("abcd"))[1]
             + pair_rounds(list("abcd"))[2]}
    for pair in pairs:
        if "c" in pair:
            pairs[pair] = outcome(False, pair, "init")
    f = attribute(FULL, singles, pairs, None)
    assert [(x.kind, x.nodes) for x in f] == [("node-fabric", ("c",))]
    pairs = {pair: outcome(pair != ("a", "d"), pair, "init") for pair in pairs}
    f = attribute(FULL, singles, pairs, None)
    assert [(x.kind, x.nodes) for x in f] == [("pair", ("a", "d"))]
    assert "between a and d" in f[0].message


def test_attribute_intermittent_scale_unresolved():
    singles = {n: outcome(True, (n,)) for n in "ab"}
    assert attribute(FULL, singles, {}, outcome(True))[0].kind == "intermittent"
    assert "ncclCommInitRank" in attribute(FULL, singles, {}, outcome(True))[0].message
    assert attribute(FULL, singles, {}, outcome(False, stage="init"))[0].kind == "scale"
    assert attribute(FULL, singles, {}, None, "no time")[0].kind == "unresolved"


class FakeRuns:
    """Stands in for ``launch``: decides each run's outcome by its label, records the calls."""

    def __init__(self, fail_labels=(), once=()):
        self.fail_labels, self.once, self.calls = set(fail_labels), set(once), []

    def __call__(self, plans, transports, limits):
        self.calls.append([(p.label, p.port, limits[i]) for i, p in enumerate(plans)])
        out = []
        for p in plans:
            failed = p.label in self.fail_labels or p.label in self.once
            self.once.discard(p.label)
            out.append(Outcome(label=p.label, run_id=p.label, nodes=p.nodes, world=p.world, ok=not failed,
                               wall_s=1.0, stage="init" if failed else None))
        return out


def test_diagnose_runs_nodes_then_pairs_then_retry_and_calls_it_intermittent():
    runs = FakeRuns(once={"full"})
    diag = diagnose(plan(("a", "b", "c", "d")), {}, 240, run=runs)
    labels = [[c[0] for c in call] for call in runs.calls]
    assert labels == [["full"], ["node a", "node b", "node c", "node d"],
                      ["pair a+d", "pair b+c"], ["pair a+c", "pair b+d"], ["pair a+b", "pair c+d"], ["full"]]
    ports = [c[1] for call in runs.calls for c in call]
    assert len(set(ports)) == len(ports)  # no two runs share a rendezvous port
    assert [f.kind for f in diag.findings] == ["intermittent"]


def test_diagnose_stops_the_hierarchy_when_the_deadline_is_near():
    now = [0.0]

    def clock():
        return now[0]

    class Slow(FakeRuns):
        def __call__(self, plans, transports, limits):
            now[0] += 100.0
            return super().__call__(plans, transports, limits)

    runs = Slow(fail_labels={"full"})
    diag = diagnose(plan(("a", "b", "c")), {}, 220, run=runs, clock=clock)
    assert len(runs.calls) == 2  # full, then per node; 10 s left is too little for a pair round
    assert diag.not_run == "no time left for every node pair"
    assert [f.kind for f in diag.findings] == ["unresolved"]
    assert [limit for call in runs.calls for _, _, limit in call] == [210.0, 110.0, 110.0, 110.0]


def test_diagnose_repeats_only_while_figures_fall_short():
    runs = FakeRuns()
    seen = []
    diag = diagnose(plan(), {}, 240, run=runs, repeats=3, good_enough=lambda o: seen.append(o) or len(seen) >= 2)
    assert len(diag.attempts) == 2 and not diag.findings


def test_diagnose_start_failure_is_the_nodes_own():
    full = Outcome(label="full", run_id="r", nodes=["a", "b"], world=2, ok=False, wall_s=3.0, stage="start",
                   missing=[1], missing_nodes=["b"], errors={1: "[start] 1 GPU(s) visible"},
                   node_by_rank={0: "a", 1: "b"})
    diag = diagnose(plan(ranks=1), {}, 240, run=lambda plans, t, limits: [full])
    assert [(f.kind, f.nodes) for f in diag.findings] == [("node", ("b",))]
    assert "1 GPU(s) visible" in diag.findings[0].message


# --- the check: params and verdicts -------------------------------------------------------

INVENTORY = """
cluster:
  gpus_per_node: 4
  container: k3ep16
nodes:
  - {name: n1, host: 10.0.0.1}
  - {name: n2, host: 10.0.0.2, data_ip: 10.1.0.2, gpus_per_node: 2,
     checks: {allreduce-probe: {where: host}}}
"""


def ctx_for(text=INVENTORY, **params):
    inv = parse_inventory(text, registry=REGISTRY)
    chk = REGISTRY.checks["allreduce-probe"]
    for settings in [inv.cluster] + [n.settings for n in inv.nodes]:  # as --set does
        settings.checks.setdefault(chk.name, {}).update(params)
    return Context(chk, inv.cluster, nodes={n.name: n for n in inv.nodes})


def test_build_plan_uses_each_nodes_settings_and_data_plane_address():
    p = build_plan(ctx_for(), ["n1", "n2"])
    assert p.world == 6
    assert p.members[0] == Member("n1", "10.0.0.1", 4, ("docker", "exec", "-i", "k3ep16", "python3"))
    assert p.members[1] == Member("n2", "10.1.0.2", 2, ("python3",))
    assert p.sizes_gpu[0] == 1 << 20 and p.sizes_gpu[-1] == 4 << 30 and len(p.sizes_gpu) == 13
    assert p.sizes_cpu == tuple(4096 << i for i in range(9))
    assert p.spec(p.members[1], 100)["rank_base"] == 4 and p.spec(p.members[1], 100)["master"] == "10.0.0.1"


@pytest.mark.parametrize("params, message", [
    ({"where": "vm"}, "allreduce-probe.where: expected one of container, host, got 'vm'"),
    ({"backend": "mpi"}, "allreduce-probe.backend: expected one of auto, nccl, gloo, got 'mpi'"),
    ({"timer": "cpu"}, "allreduce-probe.timer: expected one of auto, graph, events, host, got 'cpu'"),
    ({"alltoall_sizes": "tokens"}, "allreduce-probe.alltoall_sizes: expected one of ep, bytes, got 'tokens'"),
    ({"alltoall_splits": "random"}, "allreduce-probe.alltoall_splits: expected one of even, uneven"),
    ({"alltoall_wires": ["fp6"]}, "allreduce-probe.alltoall_wires: expected a non-empty list of wire formats of "
                                  "bf16, fp8, fp4"),
    ({"alltoall_wires": []}, "allreduce-probe.alltoall_wires: expected a non-empty list of wire formats"),
])
def test_bad_choices_are_refused_when_the_inventory_is_read(params, message):
    """Exit 3 before anything runs (the CLI prints InventoryError as one clear line), not an ERROR after."""
    text = INVENTORY.replace("  container: k3ep16\n", "  container: k3ep16\n  checks: {allreduce-probe: "
                             + json.dumps(params) + "}\n")
    with pytest.raises(InventoryError, match=re.escape(message)):
        parse_inventory(text, registry=REGISTRY)


@pytest.mark.parametrize("params, message", [
    ({"min_bytes": 6}, "allreduce-probe.min_bytes: expected a whole multiple of 4 (float32 elements), got 6"),
    ({"init_s": 0}, "allreduce-probe.init_s: expected a number in [1, 86400], got 0"),
    ({"iters": 2.5}, "allreduce-probe.iters: expected a whole number >= 1, got 2.5"),
    ({"warmup_iters": -1}, "allreduce-probe.warmup_iters: expected a whole number >= 0, got -1"),
    ({"port": 0}, "allreduce-probe.port: expected a number in [1, 65535], got 0"),
    ({"busbw_floor_gbs": {"1G": 3}}, "busbw_floor_gbs: expected a mapping of message bytes to a number"),
    ({"latency_max_us": {4096: -1}}, "latency_max_us: expected a mapping of message bytes to a number >= 0"),
    ({"warn_band": -0.1}, "allreduce-probe.warn_band: expected a number in [0, 1000000], got -0.1"),
])
def test_bad_params_are_refused_when_the_inventory_is_read(params, message):
    """Each parameter on its own is checked at load (exit 3 before anything connects), not when the probe runs."""
    text = INVENTORY.replace("  container: k3ep16\n", "  container: k3ep16\n  checks: {allreduce-probe: "
                             + json.dumps(params) + "}\n")
    with pytest.raises(InventoryError, match=re.escape(message)):
        parse_inventory(text, registry=REGISTRY)


@pytest.mark.parametrize("params, message", [
    ({"min_bytes": 8192, "max_bytes": 4096}, "sizes 8192..4096: min_bytes above max_bytes"),
])
def test_params_that_contradict_each_other_are_clear_errors(params, message):
    with pytest.raises(ParamError, match=re.escape(message)):
        build_plan(ctx_for(**params), ["n1", "n2"])


def test_floor_params_parse():
    assert floors_of({"1073741824": 40, 4096: 0.5}) == {1 << 30: 40.0, 4096: 0.5}
    with pytest.raises(ParamError):
        floors_of({"1G": 3})


def diag_with(sizes_busbw: dict, ok=True):
    o = Outcome(label="full", run_id="r", nodes=["a", "b"], world=2, ok=ok, wall_s=5.0, backend="nccl",
                stage_s={"start": 2.0}, sizes=[{"bytes": b, "time_us": 1.0, "algbw_gbs": v, "busbw_gbs": v}
                                               for b, v in sizes_busbw.items()])
    return SimpleNamespace(final=o, attempts=[o], subruns=[], findings=[], elapsed_s=5.0)


def test_figures_pass_warn_fail_against_floors():
    d = diag_with({1 << 20: 10.0, 1 << 30: 95.0})
    [v] = conclude(d, {}, 0.1)
    assert v.status == Status.PASS and "busbw 95.00 GB/s (algbw 95.00) at 1 GiB" in v.message
    assert "no busbw floor configured" in v.message
    [v] = conclude(d, {1 << 30: 90.0}, 0.1)
    assert v.status == Status.WARN and v.remediation == "ALLREDUCE-SLOW"
    [v] = conclude(d, {1 << 30: 100.0}, 0.1)
    assert v.status == Status.FAIL and "below the floor (100 GB/s)" in v.message
    [v] = conclude(d, {1 << 31: 100.0}, 0.1)
    assert v.status == Status.ERROR and "did not measure" in v.message


def test_leftover_processes_after_cleanup_fail_the_node():
    d = diag_with({4096: 1.0})
    d.final.residue = {"b": [4242]}
    verdicts = conclude(d, {}, 0.1)
    assert verdicts[0].status == Status.FAIL and verdicts[0].node == "b" and "4242" in verdicts[0].message
    assert verdicts[0].remediation == "ALLREDUCE-LEFTOVER"


def test_baseline_records_a_passing_run_and_raises_the_floors_of_large_sizes():
    d = diag_with({1 << 20: 10.0, 1 << 30: 95.0})
    entry = record_busbw(conclude(d, {}, 0.1), None)
    assert entry == {n: {"world": 2, "nodes": ["a", "b"], "busbw_gbs": {str(1 << 20): 10.0, str(1 << 30): 95.0},
                         "time_us": {str(1 << 20): 1.0, str(1 << 30): 1.0}} for n in ("a", "b")}
    assert record_busbw(conclude(diag_with({1 << 30: 1.0}), {1 << 30: 5.0}, 0.1), None) == {}  # a FAIL records nothing
    floors = merged_floors({1 << 30: 50.0, 4096: 0.1}, entry, 2, 0.2, 64 << 20)
    assert floors == {1 << 30: 76.0, 4096: 0.1}  # 95 x 0.8; 1 MiB is below baseline_min_bytes
    assert merged_floors({}, entry, 16, 0.2, 0) == {}  # a baseline of another world size does not apply
    [v] = conclude(diag_with({1 << 20: 10.0, 1 << 30: 70.0}), merged_floors({}, entry, 2, 0.2, 64 << 20), 0.1)
    assert v.status == Status.FAIL and "below the floor (76 GB/s)" in v.message


class AnalysedRuns:
    """Stands in for ``launch`` with real transcripts: ``wrong(plan, call)`` names the nodes that read a wrong sum."""

    def __init__(self, wrong):
        self.wrong, self.plans = wrong, []

    def __call__(self, plans, transports, limits):
        out = []
        for p in plans:
            self.plans.append(p)
            out.append(analyse(p, p.label, sweep_runs(p, self.wrong(p, len(self.plans))), 1.0))
        return out


def test_wrong_sum_that_passes_on_retry_is_a_fail_never_the_init_hang_warn():
    runs = AnalysedRuns(lambda p, call: ("b",) if call == 1 else ())
    diag = diagnose(plan(("a", "b", "c")), {}, 240, run=runs)
    assert all(p.sizes_gpu == (1 << 20, 2 << 20) for p in runs.plans)  # nodes and pairs re-run every size
    assert [f.kind for f in diag.findings] == ["wrong-sum"]
    [v] = conclude(diag, {}, 0.1)
    assert v.status == Status.FAIL and v.remediation == "ALLREDUCE-WRONG-SUM"
    assert "wrong all_reduce sum" in v.message and "(2, 2097152), (3, 2097152)" in v.message
    assert "intermittent wrong all_reduce sum" in v.message and "ALLREDUCE-INIT-HANG" not in str(v.evidence)


def test_wrong_sum_reproduced_on_one_node_is_that_nodes_fault():
    runs = AnalysedRuns(lambda p, call: ("b",) if "b" in p.nodes else ())
    diag = diagnose(plan(("a", "b", "c")), {}, 240, run=runs)
    assert [(f.kind, f.nodes) for f in diag.findings] == [("node", ("b",))]
    verdicts = conclude(diag, {}, 0.1)
    assert [(v.status, v.node, v.remediation) for v in verdicts] == [
        (Status.FAIL, None, "ALLREDUCE-NODE-FAULT"), (Status.FAIL, "b", "ALLREDUCE-NODE-FAULT")]
    assert "wrong all_reduce sum" in verdicts[1].message and "(0, 2097152)" in verdicts[1].message


def test_conclude_never_warns_on_a_run_with_wrong_sums():
    full = Outcome(label="full", run_id="r", nodes=["a", "b"], world=2, ok=False, wall_s=5.0, stage="sweep",
                   wrong=[{"rank": 1, "bytes": 4096, "wrong": 3, "sample": 0.0, "expected": 3.0}])
    diag = SimpleNamespace(final=full, attempts=[full], subruns=[], elapsed_s=5.0,
                           findings=[Finding("intermittent", ("a", "b"), "intermittent")])
    [v] = conclude(diag, {}, 0.1)
    assert (v.status, v.remediation) == (Status.FAIL, "ALLREDUCE-WRONG-SUM") and "(1, 4096)" in v.message
    diag.findings = []  # hierarchy off
    [v] = conclude(diag, {}, 0.1)
    assert (v.status, v.remediation) == (Status.FAIL, "ALLREDUCE-WRONG-SUM")


def test_deadline_too_short_for_one_run_is_a_param_error():
    text = INVENTORY.replace("  container: k3ep16\n", "  container: k3ep16\n  checks: {allreduce-probe: "
                             "{deadline_s: 20}}\n")
    with pytest.raises(InventoryError, match=re.escape(f"deadline_s: expected a number in [{MIN_DEADLINE_S:g}, ")):
        parse_inventory(text, registry=REGISTRY)
    runs = FakeRuns()  # the minimum itself runs the full probe, however far the clock moved since the start
    diagnose(plan(), {}, MIN_DEADLINE_S, run=runs, clock=iter(range(0, 100, 1)).__next__)
    assert [c[0][0] for c in runs.calls] == ["full"]


class ScriptedNodes:
    """Transports whose nodes answer the probe as scripted: each node's transcript after its delay, or what it
    had printed by then (its agent start) when a cleanup came first. Records when each cleanup came."""

    def __init__(self, script):
        import threading

        self.script, self.cleaned, self.started = script, {}, time.monotonic()
        self.stops = {node: threading.Event() for node in script}

    def transport(self, node):
        def run(command, timeout_s, stdin=None):
            if "--cleanup" in command:
                self.cleaned.setdefault(node, round(time.monotonic() - self.started, 2))
                self.stops[node].set()
                return SimpleNamespace(rc=0, stdout=line(ev="cleanup", killed=[], left=[]) + "\n", stderr="",
                                       timed_out=False)
            delay, ranks, body, rc = self.script[node]
            lines = [line(ev="agent", node=node, ranks=list(ranks), pid=1)]
            if self.stops[node].wait(delay):
                return SimpleNamespace(rc=-9, stdout="\n".join(lines) + "\n", stderr="", timed_out=False)
            return SimpleNamespace(rc=rc, stdout="\n".join(lines + body) + "\n", stderr="", timed_out=False)
        return SimpleNamespace(run=run)


def started_then(rank, *ending):
    return [line(ev="begin", rank=rank, stage="start"), line(ev="end", rank=rank, stage="start", dur=1.0),
            line(ev="begin", rank=rank, stage="rendezvous"), *ending]


WATCHDOG = "stage deadline of 30s exceeded (rank watchdog)"


def test_a_node_that_only_ran_out_of_time_leaves_the_others_time_to_say_so(monkeypatch):
    """Ranks waiting on one stopped rank all reach their deadline: the first node to say so must not get
    the others cleaned up before they say it too, or they read as hung with the stopped one."""
    from k3doctor.probes import allreduce

    monkeypatch.setattr(allreduce, "PEERS_GRACE_S", 1.5)
    nodes = ScriptedNodes({
        "a": (0.05, [0], started_then(0, line(ev="fail", rank=0, stage="rendezvous", error=WATCHDOG,
                                                by="watchdog")), 1),
        "b": (0.9, [1], started_then(1, line(ev="killed", rank=1, stage="rendezvous", by="agent",
                                              why="stage deadline")), 1),
        "c": (0.4, [2], started_then(2, line(ev="fail", rank=2, stage="rendezvous", error=WATCHDOG,
                                              by="watchdog")), 1)})
    [out] = allreduce.launch([plan(nodes=("a", "b", "c"), ranks=1)], {n: nodes.transport(n) for n in "abc"})
    assert out.stage == "rendezvous" and out.missing == [1] and out.missing_nodes == ["b"], out.describe()
    assert set(nodes.cleaned) == {"a", "b", "c"} and min(nodes.cleaned.values()) >= 0.9  # only the final ones


def test_a_node_whose_rank_crashed_gets_the_others_cleaned_up_at_once():
    from k3doctor.probes import allreduce

    nodes = ScriptedNodes({
        "a": (0.05, [0], started_then(0, line(ev="fail", rank=0, stage="rendezvous", error="RuntimeError: boom")), 1),
        "b": (20, [1], started_then(1), 0)})
    began = time.monotonic()
    [out] = allreduce.launch([plan(nodes=("a", "b"), ranks=1)], {n: nodes.transport(n) for n in "ab"})
    assert time.monotonic() - began < 5 and nodes.cleaned["b"] < 1.0, nodes.cleaned
    assert out.errors[0] == "[rendezvous] RuntimeError: boom"
