"""``rocm-smi --showpids``, ``--showmeminfo vram`` and ``--showmemuse``.

Used by the "is the rack free?" gate (reference §3: GPU processes and memory on every node —
necessary, not sufficient) and the HBM-size check (§12).  rocm-smi prints per-GPU fields as
``GPU[n]  : <key>: <value>``; with ``--json`` it prints ``{"card<n>": {key: value}}`` with the
same keys, or only ``WARNING: No JSON data to report`` for options it cannot render.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from k3doctor.parsers import ParseError
from k3doctor.parsers._common import embedded_json, require_text, to_int

_GPU_FIELD = re.compile(r"^GPU\[(\d+)\]\s*:\s*(.+):\s*(\S.*?)\s*$")
_NO_JSON = "No JSON data to report"
_VRAM_TOTAL = "VRAM Total Memory (B)"
_VRAM_USED = "VRAM Total Used Memory (B)"
_VRAM_PERCENT = "GPU Memory Allocated (VRAM%)"


def _gpu_fields(text: str, what: str) -> dict:
    """``{gpu: {key: value}}`` from the ``GPU[n] : key: value`` lines or the ``--json`` form."""
    require_text(text, what)
    if _NO_JSON in text:
        raise ParseError(f"{what}: rocm-smi printed '{_NO_JSON}' (no data for this option)")
    fields: dict = {}
    if re.search(r"^[\[{]", text, re.MULTILINE):
        root = embedded_json(text, what)
        if not isinstance(root, dict):
            raise ParseError(f"{what}: JSON root is not an object")
        for card, values in root.items():
            match = re.fullmatch(r"card(\d+)", card)
            if match and isinstance(values, dict):
                fields[int(match.group(1))] = dict(values)
    else:
        for line in text.splitlines():
            match = _GPU_FIELD.match(line)
            if match:
                fields.setdefault(int(match.group(1)), {})[match.group(2).strip()] = match.group(3)
    if not fields:
        raise ParseError(f"{what}: no per-GPU fields found")
    return fields


def _field(fields: dict, gpu: int, key: str, what: str) -> int | None:
    if key not in fields[gpu]:
        raise ParseError(f"{what}: GPU[{gpu}] has no '{key}' line (truncated output?)")
    return to_int(fields[gpu][key], f"{what}: GPU[{gpu}] {key}")


def parse_meminfo_vram(text: str) -> dict:
    """``rocm-smi --showmeminfo vram [--json]`` -> ``{gpu: (total_bytes, used_bytes)}``.

    Values are bytes; ``N/A`` -> None.  Partitioned GPUs may each report the full physical
    VRAM (corpus: CPX partitions all show 196592 MiB) — reported as printed.
    """
    what = "rocm-smi --showmeminfo vram"
    fields = _gpu_fields(text, what)
    return {
        gpu: (_field(fields, gpu, _VRAM_TOTAL, what), _field(fields, gpu, _VRAM_USED, what))
        for gpu in fields
    }


def parse_showmemuse(text: str) -> dict:
    """``rocm-smi --showmemuse [--json]`` -> ``{gpu: VRAM allocated percent or None}``.

    The InferenceX drain check reads exactly this field (§3); 0% alone does not mean free.
    """
    what = "rocm-smi --showmemuse"
    fields = _gpu_fields(text, what)
    return {gpu: _field(fields, gpu, _VRAM_PERCENT, what) for gpu in fields}


@dataclass(frozen=True)
class KfdProcess:
    """One row of ``rocm-smi --showpids``; ``gpus`` is a count of GPUs, not indices."""

    pid: int
    name: str
    gpus: int | None
    vram_bytes: int | None
    sdma_bytes: int | None
    cu_occupancy: int | None


_PIDS_HEADER = re.compile(r"^PID\s+PROCESS NAME\s+GPU\(s\)\s+VRAM USED\s+SDMA USED(\s+CU OCCUPANCY)?\s*$")
_NO_PIDS = re.compile(r"No KFD PIDs currently running", re.IGNORECASE)


def parse_showpids(text: str) -> list:
    """``rocm-smi --showpids`` -> ``list[KfdProcess]`` (``[]`` only when rocm-smi says none run).

    Columns arrive tab- or space-separated (corpus INDEX); the name is whatever lies between
    the PID and the numeric columns, so names with spaces survive.  A row that does not
    parse raises ParseError rather than being dropped.
    """
    what = "rocm-smi --showpids"
    require_text(text, what)
    if _NO_PIDS.search(text):
        return []
    lines = text.splitlines()
    header = next((i for i, line in enumerate(lines) if _PIDS_HEADER.match(line.strip())), None)
    if header is None:
        raise ParseError(f"{what}: no KFD process table header")
    numeric = 4 if _PIDS_HEADER.match(lines[header].strip()).group(1) else 3
    processes = []
    for line in lines[header + 1:]:
        tokens = line.split()
        if not tokens or line.startswith("="):
            break
        if len(tokens) < numeric + 2:
            raise ParseError(f"{what}: short process row {line!r}")
        tail = [_count(token, f"{what}: {line.strip()!r}") for token in tokens[-numeric:]]
        processes.append(KfdProcess(
            pid=to_int(tokens[0], f"{what}: PID in {line.strip()!r}"),
            name=" ".join(tokens[1:-numeric]),
            gpus=tail[0],
            vram_bytes=tail[1],
            sdma_bytes=tail[2],
            cu_occupancy=tail[3] if numeric == 4 else None,
        ))
    else:
        raise ParseError(f"{what}: process table not terminated (truncated output?)")
    if not processes:
        raise ParseError(f"{what}: process table header without rows or 'No KFD PIDs' message")
    return processes


def _count(token: str, what: str) -> int | None:
    """rocm-smi prints ``UNKNOWN`` (or ``N/A``) where the kernel gives no value."""
    return None if token.upper() == "UNKNOWN" else to_int(token, what)
