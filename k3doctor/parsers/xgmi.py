"""``amd-smi xgmi`` (human form): the LINK METRIC TABLE and the XGMI LINK STATUS table (reference §30).

The layout is amd-smi's own (``amdsmi_cli`` ``xgmi`` command, ROCm/rocm-systems ``projects/amdsmi``): with
no option it prints the LINK METRIC TABLE (per GPU: bdf, bit_rate, max_bandwidth, link_type, then Read/Write
rows per peer), the GPU LINK PORT STATUS (one letter per port) and the XGMI LINK STATUS (per GPU pair: ``U``,
``D``, ``X`` - joined by ``/`` when several links go to the same peer - ``SELF`` on the diagonal, ``N/A`` where
no link to that peer was found or the status is not supported), then a legend. Columns may run together
(``65535 Gb/s4294967295 Gb/sN/A`` on a host without XGMI) and a row may start ``GPU0<TAB>bdf``; both are real
captures (rocm-systems PR #2053's changelog, a public ROCm issue thread).

The port table is not kept: every port that leads to a peer also shows in the pair table, and unused ports
read ``X`` on healthy nodes (§30). Anything cut short - no pair table (older amd-smi prints only the metric
table), no legend (the capture stopped), a row with too few cells, a GPU in one table and not the other - is a
ParseError: the check never judges links it did not read.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from k3doctor.parsers import ParseError
from k3doctor.parsers.common import UINT32_MAX, require_lines, shown, to_float

_BDF = r"(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
_ROW = re.compile(rf"^GPU([0-9]{{1,3}})[ \t]+({_BDF})[ \t]*(.*)$")
_RATE = r"(N/A|[0-9.]{1,24} Gb/s)"
_METRICS = re.compile(rf"^{_RATE}[ \t]*{_RATE}[ \t]*(\S+)[ \t]*$")
_PAIR_HEADER = re.compile(r"^[ \t]*bdf((?:[ \t]+GPU[0-9]{1,3})+)[ \t]*$")
_READ_WRITE = re.compile(r"^[ \t]+(Read|Write)\b")
_STATUS = re.compile(r"^(SELF|N/A|[UDX](?:/[UDX]){0,15})$")
_TITLES = {"LINK METRIC TABLE:": "metric", "GPU LINK PORT STATUS:": "ports", "XGMI LINK STATUS:": "pairs"}
_LEGEND = "U / D / X = Link is Up / Down / Disabled"
NO_XGMI_RATES = (65535.0, float(UINT32_MAX))  # what amd-smi printed for a GPU without XGMI links (§30)


@dataclass(frozen=True)
class XgmiGpu:
    """One GPU's row of the LINK METRIC TABLE. ``bit_rate_gbps``/``max_bandwidth_gbps`` are None for ``N/A``."""

    gpu: int
    bdf: str
    bit_rate_gbps: float | None
    max_bandwidth_gbps: float | None
    link_type: str  # XGMI, PCIE, UNKNOWN or N/A


@dataclass(frozen=True)
class XgmiReport:
    gpus: dict  # gpu -> XgmiGpu
    links: dict  # (source gpu, peer gpu) -> status cell as printed ("U", "D", "U/D", "X", "N/A"), SELF left out


def _rate(text: str, what: str) -> float | None:
    return None if text == "N/A" else to_float(text.split()[0], what)


def _metric_row(gpu: int, bdf: str, rest: str) -> XgmiGpu:
    match = _METRICS.match(rest)
    if not match:
        raise ParseError(f"amd-smi xgmi: LINK METRIC TABLE row of GPU{gpu} is not 'bit_rate max_bandwidth "
                         f"link_type': {shown(rest)}")
    rate, bandwidth, link_type = match.groups()
    return XgmiGpu(gpu, bdf, _rate(rate, f"GPU{gpu} bit_rate"), _rate(bandwidth, f"GPU{gpu} max_bandwidth"),
                   link_type)


def _pair_row(gpu: int, rest: str, peers: list) -> dict:
    cells = rest.split()
    if len(cells) != len(peers):
        raise ParseError(f"amd-smi xgmi: XGMI LINK STATUS row of GPU{gpu} has {len(cells)} cell(s) for "
                         f"{len(peers)} GPU column(s): {shown(rest)}")
    out = {}
    for peer, cell in zip(peers, cells, strict=True):
        if not _STATUS.match(cell):
            raise ParseError(f"amd-smi xgmi: GPU{gpu} -> GPU{peer} link status {shown(cell)} is not U, D, X, "
                             "SELF or N/A")
        if (cell == "SELF") != (peer == gpu):
            raise ParseError(f"amd-smi xgmi: GPU{gpu} -> GPU{peer} reads {cell}: SELF belongs on the diagonal only")
        if peer != gpu:
            out[(gpu, peer)] = cell
    return out


def parse_xgmi(text: str) -> XgmiReport:
    """The metric and pair tables of ``amd-smi xgmi``; ParseError unless both are there, whole, for one set
    of GPUs, and the legend that amd-smi prints last closes the output."""
    lines = require_lines(text, "amd-smi xgmi")
    section, peers = None, None
    gpus: dict = {}
    rows: dict = {}
    links: dict = {}
    legend = False
    for line in lines:
        stripped = line.strip()
        if stripped in _TITLES:
            section = _TITLES[stripped]
            continue
        if stripped == "Legend:" or not stripped:
            section = None if stripped else section
            continue
        if _LEGEND in line:
            legend = True
        if section is None:
            continue
        if section == "pairs" and (header := _PAIR_HEADER.match(line)):
            peers = [int(word[3:]) for word in header.group(1).split()]
            continue
        if stripped.startswith("bdf") or (section == "metric" and _READ_WRITE.match(line)):
            continue
        row = _ROW.match(line.strip(" "))
        if not row:
            raise ParseError(f"amd-smi xgmi: unexpected line in the {section} table: {shown(stripped)}")
        gpu, bdf, rest = int(row.group(1)), row.group(2), row.group(3)
        if section == "metric":
            if gpu in gpus:
                raise ParseError(f"amd-smi xgmi: GPU{gpu} listed twice in the LINK METRIC TABLE")
            gpus[gpu] = _metric_row(gpu, bdf, rest)
        elif section == "pairs":
            if peers is None:
                raise ParseError("amd-smi xgmi: XGMI LINK STATUS rows before its 'bdf GPU0 GPU1 ...' header")
            if gpu in rows:
                raise ParseError(f"amd-smi xgmi: GPU{gpu} listed twice in the XGMI LINK STATUS table")
            rows[gpu] = bdf
            links.update(_pair_row(gpu, rest, peers))
    if not gpus:
        raise ParseError("amd-smi xgmi: no LINK METRIC TABLE rows")
    if not rows:
        raise ParseError("amd-smi xgmi: no XGMI LINK STATUS table (this amd-smi predates `amd-smi xgmi "
                         "--link-status`, or the output was cut): the per-pair link state was not read")
    if not legend:
        raise ParseError("amd-smi xgmi: the legend amd-smi prints last is missing: the output was cut short")
    if set(rows) != set(gpus) or sorted(peers) != sorted(gpus):
        raise ParseError(f"amd-smi xgmi: the tables disagree on the GPUs: metric {sorted(gpus)}, link status rows "
                         f"{sorted(rows)}, columns {peers}")
    moved = [g for g, b in rows.items() if b.lower() != gpus[g].bdf.lower()]
    if moved:
        raise ParseError(f"amd-smi xgmi: GPU{moved[0]} has bdf {gpus[moved[0]].bdf} in one table and "
                         f"{rows[moved[0]]} in the other")
    return XgmiReport(dict(sorted(gpus.items())), links)
