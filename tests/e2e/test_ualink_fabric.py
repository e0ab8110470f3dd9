"""ualink-state, baseline drift and fabric-domain end to end: the real CLI against the simulated rack."""
import time

import pytest
import yaml

from tests.e2e.cli import k3, k3json

pytestmark = pytest.mark.e2e

MINE = "ualink-state,fabric-domain"
NODES = ("ct13", "ct14", "ct16", "ct17")


def check(rig, *extra):
    return k3json("check", "--nodes", rig.inventory_path, "--only", MINE, *extra)


def findings(doc, check_name):
    """(node, gpu, status, remediation) of every non-PASS result of one check, sorted."""
    return sorted((r["node"], -1 if r["gpu"] is None else r["gpu"], r["status"], r["remediation"])
                  for r in doc["results"] if r["check"] == check_name and r["status"] != "PASS")


def passing_nodes(doc, check_name):
    return {r["node"] for r in doc["results"] if r["check"] == check_name and r["status"] == "PASS"}


@pytest.mark.parametrize("scenario", ["healthy", "healthy-old-layout", "healthy-stderr-noise",
                                      "healthy-amd-smi-list-json"])
def test_healthy_variants_pass_both_checks_on_every_gpu(rig, scenario):
    rig.apply(scenario)
    rc, doc = check(rig)
    assert rc == 0, doc
    assert findings(doc, "ualink-state") == [] and findings(doc, "fabric-domain") == []
    gpus = {(r["node"], r["gpu"]) for r in doc["results"] if r["check"] == "ualink-state"}
    assert gpus == {(n, g) for n in NODES for g in range(4)}
    assert passing_nodes(doc, "fabric-domain") == set(NODES)
    # §29: amd-smi 27.1's PHYSICAL_ACC_ID (bare list or gpu_data root) names the card sysfs accel_id names
    assert all("PHYSICAL_ACC_ID agrees with sysfs accel_id on 4 GPU(s)" in r["message"] for r in doc["results"]
               if r["check"] == "fabric-domain")
    assert {n["name"]: n["round_trips"] for n in doc["nodes"]} == {n: 1 for n in NODES}


def test_one_unconfigured_card_fails_on_that_card_only(rig):
    rig.apply("card-unconfigured")  # ct14 card1
    rc, doc = check(rig)
    assert rc == 1
    assert findings(doc, "ualink-state") == [("ct14", 1, "FAIL", "UALINK-NOT-ACTIVE")]
    (bad,) = [r for r in doc["results"] if r["status"] == "FAIL"]
    assert "card1 accel_state 'unconfigured'" in bad["message"] and "beyond the 60s grace" in bad["message"]
    assert findings(doc, "fabric-domain") == []


def test_odd_lane_bitmap_names_card_station_and_both_values(rig):
    rig.apply("lane-bitmap-mismatch")  # ct16 card2 ffffffffcfffffffff
    rc, doc = check(rig)
    assert rc == 1
    assert findings(doc, "ualink-state") == [("ct16", 2, "FAIL", "UALINK-LANES")] * 2
    messages = [r["message"] for r in doc["results"] if r["status"] == "FAIL"]
    assert ("card2 station_lane_en_bitmap ffffffffcfffffffff: half-enabled station(s) 8 reads 'c' "
            "(port 0 down, port 1 up)") in messages
    assert ("card2 station_lane_en_bitmap ffffffffcfffffffff differs from card0, card1, card3 "
            "(ffffffffffffffffff); station(s) 8 (f->c)") in messages
    assert findings(doc, "fabric-domain") == []


def test_stuck_unconfigured_signature_gets_its_own_remedy(rig):
    rig.apply("stuck-unconfigured")  # ct17, all four cards
    rc, doc = check(rig)
    assert rc == 1
    assert findings(doc, "ualink-state") == [("ct17", g, "FAIL", "UALINK-STUCK-UNCONFIGURED") for g in range(4)]
    assert all("waiting will not fix it" in r["message"] for r in doc["results"]
               if r["remediation"] == "UALINK-STUCK-UNCONFIGURED")
    # each card's missing fabric domain follows from its state: said once, at the cause (issue 22 §4)
    assert findings(doc, "fabric-domain") == [("ct17", g, "SKIP", None) for g in range(4)]
    assert [r["message"].split(":")[0] for r in doc["results"] if r["check"] == "fabric-domain"
            and r["status"] == "SKIP"] == [f"follows from ualink-state on ct17 gpu{g}" for g in range(4)]
    assert passing_nodes(doc, "fabric-domain") == {"ct13", "ct14", "ct16"}
    rc, out, _ = k3("explain", "UALINK-STUCK-UNCONFIGURED")
    assert rc == 0 and "rmmod amdgpu" in out and "ifoe" in out


@pytest.mark.parametrize("scenario, node, wrong", [
    ("ppod-mismatch", "ct16", "PPOD_ID 9b1f4e27-5c3a-4d88-b0e6-2f7a91c4d305 differs from the rack's "
                              "3e56c1d0-7a4b-4e21-9f3c-58d2b4a1878f (held by 12 of 16 GPUs)"),
    ("vpod-mismatch", "ct14", "VPOD_ID 3 differs from the rack's 2 (held by 12 of 16 GPUs)"),
])
def test_pod_mismatch_on_one_node_names_that_node_and_its_gpus(rig, scenario, node, wrong):
    rig.apply(scenario)
    rc, doc = check(rig)
    assert rc == 1
    assert findings(doc, "fabric-domain") == [(node, g, "FAIL", "FABRIC-DOMAIN-MISMATCH") for g in range(4)]
    assert {r["message"] for r in doc["results"] if r["status"] == "FAIL"} == {wrong}
    assert passing_nodes(doc, "fabric-domain") == set(NODES) - {node}
    assert findings(doc, "ualink-state") == []


@pytest.mark.parametrize("scenario, node", [("amd-smi-garbage", "ct14"), ("amd-smi-truncated", "ct17")])
def test_unusable_amd_smi_is_an_error_for_that_node_only(rig, scenario, node):
    rig.apply(scenario)
    rc, doc = check(rig)
    assert rc == 2 and doc["verdict"] == "INCONCLUSIVE"
    assert findings(doc, "fabric-domain") == [(node, -1, "ERROR", "FABRIC-AMDSMI-UNREADABLE")]
    assert passing_nodes(doc, "fabric-domain") == set(NODES) - {node}
    assert findings(doc, "ualink-state") == []


def test_hanging_amd_smi_is_killed_at_the_deadline_and_errors_that_node(rig):
    rig.apply("amd-smi-hang")  # ct16
    started = time.monotonic()
    rc, doc = check(rig, "--timeout", "3")
    took = time.monotonic() - started
    assert rc == 2
    assert findings(doc, "fabric-domain") == [("ct16", -1, "ERROR", "FABRIC-AMDSMI-UNREADABLE")]
    (hung,) = [r for r in doc["results"] if r["status"] == "ERROR"]
    assert hung["message"] == ("amd-smi fabric unusable (timed out and was killed); "
                               "fabric domain compared from sysfs only")
    assert passing_nodes(doc, "fabric-domain") == {"ct13", "ct14", "ct17"}
    assert findings(doc, "ualink-state") == []
    assert took < 30, f"the check took {took:.1f}s with --timeout 3"
    deadline = time.monotonic() + 5
    while rig.pids_matching("k3rig-hang") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert rig.pids_matching("k3rig-hang") == []


def record(rig, tmp_path):
    path = tmp_path / "baseline.yaml"
    rc, out, err = k3("baseline", "record", "--nodes", rig.inventory_path, "-o", path)
    assert rc == 0, out + err
    return path, yaml.safe_load(path.read_text())


def test_baseline_records_each_cards_readings(rig, tmp_path):
    rig.apply("healthy-old-layout")  # ct14 reads the older sysfs layout
    _, doc = record(rig, tmp_path)
    ct14 = doc["nodes"]["ct14"]["ualink-state"]
    assert ct14["boot_id"] == rig.nodes[1].state.boot_id
    assert ct14["cards"][0] == {"accel_id": 55, "local_accels": [55, 54, 53, 52],
                                "station_lane_en_bitmap": "ffffffffffffffffff", "link_type": "UALoE"}
    assert sorted(doc["nodes"]) == sorted(NODES)


def test_drift_after_a_reboot_fails_with_old_to_new(rig, tmp_path):
    rig.apply("healthy")
    path, _ = record(rig, tmp_path)
    rig.apply("reboot")  # ct14: new boot_id, card3 33ffffffffffffffff
    rc, doc = check(rig, "--baseline", path)
    assert rc == 1
    drift = [r for r in doc["results"] if r["remediation"] == "UALINK-DRIFT"]
    assert [(r["node"], r["gpu"], r["status"]) for r in drift] == [("ct14", 3, "FAIL")]
    assert drift[0]["message"].startswith("card3 station_lane_en_bitmap: ffffffffffffffffff -> 33ffffffffffffffff")
    old_boot = rig.nodes[1].state.boot_id
    assert "rebooted since the baseline: boot_id" in drift[0]["message"] and old_boot in drift[0]["message"]
    assert {r["node"] for r in doc["results"] if r["check"] == "ualink-state" and r["status"] != "PASS"} == {"ct14"}
    assert findings(doc, "fabric-domain") == []


def test_uniform_retrain_is_caught_only_by_the_baseline(rig, tmp_path):
    rig.apply("healthy")
    path, _ = record(rig, tmp_path)
    rig.apply("reboot-lanes-retrained")  # ct13: every card ffffffffffffffff00, identical across the node
    rc, doc = check(rig)
    assert rc == 0 and findings(doc, "ualink-state") == []
    rc, doc = check(rig, "--baseline", path)
    assert rc == 1
    assert findings(doc, "ualink-state") == [("ct13", g, "FAIL", "UALINK-DRIFT") for g in range(4)]
    notes = [r for r in doc["results"] if r["check"] == "ualink-state" and r["gpu"] is None]
    assert {(r["node"], r["status"]) for r in notes} == {("ct14", "PASS"), ("ct16", "PASS"), ("ct17", "PASS")}


def test_a_gpu_capped_below_its_peers_clock_is_named_against_the_rack(rig):
    """§29 (judge against peers): the top pp_dpm_sclk level read on every node over SSH; only a comparison across
    the nodes sees ct16 card1 at 1800 MHz where the 15 others reach 2400 MHz. The healthy rack agrees."""
    rig.apply("healthy")
    rc, doc = k3json("check", "--nodes", rig.inventory_path, "--only", "peer-outliers")
    assert rc == 0 and findings(doc, "peer-outliers") == [], doc
    [ok] = [r for r in doc["results"] if r["check"] == "peer-outliers"]
    assert "sclk top level (16 GPUs), mclk top level (16 GPUs)" in ok["message"]
    rig.apply("clock-capped")
    rc, doc = k3json("check", "--nodes", rig.inventory_path, "--only", "peer-outliers")
    assert findings(doc, "peer-outliers") == [("ct16", 1, "WARN", "PEER-OUTLIER")], doc
    [bad] = [r for r in doc["results"] if r["status"] == "WARN"]
    assert bad["message"].startswith("pp_dpm_sclk top level: 15 of 16 GPUs reach 2400 MHz, ct16 card1 reaches 1800 MHz")
