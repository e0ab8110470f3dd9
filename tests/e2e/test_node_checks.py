"""Node checks end to end (issue 3): the real CLI over real SSH and the nodes' real dockerd.

Each fault is caught on exactly the faulty node (and GPU); every other node passes. Docker
keeps recent events in the engine, so the foreign-container faults run on a rack of their
own: a foreign `create` would otherwise (correctly) keep failing rack-free for 30 minutes in
every later test of the session.
"""
import subprocess
import sys

import pytest
import yaml
from k3rig import Rig, missing_requirements

from tests.conftest import private_rack
from tests.e2e.cli import k3json

pytestmark = pytest.mark.e2e

MINE = ("amdgpu-driver", "ifoe-bound", "gpu-inventory", "hbm-uniform", "rack-free", "shm-clean", "rocjitsu-store",
        "patch-integrity")
NO_EVENTS = tuple(c for c in MINE if c != "rack-free")  # safe on the shared rack (see module doc)


def check(inventory, checks=NO_EVENTS, *extra):
    return k3json("check", "--nodes", inventory, "--only", ",".join(checks), *extra)


def findings(doc):
    """Every non-PASS result as (check, node, gpu, status, remediation), sorted."""
    return sorted((r["check"], r["node"], r["gpu"], r["status"], r["remediation"])
                  for r in doc["results"] if r["status"] != "PASS")


def messages(doc, name, node):
    return [r["message"] for r in doc["results"] if r["check"] == name and r["node"] == node]


def with_stepping(rig, tmp_path, node, stepping):
    inv = yaml.safe_load(rig.inventory_path.read_text())
    next(n for n in inv["nodes"] if n["name"] == node)["stepping"] = stepping
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(inv))
    return path


@pytest.fixture(scope="module")
def own_rack(tmp_path_factory):
    """A rack whose Docker engines have seen no foreign container before this module."""
    yield from private_rack(tmp_path_factory, "own-rack")


def test_healthy_rack_passes_every_node_check(own_rack):
    rc, doc = check(own_rack.inventory_path, MINE)
    assert (rc, findings(doc)) == (0, [])
    assert {(r["check"], r["node"]) for r in doc["results"]} >= {(c, n.name) for c in MINE if c != "hbm-uniform"
                                                                 for n in own_rack.nodes}


def test_gpu_process_is_caught_on_its_node_only(own_rack):
    own_rack.apply("gpu-process")  # ct13: pt_main_thread pid 1168514, 165 GiB on card0
    rc, doc = check(own_rack.inventory_path, MINE)
    assert rc == 1 and findings(doc) == [("rack-free", "ct13", None, "FAIL", "RACK-BUSY")]
    assert messages(doc, "rack-free", "ct13") == [
        "GPU process pid 1168514 pt_main_thread on 1 GPU(s) holds 165.2 GiB VRAM: the GPUs are in use"]


def test_a_gpu_busy_with_nothing_running_warns_on_that_gpu_alone(own_rack):
    """§29: 100 % gpu_busy_percent with no GPU process on the node is a stalled queue: a WARN on that card only
    (the healthy rig's cards read 0, so the read is exercised on every node)."""
    own_rack.apply("gpu-stalled-queue")  # before any foreign container's events reach this rack's engines
    rc, doc = check(own_rack.inventory_path, MINE)
    assert (rc, findings(doc)) == (0, [("rack-free", "ct14", 1, "WARN", "RACK-STALLED-QUEUE")])


def test_running_foreign_container_is_caught_on_its_node_only(own_rack):
    own_rack.apply("foreign-container-running")  # ct14: sglang-bench next to k3ep16
    rc, doc = check(own_rack.inventory_path, MINE)
    assert rc == 1 and findings(doc) == [("rack-free", "ct14", None, "FAIL", "RACK-BUSY")]
    [message] = messages(doc, "rack-free", "ct14")
    assert message.startswith("foreign container sglang-bench (lmsysorg/sglang:v0.5.3-rocm700-mi35x): state running")
    own_rack.apply("healthy")  # container gone, but its create/start stays in the engine's recent events
    rc, doc = check(own_rack.inventory_path, ("rack-free",))
    assert findings(doc) == [("rack-free", "ct14", None, "FAIL", "RACK-BUSY")]
    assert "(since removed)" in messages(doc, "rack-free", "ct14")[0]


def test_created_never_started_container_is_caught_on_its_node_only(tmp_path_factory):
    missing = missing_requirements()
    if missing:
        pytest.skip("simulated rack needs " + "; ".join(missing))
    # a short workdir: dockerd's containerd socket below it must fit the 108-byte unix socket path limit
    with Rig(tmp_path_factory.mktemp("rack"), scenario="foreign-container-created") as rack:  # ct16, created
        rc, doc = check(rack.inventory_path, MINE)
    assert rc == 1 and findings(doc) == [("rack-free", "ct16", None, "FAIL", "RACK-BUSY")]
    [message] = messages(doc, "rack-free", "ct16")
    assert "kimi-k3-dp8" in message and "created but never started" in message and "0 % GPU use" in message


def test_healthy_shared_rack_passes(rig):
    rig.apply("healthy")
    rc, doc = check(rig.inventory_path)
    assert (rc, findings(doc)) == (0, [])


@pytest.mark.parametrize("scenario, expected", [
    ("kfd-missing", [("amdgpu-driver", "ct17", None, "FAIL", "AMDGPU-NOT-LOADED"),  # the rest rests on it:
                     ("gpu-inventory", "ct17", None, "SKIP", None), ("hbm-uniform", "ct17", None, "SKIP", None),
                     ("ifoe-bound", "ct17", None, "SKIP", None)]),
    ("amdgpu-default-params", [("amdgpu-driver", "ct14", None, "FAIL", "AMDGPU-PARAMS")]),
    ("ifoe-not-loaded", [("amdgpu-driver", "ct16", None, "FAIL", "IFOE-NOT-LOADED"),
                         ("ifoe-bound", "ct16", None, "SKIP", None)]),  # follows from it, said once (§29)
    ("ifoe-function-unbound", [("ifoe-bound", "ct16", 2, "FAIL", "IFOE-FUNCTION-UNBOUND")]),
    ("patch-zero-byte", [("patch-integrity", "ct17", None, "FAIL", "PATCH-2380")]),
    ("stale-shm", [("shm-clean", "ct17", None, "FAIL", "SHM-STALE")]),
    ("mixed-hbm", [*(("gpu-inventory", "ct16", g, "FAIL", "HBM-SIZE") for g in range(4)),
                   *(("hbm-uniform", "ct16", g, "FAIL", "HBM-MIXED") for g in range(4))]),
])
def test_fault_is_caught_on_exactly_its_node(rig, scenario, expected):
    rig.apply(scenario)
    rc, doc = check(rig.inventory_path)
    assert rc == 1 and findings(doc) == sorted(expected)


def test_default_params_message_and_tuned_requirement(rig):
    rig.apply("amdgpu-default-params")
    rc, doc = check(rig.inventory_path, ("amdgpu-driver",), "--set", "amdgpu-driver.require_tuned=true")
    assert findings(doc) == [("amdgpu-driver", "ct14", None, "FAIL", "AMDGPU-PARAMS"),
                             ("amdgpu-driver", "ct14", None, "WARN", "AMDGPU-UNTUNED")]
    params, tuned = messages(doc, "amdgpu-driver", "ct14")
    assert "gpu_recovery=-1 (need 0), halt_if_hws_hang=0 (need 1)" in params and "retrains the UALink" in params
    assert "perf_setup ran after amdgpu was already loaded" in tuned


def test_zero_byte_patch_file_message(rig):
    rig.apply("patch-zero-byte")
    rc, doc = check(rig.inventory_path, ("patch-integrity",))
    assert messages(doc, "patch-integrity", "ct17") == [
        "/app/ATOM/atom/model_ops/mla_unfused_gather.py is 0 bytes (interrupted docker cp): it imports cleanly "
        "and defines nothing (§14)"]


def test_a0_node_with_the_image_own_rocjitsu_prefix(rig, tmp_path):
    rig.apply("rocjitsu-image-prefix")  # ct14 holds 143,217 / 7,531,385 / 170
    rc, doc = check(with_stepping(rig, tmp_path, "ct14", "A0"), ("rocjitsu-store",))
    # the translation environment is launch-config's to judge (named once): only the prefix fails here
    assert rc == 1 and {(c, n, s) for c, n, _, s, _ in findings(doc)} == {("rocjitsu-store", "ct14", "FAIL")}
    first = messages(doc, "rocjitsu-store", "ct14")[0]
    assert "image's own rocjitsu prefix (hook 143,217 B, translator 7,531,385 B, 170 store entries" in first
    assert "every token will be `!` with HTTP 200" in first
    # the same node as B0 needs no translation: the inert prefix passes
    rc, doc = check(rig.inventory_path, ("rocjitsu-store",))
    assert (rc, findings(doc)) == (0, [])


def test_a0_node_without_a_prefix_names_the_known_issue(rig, tmp_path):
    rig.apply("healthy")
    rc, doc = check(with_stepping(rig, tmp_path, "ct13", "A0"), ("rocjitsu-store",))
    assert findings(doc) == [("rocjitsu-store", "ct13", None, "FAIL", "ROCJITSU-PREFIX")]
    assert "FAIL: HOTSWAP=1 but /app/rjprefix not found" in messages(doc, "rocjitsu-store", "ct13")[0]


def shm_names(node):
    return sorted(p.name for p in (node.root / "dev/shm").iterdir())


def test_fix_removes_exactly_the_stale_segments_and_nothing_else(rig):
    rig.apply("stale-shm-with-bystanders")  # ct16
    ct16 = rig.nodes[2]
    before = ["ncclx-keep", "nccl-shm-a8f3c2d1", "psm_shm.1c9e42b7", "sem.k3-keep"]
    assert shm_names(ct16) == sorted(before)
    rc, doc = check(rig.inventory_path, ("shm-clean",))
    assert findings(doc) == [("shm-clean", "ct16", None, "FAIL", "SHM-STALE")]
    assert shm_names(ct16) == sorted(before), "without --fix nothing may be touched"
    rc, doc = check(rig.inventory_path, ("shm-clean",), "--fix")
    assert [m for m in messages(doc, "shm-clean", "ct16") if m.startswith("--fix")] == [
        "--fix removed /dev/shm/nccl-shm-a8f3c2d1, /dev/shm/psm_shm.1c9e42b7"]
    assert (rc, findings(doc)) == (0, [])  # re-judged after the repair: the node is clean now
    assert shm_names(ct16) == ["ncclx-keep", "sem.k3-keep"]
    rc, doc = check(rig.inventory_path, ("shm-clean",))
    assert (rc, findings(doc)) == (0, [])


def test_baseline_reports_hbm_and_gpu_count_drift_old_to_new(rig, tmp_path):
    rig.apply("healthy")
    baseline = tmp_path / "baseline.yaml"
    proc = subprocess.run([sys.executable, "-m", "k3doctor.cli", "baseline", "record", "--nodes",
                           str(rig.inventory_path), "-o", str(baseline)], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    recorded = yaml.safe_load(baseline.read_text())["nodes"]["ct16"]["gpu-inventory"]
    assert recorded == {"gpus": 4, "hbm_gib": {0: 432, 1: 432, 2: 432, 3: 432}}
    rig.apply("mixed-hbm")
    rc, doc = check(rig.inventory_path, ("gpu-inventory",), "--baseline", baseline)
    warns = sorted((r["node"], r["gpu"], r["message"]) for r in doc["results"] if r["status"] == "WARN")
    assert warns == [("ct16", g, "HBM changed since the baseline: 432 -> 288 GiB") for g in range(4)]
