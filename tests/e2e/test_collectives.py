"""allreduce-probe's two sweeps end to end on the simulated rack: all_reduce and the EP-shaped all-to-all.

The real CLI launches gloo ranks over SSH, one per node, on the host's python (the rig's
nodes share this machine's network, so the rendezvous at node 0's data-plane address is
real); gloo has no GPU events, so the rows are host-timed - the same code path as
nccl/RCCL with the timer swapped. Each all-to-all rank verifies the bytes it received.
"""

import pytest

from tests.e2e.cli import k3json

pytestmark = pytest.mark.e2e

PROBE = "allreduce-probe"
HOST = ["--set", f"{PROBE}.where=host", "--set", f"{PROBE}.ranks_per_node=1"]


def probe(rig, *args, hang=None):
    inventory = rig.hang_inventory(hang) if hang else rig.inventory_path  # k3rig.hang: the rig's drill
    rc, doc = k3json("check", "--nodes", inventory, "--only", PROBE, *HOST, *args, timeout=300)
    return rc, doc["results"]


def left_behind(rig, cluster_result):
    return {i: rig.pids_matching(f"k3probe:{i}") for i in cluster_result["evidence"]["run_ids"]
            if rig.pids_matching(f"k3probe:{i}")}


def test_healthy_rack_sweeps_both_collectives_verified_and_quiet(rig, torch_on_nodes):
    rig.apply("healthy")
    rc, results = probe(rig, "--set", f"{PROBE}.alltoall_splits=uneven")
    assert rc == 0, results
    assert [r for r in results if r["status"] in ("FAIL", "WARN", "ERROR")] == []
    [r] = [r for r in results if r["check"] == PROBE]
    ev = r["evidence"]
    assert r["status"] == "PASS" and ev["backend"] == "gloo" and ev["world"] == 4 and ev["timer"] == "host"
    assert "all_reduce and all-to-all over 4 rank(s)" in r["message"] and "data verified at 15 size(s)" in r["message"]
    # the EP-dispatch sizes of §19: 1..16 tokens at bf16 (14,336 B), fp8 (7,168 + 256), fp4 (3,584 + 256)
    shapes = [(row["shape"], row["bytes"]) for row in ev["alltoall"]]
    assert shapes == [(f"{t} tok {w}", t * b) for w, b in (("bf16", 14336), ("fp8", 7424), ("fp4", 3840))
                      for t in (1, 2, 4, 8, 16)]
    for row in ev["alltoall"]:  # nccl-tests' all-to-all bus bandwidth: algbw * (n-1)/n
        assert row["splits"] == "uneven" and row["time_us"] > 0
        assert row["busbw_gbs"] == pytest.approx(row["algbw_gbs"] * 0.75, rel=0.01, abs=0.002)
    for row in ev["sizes"]:
        assert row["busbw_gbs"] == pytest.approx(row["algbw_gbs"] * 1.5, rel=0.01, abs=0.002)
    assert set(ev["stage_s"]) == {"start", "rendezvous", "init", "warmup", "sweep", "alltoall"}
    assert left_behind(rig, r) == {}


def test_rank_hung_in_the_all_to_all_is_named_with_its_stage_and_node(rig, torch_on_nodes):
    rig.apply("healthy")
    hung = rig.nodes[2].name
    rc, results = probe(rig, "--set", f"{PROBE}.alltoall_s=8", "--set", f"{PROBE}.deadline_s=150",
                        hang=f"{hung}@alltoall")
    assert rc == 1, results
    mine = [r for r in results if r["check"] == PROBE]
    cluster = next(r for r in mine if r["node"] is None)
    ev = cluster["evidence"]
    # the node finding is the fault; the cluster row says it follows from it (issue 22 §4)
    assert cluster["status"] == "SKIP" and ev["own_finding"] == "FAIL ALLREDUCE-NODE-FAULT"
    assert cluster["message"].startswith(f"follows from {PROBE} on {hung}: ")
    assert ev["failed_stage"] == "alltoall" and ev["missing_ranks"] == [2] and ev["missing_nodes"] == [hung]
    assert "stopped in stage `alltoall`" in cluster["message"] and f"rank 2 ({hung}) never completed it" in \
        cluster["message"]
    assert len(ev["sizes"]) == 9  # the all_reduce sweep before it completed and was reported
    alone = {h["run"]: h for h in ev["hierarchy"]}[f"node {hung}"]
    assert alone["failed_stage"] == "alltoall" and alone["killed_ranks"] == [0]
    assert [(r["node"], r["status"]) for r in mine if r["node"] is not None] == [(hung, "FAIL")]
    assert [r for r in results if r["check"] != PROBE and r["status"] != "PASS"] == []
    assert left_behind(rig, cluster) == {}
