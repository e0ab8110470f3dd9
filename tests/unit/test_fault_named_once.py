"""A fault is named once, where it is (issue 32 item 3): what only follows from it says so and steps aside
(k3doctor.judging.causes). The results are shaped as the checks give them (message, code, evidence keys); the rig
shows the same from the real checks (tests/e2e/test_fault_named_once.py)."""
from k3doctor.judging.causes import explained
from k3doctor.results import Result, Status


def env_versions_fail(node, variable="NCCL_MNNVL_ENABLE"):
    return Result("env-versions", node, Status.FAIL, f"container k3ep16: {variable} is unset and this RCCL predates "
                  "auto-MNNVL [ENV-MNNVL-UNSET; ...]", remediation="ENV-RCCL-FABRIC",
                  evidence={"rule": "ENV-MNNVL-UNSET", "variable": variable})


def drift(node, variable="NCCL_MNNVL_ENABLE"):
    return Result("launch-config", node, Status.WARN, f"{variable} differs between nodes with no majority: ...",
                  remediation="LAUNCH-DRIFT", evidence={"variable": variable})


def test_an_env_variable_failed_on_a_node_is_not_said_again_as_drift():
    """Before: the FAIL on ct14 and again the cluster WARN "differs between nodes with no majority" (2 nodes), or the
    odd node's own drift WARN (a majority)."""
    got = explained([env_versions_fail("ct14"), drift(None), drift("ct14")])
    assert [(r.check, r.node, r.status) for r in got] == [
        ("env-versions", "ct14", Status.FAIL), ("launch-config", None, Status.SKIP),
        ("launch-config", "ct14", Status.SKIP)]
    assert got[1].message.startswith("follows from env-versions on ct14: NCCL_MNNVL_ENABLE differs between nodes")
    assert got[1].evidence["own_finding"] == "WARN LAUNCH-DRIFT"


def test_drift_of_another_variable_or_on_another_node_is_its_own_finding():
    other_variable, other_node = drift(None, "AITER_LOG_LEVEL"), drift("ct17")
    got = explained([env_versions_fail("ct14"), other_variable, other_node])
    assert [r.status for r in got] == [Status.FAIL, Status.WARN, Status.WARN]


def orphaned(node, gpu):
    return Result("rack-free", node, Status.FAIL, f"rocm-smi GPU[{gpu}] has 14 % VRAM allocated (max_vram_pct 10) and "
                  "no process owns it: an orphaned KFD context holds it (§29)", gpu=gpu, remediation="RACK-ORPHANED-VRAM",
                  evidence={"GPU Memory Allocated (VRAM%)": 14.0})


def outlier(node, gpu, code="PEER-VRAM-OUTLIER"):
    return Result("peer-outliers", node, Status.WARN, f"VRAM in use at idle: ... {node} card{gpu} holds 60.17 GiB",
                  gpu=gpu, remediation=code, evidence={"bytes": 64606617600})


def test_zombie_vram_on_one_gpu_is_named_by_rack_free_and_peer_outliers_steps_aside():
    """Before: rack-free's FAIL and again peer-outliers' "VRAM in use at idle" WARN on the same GPU."""
    got = explained([orphaned("ct14", 2), outlier("ct14", 2), outlier("ct14", 1), outlier("ct13", 2),
                     outlier("ct14", 2, "PEER-OUTLIER")])
    assert [(r.node, r.gpu, r.status) for r in got] == [
        ("ct14", 2, Status.FAIL), ("ct14", 2, Status.SKIP), ("ct14", 1, Status.WARN), ("ct13", 2, Status.WARN),
        ("ct14", 2, Status.WARN)]  # another GPU, another node, a clock outlier on that GPU: findings of their own
    assert got[1].message.startswith("follows from rack-free on ct14 gpu2: VRAM in use at idle")
