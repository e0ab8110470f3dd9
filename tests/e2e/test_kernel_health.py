"""kernel-health end to end: kernel-log faults written into one node's (fake) dmesg, judged by the real CLI
over real SSH; each is caught on exactly the faulty node and card, and the §10 noise gives nothing."""
import pytest

from tests.e2e.cli import k3, k3json

pytestmark = pytest.mark.e2e

NODES = ("ct13", "ct14", "ct16", "ct17")


def kernel_findings(rig):
    """(rc, sorted (node, gpu, status, rule, remediation) of every non-PASS result, the report)."""
    rc, doc = k3json("check", "--nodes", rig.inventory_path, "--only", "kernel-health")
    found = sorted((r["node"], -1 if r["gpu"] is None else r["gpu"], r["status"], r["remediation"],
                    *sorted(r["evidence"].get("rules", ()))) for r in doc["results"] if r["status"] != "PASS")
    return rc, found, doc


def passing(doc):
    return {r["node"] for r in doc["results"] if r["status"] == "PASS"}


@pytest.mark.parametrize("scenario, expected", [
    ("kernel-fabric-remote", [  # seen in ct13's log, AccId 62 = ct16 card1 (its sysfs accel_id)
        ("ct16", 1, "FAIL", "FABRIC-IMPORT-FAILED", "KERNEL-HELLO-SEND-FAILED", "KERNEL-IMPORT-SETUP-FAILED",
         "KERNEL-NPA-RSP-TIMEOUT")]),
    ("kernel-fabric-local", [
        ("ct14", 3, "FAIL", "FABRIC-IMPORT-FAILED", "KERNEL-LSDMA-PIO-COPY", "KERNEL-LSDMA-PIO-ERROR",
         "KERNEL-XA-IMPORT-FAILED")]),
    ("kernel-mes-wedged", [
        ("ct14", -1, "FAIL", "GPU-WEDGED", "KERNEL-SDMA-FENCE-TIMEOUT"),
        ("ct14", 1, "FAIL", "GPU-WEDGED", "KERNEL-MES-REMOVE-QUEUE", "KERNEL-MES-RING-FULL")]),
    ("kernel-page-fault", [("ct16", 2, "FAIL", "GPU-PAGE-FAULT", "KERNEL-PAGE-FAULT")]),
    ("kernel-gpu-reset", [
        ("ct17", 0, "FAIL", "GPU-HUNG-RESET", "KERNEL-GPU-RESET", "KERNEL-RING-TIMEOUT", "KERNEL-VRAM-LOST")]),
    ("kernel-ras", [
        ("ct13", 3, "FAIL", "GPU-RAS-ERROR", "KERNEL-ACA-UNCORRECTABLE", "KERNEL-RAS-BAD-PAGES", "KERNEL-RAS-POISON",
         "KERNEL-RAS-UNCORRECTABLE")]),
    ("kernel-host-crash", [("ct14", -1, "FAIL", "HOST-CRASHED", "KERNEL-BERT-FATAL")]),
    ("kernel-hard-hang", [  # §31.3: the MI325X hard hang's five wordings are one finding on the card
        ("ct16", 2, "FAIL", "GPU-HARD-HANG", "KERNEL-DEVICE-LOST", "KERNEL-KFD-QUIESCE-FAILED",
         "KERNEL-KIQ-FENCE-TIMEOUT", "KERNEL-RAS-DEVICE-DISABLED", "KERNEL-SMU-RESPONSE-LOST")]),
    ("kernel-ras-threshold", [("ct17", 1, "FAIL", "GPU-RAS-ERROR", "KERNEL-RAS-RECORDS-THRESHOLD")]),
    ("kernel-ualink-init", [
        ("ct16", 0, "WARN", "UALINK-INIT-FAILED", "KERNEL-UALINK-DEACTIVATED"),
        ("ct16", 3, "FAIL", "UALINK-INIT-FAILED", "KERNEL-UALINK-SW-INIT")]),
])
def test_each_kernel_fault_is_caught_on_its_node_and_card_only(rig, scenario, expected):
    rig.apply(scenario)
    rc, found, doc = kernel_findings(rig)
    assert rc == 1 and found == expected, doc
    faulty = {node for node, *_ in expected}
    assert passing(doc) == set(NODES) - faulty


def test_fabric_fault_names_the_node_whose_log_showed_it(rig):
    rig.apply("kernel-fabric-remote")
    _, _, doc = kernel_findings(rig)
    [npa] = [r for r in doc["results"] if r["status"] == "FAIL"]
    assert "remote AccId:62 = ct16 card1 (sysfs accel_id), seen in ct13's kernel log" in npa["message"]
    assert npa["evidence"]["rule"] == "KERNEL-NPA-RSP-TIMEOUT" and npa["evidence"]["seen_in"] == "ct13"
    assert npa["evidence"]["rules"] == {"KERNEL-NPA-RSP-TIMEOUT": 2, "KERNEL-HELLO-SEND-FAILED": 1,
                                        "KERNEL-IMPORT-SETUP-FAILED": 1}


def test_noise_of_section_10_gives_no_finding_and_the_rack_is_ready(rig):
    rig.apply("kernel-healthy-noise")
    rc, found, doc = kernel_findings(rig)
    assert (rc, found, passing(doc)) == (0, [], set(NODES))
    rc, out, err = k3("check", "--nodes", rig.inventory_path)  # the whole fast tier, kernel-health in it
    assert rc == 0, out + err
    assert "kernel-health" in out and out.rstrip().splitlines()[-1].startswith("READY TO LAUNCH")
    assert not any(word in out for word in ("FAIL", "WARN", "ERROR")), out


def test_a_site_can_silence_a_rule_and_explain_every_rule(rig):
    rig.apply("kernel-ualink-init")
    rc, doc = k3json("check", "--nodes", rig.inventory_path, "--only", "kernel-health",
                     "--set", "kernel-health.silence=[KERNEL-UALINK-DEACTIVATED]")
    assert [(r["node"], r["gpu"], r["evidence"]["rule"]) for r in doc["results"] if r["status"] != "PASS"] == [
        ("ct16", 3, "KERNEL-UALINK-SW-INIT")]
    rc, out, _ = k3("explain", "KERNEL-NPA-RSP-TIMEOUT")
    assert rc == 0 and "§8" in out and "ualink/accel_id" in out


def test_an_unknown_amdgpu_error_line_is_one_warn_on_its_node_and_card(rig):
    """Issue 21 item 4: an err-level amdgpu line no rule knows is one WARN (per node and card, per message shape),
    read through the node's own `dmesg --level=err,crit,alert,emerg`; the rest of the rack stays quiet."""
    rig.apply("kernel-unknown-error")
    rc, found, doc = kernel_findings(rig)
    assert found == [("ct14", 1, "WARN", "KERNEL-UNKNOWN-LINE", "KERNEL-UNKNOWN-ERROR")], doc
    [warn] = [r for r in doc["results"] if r["status"] == "WARN"]
    assert "XGMI: link" in warn["message"] and warn["evidence"]["details"]["count"] == 3
    assert passing(doc) == set(NODES) - {"ct14"}
    rc, doc = k3json("check", "--nodes", rig.inventory_path, "--only", "kernel-health",
                     "--set", "kernel-health.silence=['XGMI: link \\d+ training stalled']")
    assert [r["status"] for r in doc["results"]] == ["PASS"] * 4, doc


def test_retired_hbm_pages_read_in_band_warn_on_that_node_and_gpu_only(rig):
    """§29/§30: amd-smi bad-pages (run on each node over SSH) lists ct17 card 2's two retired pages; the other
    GPUs print `No bad pages found.` and pass."""
    rig.apply("gpu-bad-pages")
    rc, doc = k3json("check", "--nodes", rig.inventory_path, "--only", "gpu-bad-pages")
    bad = [(r["node"], r["gpu"], r["status"], r["remediation"]) for r in doc["results"] if r["status"] != "PASS"]
    assert bad == [("ct17", 2, "WARN", "GPU-BAD-PAGES")], doc
    assert "2 retired HBM page(s)" in next(r["message"] for r in doc["results"] if r["status"] == "WARN")
    assert passing(doc) == set(NODES) - {"ct17"}
