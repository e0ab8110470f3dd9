"""Each fault once, the cause first (issue 22 §4): consequences of a cause in causes.EXPLAINS step aside."""
from k3rig import server_log as L

from k3doctor.judging.causes import explained
from k3doctor.results import Result, Status
from k3doctor.triage import judge_all, most_likely
from k3doctor.triage.rank_logs import Layout


def test_an_unconfigured_card_explains_its_fabric_domain_and_the_import_timeouts_put_on_it():
    cause = Result("ualink-state", "ct16", Status.FAIL, "card2 stuck unconfigured", gpu=2,
                   remediation="UALINK-STUCK-UNCONFIGURED")
    fabric = Result("fabric-domain", "ct16", Status.FAIL, "PPOD_ID all-zero", gpu=2,
                    remediation="FABRIC-NOT-CONFIGURED")
    imports = Result("kernel-health", "ct16", Status.FAIL, "IMPORT: NPA-RSP timeout from remote AccId:10", gpu=2,
                     remediation="FABRIC-IMPORT-FAILED", evidence={"seen_in": "ct13"})
    other_gpu = Result("fabric-domain", "ct16", Status.FAIL, "PPOD_ID all-zero", gpu=1,
                       remediation="FABRIC-NOT-CONFIGURED")
    got = explained([fabric, cause, imports, other_gpu])
    assert [(r.check, r.gpu, r.status) for r in got] == [
        ("fabric-domain", 2, Status.SKIP), ("ualink-state", 2, Status.FAIL), ("kernel-health", 2, Status.SKIP),
        ("fabric-domain", 1, Status.FAIL)]
    assert got[0].message == "follows from ualink-state on ct16 gpu2: PPOD_ID all-zero"
    assert got[0].remediation is None and got[0].evidence["own_finding"] == "FAIL FABRIC-NOT-CONFIGURED"
    assert got[2].evidence["seen_in"] == "ct13" and got[2].evidence["follows_from"] == "ualink-state on ct16 gpu2"


def test_a_cluster_row_is_explained_by_the_node_finding():
    cluster = Result("allreduce-probe", None, Status.FAIL, "all_reduce probe hung in rendezvous: ranks 0-15 waited",
                     remediation="ALLREDUCE-NODE-FAULT")
    node = Result("allreduce-probe", "ct17", Status.FAIL, "ct17 fails alone", remediation="ALLREDUCE-NODE-FAULT")
    got = explained([cluster, node])
    assert [r.status for r in got] == [Status.SKIP, Status.FAIL]
    assert got[0].message.startswith("follows from allreduce-probe on ct17: all_reduce probe hung")
    assert explained([cluster]) == [cluster]  # nothing names a node: the cluster row is the finding


def test_triage_leads_with_the_kv_collision_not_the_negative_budget():
    logs = L.node_logs(ranks={9: {"kv": "-4.67"}}, extra={9: L.KV_COLLISION})
    texts = {f"ct{13 + i}.log": "\n".join(lines) + "\n" for i, lines in logs.items()}
    layout = Layout(nodes=("ct13", "ct14", "ct16", "ct17"), per_node=4)
    results = judge_all(texts, {}, layout, now=None, problems={})
    assert most_likely(results).remediation == "TRIAGE-KV-COLLISION"
    [negative] = [r for r in results if r.evidence.get("own_finding") == "FAIL TRIAGE-KV-NEGATIVE"]
    assert negative.status == Status.SKIP and negative.message.startswith("follows from triage-kv on ct16 gpu1")
