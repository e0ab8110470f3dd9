"""Reference §31.3's passive field facts end to end: the real CLI over real SSH reads each node's kernel, GPU
sysfs, PCI config space, amd-smi and container (the rig's fake hardware boundary, k3rig.field) and names the one
faulty node and GPU; a healthy rack is quiet. `kernel.numa_balancing` and /sys/bus/pci/devices are per-node
stand-ins (each real node has its own kernel and PCI tree)."""
import pytest

from tests.e2e.cli import k3, k3json

pytestmark = pytest.mark.e2e

NODES = ("ct13", "ct14", "ct16", "ct17")
CHECKS = ("numa-balancing", "gpu-pcie-link", "gpu-ras-counts", "gpu-bad-pages", "env-versions",
          "aiter-jit-locks", "gpu-partitions", "gpu-cper-fatal", "pcie-acs")


def field_findings(rig, *args):
    rc, doc = k3json("check", "--nodes", rig.inventory_path, "--only", ",".join(CHECKS), *args)
    found = sorted((r["check"], r["node"], r["gpu"], r["status"], r["remediation"])
                   for r in doc["results"] if r["status"] != "PASS")
    return rc, found, doc


def test_a_healthy_rack_is_quiet(rig):
    rig.apply("healthy")
    rc, found, doc = field_findings(rig)
    assert (rc, found) == (0, []), doc
    assert {(r["check"], r["node"]) for r in doc["results"]} == {(c, n) for c in CHECKS for n in NODES}


@pytest.mark.parametrize("scenario, expected, rc", [
    ("numa-balancing-on", [("numa-balancing", "ct14", None, "WARN", "NUMA-BALANCING")], 0),
    ("pcie-link-downtrained", [("gpu-pcie-link", "ct16", 1, "WARN", "PCIE-LINK-DOWNTRAINED")], 0),
    ("ras-ue-count", [("gpu-ras-counts", "ct17", 0, "FAIL", "GPU-RAS-UE-COUNT")], 1),
    ("bad-pages-pending", [("gpu-bad-pages", "ct16", 3, "WARN", "GPU-BAD-PAGES")], 0),
    ("hip-past-rocr", [("env-versions", "ct14", None, "FAIL", "ENV-VISIBLE-DEVICES")], 1),
    ("torch-stale-lock", [("aiter-jit-locks", "ct13", None, "FAIL", "TORCH-STALE-LOCK")], 1),
    ("partition-half-applied", [("gpu-partitions", "ct17", 1, "FAIL", "GPU-PARTITION"),
                                ("gpu-partitions", "ct17", 3, "FAIL", "GPU-PARTITION")], 1),
    ("cper-fatal", [("gpu-cper-fatal", "ct16", 1, "FAIL", "GPU-CPER-FATAL")], 1),
    ("pcie-acs-srcvalid", [("pcie-acs", "ct14", None, "WARN", "PCIE-ACS-SRCVALID")], 0),
])
def test_each_field_fact_names_its_node_and_gpu_only(rig, scenario, expected, rc):
    rig.apply(scenario)
    got_rc, found, doc = field_findings(rig)
    assert found == expected, doc
    assert got_rc == rc


def test_correctable_ras_errors_rising_since_the_baseline_are_a_warn(rig, tmp_path):
    rig.apply("healthy")
    baseline = tmp_path / "baseline.yaml"
    rc, out, err = k3("baseline", "record", "--nodes", rig.inventory_path, "-o", baseline)
    assert rc == 0, out + err
    rig.apply("ras-ce-rising")
    _, found, doc = field_findings(rig)
    assert found == [], doc  # without a baseline a correctable count is no finding
    _, found, doc = field_findings(rig, "--baseline", baseline)
    assert found == [("gpu-ras-counts", "ct13", 3, "WARN", "GPU-RAS-CE-RISING")], doc
    [warned] = [r for r in doc["results"] if r["status"] == "WARN"]
    assert "rose from 0 (baseline) to 40" in warned["message"]


def test_bad_page_threshold_overridden_is_said_on_its_node_only(rig):
    """§31.3: bad_page_threshold -2 (mainline: threshold ignored) is an INFO on ct16's line, not a finding."""
    rig.apply("bad-pages-pending")
    _, _, doc = field_findings(rig)
    said = {r["node"]: r["message"] for r in doc["results"] if r["check"] == "gpu-bad-pages"}
    assert [n for n, m in said.items() if "bad_page_threshold" in m] == ["ct16"], doc
    assert "1 pending, 1 un-res HBM page(s) listed by ras/gpu_vram_bad_pages" in said["ct16"]
    assert "bad_page_threshold=-2 (the threshold ignored" in said["ct16"]


def test_a_fatal_cper_older_than_the_boot_is_said_not_judged(rig):
    """§31.3 (device-metrics-exporter #506/#507): ct14's 15 h old record is an INFO on its PASS line only."""
    rig.apply("cper-fatal")
    _, _, doc = field_findings(rig)
    said = {r["node"]: (r["status"], r["message"]) for r in doc["results"] if r["check"] == "gpu-cper-fatal"}
    assert said["ct14"][0] == "PASS" and "INFO: 1 fatal CPER record(s) older than the boot on GPU 2" in said["ct14"][1]
    assert [n for n, (_, m) in said.items() if "INFO" in m] == ["ct14"], doc
