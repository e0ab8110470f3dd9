"""env-versions end to end: the versions read inside each node's real container (its ROCM_PATH, RCCL's soname)
decide which side of a §29 edge a rule is judged on; an unknown version applies the strict rule and says so.

The rack is this module's own: its scenarios recreate our container."""
import pytest
import yaml
from k3rig.tools import _amd_smi_outputs

from tests.conftest import private_rack
from tests.e2e.cli import k3json

pytestmark = pytest.mark.e2e
CHECK = "env-versions"


@pytest.fixture(scope="module")
def rack(tmp_path_factory):
    yield from private_rack(tmp_path_factory, "env-versions-rack")


def findings(doc):
    return sorted((r["node"], r["status"], r["evidence"].get("rule")) for r in doc["results"]
                  if r["check"] == CHECK and r["status"] != "PASS")


def test_healthy_rack_passes_with_versions_unknown_said_so(rack):
    rack.apply("healthy")
    rc, doc = k3json("check", "--nodes", rack.inventory_path, "--only", CHECK)
    assert rc == 0 and findings(doc) == [], doc
    assert all("applied strictly" in r["message"] for r in doc["results"])


def test_unset_mnnvl_with_rccl_unknown_is_the_strict_fault(rack):
    rack.apply("launch-env-mnnvl-missing")
    rc, doc = k3json("check", "--nodes", rack.inventory_path, "--only", CHECK)
    assert findings(doc) == [("ct14", "FAIL", "ENV-MNNVL-UNSET")], doc
    [fault] = [r for r in doc["results"] if r["status"] == "FAIL"]
    assert "rccl version unknown (not found): the strict rule applies" in fault["message"]


def test_unset_mnnvl_and_cumem_fail_only_on_the_rccl_before_pr_8444(rack, tmp_path):
    rack.apply("env-versions-rccl-auto")
    inv = yaml.safe_load(rack.inventory_path.read_text())
    inv.setdefault("cluster", {}).setdefault("checks", {})[CHECK] = {"version_edges": {"rccl-8444": "7.10"}}
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(inv))
    rc, doc = k3json("check", "--nodes", path, "--only", CHECK)
    assert findings(doc) == [("ct16", "FAIL", "ENV-CUMEM-UNSET"), ("ct16", "FAIL", "ENV-MNNVL-UNSET")], doc
    ct14 = next(r for r in doc["results"] if r["node"] == "ct14")
    assert ct14["status"] == "PASS" and "rocm 7.14.0" in ct14["message"] and "rccl 7.14.0" in ct14["message"]
    ct16 = next(r for r in doc["results"] if r["node"] == "ct16")
    assert "rccl 7.0.2 (librccl.so.1.0.70002) is before 7.10" in ct16["message"]


def test_a_stale_aiter_jit_lock_in_one_container_blocks_that_node(rack):
    rack.apply("aiter-stale-lock")
    rc, doc = k3json("check", "--nodes", rack.inventory_path, "--only", "aiter-jit-locks")
    bad = [(r["node"], r["status"], r["remediation"]) for r in doc["results"] if r["status"] != "PASS"]
    assert bad == [("ct17", "FAIL", "AITER-STALE-LOCK")], doc
    [fault] = [r for r in doc["results"] if r["status"] == "FAIL"]
    assert "/app/aiter-jit/build/lock_module_moe" in fault["message"]
    assert "holder pid 999999 is gone" in fault["message"]


def test_lmcache_offload_on_the_cuda_wheel_blocks_that_node_before_launch(rack):
    """§29: the probe imports lmcache.c_ops inside each node's container through its Docker API; only ct16 offloads
    to LMCache, with a c_ops that fails on libcudart.so.13; the other nodes need no LMCache and stay quiet."""
    rack.apply("lmcache-cuda-wheel")
    rc, doc = k3json("check", "--nodes", rack.inventory_path, "--only", "lmcache-ops")
    bad = [(r["node"], r["status"], r["remediation"]) for r in doc["results"] if r["status"] != "PASS"]
    assert bad == [("ct16", "FAIL", "LMCACHE-NO-NATIVE-OPS")], doc
    [fault] = [r for r in doc["results"] if r["status"] == "FAIL"]
    assert "ImportError: libcudart.so.13: cannot open shared object file" in fault["message"]


def test_amd_smi_only_in_the_image_runs_inside_our_container(rack, tmp_path):
    """§29: ROCm from a pip wheel leaves the host without /opt/rocm; the engine's image ships amd-smi. ct14 here has
    no amd-smi on the host: read there it is an ERROR saying where it was looked for; with `tools.amd_smi:
    container:<path>` it runs inside our container (through the node's Docker API) and the fabric domain passes."""
    rack.apply("healthy")
    ct14 = rack.nodes[1].state
    outputs = _amd_smi_outputs(ct14)
    script = ("#!/bin/sh\ncase \"$*\" in\n  'fabric --json') cat /app/venv/fabric.json ;;\n"
              "  'static --asic --bus --vram --json') cat /app/venv/asic.json ;;\n  *) exit 2 ;;\nesac\n")
    scenario = tmp_path / "amd-smi-in-image.yaml"
    scenario.write_text(yaml.safe_dump({"description": "ct14: amd-smi only in the image (pip-wheel ROCm)", "nodes": {
        2: {"delete": ["opt/rocm/bin/amd-smi"], "container_files": {
            "/app/venv/bin/amd-smi": script, "/app/venv/fabric.json": outputs["fabric --json"],
            "/app/venv/asic.json": outputs["static --asic --bus --vram --json"]}}}}))
    rack.apply(scenario)
    rc, doc = k3json("check", "--nodes", rack.inventory_path, "--only", "fabric-domain")
    [bad] = [r for r in doc["results"] if r["status"] != "PASS"]
    assert (bad["node"], bad["status"], bad["remediation"]) == ("ct14", "ERROR", "FABRIC-AMDSMI-UNREADABLE")
    assert "amd-smi is neither at /opt/rocm/bin/amd-smi nor on PATH" in bad["message"]
    inv = yaml.safe_load(rack.inventory_path.read_text())
    inv["nodes"][1]["tools"] = {"amd_smi": "container:/app/venv/bin/amd-smi"}
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(inv))
    rc, doc = k3json("check", "--nodes", path, "--only", "fabric-domain")
    assert rc == 0 and [r for r in doc["results"] if r["status"] != "PASS"] == [], doc
    [mine] = [r for r in doc["results"] if r["node"] == "ct14"]
    assert "PHYSICAL_ACC_ID agrees with sysfs accel_id on 4 GPU(s)" in mine["message"]
