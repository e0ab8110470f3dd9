"""amdgpu's DPM level files (``/sys/class/drm/cardN/device/pp_dpm_sclk``, ``pp_dpm_mclk``): one level a line.

The driver prints ``"%d: %uMhz %s\\n"`` with ``*`` on the current level (``amdgpu_pm.c``, ``smu_v13_0_6_ppt.c``:
``0: 852Mhz *``; the procfs fixture of the corpus) and, on SMU 13+, a deep-sleep line ``S: 19Mhz *``. The highest
numbered level is what the GPU may reach: stable at idle, unlike the current one, so peers compare on it; the
current one (``*``) is what a busy GPU runs at now (the watch, §31.2 signal 4).
"""
from __future__ import annotations

import re

from k3doctor.parsers import ParseError
from k3doctor.parsers.common import require_text, to_int

_LEVEL = re.compile(r"(\d{1,3}|S): (\d{1,7})\s?Mhz\s*\*?\s*")


def top_level_mhz(text: str, what: str) -> int:
    """The highest frequency (MHz) of the numbered levels; the deep-sleep ``S`` level does not count."""
    levels = []
    for line in require_text(text, what).splitlines():
        match = _LEVEL.fullmatch(line)
        if not match:
            raise ParseError(f"{what}: unexpected line {line!r:.80}")
        if match.group(1) != "S":
            levels.append(to_int(match.group(2), f"{what}: frequency"))
    if not levels:
        raise ParseError(f"{what}: no numbered DPM level")
    return max(levels)


def current_mhz(text: str, what: str) -> int:
    """The frequency (MHz) of the one level marked current (``*``), the deep-sleep level included."""
    current = []
    for line in require_text(text, what).splitlines():
        match = _LEVEL.fullmatch(line)
        if not match:
            raise ParseError(f"{what}: unexpected line {line!r:.80}")
        if line.rstrip().endswith("*"):
            current.append(to_int(match.group(2), f"{what}: frequency"))
    if len(current) != 1:
        raise ParseError(f"{what}: {len(current)} levels marked current (*), expected one")
    return current[0]
