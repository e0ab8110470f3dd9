"""A fault is named once, where it is (issue 32 item 3), end to end: the real CLI over real SSH and dockerd. What only
follows from the fault says so and steps aside (a SKIP "follows from <check> on <where>", k3doctor.judging.causes).

Two nodes (ct13, ct14): with one node lacking a variable there is no majority, the case that gave a second, cluster
WARN; ct14 card2 holding VRAM with no process is a GPU both rack-free and peer-outliers see. The rack is this
module's own: its scenarios recreate our container.
"""
import pytest

from tests.conftest import private_rack
from tests.e2e.cli import k3json

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def rack(tmp_path_factory):
    yield from private_rack(tmp_path_factory, "named-once", nodes=2)


def not_passed(doc):
    return sorted((r["check"], r["node"] or "cluster", r["gpu"], r["status"]) for r in doc["results"]
                  if r["status"] != "PASS")


def test_a_healthy_pair_is_quiet(rack):
    rack.apply("healthy")
    rc, doc = k3json("check", "--nodes", rack.inventory_path, "--only",
                     "env-versions,launch-config,rack-free,peer-outliers")
    assert (rc, not_passed(doc)) == (0, []), doc


def test_nccl_mnnvl_missing_on_one_node_is_its_fail_and_the_drift_steps_aside(rack):
    """Before: env-versions' FAIL on ct14 and again launch-config's cluster WARN "NCCL_MNNVL_ENABLE differs between
    nodes with no majority"."""
    rack.apply("launch-env-mnnvl-missing")  # ct14
    rc, doc = k3json("check", "--nodes", rack.inventory_path, "--only", "env-versions,launch-config")
    assert rc == 1 and not_passed(doc) == [("env-versions", "ct14", None, "FAIL"),
                                           ("launch-config", "cluster", None, "SKIP")], doc
    [fault] = [r for r in doc["results"] if r["status"] == "FAIL"]
    assert fault["evidence"]["rule"] == "ENV-MNNVL-UNSET" and "NCCL_MNNVL_ENABLE is unset" in fault["message"]
    [aside] = [r for r in doc["results"] if r["status"] == "SKIP"]
    assert aside["message"].startswith("follows from env-versions on ct14: NCCL_MNNVL_ENABLE differs between nodes")
    assert aside["evidence"]["own_finding"] == "WARN LAUNCH-DRIFT"


def test_zombie_vram_on_one_gpu_is_rack_frees_and_the_peer_outlier_steps_aside(rack):
    """Before: rack-free's FAIL (VRAM held with no process) and again peer-outliers' "VRAM in use at idle" WARN."""
    rack.apply("gpu-orphaned-vram")  # ct14 card2: 60 GiB, no process
    rc, doc = k3json("check", "--nodes", rack.inventory_path, "--only", "rack-free,peer-outliers")
    assert rc == 1 and not_passed(doc) == [("peer-outliers", "ct14", 2, "SKIP"),
                                           ("rack-free", "ct14", 2, "FAIL")], doc
    [fault] = [r for r in doc["results"] if r["status"] == "FAIL"]
    assert fault["remediation"] == "RACK-ORPHANED-VRAM" and "no process owns it" in fault["message"]
    [aside] = [r for r in doc["results"] if r["status"] == "SKIP"]
    assert aside["message"].startswith("follows from rack-free on ct14 gpu2: VRAM in use at idle: 7 of 8 GPUs")
    assert aside["evidence"]["own_finding"] == "WARN PEER-VRAM-OUTLIER"
