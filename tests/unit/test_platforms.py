"""Platforms as data (reference §29, §30, §31.4): the inventory's cluster.platform, which checks run there, what
the node really is from its KFD topology (a real MI300A capture from the corpus), iommu=pt, and the
HSA_OVERRIDE_GFX_VERSION rule of the recipe diff. Every test iterates the platform files that ship (a new file
is tested without a test edit); a platform made up for a test is a file in a temporary copy of the directory."""
import shutil
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


SHIPPED = platforms.names()
XGMI = [n for n in SHIPPED if platforms.get(n).fabric == "xgmi"]


def inventory(cluster=""):
    return parse_inventory(f"cluster: {{{cluster}}}\nnodes:\n  - {{name: n0, transport: local}}\n", "inv.yaml")


@pytest.fixture
def platform_dir(tmp_path, monkeypatch):
    """A copy of the shipped platform files that k3doctor reads instead; write(name, text) adds or replaces one."""
    folder = tmp_path / "platforms"
    shutil.copytree(platforms.DIR, folder, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    monkeypatch.setattr(platforms, "DIR", folder)
    platforms.get.cache_clear()
    yield lambda name, text: (folder / f"{name}.yaml").write_text(text)
    platforms.get.cache_clear()


def test_the_shipped_platforms_are_valid_and_the_ones_named_in_the_reference():
    from k3doctor.registry import REGISTRY, load_checks

    load_checks()
    assert platforms.problems(REGISTRY) == []
    assert {"gfx1250", "mi355x", "mi300x", "mi325x"} <= set(SHIPPED)  # §29, §30, §31.4


@pytest.mark.parametrize("name", SHIPPED)
def test_the_platform_file_sets_gpus_and_hbm_unless_the_inventory_does(name):
    p = platforms.get(name)
    inv = inventory(f"platform: {name}")
    assert (inv.nodes[0].settings.platform, inv.nodes[0].settings.gpus_per_node, inv.cluster.hbm_gib_per_gpu) == \
        (name, p.gpus_per_node, p.hbm_gib_per_gpu)
    assert inventory(f"platform: {name}, gpus_per_node: 2").cluster.gpus_per_node == 2


def test_an_unknown_platform_is_one_line_naming_the_shipped_ones():
    with pytest.raises(InventoryError, match=r"inv.yaml:1: cluster.platform: expected one of " + ", ".join(SHIPPED)):
        inventory("platform: not-a-platform")


def test_the_default_platforms_numbers_come_from_its_file_too(platform_dir):
    """gfx1250.yaml's gpus_per_node was once ignored (hard-coded Settings() defaults)."""
    text = (platforms.DIR / f"{platforms.DEFAULT}.yaml").read_text()
    platform_dir(platforms.DEFAULT, text.replace("gpus_per_node: 4", "gpus_per_node: 6"))
    assert inventory().cluster.gpus_per_node == 6


@pytest.mark.parametrize("edit, problem", [
    (("fabric: ualink", "fabrik: ualink"), "gfx1250.yaml:8: fabrik: unknown key (did you mean 'fabric'?)"),
    (("gpus_per_node: 4", "gpus_per_node: four"), "gfx1250.yaml:6: gpus_per_node: expected an integer >= 1"),
    (("ifoe: true", "ifoe: yes please"), "gfx1250.yaml:20: ifoe: expected true or false, got 'yes please'"),
    (("[iommu-pt, gpu-platform, xgmi-links]", "[iommu-pt, gpu-platfrom, xgmi-links]"),
     "gfx1250.yaml:14: not_for_platform: 'gpu-platfrom': no such check (did you mean 'gpu-platform'?)"),
    (("platform: gfx1250", "platform: gfx1251"), "gfx1250.yaml:2: platform: 'gfx1251', but the file is gfx1250.yaml"),
    (("gfx_target_version: 120500", ""), "gfx1250.yaml:1: gfx_target_version: missing"),
])
def test_a_bad_platform_file_is_exit_3_with_its_file_and_line(platform_dir, capsys, edit, problem):
    from k3doctor.cli.options import load_plugins

    text = (platforms.DIR / "gfx1250.yaml").read_text()
    assert edit[0] in text
    platform_dir("gfx1250", text.replace(*edit))
    with pytest.raises(SystemExit) as done:
        load_plugins()
    err = capsys.readouterr().err
    assert done.value.code == 3 and f"{platforms.DIR}/{problem}" in err, err
    assert "Traceback" not in err


def test_checks_not_for_the_platform_are_neither_run_nor_reported(tmp_path):
    reg = Registry()
    names = ("ualink-state", "iommu-pt", "shm-clean")
    for name in names:
        check(name, title=name, reads={"f": File(str(tmp_path))}, registry=reg)(lambda r, ctx: passed("ran"))
    for p in SHIPPED:
        ran = {r.check for r in run_checks(inventory(f"platform: {p}"), reg.ordered(), RunOptions()).results}
        assert ran == {n for n in names if platforms.get(p).applies(n)}
    assert platforms.not_for("ualink-state") == [p for p in SHIPPED if platforms.get(p).fabric != "ualink"]
    assert platforms.not_for("shm-clean") == []


def test_list_platform_shows_the_file_and_only_the_checks_that_run_there():
    from click.testing import CliRunner

    from k3doctor.cli.info import list_cmd
    for name in SHIPPED:
        out = CliRunner().invoke(list_cmd, ["--platform", name]).output
        p = platforms.get(name)
        assert f"platform {name} " in out and f"{p.gpus_per_node} GPUs per node" in out and p.gfx in out
        assert all(f"\n{c} " not in out for c in p.not_for_platform), out


def test_no_check_title_names_a_platform():
    """A title holds on every platform the check runs on: the numbers and names are the platform file's."""
    from k3doctor.registry import REGISTRY, load_checks

    load_checks()
    named = [(c.name, n) for c in REGISTRY.ordered() for n in SHIPPED if n in c.title.lower()]
    assert named == []


def _topology(text: str) -> dict:
    """/sys/class/kfd/kfd/topology/nodes/N/properties per node of a `cat .../nodes/*/properties` capture."""
    blocks = [b for b in text.split("----------------------------------------------\n")[1:] if b.strip()]
    return {f"/sys/class/kfd/kfd/topology/nodes/{i}/properties": b for i, b in enumerate(blocks)}


def _with_target(version: int, device: int = 0x74a0) -> dict:
    """The MI300A capture's GPU nodes reporting ``version`` and PCI ``device`` id (its own: 0x74a0 = 29856)."""
    return {path: text.replace("gfx_target_version 90402", f"gfx_target_version {version}")
            .replace("device_id 29856", f"device_id {device}") for path, text in _topology(MI300A.read_text()).items()}


def judge_platform(topology, platform="mi355x", cluster=""):
    settings = inventory(f"platform: {platform}{cluster}").cluster
    return testing.judge("gpu-platform", {"topology": topology}, settings=settings)


def test_the_node_is_what_its_kfd_topology_says():
    [v] = judge_platform(_with_target(90500))
    assert v.status == Status.PASS and v.message == "4 GPU(s) report gfx_target_version 90500 (gfx950), platform " \
                                                    "mi355x as declared"
    [v] = judge_platform(_with_target(120500))
    assert v.status == Status.FAIL and v.remediation == "PLATFORM-MISMATCH"
    assert v.message.startswith("KFD node(s) 4, 5, 6, 7 report gfx_target_version 120500 (gfx1250); the inventory "
                                "declares platform mi355x (gfx950 = 90500)")
    [v] = judge_platform(_topology(MI300A.read_text()))  # the real MI300A capture: gfx942
    siblings = ", ".join(p.name for p in platforms.by_gfx_target(90402))  # the shipped files, whichever they are
    assert v.status == Status.FAIL and f"90402 ({siblings})" in v.message
    assert judge_platform(_with_target(120500), "gfx1250")[0].status == Status.PASS


@pytest.mark.parametrize("name", [n for n in SHIPPED if platforms.get(n).device_ids])
def test_the_device_id_tells_a_platform_from_its_siblings_of_one_gfx_target(name):
    """§31.4: MI300A, MI300X and MI325X all report 90402; a device id no shipped file lists (the real MI300A
    capture's 0x74a0, unless an MI300A file is added) is none of ours, and each platform's own device id passes."""
    p = platforms.get(name)
    foreign = next(d for d in (0x74A0, *range(0x7400, 0x7500)) if not platforms.by_device_id(d))
    [v] = judge_platform(_with_target(p.gfx_target_version, device=foreign), name)
    assert v.status == Status.FAIL and v.remediation == "PLATFORM-MISMATCH"
    assert f"device id {foreign:#06x} (not a platform k3doctor knows)" in v.message and f"platform {name} is" in v.message
    for own in p.device_ids:
        assert judge_platform(_with_target(p.gfx_target_version, device=own), name)[0].status == Status.PASS
    other = next((q for q in SHIPPED if q != name and platforms.get(q).device_ids
                  and platforms.get(q).gfx_target_version == p.gfx_target_version), None)
    if other:
        [v] = judge_platform(_with_target(p.gfx_target_version, device=min(platforms.get(other).device_ids)), name)
        assert v.status == Status.FAIL and f"({other})" in v.message


def test_a_recipe_for_another_gfx_target_is_refused_naming_both():
    """§31.3 (vLLM #51964): the gfx950-only Kimi-K3 recipe on gfx942 dies with `mla_gluon requires gfx950`.
    Declared as such it is exit 3 when the inventory is read; declared gfx950 on nodes that are gfx942, the
    node's FAIL names the recipe's target beside the node's."""
    recipe = "kimi-k3-mi355x-agentx"
    assert recipes.builtin(recipe).gfx == ("gfx950",)
    for name in (n for n in SHIPPED if platforms.get(n).gfx != "gfx950"):
        with pytest.raises(InventoryError) as info:
            inventory(f"platform: {name}, recipe: {recipe}, concurrency: 8")
        [problem] = info.value.problems
        assert problem.startswith(f"inv.yaml:1: cluster.recipe: {recipe} runs on gfx950 only") and \
            f"platform {name} is {platforms.get(name).gfx}" in problem
    [v] = judge_platform(_with_target(90402), "mi355x", f", recipe: {recipe}, concurrency: 8")
    assert v.status == Status.FAIL and v.message.endswith(
        f"; recipe {recipe} runs on gfx950 only, these GPUs are gfx942: its kernels fail at launch (§31.3)")


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


AMDGPU_DEFAULTS = {"gpu_recovery": "-1\n", "halt_if_hws_hang": "0\n", "mtype_local": "0\n", "noretry": "-1\n"}


@pytest.mark.parametrize("name", SHIPPED)
def test_amdgpu_driver_asks_each_platform_for_its_own_load_parameters(name):
    """§5's load parameters and ifoe are the gfx1250 bring-up's: a platform whose file names none is healthy with
    amdgpu's own defaults and no ifoe; one that names them fails on the defaults, and passes with its values."""
    p = platforms.get(name)
    reads = {"kfd": True, "ifoe": False, "dmesg": "", **AMDGPU_DEFAULTS}
    settings = inventory(f"platform: {name}").cluster
    found = testing.judge("amdgpu-driver", reads, settings=settings)
    expected = (["AMDGPU-PARAMS"] if p.amdgpu_load_params else []) + (["IFOE-NOT-LOADED"] if p.ifoe else [])
    assert sorted(v.remediation for v in found if v.status != Status.PASS) == expected
    own = {**reads, "ifoe": True, **{k: f"{v}\n" for k, v in p.amdgpu_load_params + p.amdgpu_tuned_params}}
    [ok] = testing.judge("amdgpu-driver", own, settings=settings)
    assert ok.status == Status.PASS and ok.message.endswith(f"; platform {name}")
    [none] = testing.judge("amdgpu-driver", {**reads, "kfd": False}, settings=settings)
    assert none.status == Status.FAIL and none.remediation == "AMDGPU-NOT-LOADED"


def test_a_platform_with_a_load_parameter_of_its_own_is_read_and_judged_on_it(platform_dir):
    """The check once read only the default platform's parameter files: a platform with its own parameter was a
    KeyError inside the check."""
    text = (platforms.DIR / "mi300x.yaml").read_text().replace("platform: mi300x", "platform: testxgmi")
    platform_dir("testxgmi", text.replace("amdgpu_load_params: {}", "amdgpu_load_params: {sched_policy: 2}"))
    settings = inventory("platform: testxgmi").cluster
    [bad] = testing.judge("amdgpu-driver", {"kfd": True, "sched_policy": "0\n"}, settings=settings)
    assert bad.status == Status.FAIL and "sched_policy=0 (need 2)" in bad.message
    [ok] = testing.judge("amdgpu-driver", {"kfd": True, "sched_policy": "2\n"}, settings=settings)
    assert ok.status == Status.PASS and "sched_policy=2" in ok.message


@pytest.mark.parametrize("name", XGMI)
def test_env_versions_leaves_the_wide_ep_fabric_rows_out_on_an_xgmi_node(name):
    """§30: the gfx1250 RCCL MNNVL/cuMem defaults and MORI cco rows do not apply on one XGMI node; aiter's
    log-level row does."""
    from tests.unit.test_env_versions import CHECK, ROCM_70, readings, rules_of

    env = {"AITER_LOG_LEVEL": "VERBOSE", "MORI_CCO_FABRIC_DISABLE": "1"}
    mi = rules_of(testing.judge(CHECK, readings(env, ROCM_70), settings=inventory(f"platform: {name}").cluster))
    assert mi == [("WARN", "ENV-AITER-LOG-LEVEL", "AITER_LOG_LEVEL")]
    gfx = rules_of(testing.judge(CHECK, readings(env, ROCM_70), settings=inventory().cluster))
    assert {rule for _, rule, _ in gfx} == {"ENV-AITER-LOG-LEVEL", "ENV-MNNVL-UNSET", "ENV-CUMEM-UNSET",
                                            "ENV-MORI-FABRIC-DISABLE"}


def test_the_rigs_mi355x_xgmi_output_is_the_sample_the_parser_tests_use():
    from k3rig import mi355x

    from tests.unit.test_check_xgmi import HEALTHY
    assert mi355x.xgmi_text() == HEALTHY
