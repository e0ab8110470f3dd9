"""amdgpu-driver, gpu-inventory and hbm-uniform judged on plain sysfs/dmesg data (and amd-smi static)."""
import json

from k3doctor.checks import amdgpu

from k3doctor import testing
from k3doctor.api import Context, judge_safely
from k3doctor.inventory.types import Settings
from k3doctor.readings import CommandReading, FileReading, Readings, Unavailable
from k3doctor.registry import REGISTRY
from k3doctor.results import Status

DRIVER, INVENTORY, UNIFORM = (REGISTRY.checks[n] for n in ("amdgpu-driver", "gpu-inventory", "hbm-uniform"))
P = "/sys/module/amdgpu/parameters"
DMESG = ("[    9.412305] ifoe: loading out-of-tree module taints kernel.\n"
         "[   15.220114] [drm] amdgpu kernel modesetting enabled.\n")
GIB = 2**30


def driver_readings(params=None, kfd=True, ifoe=True, dmesg=DMESG, dmesg_rc=0, version=None):
    values = {"gpu_recovery": "0", "halt_if_hws_hang": "1", "mtype_local": "0", "noretry": "1", **(params or {})}
    return Readings({"kfd": kfd, "ifoe": ifoe, "dmesg": CommandReading("dmesg", dmesg_rc, dmesg, ""),
                     "version": FileReading("/sys/module/amdgpu/version", version),
                     **{k: FileReading(f"{P}/{k}", None if v is None else f"{v}\n") for k, v in values.items()}})


def judge(chk, r, baseline=None, settings=None, **params):
    settings = settings or Settings(hbm_gib_per_gpu=432, gpus_per_node=4, checks={chk.name: params})
    return testing.judge(chk, r, node="ct13", settings=settings, baseline=baseline)


def findings(verdicts):
    return [(v.status, v.gpu, v.remediation) for v in verdicts if v.status != Status.PASS]


def test_healthy_tuned_driver_passes_and_says_tuned():
    [v] = judge(DRIVER, driver_readings())
    assert v.status == Status.PASS
    assert "tuned (mtype_local=0 noretry=1)" in v.message


def test_missing_kfd_fails_not_loaded():
    [v] = judge(DRIVER, driver_readings(kfd=False))
    assert (v.status, v.remediation) == (Status.FAIL, "AMDGPU-NOT-LOADED")


def test_default_params_fail_and_say_reload_retrains_links():
    verdicts = judge(DRIVER, driver_readings({"gpu_recovery": "-1", "halt_if_hws_hang": "0"}))
    assert findings(verdicts) == [(Status.FAIL, None, "AMDGPU-PARAMS")]
    assert "gpu_recovery=-1 (need 0), halt_if_hws_hang=0 (need 1)" in verdicts[0].message
    assert "load-time parameters" in verdicts[0].message and "retrains the UALink links" in verdicts[0].message
    text = REGISTRY.remediations["AMDGPU-PARAMS"].text
    assert "load-time parameters" in text and "retrains the UALink links" in text


def test_missing_param_file_reads_missing():
    verdicts = judge(DRIVER, driver_readings({"halt_if_hws_hang": None}))
    assert [(v.status, v.remediation) for v in verdicts] == [(Status.FAIL, "AMDGPU-PARAMS")]
    assert "halt_if_hws_hang=missing (need 1)" in verdicts[0].message


def test_ifoe_not_loaded_fails():
    assert findings(judge(DRIVER, driver_readings(ifoe=False))) == [(Status.FAIL, None, "IFOE-NOT-LOADED")]


def test_ifoe_loaded_after_amdgpu_warns_with_timestamps():
    late = ("[   15.220114] [drm] amdgpu kernel modesetting enabled.\n"
            "[   40.000001] ifoe: loading out-of-tree module taints kernel.\n")
    verdicts = judge(DRIVER, driver_readings(dmesg=late))
    assert findings(verdicts) == [(Status.WARN, None, "IFOE-NOT-LOADED")]
    assert "ifoe at 40.000s, amdgpu init at 15.220s" in verdicts[0].message


def test_ifoe_order_not_determinable_is_said_not_guessed():
    rotated = CommandReading("dmesg", 0, "[   15.220114] [drm] amdgpu kernel modesetting enabled.\n", "")
    assert amdgpu.ifoe_load_order(rotated) == (None, "load order not determinable: no ifoe line with a boot timestamp "
                                              "in dmesg (rotated?)")
    assert amdgpu.ifoe_load_order(CommandReading("dmesg", 1, "", "Operation not permitted"))[0] is None
    assert amdgpu.ifoe_load_order(CommandReading("dmesg", 0, DMESG, ""))[0] == "before"
    # an unreadable dmesg does not turn a healthy driver into an ERROR, but the PASS says what is unknown
    [v] = judge(DRIVER, driver_readings(dmesg="", dmesg_rc=1))
    assert v.status == Status.PASS
    assert "ifoe loaded (the ifoe/amdgpu load order could not be determined from dmesg)" in v.message
    assert v.evidence["ifoe/amdgpu load order"] == "load order not determinable: dmesg not readable"
    [v] = judge(DRIVER, driver_readings())
    assert "ifoe loaded before amdgpu;" in v.message


def test_untuned_is_info_by_default_and_warn_when_required():
    r = driver_readings({"mtype_local": "-1", "noretry": "-1"})
    [v] = judge(DRIVER, r)
    assert v.status == Status.PASS and "perf_setup ran after amdgpu was already loaded" in v.message
    assert findings(judge(DRIVER, r, require_tuned=True)) == [(Status.WARN, None, "AMDGPU-UNTUNED")]


def static_vram(mib_per_gpu):
    """`amd-smi static --vram --json` as newer amd-smi prints it (MiB labelled "MB", §12)."""
    return json.dumps({"gpu_data": [{"gpu": g, "vram": {"type": "HBM", "size": {"value": mib, "unit": "MB"}}}
                                     for g, mib in enumerate(mib_per_gpu)]})


def kfd_topology(gpus: int, cpus: int = 1, target: int = 120500) -> dict:
    """KFD topology nodes: CPU agents first (gfx_target_version 0), then the GPUs (§29)."""
    return {f"/sys/class/kfd/kfd/topology/nodes/{n}/properties": FileReading(
        "p", f"cpu_cores_count 96\nsimd_count 0\ngfx_target_version {0 if n < cpus else target}\n")
        for n in range(cpus + gpus)}


def cards(sizes_gib, vendors=None, smi=None, smi_rc=0, kfd=None):
    """sysfs readings plus an amd-smi that agrees with them unless ``smi`` says otherwise; KFD topology with one
    GPU node per AMD card unless ``kfd`` gives it."""
    vendors = vendors or {c: "0x1002" for c in sizes_gib}
    if smi is None:
        smi = static_vram([g // 2**20 if isinstance(g, int) else None
                           for c, g in sizes_gib.items() if vendors[c] == "0x1002"])
    return Readings({
        "vendors": {f"/sys/class/drm/card{c}/device/vendor": FileReading("v", f"{v}\n") for c, v in vendors.items()},
        "vram": {f"/sys/class/drm/card{c}/device/mem_info_vram_total": FileReading("m", f"{g}\n")
                 for c, g in sizes_gib.items()},
        "smi": CommandReading("amd-smi static --vram --json", smi_rc, smi, "" if smi_rc == 0 else "amd-smi: not found"),
        "kfd_nodes": kfd_topology(sum(v == "0x1002" for v in vendors.values())) if kfd is None else kfd,
    })


HEALTHY = {c: 432 * GIB for c in range(4)}


def test_inventory_healthy_counts_amd_cards_only():
    r = cards({**HEALTHY, 4: 0}, vendors={0: "0x1002", 1: "0x1002", 2: "0x1002", 3: "0x1002", 4: "0x1a03"})
    [v] = judge(INVENTORY, r)
    assert v.status == Status.PASS and v.message == "4 GPUs (KFD topology, gfx_target_version 120500), 432 GiB HBM each"


def test_inventory_rounds_driver_reserved_bytes_and_matches_amd_smi_mib():
    # amd-smi reports 442368 MB (MiB) for a 432 GiB board (§12); the driver may reserve a few MiB
    r = cards({c: (442368 - 16) * 2**20 for c in range(4)})
    assert judge(INVENTORY, r)[0].status == Status.PASS


def test_inventory_amd_smi_agreeing_within_tolerance_passes():
    assert judge(INVENTORY, cards(HEALTHY, smi=static_vram([442368 - 500] * 4)))[0].status == Status.PASS
    smi = amdgpu._inventory_reads(Settings())["smi"]
    assert smi.argv[4:] == ("/opt/rocm/bin/amd-smi", "static", "--asic", "--bus", "--vram", "--json")


def test_inventory_amd_smi_disagreeing_with_sysfs_warns_naming_the_gpu():
    verdicts = judge(INVENTORY, cards(HEALTHY, smi=static_vram([442368, 442368, 294912, 442368])))
    assert findings(verdicts) == [(Status.WARN, 2, "HBM-SIZE")]
    assert verdicts[0].message == ("amd-smi GPU 2 reports 294912 MiB VRAM (288 GiB) but sysfs card2 "
                                   "mem_info_vram_total reads 432 GiB (sysfs is used)")
    assert judge(INVENTORY, cards(HEALTHY, smi=static_vram([442368, 442368, 294912, 442368])),
                 tolerance_gib=200)[0].status == Status.PASS


def test_inventory_amd_smi_pairs_with_amd_cards_by_rank_and_warns_on_count():
    r = cards({0: 0, 1: 432 * GIB, 2: 432 * GIB}, vendors={0: "0x1a03", 1: "0x1002", 2: "0x1002"},
              smi=static_vram([442368, 294912]))
    assert findings(judge(INVENTORY, r, settings=Settings(hbm_gib_per_gpu=432, gpus_per_node=2))) == \
        [(Status.WARN, 2, "HBM-SIZE")]
    verdicts = judge(INVENTORY, cards(HEALTHY, smi=static_vram([442368] * 3)))
    assert findings(verdicts) == [(Status.WARN, None, "HBM-SIZE")]
    assert verdicts[0].message.startswith("amd-smi static lists 3 GPU(s) but sysfs shows 4 AMD card(s)")


def test_inventory_unreadable_amd_smi_is_not_a_failure_and_the_pass_says_so():
    for r in (cards(HEALTHY, smi="", smi_rc=127), cards(HEALTHY, smi="\x00\x7fgarbage"),
              cards(HEALTHY, smi='{"gpu_data": [{"gpu": 0, "vram": {"size": '),):  # truncated
        [v] = judge(INVENTORY, r)
        assert v.status == Status.PASS
        assert v.message.startswith("4 GPUs (KFD topology, gfx_target_version 120500), 432 GiB HBM each; not "
                                    "cross-checked with amd-smi static --vram (amd-smi may be missing here)")
    [v] = judge(INVENTORY, cards(HEALTHY, smi=json.dumps([{"gpu": g, "vram": "N/A"} for g in range(4)])))
    assert v.status == Status.PASS
    assert v.message == ("4 GPUs (KFD topology, gfx_target_version 120500), 432 GiB HBM each; amd-smi gave no VRAM "
                         "size for GPU 0, GPU 1, GPU 2, GPU 3, not cross-checked")


def test_inventory_three_gpus_fail_count():
    verdicts = judge(INVENTORY, cards({c: 432 * GIB for c in range(3)}))
    assert findings(verdicts) == [(Status.FAIL, None, "GPU-COUNT")]
    assert verdicts[0].message == ("3 AMD GPU(s) visible (KFD topology, gfx_target_version 120500), inventory "
                                   "expects 4")


def test_inventory_288_gib_board_fails_on_that_gpu():
    verdicts = judge(INVENTORY, cards({**HEALTHY, 2: 288 * GIB}))
    assert findings(verdicts) == [(Status.FAIL, 2, "HBM-SIZE")]
    assert "288 GiB HBM, inventory says 432 GiB" in verdicts[0].message


def test_inventory_missing_vram_file_fails_unknown_and_garbage_errors():
    r = cards(HEALTHY)
    del r._results["vram"]["/sys/class/drm/card1/device/mem_info_vram_total"]
    assert findings(judge(INVENTORY, r)) == [(Status.FAIL, 1, "HBM-SIZE")]
    bad = cards({**HEALTHY, 0: "N/A"})
    [v] = judge(INVENTORY, bad)
    assert v.status == Status.ERROR and "not a byte count" in v.message


def test_inventory_undeclared_hbm_warns_per_gpu():
    verdicts = judge(INVENTORY, cards(HEALTHY), settings=Settings(gpus_per_node=4))
    assert [f[:2] for f in findings(verdicts)] == [(Status.WARN, c) for c in range(4)]


def test_inventory_record_and_drift_old_to_new():
    baseline = amdgpu.record_inventory(cards(HEALTHY), None)
    assert baseline == {"gpus": 4, "hbm_gib": {0: 432, 1: 432, 2: 432, 3: 432}}
    assert findings(judge(INVENTORY, cards(HEALTHY), baseline=baseline)) == []
    drifted = judge(INVENTORY, cards({c: 432 * GIB for c in range(3)}), baseline=baseline)
    messages = [v.message for v in drifted if v.status == Status.WARN]
    assert messages == ["GPU count changed since the baseline: 4 -> 3",
                        "HBM changed since the baseline: 432 -> absent GiB"]
    assert judge(INVENTORY, cards(HEALTHY), baseline={"unrecorded": "x"})[0].status == Status.PASS


def judge_cluster(per_node, declared=432):
    ctx = Context(UNIFORM, Settings(hbm_gib_per_gpu=declared), nodes={n: None for n in per_node})
    return judge_safely(UNIFORM.judge, per_node, ctx)


def test_uniform_rack_passes():
    [v] = judge_cluster({n: cards(HEALTHY) for n in ("ct13", "ct14", "ct16", "ct17")})
    assert v.status == Status.PASS and v.message == "all 16 GPUs report 432 GiB HBM"


def test_no_gpu_anywhere_is_nothing_to_compare_not_a_pass():
    [v] = judge_cluster({n: cards({}) for n in ("ct13", "ct14")})
    assert v.status == Status.SKIP and "nothing to compare" in v.message and "ct13, ct14" in v.message


def test_mixed_boards_fail_naming_the_odd_node_and_gpus():
    per_node = {n: cards(HEALTHY) for n in ("ct13", "ct14", "ct17")}
    per_node["ct16"] = cards({c: 288 * GIB for c in range(4)})
    verdicts = judge_cluster(per_node)
    assert [(v.status, v.node, v.gpu) for v in verdicts] == [(Status.FAIL, "ct16", c) for c in range(4)]
    assert "the rest of the rack has 432 GiB" in verdicts[0].message


def test_even_split_uses_declared_size_else_fails_without_majority():
    per_node = {"a": cards(HEALTHY), "b": cards({c: 288 * GIB for c in range(4)})}
    assert {v.node for v in judge_cluster(per_node)} == {"b"}
    [v] = judge_cluster(per_node, declared=None)
    assert v.status == Status.FAIL and "no majority" in v.message


def test_unreadable_node_is_an_error_for_that_node_only():
    per_node = {n: cards(HEALTHY) for n in ("ct13", "ct14", "ct16")}
    per_node["ct17"] = Readings({"vendors": Unavailable("node deadline"), "vram": Unavailable("node deadline")})
    verdicts = judge_cluster(per_node)
    assert [(v.status, v.node) for v in verdicts] == [(Status.ERROR, "ct17"), (Status.PASS, None)]


def test_nodes_without_any_hbm_size_are_named_and_keep_the_rack_from_a_clean_pass():
    per_node = {"ct13": cards(HEALTHY), "ct14": cards({}), "ct16": cards({}), "ct17": cards(HEALTHY)}
    per_node["ct17"]._results["vram"] = {}  # AMD cards, but no mem_info_vram_total at all
    verdicts = judge_cluster(per_node)
    assert [(v.status, v.node) for v in verdicts] == [(Status.ERROR, "ct14"), (Status.ERROR, "ct16"),
                                                      (Status.ERROR, "ct17"), (Status.PASS, None)]
    assert "no HBM size read" in verdicts[0].message and "left out of the comparison" in verdicts[0].message
    assert verdicts[-1].message == "all 4 GPUs report 432 GiB HBM, 3 node(s) left out"


def test_one_healthy_node_and_three_empty_is_not_a_clean_pass():
    per_node = {"ct13": cards(HEALTHY), **{n: cards({}) for n in ("ct14", "ct16", "ct17")}}
    statuses = [v.status for v in judge_cluster(per_node)]
    assert statuses.count(Status.ERROR) == 3 and max(s.severity for s in statuses) == Status.ERROR.severity


def test_inventory_counts_kfd_gpu_nodes_not_drm_or_render_nodes():
    """§29/§0.2 (the GPU count of §12 corrected): a gfx1250 tray showed 32 render nodes for 4 GPUs - the count is
    the KFD topology's nodes with a non-zero gfx_target_version; the DRM count is only INFO."""
    partitioned = cards({c: 432 * GIB for c in range(8)}, kfd=kfd_topology(4, cpus=2))
    [v] = judge(INVENTORY, partitioned)
    assert v.status == Status.PASS and v.message.startswith(
        "4 GPUs (KFD topology, gfx_target_version 120500; INFO: 8 AMD DRM card(s), which are not GPUs (§29))")
    short = cards(HEALTHY, kfd=kfd_topology(3))
    assert findings(judge(INVENTORY, short)) == [(Status.FAIL, None, "GPU-COUNT")]
    no_topology = cards(HEALTHY, kfd={})
    [v] = judge(INVENTORY, no_topology)
    assert v.status == Status.PASS and "(AMD DRM cards: no KFD topology readable)" in v.message
    garbled = cards(HEALTHY, kfd={"/sys/class/kfd/kfd/topology/nodes/1/properties": FileReading("p", "junk\n")})
    [v] = judge(INVENTORY, garbled)
    assert v.status == Status.ERROR and "no gfx_target_version line" in v.message


def test_in_tree_driver_without_version_file_passes_and_says_in_tree_not_missing():
    """§29 (ollama/ollama #3425): the in-tree amdgpu has no /sys/module/amdgpu/version; that is an INFO on the
    PASS line, never a missing driver, and a DKMS driver's version is named."""
    [v] = judge(DRIVER, driver_readings())
    assert v.status == Status.PASS
    assert "INFO: in-tree amdgpu (no /sys/module/amdgpu/version" in v.message and "not a missing driver" in v.message
    [v] = judge(DRIVER, driver_readings(version="6.16.6\n"))
    assert v.status == Status.PASS and "amdgpu 6.16.6 (DKMS)" in v.message and "in-tree" not in v.message
