"""GPUs judged against their rack peers where no spec value exists (issue 21 item 5; reference §29 "judge against
peers", NVIDIA/NVSentinel #1748).

Two measured values are read on every GPU of the rack from sysfs the other checks already read:

- the UALink lane bitmap (``ualink/station_lane_en_bitmap``): ualink-state compares a card with the other
  cards of its node; here a node whose cards agree with each other but not with the rest of the rack is
  named against the rack ("12 of 16 read X, ct17 card0-3 read Y") - what no per-node comparison can see;
- VRAM in use at idle (``mem_info_vram_used``): a GPU that holds far more than its peers is named against
  their median, below any hand-set percentage (rack-free's ``max_vram_pct`` judges the absolute). "Far" is
  robust to the peers' spread: more than ``vram_outlier_mads`` median absolute deviations above the median
  and at least ``vram_outlier_min_gib`` above it (the documented defaults; the sources set no number);
- the clocks a GPU may reach (the top level of ``pp_dpm_sclk`` / ``pp_dpm_mclk``): the same part on every tray
  offers the same levels, so a GPU whose top level is below the rack's is named against it (a power or thermal
  cap, a board in a degraded state) - the current level varies at idle and is not compared.
"""
from __future__ import annotations

import statistics

from k3doctor.api import Glob, ReadingUnavailable, check, error, passed, remediation, warn
from k3doctor.views.gpu import card_of
from k3doctor.views.peers import majority
from k3doctor.views.ualink import nibbles, ualink_cards
from k3doctor.parsers.dpm import top_level_mhz

CHECK = "peer-outliers"
VRAM_USED_GLOB = "/sys/class/drm/card*/device/mem_info_vram_used"
CLOCKS = ("sclk", "mclk")  # pp_dpm_<clock>
GIB = 2**30

OUTLIER = remediation("PEER-OUTLIER", "a GPU or node measures unlike its rack peers", """
No spec value says what this reading must be, but the rest of the rack agrees on it and this GPU (or
node) does not: a degrading or differently configured GPU shows itself this way first (fleet health
practice, §29). Lane bitmap unlike the rack: that node's trays were trained or cabled differently -
reload amdgpu there (ifoe first, §5) and compare again, then check the tray's UALink ports (§6).
A lower top clock level than the peers (pp_dpm_sclk / pp_dpm_mclk): that GPU is capped - read its power cap and
temperature (`amd-smi metric -p -t`), its performance level (power_dpm_force_performance_level) and whether
perf_setup ran on that node (§5); reload amdgpu there if the others were tuned and it was not.
""")
# A code of its own: rack-free's orphaned-VRAM finding on the same GPU explains it (k3doctor/judging/causes.py).
VRAM_OUTLIER = remediation("PEER-VRAM-OUTLIER", "a GPU holds far more VRAM at idle than its rack peers", """
No spec value says how much VRAM an idle GPU holds, but the rest of the rack agrees and this GPU does not
(fleet health practice, §29): something holds memory on it (a leftover context, a stray process, §3/§29) - look
at `rocm-smi --showpids` as root and /sys/class/kfd/kfd/proc on that node. Where rack-free names the same GPU
(a GPU process, or VRAM held with no process: an orphaned KFD context), this finding follows from it.
""")


def _gib(value: float) -> str:
    return f"{value / GIB:.2f} GiB"


def lane_outliers(bitmaps: dict) -> list:
    """Nodes whose cards agree among themselves (so ualink-state is silent) but not with the rack's majority."""
    node_values = {}
    for node, cards in bitmaps.items():
        top, odd = majority(cards)
        if top is not None and not odd:
            node_values[node] = top
    rack_top, odd_nodes = majority(node_values)
    if rack_top is None or not odd_nodes:
        return []
    gpus = sum(len(c) for c in bitmaps.values())
    agreeing = sum(len(bitmaps[n]) for n, v in node_values.items() if v == rack_top)
    return [warn(f"station_lane_en_bitmap: {agreeing} of {gpus} GPUs read {rack_top}, {node} "
                 f"card{','.join(map(str, sorted(bitmaps[node])))} read {node_values[node]} (§6, §29: against its "
                 "peers)", node=node, remediation=OUTLIER,
                 evidence={"rack": rack_top, "here": node_values[node], "agreeing GPUs": agreeing, "GPUs": gpus})
            for node in odd_nodes]


def vram_outliers(used: dict, mads: float, min_gib: float) -> list:
    """GPUs holding more VRAM at idle than the peers' median by more than ``mads`` MADs and ``min_gib``."""
    values = [v for cards in used.values() for v in cards.values()]
    if len(values) < 3:
        return []
    median = statistics.median(values)
    mad = statistics.median(abs(v - median) for v in values)
    limit = median + max(mads * mad, min_gib * GIB)
    out = []
    for node, cards in used.items():
        for card, value in sorted(cards.items()):
            if value > limit:
                peers = sum(1 for v in values if v <= limit)
                out.append(warn(f"VRAM in use at idle: {peers} of {len(values)} GPUs hold at most {_gib(limit)} "
                                f"(median {_gib(median)}), {node} card{card} holds {_gib(value)} (§3, §29: against "
                                "its peers)", node=node, gpu=card, remediation=VRAM_OUTLIER,
                                evidence={"bytes": value, "peer median bytes": median, "limit bytes": limit}))
    return out


def clock_outliers(tops: dict, clock: str) -> list:
    """GPUs whose top ``clock`` level ({node: {card: MHz}}) is below the rack's majority value."""
    values = {(node, card): mhz for node, cards in tops.items() for card, mhz in cards.items()}
    top, odd = majority(values)
    if top is None or len(values) < 3:
        return []
    agreeing = len(values) - len(odd)
    return [warn(f"pp_dpm_{clock} top level: {agreeing} of {len(values)} GPUs reach {top} MHz, {node} card{card} "
                 f"reaches {values[node, card]} MHz (§29: against its peers)", node=node, gpu=card, remediation=OUTLIER,
                 evidence={"MHz": values[node, card], "peers' MHz": top, "agreeing GPUs": agreeing})
            for node, card in odd if values[node, card] < top]


def _reads(settings) -> dict:
    return {"bitmap": Glob("/sys/class/drm/card*/device/ualink/station_lane_en_bitmap"),
            "vram_used": Glob(VRAM_USED_GLOB),
            **{clock: Glob(f"/sys/class/drm/card*/device/pp_dpm_{clock}") for clock in CLOCKS}}


@check(CHECK, title="no GPU or node unlike its rack peers on lane bitmap, idle VRAM or top clocks (§29)",
       scope="cluster", reads=_reads, remediation=(OUTLIER, VRAM_OUTLIER),
       params={"vram_outlier_mads": 5.0, "vram_outlier_min_gib": 1.0},  # a named fault steps aside:
       needs={"amdgpu-driver": ("bitmap", "vram_used", *CLOCKS), "rack-free": ("vram_used",)})
def peer_outliers(per_node, ctx):
    """Item 5 of issue 21: name the odd one against its peers ("15 of 16 read X, ct17 gpu3 reads Y")."""
    bitmaps, used, unread, aside = {}, {}, [], []
    tops = {clock: {} for clock in CLOCKS}
    for node, r in per_node.items():
        if r.not_evaluated("bitmap", "vram_used"):
            aside.append(node)  # a prerequisite's finding on that node already names the fault
            continue
        try:
            cards = ualink_cards({"ualink": r["bitmap"], "ualink_stations": {}, "ualink_setup": {}})
            bitmaps[node] = {n: nibbles(c.get("station_lane_en_bitmap"), f"card{n}") for n, c in cards.items()
                             if c.get("station_lane_en_bitmap") is not None}
            used[node] = {card_of(p): int(reading.text()) for p, reading in r["vram_used"].items() if reading.exists}
            for clock in CLOCKS:  # a node without the files (no DPM interface) is left out of that comparison
                tops[clock][node] = {card_of(p): top_level_mhz(reading.text(), p)
                                     for p, reading in (r.get(clock) or {}).items() if reading.exists}
        except (ReadingUnavailable, ValueError) as exc:
            bitmaps.pop(node, None)
            used.pop(node, None)
            for clock in CLOCKS:
                tops[clock].pop(node, None)
            unread.append(error(f"not compared with its peers: {exc}", node=node))
    found = lane_outliers({n: c for n, c in bitmaps.items() if c}) + vram_outliers(
        used, ctx.param("vram_outlier_mads"), ctx.param("vram_outlier_min_gib"))
    found += [v for clock in CLOCKS for v in clock_outliers(tops[clock], clock)]
    if found:
        return unread + found
    gpus = sum(len(c) for c in used.values())
    left = f" ({', '.join(aside)} not compared: a prerequisite failed there)" if aside else ""
    clocks = "".join(f", {clock} top level ({sum(len(c) for c in tops[clock].values())} GPUs)" for clock in CLOCKS
                     if any(tops[clock].values()))
    return unread + [passed(f"{gpus} GPUs on {len(used)} node(s) agree with their peers on lane bitmap, idle VRAM"
                            f"{clocks}{left}")]
