"""Partial or odd tool output end to end (issue 9 §2): the real CLI over real SSH on the rig.

rocm-smi cut off on one node is an ERROR of rack-free on exactly that node, never a PASS from
the GPUs it did print; a /dev/shm name with a TAB is listed, and removed by --fix, whole.
"""
import pytest

from tests.e2e.cli import k3json

pytestmark = pytest.mark.e2e


def findings(doc):
    return sorted((r["check"], r["node"], r["gpu"], r["status"]) for r in doc["results"] if r["status"] != "PASS")


def messages(doc, name, node):
    return [r["message"] for r in doc["results"] if r["check"] == name and r["node"] == node]


def test_rocm_smi_cut_off_is_an_error_on_its_node_only(rig):
    rig.apply("rocm-smi-truncated")  # ct14
    rc, doc = k3json("check", "--nodes", rig.inventory_path, "--only", "rack-free")
    assert rc == 2 and findings(doc) == [("rack-free", "ct14", None, "ERROR")] * 2
    memuse, pids = sorted(messages(doc, "rack-free", "ct14"))
    assert memuse.startswith("rocm-smi --showmemuse not readable") and "cut off" in memuse
    assert pids.startswith("rocm-smi --showpids not readable") and "cut off" in pids


def test_fix_removes_a_segment_with_a_tab_in_its_name_whole(rig):
    rig.apply("stale-shm-tab-name")  # ct17
    ct17 = rig.nodes[3]
    rc, doc = k3json("check", "--nodes", rig.inventory_path, "--only", "shm-clean")
    assert findings(doc) == [("shm-clean", "ct17", None, "FAIL")]
    assert "'nccl-a\\tb'" in messages(doc, "shm-clean", "ct17")[0]
    rc, doc = k3json("check", "--nodes", rig.inventory_path, "--only", "shm-clean", "--fix")
    assert "--fix removed '/dev/shm/nccl-a\\tb'" in messages(doc, "shm-clean", "ct17")
    assert (rc, findings(doc)) == (0, [])
    assert sorted(p.name for p in (ct17.root / "dev/shm").iterdir()) == ["sem.k3-keep"]
