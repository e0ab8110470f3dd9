"""An MI355X AgentX node end to end (reference §25, §29, §30): the real CLI over real SSH and a real dockerd
against the rig's MI355X node kind (8 × gfx950 of 288 GB joined by XGMI, ~3 TB of host RAM, the ATOM server
running in its container at one concurrency point). `k3doctor check` judges the node; `k3doctor recipe diff
--nodes` reads the running server's own argv and environment and applies the recipe's arithmetic rules.

One one-node rig serves the module; each test applies its state as a scenario file of its own.
"""
import json

import pytest
import yaml

from tests.conftest import private_rack
from tests.e2e.cli import k3, k3json

pytestmark = pytest.mark.e2e

RECIPE = "kimi-k3-mi355x-agentx"
DRAFTER = ("/app/hf-hub-cache/models--Inferact--Kimi-K3-DSpark/snapshots/3f1c2a9d7b6e5a4c3b2a19f8e7d6c5b4a3f2e1d0/"
           "config.json")


@pytest.fixture(scope="module")
def mi355x(tmp_path_factory):
    yield from private_rack(tmp_path_factory, "mi355x", nodes=1, platform="mi355x")


def apply(rig, tmp_path, **node):
    """The healthy MI355X node with ``node``'s NodeState overrides (a scenario file of this test's own)."""
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump({"description": "test state", "nodes": {1: node} if node else {}}))
    rig.apply(path)
    inventory = yaml.safe_load(rig.inventory_path.read_text())  # launch-config judges the point the inventory names
    inventory["cluster"]["concurrency"] = node.get("concurrency", 8)
    rig.inventory_path.write_text(yaml.safe_dump(inventory, sort_keys=False))


def not_passing(doc):
    return [(r["check"], r["node"], r["status"], r.get("gpu"), r["message"]) for r in doc["results"]
            if r["status"] not in ("PASS", "SKIP")]


def recipe_diff(rig, concurrency):
    """(exit code, the diff of the rig node's server). The node reads every model server process it sees, and
    the rig's nodes share this machine's PID namespace: a server another test runs here is left aside."""
    rc, out, err = k3("recipe", "diff", "--recipe", RECIPE, "--concurrency", concurrency, "--nodes",
                      rig.inventory_path, "--format", "json")
    assert out, err
    launches = json.loads(out)["launches"]
    [launch] = [launch for launch in launches if launch["pid"] == rig.nodes[0].server_pid]
    return (rc if len(launches) == 1 else None), launch


@pytest.mark.parametrize("concurrency", [1, 8])
def test_a_healthy_node_is_quiet_and_runs_its_recipe_point(mi355x, tmp_path, concurrency):
    apply(mi355x, tmp_path, concurrency=concurrency)
    rc, doc = k3json("check", "--nodes", mi355x.inventory_path)
    assert (rc, not_passing(doc)) == (0, []), doc
    ran = {r["check"] for r in doc["results"]}
    assert {"xgmi-links", "gpu-platform", "iommu-pt", "gpu-inventory", "launch-config"} <= ran
    assert not ran & {"ualink-state", "fabric-domain"}
    [xgmi] = [r for r in doc["results"] if r["check"] == "xgmi-links"]
    assert xgmi["message"].startswith("all 28 GPU pairs of 8 GPUs linked by XGMI")
    rc, launch = recipe_diff(mi355x, concurrency)
    [point] = launch["points"]
    assert rc in (0, None) and (launch["node"], point["identical"], point["differences"]) == ("ct13", True, [])
    assert fired(point) == [], point["rules"]


@pytest.mark.parametrize("links, rates, status, expected", [
    ({"2-5": "D", "5-2": "D"}, {}, "FAIL", [("xgmi-links", 2, "XGMI-LINK-DOWN", "gpu2<->gpu5 XGMI link down: GPU2 "
                                             "(0000:65:00.0) reads D, GPU5 (0000:95:00.0) reads D")]),
    ({"3-6": "U/D", "6-3": "U/D"}, {}, "FAIL", [("xgmi-links", 3, "XGMI-LINK-DOWN", "gpu3<->gpu6 XGMI link down: "
                                                 "GPU3 (0000:75:00.0) reads U/D, GPU6 (0000:e5:00.0) reads U/D")]),
    ({}, {1: 16}, "WARN", [("xgmi-links", 1, "XGMI-LINK-DEGRADED",
                            "GPU1 (0000:15:00.0) XGMI links trained at 16 Gb/s")]),
])
def test_each_xgmi_fault_is_named_on_its_node_and_gpus_alone(mi355x, tmp_path, links, rates, status, expected):
    """§30: a D in either status table is a BLOCK (U/D too); a GPU trained slower than its peers still carries
    traffic: a WARN, the node may launch."""
    apply(mi355x, tmp_path, xgmi_links=links, xgmi_bit_rates=rates)
    rc, doc = k3json("check", "--nodes", mi355x.inventory_path)
    found = [r for r in doc["results"] if r["status"] not in ("PASS", "SKIP")]
    assert (rc, [(r["check"], r["node"], r["status"]) for r in found]) == (
        1 if status == "FAIL" else 0, [("xgmi-links", "ct13", status)])
    assert [(r["check"], r["gpu"], r["remediation"]) for r in found] == [e[:3] for e in expected]
    assert found[0]["message"].startswith(expected[0][3]), found[0]["message"]


@pytest.mark.parametrize("state, rule, status, says", [
    ({"container_env": {"LMCACHE_MAX_LOCAL_CPU_SIZE": "257"}}, "dram-per-rank", "BLOCK",
     "LMCACHE_MAX_LOCAL_CPU_SIZE=257 is the whole DRAM budget"),
    ({"meminfo": {"MemTotal": 402653184}}, "pinned-host-memory", "BLOCK",
     "(32 GiB LMCache + 16 GiB state tier) x 8 ranks = 384 GiB pinned of 384 GiB MemTotal"),
    ({"container_env": {"OFFLOAD_GPU_STAGING_CHUNKS": "2"}}, "staging-chunks", "BLOCK", "OFFLOAD_GPU_STAGING_CHUNKS"),
    ({"container_env": {"AITER_LOG_LEVEL": "VERBOSE"}}, "aiter-log-level", "WARN", "AITER_LOG_LEVEL is"),
    ({"container_env": {"OFFLOAD_STATE": None}}, "offload-tiers-together", "WARN", "--kv-transfer-config lmcache"),
    ({"launch_args": {"--spec-decode-acceptance-length": "2.54"}}, "spec-decode", "WARN", "golden AL 2.51"),
    ({"container_files": {DRAFTER: None}}, "draft-model", "BLOCK", "not complete in the mounted HF cache"),
    ({"container_env": {"HSA_OVERRIDE_GFX_VERSION": "12.5.0"}}, "hsa-override", "BLOCK",
     "HSA_OVERRIDE_GFX_VERSION=12.5.0 (gfx1250's gfx1250) on a mi355x recipe"),
])
def test_each_arithmetic_rule_is_named_on_the_node_that_runs_the_server(mi355x, tmp_path, state, rule, status, says):
    apply(mi355x, tmp_path, **state)
    rc, launch = recipe_diff(mi355x, 8)
    [point] = launch["points"]
    assert rc in (1, None) and launch["node"] == "ct13"
    [(fired_rule, fired_status, message)] = fired(point)
    assert (fired_rule, fired_status) == (rule, status) and says in message, message


def fired(point):
    """(rule, status, message) of every BLOCK/WARN: on its own, or on the difference of the variable or flag it
    is about (`BLOCK dram-per-rank: ...` under `other value LMCACHE_MAX_LOCAL_CPU_SIZE`)."""
    own = [(f["rule"], f["status"], f["message"]) for f in point["rules"] if f["status"] in ("BLOCK", "WARN")]
    on_differences = [(head.split()[1], head.split()[0], message) for d in point["differences"] if d["rule"]
                      for head, message in [d["rule"].split(": ", 1)]]
    return own + on_differences


@pytest.mark.parametrize("mode", ["truncated", "garbage"])
def test_amd_smi_output_cut_or_garbled_is_an_error_for_the_node_never_a_pass(mi355x, tmp_path, mode):
    apply(mi355x, tmp_path, tools={"amd-smi": mode})
    rc, doc = k3json("check", "--nodes", mi355x.inventory_path, "--only", "xgmi-links")
    [xgmi] = [r for r in doc["results"] if r["check"] == "xgmi-links"]
    assert (xgmi["node"], xgmi["status"]) == ("ct13", "ERROR") and "unparseable output" in xgmi["message"], xgmi


def test_xgmi_links_up_at_0_gbps_are_an_error_for_the_node_never_a_pass(mi355x, tmp_path):
    """A link that is up moves bits: amd-smi reading 0 Gb/s on every GPU while every pair is U is not a reading
    of the links (issue 32), so the node is not judged on it - an ERROR there, exit 2, nothing passed."""
    apply(mi355x, tmp_path, xgmi_bit_rates={g: 0 for g in range(8)})
    rc, doc = k3json("check", "--nodes", mi355x.inventory_path, "--only", "xgmi-links")
    [xgmi] = [r for r in doc["results"] if r["check"] == "xgmi-links"]
    assert (rc, xgmi["node"], xgmi["status"]) == (2, "ct13", "ERROR"), xgmi
    assert "GPU0 has links up (U) at bit_rate 0 Gb/s" in xgmi["message"], xgmi


def test_a_job_holding_a_gpu_through_kfd_makes_the_node_busy_whatever_docker_ps_says(mi355x, tmp_path):
    """§30: an AgentX job often runs under Slurm + pyxis/enroot, which `docker ps` does not show; rack-free
    names the KFD holder (sysfs /sys/class/kfd/kfd/proc and rocm-smi --showpids) on its node."""
    apply(mi355x, tmp_path, gpu_processes=[{"pid": 424242, "name": "pt_main_thread", "card": 6,
                                            "vram_bytes": 190 * 2**30}])
    rc, doc = k3json("check", "--nodes", mi355x.inventory_path, "--only", "rack-free")
    found = [(r["node"], r["status"], r["message"]) for r in doc["results"] if r["status"] != "PASS"]
    assert rc == 1 and found == [("ct13", "FAIL", "GPU process pid 424242 pt_main_thread on 1 GPU(s) holds "
                                  "190.0 GiB VRAM: the GPUs are in use")], found


SLURM_JOB = {"id": 5150, "user": "alice", "state": "RUNNING", "gres": "gres/gpu:8", "name": "agentx-conc8"}


def test_a_foreign_slurm_job_makes_the_node_busy_before_it_holds_any_gpu(mi355x, tmp_path):
    """§30: rack-free uses `squeue` + KFD. A job allocated on the node (its image still importing: no KFD
    holder, no VRAM, nothing in `docker ps`) is named on that node; the job k3doctor runs in is ours."""
    apply(mi355x, tmp_path, slurm_jobs=[SLURM_JOB, {"id": 5151, "user": "bob", "state": "PENDING"}])
    rc, doc = k3json("check", "--nodes", mi355x.inventory_path, "--only", "rack-free")
    found = [(r["node"], r["status"], r["message"]) for r in doc["results"] if r["status"] != "PASS"]
    assert rc == 1 and found == [("ct13", "FAIL", "Slurm job 5150 (agentx-conc8) of alice is RUNNING on this node "
                                  "with gres/gpu:8: the node is allocated to someone else (§30)")], found
    for env, extra in (({"SLURM_JOB_ID": "5150"}, ()), ({}, ("--set", "rack-free.own_slurm_jobs=[5150]"))):
        rc, doc = k3json("check", "--nodes", mi355x.inventory_path, "--only", "rack-free", *extra, env=env)
        [result] = doc["results"]
        assert (rc, result["status"]) == (0, "PASS") and "no other Slurm job" in result["message"], result


def test_slurm_that_does_not_answer_is_an_error_never_a_free_node(mi355x, tmp_path):
    apply(mi355x, tmp_path, tools={"squeue": "garbage"})
    rc, doc = k3json("check", "--nodes", mi355x.inventory_path, "--only", "rack-free")
    [result] = doc["results"]
    assert (rc, result["node"], result["status"]) == (2, "ct13", "ERROR"), result
    assert result["message"].startswith("Slurm job list not readable"), result


@pytest.mark.parametrize("files, expected", [
    ({"proc/cmdline": "BOOT_IMAGE=/vmlinuz-6.8.0-60-generic root=/dev/mapper/vg0-root ro\n"},
     ("iommu-pt", "WARN", "iommu=pt is not on the kernel command line")),
    ({"sys/class/kfd/kfd/topology/nodes/3/properties":
      "cpu_cores_count 0\nsimd_count 1024\nnum_xcc 8\ngfx_target_version 120500\n"},
     ("gpu-platform", "FAIL", "KFD node(s) 3 report gfx_target_version 120500")),
], ids=["no-iommu-pt", "a-gfx1250-gpu"])
def test_a_node_that_is_not_what_its_platform_needs_is_named_there_alone(mi355x, tmp_path, files, expected):
    """§29/§30: `iommu=pt` missing from the kernel command line (RCCL's warning) is a WARN; a GPU whose KFD
    topology reads another gfx target than the declared platform's is a FAIL naming its KFD node."""
    apply(mi355x, tmp_path, files=files)
    rc, doc = k3json("check", "--nodes", mi355x.inventory_path)
    found = not_passing(doc)
    check, status, said = expected
    assert [(c, node, s) for c, node, s, _, _ in found] == [(check, "ct13", status)], found
    assert said in found[0][4], found[0][4]
    assert rc == (1 if status == "FAIL" else 0)
