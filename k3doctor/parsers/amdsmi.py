"""``amd-smi fabric`` and ``amd-smi static`` (VRAM size, PHYSICAL_ACC_ID), human and ``--json`` forms.

Wide EP needs one PPOD/VPOD across all 16 GPUs and a fabric that is ACTIVE (reference §6, §7);
the KV budget depends on the HBM size per GPU (§12).  The JSON root is either a bare list
(ROCm <= 6.4) or ``{"gpu_data": [...]}``, and entries are either ``{"gpu", "fabric": {...}}``
or flat (§28).  The human form is amd-smi's indented ``KEY: value`` layout; no real fabric
capture exists, so it is parsed by key, not position (§27 item 1).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from k3doctor.parsers import ParseError
from k3doctor.parsers.common import (
    UINT32_MAX,
    embedded_json,
    is_na,
    ppod_or_none,
    require_lines,
    require_text,
    shown,
    to_float,
    to_int,
    to_u32,
)

_KEY_LINE = re.compile(r"^(\s*)([A-Z][A-Z0-9_]*)[ \t]*:(.*)$")  # value stripped in Python: linear time
# Top-level sections `amd-smi static` prints per GPU (amd-smi static --help); a GPU block with
# none of them (`amd-smi list`, `fabric`, a block cut after its `GPU: n` line) is not static output. `vbios`
# became `ifwi` in amd-smi 26.1.0 (ROCm 7.1, reference §29): both count.
_STATIC_SECTIONS = {"asic", "bus", "vbios", "ifwi", "limit", "driver", "board", "ras", "soc_pstate", "xgmi_plpd",
                    "process_isolation", "numa", "vram", "cache_info", "partition", "clock"}

# Key names of the C++ host CLI variant (§27 item 1) mapped onto the Python CLI's.
_FABRIC_KEY_ALIASES = {
    "physical_pod_id": "ppod_id",
    "virtual_pod_id": "vpod_id",
    "accelerator_state": "accel_state",
}
_FABRIC_KEYS = {"accelerator_id", "fabric_type", "ppod_id", "vpod_id", "accel_state", *_FABRIC_KEY_ALIASES}


@dataclass(frozen=True)
class FabricInfo:
    """One GPU's fabric configuration as amd-smi reports it.

    ``available`` is False when amd-smi printed ``fabric_info: "N/A"`` (library call failed);
    all fabric fields are then None.  ``ppod_id`` is None when unset (all-9s CLI sentinel or
    all-zero driver default, §6/§7); ``ppod_id_raw`` keeps what was printed so a check can say
    "not configured".  ``bandwidth_mbps``/``latency_ns``/``version`` of 0 or None are
    unpopulated by this firmware, not a finding (§7).
    """

    gpu: int
    bdf: str | None
    available: bool
    fabric_bdf: str | None = None
    accelerator_id: int | None = None
    fabric_type: str | None = None
    ppod_id: str | None = None
    ppod_id_raw: str | None = None
    ppod_size: int | None = None
    vpod_id: int | None = None
    vpod_size: int | None = None
    local_accelerators: list | None = None
    accel_state: str | None = None
    addr_mode: str | None = None
    version: str | None = None
    bandwidth_mbps: float | None = None
    latency_ns: float | None = None


def _human_blocks(lines: list, what: str) -> list:
    """Nest amd-smi's indented human layout into ``(kind, index, dict)`` per top-level block.

    ``GPU: 0`` (or ``AI_NIC: 0``) at column 0 opens a block; ``KEY:`` with no value opens a
    section; keys are lower-cased so the result has the same shape as ``--json``.  Lines
    that are not ``KEY: value`` (prompts, ``[output truncated]``, list rows) are skipped; a
    key printed twice in one section is garbled output (a repeated line, glued captures).
    """
    blocks = []
    stack: list = []  # (indent of the section header, dict)
    for line in lines:
        match = _KEY_LINE.match(line)
        if not match:
            continue
        indent, key, value = len(match.group(1)), match.group(2), match.group(3).strip()
        if indent == 0:
            body: dict = {}
            blocks.append((key, value, body))
            stack = [(0, body)]
            continue
        if not stack:
            continue
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        if key.lower() in stack[-1][1]:
            raise ParseError(f"{what}: {key} printed twice in one section (garbled or glued output)")
        if value:
            stack[-1][1][key.lower()] = value
        else:
            section: dict = {}
            stack[-1][1][key.lower()] = section
            stack.append((indent, section))
    return blocks


def _gpu_entries(text: str, what: str) -> list:
    """Per-GPU dicts ``{"gpu": n, ...}`` from either output form (human wins if it has GPU blocks).

    The human form must end with a complete line (a capture cut mid-line may end in a
    shortened number); a GPU index that appears twice raises rather than overwriting.
    """
    require_text(text, what)
    human = [(index, body) for kind, index, body in _human_blocks(text.splitlines(), what) if kind == "GPU"]
    if human:
        require_lines(text, what)
        entries = [{**body, "gpu": to_int(index, f"{what}: GPU index")} for index, body in human]
    else:
        root = embedded_json(text, what)
        if isinstance(root, dict):
            root = root.get("gpu_data", [root])
        if not isinstance(root, list) or not root:
            raise ParseError(f"{what}: no GPU entries in JSON")
        for entry in root:
            if not isinstance(entry, dict) or to_int(entry.get("gpu"), f"{what}: gpu") is None:
                raise ParseError(f"{what}: JSON entry without a GPU index: {shown(entry, 80)}")
        entries = root
    seen: set = set()
    for entry in entries:
        gpu = to_int(entry["gpu"], f"{what}: gpu")
        if gpu in seen:
            raise ParseError(f"{what}: GPU {gpu} listed twice (glued or garbled output)")
        seen.add(gpu)
    return entries


def _value_unit(value: Any) -> tuple:
    """``{"value", "unit"}`` (JSON) or ``"<n> <unit>"`` (human) -> (number, unit or None)."""
    if isinstance(value, dict):
        return value.get("value"), value.get("unit")
    if isinstance(value, str) and len(value.split()) == 2:
        return tuple(value.split())
    return value, None


def _quantity(value: Any, unit: str, what: str) -> float | None:
    """A bandwidth/latency reading in ``unit``; UINT32_MAX (driver's unset value, §6) -> None."""
    number, got = _value_unit(value)
    if got is not None and got != unit:
        raise ParseError(f"{what}: expected unit {unit}, got {shown(got)}")
    number = to_float(number, what)
    return None if number == UINT32_MAX else number


def _accelerator_list(value: Any, what: str) -> list | None:
    """``"3, 2, 1, 0"`` or a JSON list -> ints; ``N/A`` -> None; unset UINT32_MAX slots dropped."""
    if is_na(value):
        return None
    items = value if isinstance(value, list) else str(value).split(",")
    ids = [to_u32(item, what) for item in items if not is_na(item)]
    return [i for i in ids if i is not None]


def _text(value: Any, normalise=str) -> str | None:
    return None if is_na(value) else normalise(str(value).strip())


def _version(value: Any) -> str | None:
    """As printed (firmware says "0.1"); UINT32_MAX means not reported (§7, §28)."""
    text = _text(value)
    return None if text == str(UINT32_MAX) else text


def _fabric_info(entry: dict, what: str) -> FabricInfo:
    gpu = to_int(entry["gpu"], f"{what}: gpu")
    node = entry.get("fabric", entry)
    if is_na(node):
        return FabricInfo(gpu=gpu, bdf=_text(entry.get("bdf")), available=False)
    if not isinstance(node, dict):
        raise ParseError(f"{what}: GPU {gpu}: unexpected fabric value {shown(node, 80)}")
    bdf = _text(node.get("bdf", entry.get("bdf")))
    info = node.get("fabric_info", node if _FABRIC_KEYS & node.keys() else None)
    if info is None:
        raise ParseError(f"{what}: GPU {gpu}: no fabric_info")
    if is_na(info):
        return FabricInfo(gpu=gpu, bdf=bdf, available=False)
    if not isinstance(info, dict):
        raise ParseError(f"{what}: GPU {gpu}: unexpected fabric_info {shown(info, 80)}")
    info = {_FABRIC_KEY_ALIASES.get(key, key): value for key, value in info.items()}
    where = f"{what}: GPU {gpu}"
    return FabricInfo(
        gpu=gpu,
        bdf=bdf,
        available=True,
        fabric_bdf=_text(info.get("bdf")),
        accelerator_id=to_u32(info.get("accelerator_id"), f"{where} accelerator_id"),
        fabric_type=_text(info.get("fabric_type"), str.upper),
        ppod_id=ppod_or_none(info.get("ppod_id")),
        ppod_id_raw=_text(info.get("ppod_id")),
        ppod_size=to_u32(info.get("ppod_size"), f"{where} ppod_size"),
        vpod_id=to_u32(info.get("vpod_id"), f"{where} vpod_id"),
        vpod_size=to_u32(info.get("vpod_size"), f"{where} vpod_size"),
        local_accelerators=_accelerator_list(info.get("local_accelerators"), f"{where} local_accelerators"),
        accel_state=_text(info.get("accel_state"), str.lower),
        addr_mode=_text(info.get("addr_mode"), str.lower),
        version=_version(info.get("version")),
        bandwidth_mbps=_quantity(info.get("bandwidth"), "Mb/s", f"{where} bandwidth"),
        latency_ns=_quantity(info.get("latency"), "ns", f"{where} latency"),
    )


def parse_fabric(text: str) -> list:
    """``amd-smi fabric`` (human or ``--json``) -> ``list[FabricInfo]``, one per GPU, in output order."""
    return [_fabric_info(entry, "amd-smi fabric") for entry in _gpu_entries(text, "amd-smi fabric")]


def _mib(size: Any, what: str) -> int | None:
    """amd-smi's "MB" is MiB (196592 MB = 206141652992 B, corpus INDEX); GB -> x1024."""
    number, unit = _value_unit(size)
    number = to_int(number, what)
    if number is None:
        return None
    if unit in (None, "MB"):
        return number
    if unit == "GB":
        return number * 1024
    raise ParseError(f"{what}: unknown unit {shown(unit)}")


def parse_static_vram(text: str) -> dict:
    """``amd-smi static`` (human or ``--json``) -> ``{gpu: VRAM MiB or None}``.

    None means the output had no (or an ``N/A``) VRAM section, e.g. ``static`` run without
    ``--vram`` or a truncated capture — HBM size unknown, never 0 (§12: BLOCK if unknown).
    """
    result = {}
    for entry in _gpu_entries(text, "amd-smi static"):
        gpu = to_int(entry["gpu"], "amd-smi static: gpu")
        if not _STATIC_SECTIONS & entry.keys():
            raise ParseError(f"amd-smi static: GPU {gpu} has none of static's sections "
                             f"({', '.join(sorted(entry.keys() - {'gpu'})) or 'nothing'}): not amd-smi static output")
        vram = entry.get("vram")
        size = vram.get("size") if isinstance(vram, dict) else None
        result[gpu] = _mib(size, f"amd-smi static: GPU {gpu} VRAM size")
    return result


_NOT_SUPPORTED = ("NOT_SUPPORTED", "NOT SUPPORTED")


def parse_physical_acc_ids(text: str) -> dict:
    """``amd-smi static --asic --bus`` (human or ``--json``) -> ``{gpu: (bdf or None, PHYSICAL_ACC_ID or None)}``.

    ``PHYSICAL_ACC_ID`` exists from amd-smi 27.1 (ROCm 10.1, reference §29); an amd-smi before it prints no such
    key and the GPU is left out (nothing to cross-check). UINT32_MAX, ``N/A`` or ``NOT_SUPPORTED`` (no UALoE
    session yet) is None. A GPU without an ASIC section is not static --asic output: ParseError.
    """
    result = {}
    for entry in _gpu_entries(text, "amd-smi static --asic"):
        gpu = to_int(entry["gpu"], "amd-smi static --asic: gpu")
        asic, bus = entry.get("asic"), entry.get("bus")
        if not isinstance(asic, dict):
            raise ParseError(f"amd-smi static --asic: GPU {gpu} has no ASIC section: not static --asic output")
        if "physical_acc_id" not in asic:
            continue
        raw = asic["physical_acc_id"]
        unset = isinstance(raw, str) and raw.strip().upper() in _NOT_SUPPORTED
        bdf = _text(bus.get("bdf")) if isinstance(bus, dict) else None
        result[gpu] = (bdf, None if unset else to_u32(raw, f"amd-smi static --asic: GPU {gpu} PHYSICAL_ACC_ID"))
    return result


_NO_BAD_PAGES = "No bad pages found."
BAD_PAGE_KINDS = ("retired", "pending", "un_res")  # amd-smi bad-pages: RESERVED, PENDING, UNRESERVABLE pages


def parse_bad_pages(text: str) -> dict:
    """``amd-smi bad-pages --json`` -> ``{gpu: {kind: page count or None}}`` for each of BAD_PAGE_KINDS.

    Per kind amd-smi prints ``"No bad pages found."`` (0), one page as an object, several as a list, or ``"N/A"``
    when the library could not read them (None: unknown, never 0). MI300/MI350 raise no out-of-band CPER past
    the bad-page threshold, so this in-band list is where retired pages show (reference §29, §30)."""
    result = {}
    for entry in _gpu_entries(text, "amd-smi bad-pages"):
        gpu = to_int(entry["gpu"], "amd-smi bad-pages: gpu")
        if not set(BAD_PAGE_KINDS) & entry.keys():
            raise ParseError(f"amd-smi bad-pages: GPU {gpu} has none of {', '.join(BAD_PAGE_KINDS)}: not bad-pages "
                             "output")
        counts = {}
        for kind in BAD_PAGE_KINDS:
            value = entry.get(kind)
            if isinstance(value, list):
                counts[kind] = len(value)
            elif isinstance(value, dict):
                counts[kind] = 1
            elif isinstance(value, str) and value.strip() == _NO_BAD_PAGES:
                counts[kind] = 0
            elif value is None or is_na(value):
                counts[kind] = None
            else:
                raise ParseError(f"amd-smi bad-pages: GPU {gpu} {kind}: unexpected {shown(value, 80)}")
        result[gpu] = counts
    return result


COMPUTE_PARTITIONS = ("SPX", "DPX", "TPX", "QPX", "CPX")  # amdsmi_compute_partition_type_t
MEMORY_PARTITIONS = ("NPS1", "NPS2", "NPS4", "NPS8")  # amdsmi_memory_partition_type_t


def parse_partitions(text: str) -> dict:
    """``amd-smi static --partition`` (human or ``--json``) -> ``{gpu: (compute or None, memory or None)}``.

    amdsmi_commands.py prints ``partition: {compute_partition, memory_partition, partition_id}`` per GPU (one
    entry per partition in CPX/DPX); ``N/A`` (no partition support, or the half-applied change of legacy #4439)
    is None, never a mode. A GPU without a partition section or a value outside the modes is a ParseError."""
    result = {}
    for entry in _gpu_entries(text, "amd-smi static --partition"):
        gpu = to_int(entry["gpu"], "amd-smi static --partition: gpu")
        section = entry.get("partition")
        if not isinstance(section, dict) or not {"compute_partition", "memory_partition"} <= section.keys():
            raise ParseError(f"amd-smi static --partition: GPU {gpu} has no compute/memory partition: "
                             f"{shown(section, 80)}")
        modes = []
        for key, known in (("compute_partition", COMPUTE_PARTITIONS), ("memory_partition", MEMORY_PARTITIONS)):
            value = section[key]
            if is_na(value):
                modes.append(None)
            elif isinstance(value, str) and value.strip().upper() in known:
                modes.append(value.strip().upper())
            else:
                raise ParseError(f"amd-smi static --partition: GPU {gpu} {key} {shown(value, 40)}: not one of "
                                 f"{'/'.join(known)} or N/A")
        result[gpu] = tuple(modes)
    return result
