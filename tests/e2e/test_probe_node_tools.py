"""A node's own `tools:` override reaches the ualoe-fabric probe end to end (it used to read the cluster's only)."""
import pytest
import yaml

from tests.e2e import cli

pytestmark = pytest.mark.e2e

PROBE = "ualoe-fabric"


def test_one_nodes_own_ubench_dir_is_the_one_its_tools_run_from(rig, tmp_path):
    rig.apply("healthy")
    inventory = yaml.safe_load(rig.inventory_path.read_text())
    moved = "/nonexistent/ubench-ct17/build"  # only ct17 says its build lives elsewhere (and it is not there)
    for node in inventory["nodes"]:
        if node["name"] == "ct17":
            node["tools"] = {"ubench_dir": moved}
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    rc, doc = cli.k3json("check", "--nodes", path, "--only", PROBE, timeout=240)
    results = [r for r in doc["results"] if r["check"] == PROBE]
    assert rc == 2, results  # INCONCLUSIVE on ct17: a missing build says nothing about the fabric
    bad = [r for r in results if r["status"] != "PASS"]
    assert [(r["node"], r["status"]) for r in bad] == [("ct17", "ERROR"), ("ct17", "ERROR")]
    assert all(f"ubench not runnable on ct17: {moved}/ualoe_p2p.exe was not found" in r["message"] for r in bad)
    assert {r["evidence"]["pair"] for r in bad} == {"ct16<->ct17", "ct17<->ct13"}
    good = [r for r in results if r["status"] == "PASS"]  # the cluster's build still serves every other node
    assert sorted(r["evidence"]["pair"] for r in good) == ["ct13<->ct14"] * 2 + ["ct14<->ct16"] * 2
