"""A GPU's own sysfs attributes that reference §31.3 judges before launch: PCIe link training, RAS error
counters and the driver's bad-page list.

Shapes (drivers/pci/pci-sysfs.c, amdgpu_ras.c): ``current_link_speed`` / ``max_link_speed`` print
``"%s\\n"`` of ``pci_speed_string()`` (``32.0 GT/s PCIe``; ``8.0 GT/s PCIe`` on 5.x is ``8 GT/s``;
``Unknown`` when the link is down), ``*_link_width`` ``"%u\\n"``; ``ras/<block>_err_count`` prints
``ue: %lu\\nce: %lu\\n`` (``de: %lu`` too on newer kernels) or ``Query currently inaccessible`` during a
RAS interrupt; ``ras/gpu_vram_bad_pages`` one ``0x%08x : 0x%08x : %c`` line per page (pfn : size : R
reserved, P pending, F failed to reserve). Anything else is a ParseError, never a healthy value.
"""
from __future__ import annotations

import re

from k3doctor.parsers import ParseError
from k3doctor.parsers.common import MAX_DIGITS, require_text, shown

_SPEED = re.compile(r"^(?P<gts>[0-9]{1,3}(?:\.[0-9]{1,2})?) GT/s(?: PCIe)?$")
_WIDTH = re.compile(r"^[0-9]{1,2}$")
_COUNT = re.compile(rf"^(?P<kind>ue|ce|de): ?(?P<n>[0-9]{{1,{MAX_DIGITS}}})$")
_BAD_PAGE = re.compile(r"^0x[0-9a-fA-F]{1,16} : 0x[0-9a-fA-F]{1,16} : (?P<flag>[RPF])$")
BAD_PAGE_FLAGS = {"R": "reserved", "P": "pending", "F": "unreservable"}


def parse_link_speed(text: str) -> float:
    """GT/s of a ``current_link_speed`` / ``max_link_speed`` value (``Unknown``: a link that is down)."""
    value = require_text(text, "PCIe link speed").strip()
    match = _SPEED.match(value)
    if not match or float(match.group("gts")) <= 0:
        raise ParseError(f"PCIe link speed {shown(value)}: not `<n> GT/s`")
    return float(match.group("gts"))


def parse_link_width(text: str) -> int:
    """Lanes of a ``current_link_width`` / ``max_link_width`` value (1..32)."""
    value = require_text(text, "PCIe link width").strip()
    if not _WIDTH.match(value) or not 1 <= int(value) <= 32:
        raise ParseError(f"PCIe link width {shown(value)}: not 1..32 lanes")
    return int(value)


def parse_err_count(text: str) -> dict:
    """``{"ue": n, "ce": n[, "de": n]}`` of one ``ras/<block>_err_count`` file; ue and ce must both be there."""
    counts = {}
    for line in require_text(text, "RAS error count").strip().splitlines():
        match = _COUNT.match(line.strip())
        if not match or match.group("kind") in counts:
            raise ParseError(f"RAS error count: unexpected line {shown(line)}")
        counts[match.group("kind")] = int(match.group("n"))
    if not {"ue", "ce"} <= set(counts):
        raise ParseError(f"RAS error count without both ue and ce: {shown(text)}")
    return counts


def parse_vram_bad_pages(text: str) -> dict:
    """``{"reserved": n, "pending": n, "unreservable": n}`` of ``ras/gpu_vram_bad_pages`` (empty: none)."""
    if not isinstance(text, str):
        raise ParseError(f"gpu_vram_bad_pages: expected text, got {type(text).__name__}")
    counts = dict.fromkeys(BAD_PAGE_FLAGS.values(), 0)
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _BAD_PAGE.match(line.strip())
        if not match:
            raise ParseError(f"gpu_vram_bad_pages: unexpected line {shown(line)}")
        counts[BAD_PAGE_FLAGS[match.group("flag")]] += 1
    return counts
