"""``/proc/meminfo``: the kernel's memory counters (``Name:   <n> kB``, a few without unit).

The host-resources check needs ``MemTotal`` and ``SwapTotal`` (reference §12); a file that lacks
either, or has a line that is not ``Name: number [kB]``, was cut off or is not meminfo at all. A number
is ASCII digits (common.to_int), and none is above 2**50 (1 EiB in kB, far past any host's RAM or a
page count): a larger one is garbled, and a ParseError like every other bad line, never a figure to judge.
"""
from __future__ import annotations

import re

from k3doctor.parsers import ParseError
from k3doctor.parsers.common import require_text, to_int

REQUIRED = ("MemTotal", "SwapTotal")
MAX_VALUE = 2 ** 50  # 1 EiB in kB: no meminfo figure comes near it
_LINE = re.compile(r"^([A-Za-z][A-Za-z0-9_()]*):[ \t]+(\S+)(?: (kB))?$")


def parse_meminfo(text: str) -> dict:
    """``{field: value}``, kB fields converted to bytes (unitless fields such as HugePages_Total
    stay counts). ParseError on a garbled line, a repeated field or a missing MemTotal/SwapTotal."""
    out: dict = {}
    for line in require_text(text, "/proc/meminfo").splitlines():
        if not line.strip():
            continue
        match = _LINE.match(line.strip())
        if not match:
            raise ParseError(f"/proc/meminfo: unexpected line {line!r:.120}")
        name, value, unit = match.groups()
        if name in out:
            raise ParseError(f"/proc/meminfo: {name} appears twice")
        number = to_int(value, f"/proc/meminfo: {name}", maximum=MAX_VALUE)
        if number is None:
            raise ParseError(f"/proc/meminfo: {name} reads {value!r:.40}, not a number")
        out[name] = number * (1024 if unit else 1)
    missing = [name for name in REQUIRED if name not in out]
    if missing:
        raise ParseError(f"/proc/meminfo: no {' or '.join(missing)} (cut off?)")
    if out["MemTotal"] == 0:
        raise ParseError("/proc/meminfo: MemTotal is 0")
    return out
