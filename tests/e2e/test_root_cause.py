"""Root cause first, quiet when healthy (issue 9 §5), end to end: the real CLI over real SSH and dockerd.

A node without amdgpu is one fault: its FAIL is the only finding that is not a SKIP saying which
prerequisite failed. The recipe's validated B0 configuration (populated prefix, exports still set)
is quiet before launch; only translations that actually happened warn. The rack is this module's
own: it recreates our container (environment, log) and reads rack-free, which another module's
foreign containers would (correctly) keep failing for 30 minutes.
"""
import pytest

from tests.conftest import private_rack
from tests.e2e.cli import k3, k3json

pytestmark = pytest.mark.e2e

NOT_EVALUATED = "not evaluated: amdgpu-driver failed"


@pytest.fixture(scope="module")
def rack(tmp_path_factory):
    yield from private_rack(tmp_path_factory, "root-cause")


def not_passed(doc):
    return sorted((r["check"], r["node"], r["status"]) for r in doc["results"] if r["status"] != "PASS")


def test_a_node_without_amdgpu_has_one_fail_and_every_dependant_says_why_it_was_not_evaluated(rack):
    rack.apply("amdgpu-not-loaded")  # ct17
    rc, out, err = k3("check", "--nodes", rack.inventory_path)
    lines = [line for line in out.splitlines() if line.startswith(("FAIL", "ERROR", "WARN", "SKIP"))]
    assert rc == 1, err
    assert lines[0] == "FAIL  amdgpu-driver ct17: /dev/kfd does not exist: amdgpu is not loaded  [AMDGPU-NOT-LOADED]"
    assert sorted(lines[1:]) == [f"SKIP  {check} ct17: {NOT_EVALUATED}" for check in
                                 ("fabric-domain", "gpu-bad-pages", "gpu-cper-fatal", "gpu-inventory",
                                  "gpu-partitions", "gpu-pcie-link", "gpu-ras-counts", "hbm-uniform", "ifoe-bound")] + [
        f"SKIP  rack-free ct17: GPU processes and VRAM {NOT_EVALUATED}", f"SKIP  ualink-state ct17: {NOT_EVALUATED}"]
    assert out.rstrip().splitlines()[-1].endswith("see `k3doctor explain AMDGPU-NOT-LOADED`")

    rc, doc = k3json("check", "--nodes", rack.inventory_path)
    assert not_passed(doc) == [("amdgpu-driver", "ct17", "FAIL"), *(
        (c, "ct17", "SKIP") for c in ("fabric-domain", "gpu-bad-pages", "gpu-cper-fatal", "gpu-inventory",
                                      "gpu-partitions", "gpu-pcie-link", "gpu-ras-counts", "hbm-uniform", "ifoe-bound",
                                      "rack-free", "ualink-state"))]
    judged = {(r["check"], r["node"]) for r in doc["results"] if r["status"] == "PASS"}
    for node in ("ct13", "ct14", "ct16"):  # the healthy nodes are judged as usual, also by the cluster checks
        assert {("ualink-state", node), ("gpu-inventory", node), ("rack-free", node), ("fabric-domain", node)} <= judged


def test_the_validated_b0_configuration_is_quiet_before_launch(rack):
    rack.apply("rocjitsu-b0-validated")  # every node: populated prefix, HSA_TOOLS_LIB + LD_LIBRARY_PATH set
    rc, doc = k3json("check", "--nodes", rack.inventory_path)
    assert (rc, not_passed(doc)) == (0, [])
    messages = {r["node"]: r["message"] for r in doc["results"] if r["check"] == "rocjitsu-store"}
    assert sorted(messages) == ["ct13", "ct14", "ct16", "ct17"]
    assert all("prefix active and no translation in the container log: the validated B0 signature" in m
               for m in messages.values()), messages


def test_translations_that_happened_on_b0_warn_on_exactly_that_node(rack):
    rack.apply("rocjitsu-b0-translating")  # ct17's container log: two `outcome=translated` lines
    rc, doc = k3json("check", "--nodes", rack.inventory_path, "--only", "rocjitsu-store")
    [warned] = [r for r in doc["results"] if r["status"] != "PASS"]
    assert rc == 0 and (warned["node"], warned["status"], warned["remediation"]) == ("ct17", "WARN", "ROCJITSU-ON-B0")
    assert "2 `outcome=translated` line(s) in the container log" in warned["message"]
