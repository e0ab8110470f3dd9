"""fabric-domain judged on plain data: JSON and text amd-smi forms, sentinels, splits, sysfs cross-check."""
import json

import pytest
from k3doctor.checks import fabric

from k3doctor import testing
from k3doctor.inventory.types import Settings
from k3doctor.views.gpu import card_buses
from k3doctor.readings import FIND_TOOL, CommandReading, FileReading, Readings, Unavailable
from k3doctor.registry import REGISTRY
from k3doctor.results import Status

CHECK = REGISTRY.checks["fabric-domain"]
PPOD = "3e56c1d0-7a4b-4e21-9f3c-58d2b4a1878f"
OTHER = "9b1f4e27-5c3a-4d88-b0e6-2f7a91c4d305"
ZERO = "00000000-0000-0000-0000-000000000000"
NINES = "99999999-9999-9999-9999-999999999999"
NODES = ("ct13", "ct14", "ct16", "ct17")


def fabric_entry(gpu, ppod, vpod, accel):
    """One `amd-smi fabric --json` entry in the shape of the corpus fixture (unpopulated fields included)."""
    return {"gpu": gpu, "fabric": {"gpu": gpu, "bdf": f"{gpu:04x}:01:00.0", "fabric_info": {
        "bdf": f"{gpu:04x}:01:00.1", "version": 4294967295, "accelerator_id": accel, "fabric_type": "UALOE",
        "bandwidth": {"value": 0, "unit": "Mb/s"}, "latency": {"value": 0, "unit": "ns"},
        "ppod_id": ppod, "ppod_size": 72, "vpod_id": vpod, "vpod_size": 16,
        "local_accelerators": "3, 2, 1, 0", "addr_mode": "SOURCE-ALIASING", "accel_state": "ACTIVE"},
        "fabric_telemetry": "N/A"}}


def as_text(entries):
    """The human form (§27 item 1 layout) with amd-smi's stdout noise line first."""
    out = ["WARNING: User is missing the following required groups: render, video"]
    for e in entries:
        out += [f"GPU: {e['gpu']}", "    FABRIC_INFO:"]
        for key, value in e["fabric"]["fabric_info"].items():
            value = f"{value['value']} {value['unit']}" if isinstance(value, dict) else value
            out.append(f"        {key.upper()}: {value}")
        out.append("    FABRIC_TELEMETRY: N/A")
    return "\n".join(out) + "\n"


def node(sys_pods=None, smi_pods=None, form="json", fabric_reading=None):
    """A node's readings: 4 cards; ``*_pods`` map card -> (ppod, vpod) overrides for sysfs / amd-smi."""
    flat, uevent, entries = {}, {}, []
    for c in range(4):
        ppod, vpod = (sys_pods or {}).get(c, (PPOD, 2))
        d = f"/sys/class/drm/card{c}/device"
        flat[f"{d}/ualink/ppod_id"] = FileReading(f"{d}/ualink/ppod_id", f"{ppod}\n")
        flat[f"{d}/ualink/vpod_id"] = FileReading(f"{d}/ualink/vpod_id", f"{vpod}\n")
        uevent[f"{d}/uevent"] = FileReading(f"{d}/uevent", f"DRIVER=amdgpu\nPCI_SLOT_NAME={c:04x}:01:00.0\n")
        sppod, svpod = (smi_pods or sys_pods or {}).get(c, (PPOD, 2))
        entries.append(fabric_entry(c, sppod, svpod, 3 - c))
    text = json.dumps({"gpu_data": entries}, indent=4) if form == "json" else as_text(entries)
    reading = fabric_reading or CommandReading("sh -c ...", 0, text, "")
    return Readings({"ualink": flat, "ualink_stations": {}, "ualink_setup": {}, "uevent": uevent,
                     "fabric": reading})


def judge(per_node, **params):
    return testing.judge(CHECK, per_node, nodes={}, **params)


def rack(**odd):
    return {name: odd.get(name) or node() for name in NODES}


def bad(verdicts):
    found = [(v.status, v.node, v.gpu, v.remediation) for v in verdicts if v.status != Status.PASS]
    return sorted(found, key=lambda f: (f[0].value, f[1], -1 if f[2] is None else f[2]))


def replaced(r, **readings):
    return Readings({**r.raw(), **readings})


@pytest.mark.parametrize("form", ["json", "text"])
def test_healthy_rack_passes_per_node_and_ignores_unpopulated_fields(form):
    verdicts = judge({n: node(form=form) for n in NODES})
    assert bad(verdicts) == []
    assert sorted(v.node for v in verdicts) == sorted(NODES)
    assert f"4 GPU(s) in PPOD_ID {PPOD} VPOD_ID 2" in verdicts[0].message
    for v in verdicts:  # amd-smi was read and agreed with sysfs on every GPU, not silently left out
        assert {k: v.evidence[k] for k in v.evidence if k.startswith("amd-smi")} == {
            **{f"amd-smi GPU {g} PPOD_ID": PPOD for g in range(4)}, **{f"amd-smi GPU {g} VPOD_ID": 2 for g in range(4)}}


def test_ppod_mismatch_on_one_node_names_that_node_and_all_its_gpus():
    verdicts = judge(rack(ct16=node({c: (OTHER, 2) for c in range(4)})))
    assert bad(verdicts) == [(Status.FAIL, "ct16", g, "FABRIC-DOMAIN-MISMATCH") for g in range(4)]
    msg = [v for v in verdicts if v.node == "ct16"][0].message
    assert msg == f"PPOD_ID {OTHER} differs from the rack's {PPOD} (held by 12 of 16 GPUs)"
    assert {v.status for v in verdicts if v.node != "ct16"} == {Status.PASS}


def test_vpod_mismatch_on_a_single_gpu():
    verdicts = judge(rack(ct14=node({1: (PPOD, 3)})))
    assert bad(verdicts) == [(Status.FAIL, "ct14", 1, "FABRIC-DOMAIN-MISMATCH")]
    assert "VPOD_ID 3 differs from the rack's 2 (held by 15 of 16 GPUs)" in bad_messages(verdicts)[0]


def bad_messages(verdicts):
    return [v.message for v in verdicts if v.status != Status.PASS]


def test_two_two_split_names_both_groups():
    odd = node({c: (PPOD, 3) for c in range(4)})
    verdicts = judge(rack(ct16=odd, ct17=odd))
    assert [(n, g) for _, n, g, _ in bad(verdicts)] == [(n, g) for n in NODES for g in range(4)]
    assert "no majority (2: ct13 GPUs 0,1,2,3; ct14 GPUs 0,1,2,3; 3: ct16 GPUs 0,1,2,3; ct17 GPUs 0,1,2,3)" \
        in bad_messages(verdicts)[0]


def test_expected_ids_override_the_majority():
    verdicts = judge(rack(), expected_vpod_id="3")
    assert len(bad(verdicts)) == 16
    assert "VPOD_ID 2 differs from the rack's 3 (expected)" in bad_messages(verdicts)[0]
    assert bad(judge(rack(), expected_ppod_id=PPOD.upper(), expected_vpod_id="2")) == []


@pytest.mark.parametrize("sentinel", [ZERO, NINES])
def test_ppod_sentinels_mean_not_configured(sentinel):
    verdicts = judge(rack(ct17=node({0: (sentinel, 2)})))
    assert bad(verdicts) == [(Status.FAIL, "ct17", 0, "FABRIC-NOT-CONFIGURED")]
    assert f"PPOD_ID {sentinel}: not configured (sysfs)" in bad_messages(verdicts)[0]


@pytest.mark.parametrize("raw", [ZERO, NINES, "N/A", "----", PPOD.upper()])
def test_sysfs_and_amd_smi_read_ppod_sentinels_alike(raw):
    """One helper for both sources: a "not configured" in one is never a real id in the other."""
    r = node({0: (raw, 2)})
    (_, smi), *_ = fabric.amdsmi_gpus("ct13", r["fabric"], card_buses(r["uevent"]))
    assert fabric.sysfs_gpus("ct13", r)[0].ppod == smi.ppod == (PPOD if raw == PPOD.upper() else None)


def test_stuck_node_is_not_configured_and_in_the_wrong_vpod():
    verdicts = judge(rack(ct17=node({c: (ZERO, 0) for c in range(4)})))
    assert bad(verdicts) == [(Status.FAIL, "ct17", g, "FABRIC-NOT-CONFIGURED") for g in range(4)]
    assert bad_messages(verdicts)[0] == (f"PPOD_ID {ZERO}: not configured (sysfs); "
                                         "VPOD_ID 0 differs from the rack's 2 (held by 12 of 16 GPUs)")


def test_vpod_unset_is_not_configured():
    verdicts = judge(rack(ct13=node({2: (PPOD, 4294967295)})))
    assert bad(verdicts) == [(Status.FAIL, "ct13", 2, "FABRIC-NOT-CONFIGURED")]


def test_amd_smi_disagreeing_with_sysfs_warns_naming_the_gpu():
    verdicts = judge(rack(ct14=node(smi_pods={3: (PPOD, 5)})))
    assert bad(verdicts) == [(Status.WARN, "ct14", 3, "FABRIC-SOURCES-DISAGREE")]
    assert bad_messages(verdicts)[0] == (f"amd-smi GPU 3 reports PPOD_ID {PPOD} VPOD_ID 5 but sysfs card3 reads "
                                         f"ppod_id {PPOD} vpod_id 2")


def test_cross_check_maps_by_pci_bus_not_by_index():
    r = node(smi_pods={0: (OTHER, 2)})
    gpu0 = r.raw()["uevent"]
    # card0 and card1 swap buses: amd-smi GPU 0 (bus 0000:01) is now card1.
    gpu0["/sys/class/drm/card0/device/uevent"].content = "PCI_SLOT_NAME=0001:01:00.0\n"
    gpu0["/sys/class/drm/card1/device/uevent"].content = "PCI_SLOT_NAME=0000:01:00.0\n"
    verdicts = judge(rack(ct14=r))
    assert bad(verdicts) == [(Status.WARN, "ct14", 1, "FABRIC-SOURCES-DISAGREE")]


@pytest.mark.parametrize("reading, why", [
    (CommandReading("sh -c ...", 0, "{\n  \"gpu_data\": [\n    {\"gpu\": 0, \"fab", "", ), "truncated JSON"),
    (CommandReading("sh -c ...", 0, "\x00\x1b[0;31m\xff\xfe garbage", ""), "no JSON document"),
    # §29: rc 0 with nothing printed (ROCm/amdsmi #168, #177) is an ERROR, never "no GPUs"
    (CommandReading("sh -c ...", 0, "", ""), "empty output"),
    (CommandReading("sh -c ...", 124, "", "", timed_out=True), "timed out and was killed"),
    (CommandReading("sh -c ...", 2, "", "amd-smi: error: argument: invalid choice: 'fabric'"), "exited 2"),
])
def test_unusable_amd_smi_is_an_error_for_that_node_only(reading, why):
    verdicts = judge(rack(ct14=node(fabric_reading=reading)))
    assert bad(verdicts) == [(Status.ERROR, "ct14", None, "FABRIC-AMDSMI-UNREADABLE")]
    assert why in bad_messages(verdicts)[0]
    assert {v.node for v in verdicts if v.status == Status.PASS} == {"ct13", "ct16", "ct17"}


def test_odd_node_is_still_caught_from_sysfs_when_its_amd_smi_is_garbled():
    garbled = CommandReading("sh -c ...", 0, "\x00garbage", "")
    verdicts = judge(rack(ct14=node({c: (PPOD, 3) for c in range(4)}, fabric_reading=garbled)))
    assert bad(verdicts) == [(Status.ERROR, "ct14", None, "FABRIC-AMDSMI-UNREADABLE")] + \
        [(Status.FAIL, "ct14", g, "FABRIC-DOMAIN-MISMATCH") for g in range(4)]


def sysfs_only_on(cards, r):
    """``r`` with the ualink pod id files of every other card removed (amd-smi still reports all four)."""
    flat = r.raw()["ualink"]
    for path in [p for p in flat if int(p.split("/card")[1].split("/")[0]) not in cards]:
        del flat[path]
    return r


def test_gpus_only_amd_smi_sees_are_still_compared_across_the_rack():
    r = sysfs_only_on({0, 1}, node(smi_pods={2: (OTHER, 2), 3: (OTHER, 2)}))
    verdicts = judge(rack(ct16=r))
    assert bad(verdicts) == [(Status.FAIL, "ct16", 2, "FABRIC-DOMAIN-MISMATCH"),
                             (Status.FAIL, "ct16", 3, "FABRIC-DOMAIN-MISMATCH"),
                             (Status.WARN, "ct16", 2, "FABRIC-SOURCES-DISAGREE"),
                             (Status.WARN, "ct16", 3, "FABRIC-SOURCES-DISAGREE")]
    fails = [v for v in verdicts if v.status == Status.FAIL]
    assert fails[0].message == f"PPOD_ID {OTHER} differs from the rack's {PPOD} (held by 14 of 16 GPUs)"
    assert "amd-smi GPU 2 PPOD_ID" in fails[0].evidence
    assert "compared from amd-smi alone" in [v for v in verdicts if v.status == Status.WARN][0].message


def test_amd_smi_gpus_on_no_known_bus_are_compared_without_taking_a_card_number():
    r = sysfs_only_on({0, 1}, node(smi_pods={2: (OTHER, 2), 3: (OTHER, 2)}))
    for c in (2, 3):  # their cards' uevent files are gone: amd-smi's bdf maps to no card
        del r.raw()["uevent"][f"/sys/class/drm/card{c}/device/uevent"]
    verdicts = judge(rack(ct16=r))
    fails = [v for v in verdicts if v.status == Status.FAIL]
    assert [(v.node, v.gpu) for v in fails] == [("ct16", None), ("ct16", None)]
    assert [v.message for v in fails] == [
        f"amd-smi GPU {g} (no card on its PCI bus): PPOD_ID {OTHER} differs from the rack's {PPOD} "
        "(held by 14 of 16 GPUs)" for g in (2, 3)]


def test_no_majority_split_names_amd_smi_only_gpus_by_their_index():
    r = sysfs_only_on({0, 1}, node(smi_pods={2: (OTHER, 2), 3: (OTHER, 2)}))
    del r.raw()["uevent"]["/sys/class/drm/card3/device/uevent"]
    verdicts = judge({"ct13": node(), "ct16": r, "ct17": node({c: (OTHER, 2) for c in range(4)})})
    (odd,) = [v for v in verdicts if v.status == Status.FAIL and v.gpu is None]
    assert odd.message.startswith("amd-smi GPU 3 (no card on its PCI bus): PPOD_ID")
    assert f"{OTHER}: ct16 GPUs 2,3 (amd-smi); ct17 GPUs 0,1,2,3)" in odd.message


def test_without_sysfs_pod_ids_amd_smi_is_used():
    r = replaced(node(smi_pods={c: (OTHER, 2) for c in range(4)}), ualink={})
    verdicts = judge(rack(ct16=r))
    assert bad(verdicts) == [(Status.FAIL, "ct16", g, "FABRIC-DOMAIN-MISMATCH") for g in range(4)]
    assert "amd-smi GPU 0 PPOD_ID" in [v for v in verdicts if v.node == "ct16"][0].evidence


def test_fabric_info_na_warns_and_node_without_any_source_errors():
    entries = [{"gpu": c, "fabric": {"gpu": c, "bdf": f"{c:04x}:01:00.0", "fabric_info": "N/A"}} for c in range(4)]
    na = node(fabric_reading=CommandReading("sh -c ...", 0, json.dumps(entries), ""))
    verdicts = judge(rack(ct13=na))
    assert bad(verdicts) == [(Status.WARN, "ct13", g, "FABRIC-SOURCES-DISAGREE") for g in range(4)]
    verdicts = judge(rack(ct13=replaced(na, ualink={})))
    errors = [v for v in verdicts if v.status == Status.ERROR]
    assert [(v.node, v.message[:33]) for v in errors] == [("ct13", "no GPU reports a fabric domain (n")]
    verdicts = judge(rack(ct13=replaced(na, ualink=Unavailable("node deadline of 5s reached"))))
    errors = [v for v in verdicts if v.status == Status.ERROR]
    assert [v.node for v in errors] == ["ct13"] and "node deadline of 5s reached" in errors[0].message


def test_fabric_command_keeps_the_tool_path_one_argv_word_and_falls_back_to_text():
    spec = fabric._reads(Settings(tools={"amd_smi": "/opt/my rocm/amd-smi; rm -rf /"}))["fabric"]
    assert spec.argv[:2] == ("sh", "-c") and spec.argv[-1] == "/opt/my rocm/amd-smi; rm -rf /"
    assert '"$t" fabric --json ||' in spec.argv[2] and '"$t" fabric; }' in spec.argv[2]
    assert spec.argv[2].startswith(FIND_TOOL)  # §29: else found on the node's PATH (tests/unit/test_tool_paths.py)


def test_no_amd_smi_and_no_sysfs_pod_ids_is_one_error_saying_both():
    gone = CommandReading("sh -c ...", 127, "", "k3doctor-fabric: 1: /opt/rocm/bin/amd-smi: not found")
    verdicts = judge(rack(ct16=replaced(node(fabric_reading=gone), ualink={})))
    (v,) = [v for v in verdicts if v.status != Status.PASS]
    assert (v.status, v.node) == (Status.ERROR, "ct16")
    assert v.message == ("amd-smi fabric unusable (exited 127: k3doctor-fabric: 1: /opt/rocm/bin/amd-smi: not found); "
                         "and no ualink pod ids in sysfs either")


def static_asic(ids, root="gpu_data"):
    """`amd-smi static --asic --bus --json` of amd-smi 27.1 (ROCm 10.1): PHYSICAL_ACC_ID in the ASIC section."""
    entries = [{"gpu": g, "asic": {"market_name": "AMD Instinct MI455X", "oam_id": g, "physical_acc_id": acc},
                "bus": {"bdf": f"{g:04x}:01:00.0"}} for g, acc in enumerate(ids)]
    return json.dumps({"gpu_data": entries} if root == "gpu_data" else entries)


def with_accel_ids(r, ids, asic):
    flat = dict(r.raw()["ualink"])
    for c, acc in enumerate(ids):
        path = f"/sys/class/drm/card{c}/device/ualink/accel_id"
        flat[path] = FileReading(path, f"{acc}\n")
    return replaced(r, ualink=flat, asic=asic)


def test_physical_acc_id_is_cross_checked_with_sysfs_accel_id():
    """§29: amd-smi 27.1 adds PHYSICAL_ACC_ID; it must name the accelerator sysfs accel_id names (§6)."""
    sysfs = (7, 6, 5, 4)
    ok = with_accel_ids(node(), sysfs, CommandReading("sh -c ...", 0, static_asic(sysfs), ""))
    verdicts = judge(rack(ct14=ok))
    assert bad(verdicts) == []
    assert "PHYSICAL_ACC_ID agrees with sysfs accel_id on 4 GPU(s)" in next(v.message for v in verdicts
                                                                             if v.node == "ct14")
    swapped = with_accel_ids(node(), sysfs, CommandReading("sh -c ...", 0, static_asic((7, 5, 6, 4), "list"), ""))
    verdicts = judge(rack(ct14=swapped))
    assert bad(verdicts) == [(Status.WARN, "ct14", 1, "FABRIC-SOURCES-DISAGREE"),
                             (Status.WARN, "ct14", 2, "FABRIC-SOURCES-DISAGREE")]
    assert "amd-smi GPU 1 (bdf 0001:01:00.0) reports PHYSICAL_ACC_ID 5 but sysfs card1 reads accel_id 6" in \
        bad_messages(verdicts)[0]


def test_physical_acc_id_absent_unset_or_unreadable_is_no_finding_and_the_pass_says_which():
    sysfs = (7, 6, 5, 4)
    older = json.dumps({"gpu_data": [{"gpu": g, "asic": {"oam_id": g}, "bus": {"bdf": f"{g:04x}:01:00.0"}}
                                     for g in range(4)]})  # amd-smi before 27.1 prints no PHYSICAL_ACC_ID
    unset = static_asic([4294967295, "N/A", "NOT_SUPPORTED", 4294967295])  # no UALoE session yet
    for text in (older, unset):
        verdicts = judge(rack(ct14=with_accel_ids(node(), sysfs, CommandReading("sh -c ...", 0, text, ""))))
        assert bad(verdicts) == [] and "PHYSICAL_ACC_ID" not in next(v.message for v in verdicts if v.node == "ct14")
    empty = with_accel_ids(node(), sysfs, CommandReading("sh -c ...", 0, "", ""))  # rc 0, nothing printed
    [v] = [v for v in judge(rack(ct14=empty)) if v.node == "ct14"]
    assert v.status == Status.PASS and "PHYSICAL_ACC_ID not cross-checked (" in v.message and "empty output" in \
        v.message
