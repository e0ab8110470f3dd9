"""Platforms as data (reference §29, §30): the inventory's cluster.platform, which checks run there, what
the node really is from its KFD topology (a real MI300A capture from the corpus), iommu=pt, and the
HSA_OVERRIDE_GFX_VERSION rule of the recipe diff."""
from pathlib import Path

import pytest

from k3doctor import platforms, recipes, testing
from k3doctor.inventory.load import parse_inventory
from k3doctor.inventory.types import InventoryError
from k3doctor.judging.runner import RunOptions, run_checks
from k3doctor.readings import File
from k3doctor.recipes import rules
from k3doctor.registry import Registry, check
from k3doctor.results import Status, passed

MI300A = Path(__file__).with_name("samples") / "kfd-topology-properties-mi300a-4gpu.txt"


def inventory(cluster=""):
    return parse_inventory(f"cluster: {{{cluster}}}\nnodes:\n  - {{name: n0, transport: local}}\n", "inv.yaml")


def test_the_platform_sets_gpus_and_hbm_unless_the_inventory_does():
    gfx = inventory()
    assert (gfx.cluster.platform, gfx.cluster.gpus_per_node, gfx.cluster.hbm_gib_per_gpu) == ("gfx1250", 4, None)
    mi = inventory("platform: mi355x")
    assert (mi.nodes[0].settings.platform, mi.nodes[0].settings.gpus_per_node, mi.cluster.hbm_gib_per_gpu) == \
        ("mi355x", 8, 288)
    assert inventory("platform: mi355x, gpus_per_node: 4").cluster.gpus_per_node == 4
    with pytest.raises(InventoryError, match=r"inv.yaml:1: cluster.platform: expected one of gfx1250, mi355x"):
        inventory("platform: mi300x")


def test_checks_not_for_the_platform_are_neither_run_nor_reported(tmp_path):
    reg = Registry()
    for name in ("ualink-state", "iommu-pt", "shm-clean"):
        check(name, title=name, reads={"f": File(str(tmp_path))}, registry=reg)(lambda r, ctx: passed("ran"))
    ran = {p: {r.check for r in run_checks(inventory(f"platform: {p}"), reg.ordered(), RunOptions()).results}
           for p in ("gfx1250", "mi355x")}
    assert ran == {"gfx1250": {"ualink-state", "shm-clean"}, "mi355x": {"iommu-pt", "shm-clean"}}
    assert platforms.not_for("ualink-state") == ["mi355x"] and platforms.not_for("shm-clean") == []


def _topology(text: str) -> dict:
    """/sys/class/kfd/kfd/topology/nodes/N/properties per node of a `cat .../nodes/*/properties` capture."""
    blocks = [b for b in text.split("----------------------------------------------\n")[1:] if b.strip()]
    return {f"/sys/class/kfd/kfd/topology/nodes/{i}/properties": b for i, b in enumerate(blocks)}


def _with_target(version: int) -> dict:
    return {path: text.replace("gfx_target_version 90402", f"gfx_target_version {version}")
            for path, text in _topology(MI300A.read_text()).items()}


def judge_platform(topology, platform="mi355x"):
    return testing.judge("gpu-platform", {"topology": topology}, settings=inventory(f"platform: {platform}").cluster)


def test_the_node_is_what_its_kfd_topology_says():
    [v] = judge_platform(_with_target(90500))
    assert v.status == Status.PASS and v.message == "4 GPU(s) report gfx_target_version 90500 (gfx950), platform " \
                                                    "mi355x as declared"
    [v] = judge_platform(_with_target(120500))
    assert v.status == Status.FAIL and v.remediation == "PLATFORM-MISMATCH"
    assert v.message.startswith("KFD node(s) 4, 5, 6, 7 report gfx_target_version 120500 (gfx1250); the inventory "
                                "declares platform mi355x (gfx950 = 90500)")
    [v] = judge_platform(_topology(MI300A.read_text()))  # the real MI300A capture: gfx942, no platform of ours
    assert v.status == Status.FAIL and "90402 (not a platform k3doctor knows)" in v.message
    assert judge_platform(_with_target(120500), "gfx1250")[0].status == Status.PASS


@pytest.mark.parametrize("topology", [{}, {"/sys/class/kfd/kfd/topology/nodes/2/properties": "simd_count 0\n"}])
def test_an_unreadable_topology_is_an_error_never_a_pass(topology):
    assert judge_platform(topology)[0].status == Status.ERROR


@pytest.mark.parametrize("cmdline, status", [
    ("BOOT_IMAGE=/vmlinuz-6.8.0-84-generic root=UUID=1 ro iommu=pt amd_iommu=on", Status.PASS),
    ("BOOT_IMAGE=/vmlinuz-6.8.0-84-generic root=UUID=1 ro amd_iommu=on", Status.WARN),
    ("", Status.ERROR)])
def test_iommu_pt(cmdline, status):
    [v] = testing.judge("iommu-pt", {"cmdline": cmdline})
    assert v.status == status
    if status == Status.WARN:
        assert "(it has amd_iommu=on)" in v.message and v.remediation == "IOMMU-PT"


def test_a_gfx1250_hsa_override_on_an_mi355x_recipe_blocks():
    agentx, config_a = recipes.builtin("kimi-k3-mi355x-agentx"), recipes.builtin("config-a")

    def found(recipe, value):
        launch = rules.Launch(flags={}, env={"HSA_OVERRIDE_GFX_VERSION": value})
        return [(f.status, f.message) for f in rules.apply(launch, recipe, recipe.points[0])
                if f.rule == "hsa-override"]

    [(status, message)] = found(agentx, "12.5.0")
    assert status == rules.BLOCK and "HSA_OVERRIDE_GFX_VERSION=12.5.0 (gfx1250's gfx1250) on a mi355x recipe" in message
    assert found(agentx, "9.5.0")[0][0] == rules.PASS and found(config_a, "12.5.0")[0][0] == rules.PASS
    assert found(config_a, "9.5.0")[0][0] == rules.BLOCK


def test_the_report_leaves_checks_not_for_the_platform_out_and_says_so_with_v(tmp_path):
    from k3doctor.outputs.report import render_table

    reg = Registry()
    for name in ("ualink-state", "shm-clean"):
        check(name, title=name, reads={"f": File(str(tmp_path))}, registry=reg)(lambda r, ctx: passed("ran"))
    report = run_checks(inventory("platform: mi355x"), reg.ordered(), RunOptions())
    assert report.not_for_platform == ("ualink-state",)
    quiet, verbose = render_table(report, reg.ordered()), render_table(report, reg.ordered(), verbose=True)
    assert "ualink-state" not in quiet and "shm-clean" in quiet
    assert "not for this platform (mi355x, not run): ualink-state" in verbose


def test_amdgpu_driver_asks_an_xgmi_node_for_dev_kfd_only():
    """§5's load parameters and ifoe are the gfx1250 bring-up's: an MI355X node with amdgpu's own defaults and
    no ifoe is healthy; the same readings on gfx1250 fail both rules."""
    reads = {"kfd": True, "ifoe": False, "dmesg": "", **{f"{p}": f"{v}\n" for p, v in
                                                       (("gpu_recovery", -1), ("halt_if_hws_hang", 0),
                                                        ("mtype_local", 0), ("noretry", -1))}}
    [mi] = testing.judge("amdgpu-driver", reads, settings=inventory("platform: mi355x").cluster)
    assert mi.status == Status.PASS and mi.message.startswith("/dev/kfd present (platform mi355x")
    gfx = testing.judge("amdgpu-driver", reads, settings=inventory().cluster)
    assert sorted(v.remediation for v in gfx) == ["AMDGPU-PARAMS", "IFOE-NOT-LOADED"]
    [none] = testing.judge("amdgpu-driver", {**reads, "kfd": False}, settings=inventory("platform: mi355x").cluster)
    assert none.status == Status.FAIL and none.remediation == "AMDGPU-NOT-LOADED"


def test_env_versions_leaves_the_wide_ep_fabric_rows_out_on_mi355x():
    """§30: the gfx1250 RCCL MNNVL/cuMem defaults and MORI cco rows do not apply on one XGMI node; aiter's
    log-level row does."""
    from tests.unit.test_env_versions import CHECK, ROCM_70, readings, rules_of

    env = {"AITER_LOG_LEVEL": "VERBOSE", "MORI_CCO_FABRIC_DISABLE": "1"}
    mi = rules_of(testing.judge(CHECK, readings(env, ROCM_70), settings=inventory("platform: mi355x").cluster))
    assert mi == [("WARN", "ENV-AITER-LOG-LEVEL", "AITER_LOG_LEVEL")]
    gfx = rules_of(testing.judge(CHECK, readings(env, ROCM_70), settings=inventory().cluster))
    assert {rule for _, rule, _ in gfx} == {"ENV-AITER-LOG-LEVEL", "ENV-MNNVL-UNSET", "ENV-CUMEM-UNSET",
                                            "ENV-MORI-FABRIC-DISABLE"}


def test_the_rigs_mi355x_xgmi_output_is_the_sample_the_parser_tests_use():
    from k3rig import mi355x

    from tests.unit.test_check_xgmi import HEALTHY
    assert mi355x.xgmi_text() == HEALTHY
