"""A GPU's own sysfs attributes that reference §31.3 judges before launch: PCIe link training, RAS error
counters, the driver's bad-page list and its ``bad_page_threshold`` parameter.

Shapes (drivers/pci/pci-sysfs.c, amdgpu_ras.c): ``current_link_speed`` / ``max_link_speed`` print
``"%s\\n"`` of ``pci_speed_string()`` (``32.0 GT/s PCIe``; ``8.0 GT/s PCIe`` on 5.x is ``8 GT/s``;
``Unknown`` when the link is down), ``*_link_width`` ``"%u\\n"``; ``ras/<block>_err_count`` prints
``ue: %lu\\nce: %lu\\n`` (``de: %lu`` too on newer kernels) or ``Query currently inaccessible`` during a
RAS interrupt; ``ras/gpu_vram_bad_pages`` one ``0x%08x : 0x%08x : %c`` line per page (pfn : size : R
reserved, P pending, F failed to reserve); ``/sys/module/amdgpu/parameters/bad_page_threshold`` ``%d``;
``gpu_busy_percent`` ``"%d\n"`` (0..100) and hwmon's ``power1_average`` / ``power1_input`` / ``power1_cap``
``"%u\n"`` in microwatts (amdgpu_pm.c; the watch's device health under load, §31.2 signal 4);
``mem_info_vram_used`` / ``mem_info_vram_total`` ``"%llu\n"`` bytes (amdgpu_vram_mgr.c).
Anything else is a ParseError, never a healthy value.
"""
from __future__ import annotations

import re

from k3doctor.parsers import ParseError
from k3doctor.parsers.amdsmi import BAD_PAGE_KINDS
from k3doctor.parsers.common import MAX_DIGITS, require_text, shown

_SPEED = re.compile(r"^(?P<gts>[0-9]{1,3}(?:\.[0-9]{1,2})?) GT/s(?: PCIe)?$")
_WIDTH = re.compile(r"^[0-9]{1,2}$")
_COUNT = re.compile(rf"^(?P<kind>ue|ce|de): ?(?P<n>[0-9]{{1,{MAX_DIGITS}}})$")
_BAD_PAGE = re.compile(r"^0x[0-9a-fA-F]{1,16} : 0x[0-9a-fA-F]{1,16} : (?P<flag>[RPF])$")
BAD_PAGE_FLAGS = dict(zip("RPF", BAD_PAGE_KINDS))  # amd-smi's names of the same list (rocm_smi reads this file)
_THRESHOLD = re.compile(r"^-?[0-9]{1,10}$")
_UNSIGNED = re.compile(r"^[0-9]{1,12}$")
_BYTES = re.compile(r"^[0-9]{1,16}$")
MAX_GPU_WATTS = 10_000  # no board draws more: a larger value is garbled, not a figure to judge


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
    """``{"retired": n, "pending": n, "un_res": n}`` of ``ras/gpu_vram_bad_pages`` (empty: none): R, P, F lines
    under the names amd-smi bad-pages gives the same list."""
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


def parse_bad_page_threshold(text: str) -> int:
    """The amdgpu ``bad_page_threshold`` module parameter (``%d``: -2, -1, 0 or a page count)."""
    value = require_text(text, "bad_page_threshold").strip()
    if not _THRESHOLD.match(value) or int(value) < -2:
        raise ParseError(f"bad_page_threshold {shown(value)}: not -2, -1 or a page count")
    return int(value)


def parse_busy_percent(text: str) -> int:
    """``gpu_busy_percent``: 0..100."""
    value = require_text(text, "gpu_busy_percent").strip()
    if not _UNSIGNED.match(value) or int(value) > 100:
        raise ParseError(f"gpu_busy_percent {shown(value)}: not 0..100")
    return int(value)


def parse_microwatts(text: str, what: str) -> float:
    """A hwmon power attribute (microwatts) in watts."""
    value = require_text(text, what).strip()
    if not _UNSIGNED.match(value) or int(value) > MAX_GPU_WATTS * 1_000_000:
        raise ParseError(f"{what} {shown(value)}: not microwatts (0..{MAX_GPU_WATTS} W)")
    return int(value) / 1_000_000


def parse_vram_bytes(text: str, what: str) -> int:
    """``mem_info_vram_used`` / ``mem_info_vram_total``: bytes."""
    value = require_text(text, what).strip()
    if not _BYTES.match(value):
        raise ParseError(f"{what} {shown(value)}: not a byte count")
    return int(value)
