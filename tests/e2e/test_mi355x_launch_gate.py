"""The pre-launch gate judges an MI355X AgentX launch (issue 30; reference §25, §30): `k3doctor check` names each of
the ten launch faults on its node with the rule and numbers `recipe diff` shows, whether the server runs (in our
container, as a bare host process, or as Slurm + pyxis/enroot leaves it: a host process in the image's root, what is
and is not simulated in k3rig.agentx.pyxis), the container is created but not started, or only the launch script
(`cluster.launch_script`) exists yet; a healthy launch at every recipe point is quiet.

One one-node rig serves the module; each test applies its state (a scenario of its own), then puts the node in
the launch state under test through the node's real dockerd and processes (k3rig.agentx).
"""
import contextlib
import json

import pytest
import yaml
from k3rig import agentx

from tests.conftest import private_rack
from tests.e2e.cli import k3, k3json

pytestmark = pytest.mark.e2e

RECIPE = "kimi-k3-mi355x-agentx"
DRAFTER = ("/app/hf-hub-cache/models--Inferact--Kimi-K3-DSpark/snapshots/3f1c2a9d7b6e5a4c3b2a19f8e7d6c5b4a3f2e1d0/"
           "config.json")
# The ten launch faults of issue 30 at concurrency 8: (state, the finding's status, its code, what it says).
FAULTS = {
    "lmcache-aggregate": ({"container_env": {"LMCACHE_MAX_LOCAL_CPU_SIZE": "257"}}, "FAIL", "RECIPE-DRAM-PER-RANK",
                          "257 // TP 8 = 32 GB per rank"),
    "dram-over-host-ram": ({"meminfo": {"MemTotal": 402653184}}, "FAIL", "RECIPE-PINNED-HOST-MEMORY",
                           "(32 GiB LMCache + 16 GiB state tier) x 8 ranks = 384 GiB pinned of 384 GiB MemTotal"),
    "state-offload-off": ({"container_env": {"OFFLOAD_STATE": None}}, "WARN", "RECIPE-OFFLOAD-TIERS-TOGETHER",
                          "without OFFLOAD_STATE=1"),
    "staging-chunks-default": ({"container_env": {"OFFLOAD_GPU_STAGING_CHUNKS": None}}, "FAIL",
                               "RECIPE-STAGING-CHUNKS", "unset (default 2 chunks = 8 MiB)"),
    "aiter-log-invalid": ({"container_env": {"AITER_LOG_LEVEL": "VERBOSE"}}, "WARN", "RECIPE-AITER-LOG-LEVEL",
                          "'VERBOSE', not one of"),
    "al-off-golden": ({"launch_args": {"--spec-decode-acceptance-length": "2.54"}}, "WARN", "RECIPE-SPEC-DECODE",
                      "golden AL 2.51"),
    "length-and-rate": ({"launch_args": {"--spec-decode-acceptance-rate": "0.77"}}, "FAIL", "RECIPE-SPEC-DECODE",
                        "mutually exclusive"),
    "no-served-name": ({"launch_args": {"--model": "/models/Kimi-K3"}}, "WARN", "RECIPE-SERVED-MODEL-NAME",
                       "ATOM serves under the path /models/Kimi-K3"),
    "draft-not-local": ({"container_files": {DRAFTER: None}}, "FAIL", "RECIPE-DRAFT-MODEL",
                        "not complete in the mounted HF cache"),
    "hsa-gfx1250": ({"container_env": {"HSA_OVERRIDE_GFX_VERSION": "12.5.0"}}, "FAIL", "RECIPE-HSA-OVERRIDE",
                    "HSA_OVERRIDE_GFX_VERSION=12.5.0 (gfx1250's gfx1250) on a mi355x recipe"),
}
# Faults of the node itself (its MemTotal, the HF cache directory the script mounts), which `recipe diff --script`
# has no node to read.
NODE_FACTS = {"dram-over-host-ram", "draft-not-local"}


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    yield from private_rack(tmp_path_factory, "agentx", nodes=1, platform="mi355x")


def apply(rig, tmp_path, concurrency=8, **node):
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump({"description": "launch gate", "nodes": {1: {"concurrency": concurrency,
                                                                                 **node}}}))
    rig.apply(path)
    with contextlib.suppress(OSError):  # the inventory names the point the node launches
        inv = yaml.safe_load(rig.inventory_path.read_text())
        inv["cluster"]["concurrency"] = concurrency
        rig.inventory_path.write_text(yaml.safe_dump(inv, sort_keys=False))


@contextlib.contextmanager
def launch_state(rig, state):
    """The node in launch state ``state``; yields (inventory, how `recipe diff` reads the same launch or None)."""
    node = rig.nodes[0]
    if state == "running":
        yield rig.inventory_path, ("--nodes", str(rig.inventory_path))
    elif state in ("bare", "pyxis"):  # a host process: bare, or in an image's root as srun --container-image
        with (agentx.bare if state == "bare" else agentx.pyxis)(rig, node):
            yield rig.inventory_path, ("--nodes", str(rig.inventory_path))
    elif state == "created":
        agentx.created(rig, node)
        yield rig.inventory_path, None
    else:
        inventory = agentx.script_only(rig, node)
        yield inventory, ("--script", str(node.tree / agentx.LAUNCH_SCRIPT.lstrip("/")))


def gate(inventory):
    rc, doc = k3json("check", "--nodes", str(inventory), "--only", "launch-config")
    return rc, [(r["node"], r["status"], r["remediation"], r["message"]) for r in doc["results"]
                if r["check"] == "launch-config" and r["status"] != "PASS"], doc


def diff_messages(how, concurrency):
    """Every BLOCK/WARN rule message `recipe diff` shows for the same launch."""
    rc, out, err = k3("recipe", "diff", "--recipe", RECIPE, "--concurrency", concurrency, *how, "--format", "json",
                      timeout=120)
    doc = json.loads(out)
    points = [p for launch in doc.get("launches", [doc]) for p in launch["points"]]
    said = [r["message"] for p in points for r in p["rules"] if r["status"] in ("BLOCK", "WARN")]
    said += [d["rule"].split(": ", 1)[1] for p in points for d in p["differences"] if d["rule"]]
    return said


@pytest.mark.parametrize("state, concurrency", [("running", 1), ("running", 4), ("running", 8), ("running", 10),
                                                ("created", 1), ("created", 10), ("script", 4), ("script", 8),
                                                ("bare", 10), ("pyxis", 8)])
def test_a_healthy_launch_is_quiet_at_every_point_in_every_state(rig, tmp_path, state, concurrency):
    apply(rig, tmp_path, concurrency)
    with launch_state(rig, state) as (inventory, _):
        rc, found, doc = gate(inventory)
    assert (rc, found) == (0, []), doc
    [ok] = [r for r in doc["results"] if r["check"] == "launch-config"]
    assert ok["node"] == "ct13" and f"concurrency {concurrency}" in ok["message"], ok


@pytest.mark.parametrize("state", ["running", "created", "script", "bare", "pyxis"])
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_launch_fault_is_named_on_its_node_with_the_rule_and_numbers_of_recipe_diff(rig, tmp_path, fault,
                                                                                         state):
    overrides, status, code, says = FAULTS[fault]
    apply(rig, tmp_path, 8, **overrides)
    with launch_state(rig, state) as (inventory, how):
        rc, found, doc = gate(inventory)
        diff_said = diff_messages(how, 8) if how else None
    assert [(n, s, c) for n, s, c, _ in found] == [("ct13", status, code)], doc
    assert rc == (1 if status == "FAIL" else 0)
    message = found[0][3]
    assert says in message, message
    if diff_said is not None and not (state == "script" and fault in NODE_FACTS):  # same rule, words, numbers
        assert any(m in message for m in diff_said), (message, diff_said)


def test_nothing_to_judge_is_an_error_that_names_cluster_launch_script(rig, tmp_path):
    apply(rig, tmp_path, 8)
    agentx.script_only(rig, rig.nodes[0])  # nothing runs, no container: and the inventory names no script
    rc, found, doc = gate(rig.inventory_path)
    assert rc == 2 and [(n, s, c) for n, s, c, _ in found] == [("ct13", "ERROR", "RECIPE-NO-LAUNCH")], doc
    assert "cluster.launch_script: PATH" in found[0][3]
