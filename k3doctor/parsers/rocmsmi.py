"""``rocm-smi --showpids`` and ``--showmemuse``.

Used by the "is the rack free?" gate (reference §3: GPU processes and memory on every node —
necessary, not sufficient).  rocm-smi frames every answer in ``=== ... ===`` spacer lines and
ends it with ``=== End of ROCm SMI Log ===``; per-GPU fields read ``GPU[n]  : <key>: <value>``.
An answer without that last line was cut off, and one that does not cover every GPU of the
node says nothing about the GPUs it left out: both raise ParseError, never a partial result.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from k3doctor.parsers import ParseError
from k3doctor.parsers.common import require_lines, shown, to_int, to_percent

_END = "End of ROCm SMI Log"
_GPU_LINE = re.compile(r"GPU\[([0-9]{1,4})\]\s*:")
_VRAM_PERCENT = "GPU Memory Allocated (VRAM%)"


def _is_spacer(line: str) -> bool:
    """printLogSpacer lines: a rule of ``=`` or ``=== Title ===`` (line already stripped)."""
    return line.startswith("=") and line.endswith("=")


def _log_body(text: str, what: str) -> list:
    """The stripped, non-blank lines of one complete rocm-smi answer, spacers and warnings dropped.

    Exactly one ``End of ROCm SMI Log`` line, with nothing but blank lines after it: no end
    line means the output was cut off; two, or text after it, means two answers were glued.
    """
    lines = [line.strip() for line in require_lines(text, what)]
    ends = [i for i, line in enumerate(lines) if _is_spacer(line) and line.strip("= ") == _END]
    if not ends:
        raise ParseError(f"{what}: no '{_END}' line: output cut off or not rocm-smi's")
    if len(ends) > 1:
        raise ParseError(f"{what}: {len(ends)} '{_END}' lines: several outputs glued together")
    after = [line for line in lines[ends[0] + 1:] if line]
    if after:
        raise ParseError(f"{what}: output continues after '{_END}': {shown(after[0])}")
    return [line for line in lines[:ends[0]] if line and not _is_spacer(line) and not line.startswith("WARNING:")]


def _gpu_fields(text: str, what: str, gpus: int) -> dict:
    """``{gpu: {key: value}}`` from the ``GPU[n] : key: value`` lines, covering GPU 0..gpus-1.

    rocm-smi numbers the GPUs it sees 0..n-1; a gap, fewer than ``gpus`` (the node's count) or
    the same key twice for one GPU is a partial or garbled answer.
    """
    fields: dict = {}
    for line in _log_body(text, what):
        match = _GPU_LINE.match(line)
        if not match:
            continue
        key, colon, value = line[match.end():].partition(":")
        if not colon:
            continue  # printLog without a value, e.g. "GPU[0] : Not supported"
        gpu, key = int(match.group(1)), key.strip()
        if key in fields.setdefault(gpu, {}):
            raise ParseError(f"{what}: GPU[{gpu}] '{key}' printed twice (outputs glued together?)")
        fields[gpu][key] = value.strip()
    missing = sorted(set(range(max(gpus, max(fields, default=-1) + 1))) - set(fields))
    if missing:
        listed = ", ".join(f"GPU[{g}]" for g in sorted(fields)) or "no GPU"
        raise ParseError(f"{what}: covers {listed}, not " + ", ".join(f"GPU[{g}]" for g in missing)
                         + f" (the node has {gpus} GPU(s)): output cut off or a GPU not enumerated")
    return fields


def parse_showmemuse(text: str, gpus: int) -> dict:
    """``rocm-smi --showmemuse`` -> ``{gpu: VRAM allocated percent or None}`` for every GPU.

    ``gpus`` is the number of GPUs the node has (the inventory's gpus_per_node): a reading
    that lists fewer is an error, not a node with fewer busy GPUs.  The InferenceX drain check
    reads exactly this field (§3); 0% alone does not mean free.
    """
    what = "rocm-smi --showmemuse"
    fields = _gpu_fields(text, what, gpus)
    out = {}
    for gpu, values in sorted(fields.items()):
        if _VRAM_PERCENT not in values:
            raise ParseError(f"{what}: GPU[{gpu}] has no '{_VRAM_PERCENT}' line")
        out[gpu] = to_percent(values[_VRAM_PERCENT], f"{what}: GPU[{gpu}] {_VRAM_PERCENT}")
    return out


@dataclass(frozen=True)
class KfdProcess:
    """One row of ``rocm-smi --showpids``; ``gpus`` is a count of GPUs, not indices."""

    pid: int
    name: str
    gpus: int | None
    vram_bytes: int | None
    sdma_bytes: int | None
    cu_occupancy: int | None


_PIDS_HEADER = re.compile(r"PID\s+PROCESS NAME\s+GPU\(s\)\s+VRAM USED\s+SDMA USED(\s+CU OCCUPANCY)?")
_NO_PIDS = "No KFD PIDs currently running"
_TABLE_TITLE = "KFD process information:"


def parse_showpids(text: str) -> list:
    """``rocm-smi --showpids`` -> ``list[KfdProcess]``.

    ``[]`` only when "No KFD PIDs currently running" is the whole answer: next to a process
    table it is a garbled answer, not "nothing runs".  Columns arrive tab- or space-separated
    (corpus INDEX); the name is whatever lies between the PID and the numeric columns, so
    names with spaces survive.  Every line of the table must be a row.
    """
    what = "rocm-smi --showpids"
    body = _log_body(text, what)
    if body == [_NO_PIDS]:
        return []
    if _NO_PIDS in body:
        raise ParseError(f"{what}: '{_NO_PIDS}' next to other output: {shown(body[0])}")
    if body[:1] == [_TABLE_TITLE]:
        body = body[1:]
    header = _PIDS_HEADER.fullmatch(body[0]) if body else None
    if header is None:
        raise ParseError(f"{what}: neither '{_NO_PIDS}' nor a KFD process table")
    if len(body) == 1:
        raise ParseError(f"{what}: process table header without rows")
    numeric = 4 if header.group(1) else 3
    return [_process(line, numeric, what) for line in body[1:]]


def _process(line: str, numeric: int, what: str) -> KfdProcess:
    tokens = line.split()
    where = f"{what}: row {shown(line, 80)}"
    if len(tokens) < numeric + 2:
        raise ParseError(f"{where}: too few columns")
    tail = [_count(token, where) for token in tokens[-numeric:]]
    return KfdProcess(
        pid=to_int(tokens[0], f"{where} PID"),
        name=" ".join(tokens[1:-numeric]),
        gpus=tail[0],
        vram_bytes=tail[1],
        sdma_bytes=tail[2],
        cu_occupancy=tail[3] if numeric == 4 else None,
    )


def _count(token: str, what: str) -> int | None:
    """rocm-smi prints ``UNKNOWN`` (or ``N/A``) where the kernel gives no value."""
    return None if token.upper() == "UNKNOWN" else to_int(token, what)
