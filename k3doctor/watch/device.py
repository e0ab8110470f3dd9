"""Device health under load (reference §31.2 signal 4, §29), per card from its sysfs: ``gpu_busy_percent``, the
current and top ``pp_dpm_sclk`` levels, and hwmon's power and power cap.

- A GPU busy (>= 90 %) whose current gfx clock is below half its top level is throttled or stuck low (MI300X
  seen at 60-70 MHz under load, ROCm legacy #4414): GPU-CLOCKS-LOW-UNDER-LOAD.
- A GPU 100 % busy while drawing under a fifth of its power cap is the §29 stalled queue ("100 %" at idle power,
  legacy-rocm-build #6530): GPU-BUSY-AT-IDLE-POWER, the cause - its low clocks are not said again beside it.
  Where hwmon gives no cap the rule is not judged (an idle wattage differs per board).
- A GPU idle at low clocks (the deep-sleep ``S`` level) is healthy, and a busy GPU at its top clock is working.
- Once the engine's processes are gone (the watch saw them, none is left, not even defunct), a card still holding
  more than rack-free's ``max_vram_pct`` of its VRAM (``mem_info_vram_used`` / ``_total``) holds an orphaned KFD
  context (§29: only a reset or a reboot frees it): GPU-VRAM-HELD-AFTER-EXIT. The driver frees a process's VRAM
  when its last file closes, so the two reads in a row are its grace.

Each holds only after two reads in a row (one read catches a clock ramping up) and clears when a read no longer
shows it. A card without ``gpu_busy_percent`` (not every driver has it) is not judged; a value that does not
parse is UNKNOWN for that card, never healthy.
"""
from __future__ import annotations

from k3doctor.checks.rack import MAX_VRAM_PCT
from k3doctor.parsers import ParseError
from k3doctor.parsers.dpm import current_mhz, top_level_mhz
from k3doctor.parsers.gpu_sysfs import parse_busy_percent, parse_microwatts, parse_vram_bytes
from k3doctor.readings import FileReading
from k3doctor.watch.events import Condition, live
from k3doctor.watch.gpu_events import card_of

BUSY_PCT, STALLED_BUSY_PCT = 90, 100
LOW_CLOCK_FRACTION = 0.5  # of the top pp_dpm_sclk level
IDLE_POWER_FRACTION = 0.2  # of the power cap (an inference: MI300X idles near 140 W of 750 W, §27 style)
READS_IN_A_ROW = 2
POWER_NOW = ("power1_input", "power1_average")  # newer SMUs give the instant value, older the average


def _files(reading) -> dict:
    """card -> {file name -> text} of one glob reading (files that exist and were read whole)."""
    out: dict = {}
    for path, file in (reading or {}).items():
        card = card_of(path)
        if card is not None and isinstance(file, FileReading) and file.exists:
            text = None if file.content is None or file.truncated else file.content
            out.setdefault(card, {})[path.rsplit("/", 1)[-1]] = text
    return out


def _read_card(busy_text, sclk_text, power: dict) -> tuple:
    """(busy %, current MHz, top MHz, watts or None, cap watts or None) of one card; ParseError if unread."""
    if busy_text is None or sclk_text is None:
        raise ParseError("gpu_busy_percent or pp_dpm_sclk not read whole")
    busy = parse_busy_percent(busy_text)
    now, top = current_mhz(sclk_text, "pp_dpm_sclk"), top_level_mhz(sclk_text, "pp_dpm_sclk")
    name = next((n for n in POWER_NOW if n in power), None)
    watts = parse_microwatts(power[name] or "", name) if name else None
    cap = parse_microwatts(power["power1_cap"] or "", "power1_cap") if "power1_cap" in power else None
    return busy, now, top, watts, cap


def judge_device(node: str, state: dict, got: dict) -> list:
    """The device-health conditions of every card of ``node`` this interval (``got``: the sample's readings)."""
    unread = [f"{name}: {getattr(got[name], 'reason', got[name])}" for name in ("busy", "sclk", "power", "vram")
              if got.get(name) is not None and not isinstance(got[name], dict)]
    if unread:
        state.pop("device", None)
        return [Condition("DEVICE-UNREAD", node, "node", "unknown",
                          f"GPU load, clocks or power not read ({'; '.join(unread)}): not judged", "§31.2")]
    busy, sclk, power = (_files(got.get(name)) for name in ("busy", "sclk", "power"))
    marks, found = state.setdefault("device", {}), []
    if state.get("engine_exited"):
        found += _held_vram(node, marks, _files(got.get("vram")))
    else:
        for mark in marks.values():
            mark.pop("vram_held", None)
    for card in sorted(busy):
        try:
            load, now, top, watts, cap = _read_card(busy[card].get("gpu_busy_percent"),
                                                    sclk.get(card, {}).get("pp_dpm_sclk"), power.get(card, {}))
        except ParseError as exc:
            marks.pop(card, None)
            found.append(Condition("DEVICE-UNREAD", node, card, "unknown",
                                   f"{card} load, clock or power not read: {exc}", "§31.2"))
            continue
        mark = marks.setdefault(card, {})
        idle = load >= STALLED_BUSY_PCT and cap and watts is not None and watts < IDLE_POWER_FRACTION * cap
        low = load >= BUSY_PCT and now < LOW_CLOCK_FRACTION * top
        mark["idle_power"] = mark.get("idle_power", 0) + 1 if idle else 0
        mark["low_clock"] = mark.get("low_clock", 0) + 1 if low else 0
        if mark["idle_power"] >= READS_IN_A_ROW:
            found.append(live("GPU-BUSY-AT-IDLE-POWER", node, card,
                              f"{card}: {load} % busy while drawing {watts:.0f} W of its {cap:.0f} W cap, "
                              f"{mark['idle_power']} reads in a row: a queue the GPU never drains, not work (§29)"))
        elif mark["low_clock"] >= READS_IN_A_ROW:
            found.append(live("GPU-CLOCKS-LOW-UNDER-LOAD", node, card,
                              f"{card}: {load} % busy at {now} MHz, under half its top gfx clock {top} MHz, "
                              f"{mark['low_clock']} reads in a row: throttled or stuck low (§31.2 signal 4)"))
    return found


def _held_vram(node: str, marks: dict, vram: dict) -> list:
    """The cards that still hold VRAM after the engine exited (two reads in a row)."""
    found = []
    for card, files in sorted(vram.items()):
        mark = marks.setdefault(card, {})
        try:
            used = parse_vram_bytes(files.get("mem_info_vram_used") or "", "mem_info_vram_used")
            total = parse_vram_bytes(files.get("mem_info_vram_total") or "", "mem_info_vram_total")
        except ParseError as exc:
            found.append(Condition("DEVICE-UNREAD", node, card, "unknown", f"{card} VRAM use not read: {exc}",
                                   "§31.2"))
            continue
        held = total > 0 and used * 100 > MAX_VRAM_PCT * total
        mark["vram_held"] = mark.get("vram_held", 0) + 1 if held else 0
        if mark["vram_held"] >= READS_IN_A_ROW:
            found.append(live("GPU-VRAM-HELD-AFTER-EXIT", node, card,
                              f"{card}: {used / 2**30:.1f} of {total / 2**30:.0f} GiB VRAM still in use after the "
                              f"engine's processes exited (> {MAX_VRAM_PCT} %): an orphaned KFD context; reset "
                              "or reboot before relaunching (§29)"))
    return found
