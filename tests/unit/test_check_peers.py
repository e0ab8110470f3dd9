"""peer-outliers: a GPU or node named against its rack peers where no spec value exists (issue 21 item 5)."""
from k3doctor.checks import peers  # noqa: F401  (registers peer-outliers)

from k3doctor import testing
from k3doctor.readings import FileReading
from k3doctor.registry import REGISTRY
from k3doctor.results import Status

CHECK = REGISTRY.checks["peer-outliers"]
NODES = ("ct13", "ct14", "ct16", "ct17")
FULL = "ffffffffffffffffff"
GIB = 2**30


def dpm(top, current=0):
    """pp_dpm_* as amdgpu prints it ("%d: %uMhz %s\n", `*` on the current level; SMU 13 adds a deep-sleep S line)."""
    levels = [500, 1600, top]
    return "S: 19Mhz \n" + "".join(f"{i}: {mhz}Mhz {'*' if i == current else ''}\n" for i, mhz in enumerate(levels))


def node(bitmaps=(FULL,) * 4, used=(300 * 2**20,) * 4, sclk=(2400,) * 4, mclk=(1900,) * 4):
    d = "/sys/class/drm/card{}/device"
    return {"bitmap": {f"{d.format(c)}/ualink/station_lane_en_bitmap": FileReading("b", f"{b}\n")
                       for c, b in enumerate(bitmaps)},
            "vram_used": {f"{d.format(c)}/mem_info_vram_used": FileReading("u", f"{u}\n") for c, u in enumerate(used)},
            "sclk": {f"{d.format(c)}/pp_dpm_sclk": FileReading("s", dpm(t, current=c % 3)) for c, t in enumerate(sclk)},
            "mclk": {f"{d.format(c)}/pp_dpm_mclk": FileReading("m", dpm(t)) for c, t in enumerate(mclk)}}


def judge(per_node, **params):
    return testing.judge(CHECK, per_node, **params)


def test_a_healthy_rack_agrees():
    [v] = judge({n: node() for n in NODES})
    assert v.status == Status.PASS and "16 GPUs on 4 node(s) agree" in v.message
    assert "sclk top level (16 GPUs), mclk top level (16 GPUs)" in v.message


def test_a_node_whose_cards_agree_but_differ_from_the_rack_is_named_against_its_peers():
    half = "fffffffffffffff0ff"
    verdicts = judge({**{n: node() for n in NODES[:3]}, "ct17": node((half,) * 4)})
    [v] = [v for v in verdicts if v.status != Status.PASS]
    assert (v.status, v.node, v.remediation) == (Status.WARN, "ct17", "PEER-OUTLIER")
    assert v.message.startswith(f"station_lane_en_bitmap: 12 of 16 GPUs read {FULL}, ct17 card0,1,2,3 read {half}")


def test_one_odd_card_inside_its_node_is_left_to_ualink_state():
    odd = node((FULL, FULL, FULL, "fffffffffffffff0ff"))
    assert [v.status for v in judge({**{n: node() for n in NODES[:3]}, "ct17": odd})] == [Status.PASS]


def test_idle_vram_far_above_the_peers_is_named_with_the_peer_median():
    held = node(used=(300 * 2**20, 300 * 2**20, 6 * GIB, 300 * 2**20))
    verdicts = judge({**{n: node() for n in NODES[:3]}, "ct17": held})
    [v] = [v for v in verdicts if v.status != Status.PASS]
    assert (v.status, v.node, v.gpu) == (Status.WARN, "ct17", 2)
    assert v.message.startswith("VRAM in use at idle: 15 of 16 GPUs hold at most 1.29 GiB (median 0.29 GiB), "
                                "ct17 card2 holds 6.00 GiB")
    # the peers' own spread widens the limit: no hand-set threshold decides it
    spread = {n: node(used=tuple((i + 1) * GIB for i in range(4))) for n in NODES}
    assert [v.status for v in judge(spread)] == [Status.PASS]
    assert [v.status for v in judge({**{n: node() for n in NODES[:3]}, "ct17": held}, vram_outlier_min_gib=8)] == [
        Status.PASS]


def test_an_unreadable_node_is_an_error_not_a_silent_peer():
    bad = node()
    bad["vram_used"]["/sys/class/drm/card0/device/mem_info_vram_used"] = FileReading("u", "garbage\n")
    verdicts = judge({**{n: node() for n in NODES[:3]}, "ct17": bad})
    assert [(v.status, v.node) for v in verdicts] == [(Status.ERROR, "ct17"), (Status.PASS, None)]


def test_a_gpu_whose_top_clock_level_is_below_its_peers_is_named_against_them():
    """§29 (judge against peers): the current level moves at idle (each card here sits on another), the top level
    does not; ct16 card1 reaches 1800 MHz where the 15 others reach 2400."""
    verdicts = judge({**{n: node() for n in NODES if n != "ct16"}, "ct16": node(sclk=(2400, 1800, 2400, 2400))})
    [v] = [v for v in verdicts if v.status != Status.PASS]
    assert (v.status, v.node, v.gpu, v.remediation) == (Status.WARN, "ct16", 1, "PEER-OUTLIER")
    assert v.message.startswith("pp_dpm_sclk top level: 15 of 16 GPUs reach 2400 MHz, ct16 card1 reaches 1800 MHz")
    # a GPU above its peers is not capped; a node without DPM files is left out of that comparison, said in the PASS
    assert [v.status for v in judge({**{n: node() for n in NODES[:3]}, "ct17": node(mclk=(2100,) * 4)})] == [
        Status.PASS]
    bare = {k: v for k, v in node().items() if k not in ("sclk", "mclk")}
    [v] = judge({**{n: node() for n in NODES[:3]}, "ct17": bare})
    assert v.status == Status.PASS and "sclk top level (12 GPUs)" in v.message


def test_a_garbled_dpm_file_is_an_error_for_that_node():
    bad = node()
    bad["sclk"]["/sys/class/drm/card0/device/pp_dpm_sclk"] = FileReading("s", "0: fastMhz *\n")
    verdicts = judge({**{n: node() for n in NODES[:3]}, "ct17": bad})
    assert [(v.status, v.node) for v in verdicts] == [(Status.ERROR, "ct17"), (Status.PASS, None)]
