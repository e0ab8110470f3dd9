"""Reference §31.3's passive field facts end to end: the real CLI over real SSH reads each node's kernel and GPU
sysfs (the rig's fake hardware boundary, k3rig.field) and names the one faulty node and GPU; a healthy rack
is quiet. `kernel.numa_balancing` is a per-node stand-in file (each real node has its own kernel)."""
import pytest

from tests.e2e.cli import k3, k3json

pytestmark = pytest.mark.e2e

NODES = ("ct13", "ct14", "ct16", "ct17")
CHECKS = ("numa-balancing", "gpu-pcie-link", "gpu-ras-counts")


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
