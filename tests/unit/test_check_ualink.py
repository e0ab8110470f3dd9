"""ualink-state judged on plain sysfs data: both layouts, grace, stuck signature, lanes, local accels, drift."""
import pytest
import yaml
from k3doctor.checks import ualink

from k3doctor import testing
from k3doctor.views.ualink import ualink_cards
from k3doctor.readings import CommandReading, FileReading, Readings, Unavailable
from k3doctor.registry import REGISTRY
from k3doctor.results import Status

CHECK = REGISTRY.checks["ualink-state"]
PPOD = "3e56c1d0-7a4b-4e21-9f3c-58d2b4a1878f"
FULL = "ffffffffffffffffff"
BOOT = "0b7c1f5e-8f0a-4d5e-9a51-2f6c3b9d1e77"


def healthy_card(c, base=48):
    return {"accel_state": "active", "accel_id": str(base + 3 - c), "link_type": "UALoE", "ppod_id": PPOD,
            "vpod_id": "2", "lane_bitmap": FULL, "local_accels": " ".join(str(base + 3 - i) for i in range(4))}


def readings(overrides=None, layout="new", uptime="5000.12 9000.00", load_stamp=15.220114, boot_id=BOOT):
    """Readings as the gatherer returns them for a 4-card node (card -> field overrides)."""
    flat, stations, setup = {}, {}, {}
    for c in range(4):
        values = {**healthy_card(c), **(overrides or {}).get(c, {})}
        d = f"/sys/class/drm/card{c}/device/ualink"
        for key, value in values.items():
            if key == "lane_bitmap":
                target, path = (flat, f"{d}/station_lane_en_bitmap") if layout == "new" else \
                    (stations, f"{d}/stations/lane_en_bitmap")
            elif key == "local_accels" and layout == "old":
                target, path = setup, f"{d}/setup/local_accels"
            else:
                target, path = flat, f"{d}/{key}"
            if value is not None:
                target[path] = FileReading(path, f"{value}\n")
        if layout == "old":
            for sub in ("stations", "setup"):
                flat[f"{d}/{sub}"] = FileReading(f"{d}/{sub}", None, error="is a directory")
    dmesg = f"[{load_stamp:12.6f}] [drm] amdgpu kernel modesetting enabled.\n" if load_stamp is not None else ""
    return Readings({
        "ualink": flat, "ualink_stations": stations, "ualink_setup": setup,
        "uptime": FileReading("/proc/uptime", f"{uptime} 1234.5\n"),
        "dmesg": CommandReading("dmesg", 0, f"[    1.000000] Linux version 6.8\n{dmesg}", ""),
        "boot_id": FileReading(ualink.BOOT_ID.path, f"{boot_id}\n"),
        "vendors": {f"/sys/class/drm/card{c}/device/vendor": FileReading(f"/sys/class/drm/card{c}/device/vendor",
                                                                        "0x1002\n") for c in range(4)},
    })


def without_ualink(r, card, visible=True):
    """``r`` with one card's ualink/ directory gone (and the GPU itself too unless ``visible``)."""
    for key in ("ualink", "ualink_stations", "ualink_setup"):
        for path in [p for p in r.raw()[key] if f"/card{card}/" in p]:
            del r.raw()[key][path]
    if not visible:
        del r.raw()["vendors"][f"/sys/class/drm/card{card}/device/vendor"]
    return r


def judge(r, baseline=None, **params):
    return testing.judge(CHECK, r, node="ct13", baseline=baseline, **params)


def findings(verdicts):
    return [(v.status, v.gpu, v.remediation) for v in verdicts if v.status != Status.PASS]


@pytest.mark.parametrize("layout", ["new", "old"])
def test_healthy_node_passes_every_card_in_both_layouts(layout):
    verdicts = judge(readings(layout=layout))
    assert findings(verdicts) == []
    assert sorted(v.gpu for v in verdicts) == [0, 1, 2, 3]
    assert "station_lane_en_bitmap ffffffffffffffffff" in verdicts[0].message


def test_cards_map_by_card_number_and_accel_id_file_not_by_position():
    cards = ualink_cards(readings())
    assert {n: c.accel_id() for n, c in cards.items()} == {0: 51, 1: 50, 2: 49, 3: 48}


def test_ready_warns_and_other_states_fail():
    verdicts = judge(readings({1: {"accel_state": "ready"}, 3: {"accel_state": "error"}}))
    assert findings(verdicts) == [(Status.WARN, 1, "UALINK-NOT-ACTIVE"), (Status.FAIL, 3, "UALINK-NOT-ACTIVE")]
    assert "'error'" in [v for v in verdicts if v.gpu == 3][0].message


@pytest.mark.parametrize("state", ["configured", "ppod_configured", "vpod_configured"])
def test_revision_b_configured_states_are_named_as_the_whole_job_falling_back(state):
    """§29 (rocm-systems #6112): MNNVL needs ACTIVE or READY on all ranks; one configured card moves everyone off."""
    verdicts = judge(readings({2: {"accel_state": state}}))
    assert findings(verdicts) == [(Status.FAIL, 2, "UALINK-JOB-FALLBACK")]
    assert "the whole job falls back" in next(v for v in verdicts if v.gpu == 2).message


def test_accepted_and_tolerated_sets_are_params():
    verdicts = judge(readings({1: {"accel_state": "ready"}}), accepted_states=["active", "ready"],
                     tolerated_states=[])
    assert findings(verdicts) == []


def test_unconfigured_within_grace_warns_with_the_load_age():
    verdicts = judge(readings({2: {"accel_state": "unconfigured"}}, uptime="45.50 80.00", load_stamp=15.5))
    assert findings(verdicts) == [(Status.WARN, 2, "UALINK-NOT-ACTIVE")]
    assert "loaded 30s ago (within the 60s grace" in [v for v in verdicts if v.gpu == 2][0].message


def test_unconfigured_beyond_grace_fails():
    verdicts = judge(readings({2: {"accel_state": "unconfigured"}}))
    assert findings(verdicts) == [(Status.FAIL, 2, "UALINK-NOT-ACTIVE")]
    assert "loaded 4985s ago, beyond the 60s grace" in [v for v in verdicts if v.gpu == 2][0].message


def test_unknown_load_time_counts_as_beyond_grace_and_says_so():
    verdicts = judge(readings({0: {"accel_state": "unconfigured"}}, uptime="30.00 10.00", load_stamp=None))
    (bad,) = [v for v in verdicts if v.gpu == 0]
    assert bad.status == Status.FAIL
    assert "load time unknown" in bad.message and "treated as beyond the 60s grace" in bad.message


def test_grace_is_a_param():
    verdicts = judge(readings({2: {"accel_state": "unconfigured"}}), unconfigured_grace_s=10000)
    assert findings(verdicts) == [(Status.WARN, 2, "UALINK-NOT-ACTIVE")]


STUCK = {"accel_state": "unconfigured", "ppod_id": "00000000-0000-0000-0000-000000000000", "vpod_id": "0",
         "accel_id": "4294967295", "link_type": "invalid"}


def test_stuck_unconfigured_signature_has_its_own_remedy():
    verdicts = judge(readings({1: STUCK}))
    assert (Status.FAIL, 1, "UALINK-STUCK-UNCONFIGURED") in findings(verdicts)
    (stuck,) = [v for v in verdicts if v.remediation == "UALINK-STUCK-UNCONFIGURED"]
    assert "waiting will not fix it" in stuck.message
    assert stuck.evidence["card1/ualink/accel_id"] == "4294967295"
    assert "rmmod amdgpu" in REGISTRY.remediations["UALINK-STUCK-UNCONFIGURED"].text


def test_stuck_signature_within_grace_is_still_only_a_warning():
    verdicts = judge(readings({1: STUCK}, uptime="20.0 1.0", load_stamp=12.0))
    assert (Status.WARN, 1, "UALINK-NOT-ACTIVE") in findings(verdicts)
    assert all(v.remediation != "UALINK-STUCK-UNCONFIGURED" for v in verdicts)


def test_active_card_with_unset_accel_id_or_invalid_link_type_fails():
    verdicts = judge(readings({0: {"accel_id": "4294967295"}, 3: {"link_type": "invalid"}}))
    bad = findings(verdicts)
    assert (Status.FAIL, 0, "UALINK-CARD-INVALID") in bad
    assert (Status.FAIL, 3, "UALINK-CARD-INVALID") in bad
    assert "link_type is 'invalid' (need UALoE or UALink)" in [v for v in verdicts if v.gpu == 3][0].message


def test_odd_lane_bitmap_names_the_card_both_values_and_the_station():
    verdicts = judge(readings({2: {"lane_bitmap": "fffffffffffffffff3"}}))
    card2 = [v for v in verdicts if v.gpu == 2]
    assert [(v.status, v.remediation) for v in card2] == [(Status.FAIL, "UALINK-LANES")] * 2
    half, odd = card2
    assert "half-enabled station(s) 17 reads '3' (port 1 down, port 0 up)" in half.message
    assert odd.message == ("card2 station_lane_en_bitmap fffffffffffffffff3 differs from card0, card1, card3 "
                           "(ffffffffffffffffff); station(s) 17 (f->3)")
    assert all(v.status == Status.PASS for v in verdicts if v.gpu != 2)


def test_half_enabled_station_index_counts_from_the_left_and_policy_is_a_param():
    r = readings({c: {"lane_bitmap": "0xffcfffffffffffffff"} for c in range(4)})
    verdicts = judge(r)
    assert {v.status for v in verdicts} == {Status.FAIL}
    assert "half-enabled station(s) 2 reads 'c'" in verdicts[0].message
    assert {v.status for v in judge(r, half_station="warn")} == {Status.WARN}


def test_zero_bitmap_fails_and_a_2_2_split_names_both_groups():
    verdicts = judge(readings({0: {"lane_bitmap": "0"}, 1: {"lane_bitmap": "0"}}))
    zero = [v for v in verdicts if "no lane enabled" in v.message]
    assert [(v.gpu, v.status) for v in zero] == [(0, Status.FAIL), (1, Status.FAIL)]
    split = [v for v in verdicts if "no majority" in v.message]
    assert split and {v.status for v in split} == {Status.FAIL}
    assert [v.gpu for v in split] == [0, 1, 2, 3]
    assert "0 on card0, card1; ffffffffffffffffff on card2, card3" in split[0].message


def test_bitmap_that_is_not_hex_is_an_error_not_a_pass():
    verdicts = judge(readings({1: {"lane_bitmap": "garbage!"}}))
    assert any(v.status == Status.ERROR and "not a hex lane bitmap" in v.message for v in verdicts)


def test_local_accels_must_agree_and_hold_each_cards_own_id():
    verdicts = judge(readings({3: {"local_accels": "51 50 49 47"}}))
    bad = [v for v in verdicts if v.remediation == "UALINK-LOCAL-ACCELS"]
    assert [(v.gpu, v.status) for v in bad] == [(3, Status.FAIL), (3, Status.FAIL)]
    assert "the other cards list 51 50 49 48" in bad[0].message
    assert "accel_id 48 is not in its own local_accels (51 50 49 47)" in bad[1].message


def test_no_ualink_directory_fails_and_unreadable_glob_is_an_error():
    empty = Readings({"ualink": {}, "ualink_stations": {}, "ualink_setup": {},
                      "uptime": Unavailable("x"), "dmesg": Unavailable("x"), "boot_id": Unavailable("x")})
    (v,) = judge(empty)
    assert v.status == Status.FAIL and "no GPU exposes" in v.message
    broken = Readings({"ualink": Unavailable("node deadline reached"), "ualink_stations": {}, "ualink_setup": {},
                       "uptime": Unavailable("x"), "dmesg": Unavailable("x"), "boot_id": Unavailable("x")})
    (v,) = judge(broken)
    assert v.status == Status.ERROR and "node deadline reached" in v.message


def test_amd_gpu_without_a_ualink_directory_fails_by_card_number():
    verdicts = judge(without_ualink(readings(), 2))
    assert findings(verdicts) == [(Status.FAIL, 2, "UALINK-MISSING")]
    (v,) = [v for v in verdicts if v.gpu == 2]
    assert v.message == "card2 is an AMD GPU without a ualink/ directory: its accelerator can never become active"
    assert sorted(v.gpu for v in verdicts if v.status == Status.PASS) == [0, 1, 3]


def test_gpu_missing_altogether_is_one_node_line_naming_its_accel_id():
    verdicts = judge(without_ualink(readings(), 1, visible=False))
    assert findings(verdicts) == [(Status.FAIL, None, "UALINK-MISSING")]
    (v,) = [v for v in verdicts if v.gpu is None]
    assert v.message == ("1 GPU(s) missing: 3 card(s) expose ualink/, the inventory expects 4 GPUs per node; "
                         "accel_id(s) 50 in local_accels belong to no card")


def test_shortfall_is_counted_when_the_vendor_glob_is_unreadable_and_a_card_not_up_hides_no_id():
    r = without_ualink(readings({0: STUCK}), 3)
    verdicts = judge(Readings({**r.raw(), "vendors": Unavailable("node deadline reached")}))
    assert findings(verdicts) == [(Status.FAIL, 0, "UALINK-STUCK-UNCONFIGURED"), (Status.FAIL, None, "UALINK-MISSING")]
    assert [v.message for v in verdicts if v.gpu is None] == [
        "1 GPU(s) missing: 3 card(s) expose ualink/, the inventory expects 4 GPUs per node"]


def test_named_and_invisible_gpus_together():
    r = without_ualink(without_ualink(readings(), 2), 3, visible=False)
    verdicts = judge(r)
    assert findings(verdicts) == [(Status.FAIL, 2, "UALINK-MISSING"), (Status.FAIL, None, "UALINK-MISSING")]
    assert "1 GPU(s) missing: 2 card(s) expose ualink/ (and 1 AMD card(s) without it)" in verdicts[1].message


def test_unreadable_file_errors_that_card_only():
    r = readings()
    path = "/sys/class/drm/card1/device/ualink/accel_state"
    r.raw()["ualink"][path] = FileReading(path, None, error="Permission denied")
    verdicts = judge(r)
    assert [(v.status, v.gpu) for v in verdicts if v.status != Status.PASS] == [(Status.ERROR, 1)]
    assert "Permission denied" in [v for v in verdicts if v.gpu == 1][0].message


# --- baseline -----------------------------------------------------------------------------------------


def recorded(r):
    """A record as it comes back from the baseline YAML file."""
    return yaml.safe_load(yaml.safe_dump(CHECK.record(r, None)))


@pytest.mark.parametrize("layout", ["new", "old"])
def test_record_keeps_per_card_readings_and_boot_id(layout):
    rec = recorded(readings(layout=layout))
    assert rec["boot_id"] == BOOT
    assert rec["cards"][2] == {"accel_id": 49, "local_accels": [51, 50, 49, 48],
                               "station_lane_en_bitmap": FULL, "link_type": "UALoE"}


def test_no_baseline_means_no_drift_verdict_at_all():
    verdicts = judge(readings())
    assert [(v.gpu, v.status, v.remediation) for v in verdicts] == [(c, Status.PASS, None) for c in range(4)]
    assert all("baseline" not in v.message for v in verdicts)


def test_unchanged_readings_pass_and_a_reboot_is_only_noted():
    rec = recorded(readings())
    verdicts = judge(readings(boot_id="11111111-2222-3333-4444-555555555555"), baseline=rec)
    assert findings(verdicts) == []
    (note,) = [v for v in verdicts if v.gpu is None]
    assert note.status == Status.PASS
    assert f"rebooted since the baseline: boot_id {BOOT} -> 11111111-2222-3333-4444-555555555555" in note.message


def test_drift_fails_per_card_with_old_to_new():
    rec = recorded(readings())
    verdicts = judge(readings({2: {"lane_bitmap": "fffffffffffffffff3"}}, boot_id="1-2"), baseline=rec)
    (drift,) = [v for v in verdicts if v.remediation == "UALINK-DRIFT"]
    assert drift.status == Status.FAIL and drift.gpu == 2
    assert drift.message.startswith("card2 station_lane_en_bitmap: ffffffffffffffffff -> fffffffffffffffff3")
    assert "boot_id" in drift.message


def test_uniform_drift_that_looks_healthy_is_caught_only_by_the_baseline():
    rec = recorded(readings())
    changed = readings({c: {"lane_bitmap": "ffffffffffff0fffff"} for c in range(4)})
    assert findings(judge(changed)) == []
    drifted = findings(judge(changed, baseline=rec))
    assert drifted == [(Status.FAIL, c, "UALINK-DRIFT") for c in range(4)]


def test_changed_accel_id_and_local_accels_and_missing_card_drift():
    rec = recorded(readings())
    rec["cards"][4] = dict(rec["cards"][3])
    r = readings({c: {"local_accels": "0 1 2 3", "accel_id": str(3 - c)} for c in range(4)})
    verdicts = [v for v in judge(r, baseline=rec) if v.remediation == "UALINK-DRIFT"]
    assert [(v.gpu, v.status) for v in verdicts] == [(c, Status.FAIL) for c in range(5)]
    assert verdicts[0].message == "card0 accel_id: 51 -> 3; card0 local_accels: 51 50 49 48 -> 0 1 2 3"
    assert "in the baseline but has no ualink directory now" in verdicts[4].message


def test_unrecorded_baseline_entry_warns_to_re_record():
    verdicts = judge(readings(), baseline={"unrecorded": "glob not finished"})
    (v,) = [v for v in verdicts if v.remediation == "UALINK-DRIFT"]
    assert v.status == Status.WARN and "glob not finished" in v.message


def test_a_card_that_is_not_up_is_not_compared_for_lanes():
    verdicts = judge(readings({0: {**STUCK, "lane_bitmap": "0", "local_accels": ""}}))
    assert findings(verdicts) == [(Status.FAIL, 0, "UALINK-STUCK-UNCONFIGURED")]


def test_trimmed_trailing_stations_compare_equal_to_disabled_ones():
    trimmed = {0: {"lane_bitmap": "0xffffffffffffffff"}}
    (odd,) = [v for v in judge(readings(trimmed)) if v.status != Status.PASS]
    assert odd.gpu == 0 and odd.message.endswith("station(s) 16 (f->0), 17 (f->0)")
    same = readings({c: {"lane_bitmap": "ffffffffffffffff00"} for c in range(1, 4)} | trimmed)
    assert findings(judge(same)) == []


def test_several_half_stations_of_a_card_make_one_finding():
    verdicts = judge(readings({c: {"lane_bitmap": "33ffffffffffffffff"} for c in range(4)}))
    assert [(v.gpu, v.status) for v in verdicts] == [(c, Status.FAIL) for c in range(4)]
    assert verdicts[0].message == ("card0 station_lane_en_bitmap 33ffffffffffffffff: half-enabled station(s) "
                                   "0 reads '3' (port 1 down, port 0 up), 1 reads '3' (port 1 down, port 0 up)")


def test_each_cards_verdict_carries_the_card_and_its_accid_for_the_rack_map():
    from k3doctor.results import CardId

    verdicts = judge(readings({0: {"accel_id": "4294967295"}}))
    by_gpu = {v.gpu: [f for f in v.figures if isinstance(f, CardId)] for v in verdicts if v.gpu is not None}
    assert {g: {f.acc_id for f in fs} for g, fs in by_gpu.items()} == {0: {None}, 1: {50}, 2: {49}, 3: {48}}
