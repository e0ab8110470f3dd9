"""``amd-smi xgmi`` (human form): the LINK METRIC TABLE and the XGMI LINK STATUS table (reference §30).

The layout is amd-smi's own (``amdsmi_cli`` ``xgmi`` command, ROCm/rocm-systems ``projects/amdsmi``): with
no option it prints the LINK METRIC TABLE (per GPU: bdf, bit_rate, max_bandwidth, link_type, then Read/Write
rows per peer), the GPU LINK PORT STATUS (one letter per port) and the XGMI LINK STATUS (per GPU pair: ``U``,
``D``, ``X`` - joined by ``/`` when several links go to the same peer - ``SELF`` on the diagonal, ``N/A`` where
no link to that peer was found or the status is not supported), then a legend. Columns may run together
(``65535 Gb/s4294967295 Gb/sN/A`` on a host without XGMI) and a row may start ``GPU0<TAB>bdf``; both are real
captures (rocm-systems PR #2053's changelog, a public ROCm issue thread).

The port table (amd-smi 26.1 / ROCm 7.1 and later; older ones print none, so it is optional) is kept too: a D
there is a down link (§30 "a D in either status table"; amdsmi's ``AMDSMI_XGMI_LINK_DOWN``, the firmware's link
status 0 - X is its "disabled" 0xFFFF, which unused ports read on healthy nodes). Both status tables print the
one array ``amdsmi_get_gpu_xgmi_link_status`` returns for a GPU: the port table as it is, the pair table the
entries at the link indexes whose remote bdf is that peer. So a GPU's pair row can never hold more U (or D, or
X) than its port row: a pair table all U over a port table all D is no node's reading, a ParseError.

The rule of this parser, as of every parser here: it returns what the tool said or raises ParseError, and an
absurd value is a ParseError too, never a number a check could pass. Anything cut short - no pair table (older
amd-smi prints only the metric table), no legend (the capture stopped), a row with too few cells, a GPU in one
table and not the other - is a ParseError: the check never judges links it did not read. So is a link_type
amd-smi cannot print (it prints XGMI, PCIE, UNKNOWN or N/A: anything else is garbled, not a PCIe path), and a
GPU whose links are up (a U in either table) at a bit_rate or max_bandwidth of 0 Gb/s: a link that is up
carries bits, so that reading says nothing about the link.
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
_PORT = re.compile(r"^(N/A|[UDX])$")
LINK_TYPES = ("XGMI", "PCIE", "UNKNOWN", "N/A")  # all amdsmi_cli's xgmi command prints (§30)
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
    ports: dict  # gpu -> its GPU LINK PORT STATUS cells ("U", "D", "X", "N/A"); {} where amd-smi printed no port table


def gbps(rate: float | None) -> str:
    """A rate as a message shows it: ``32``, ``N/A``."""
    return "N/A" if rate is None else f"{rate:g}"


def _rate(text: str, what: str) -> float | None:
    return None if text == "N/A" else to_float(text.split()[0], what)


def _metric_row(gpu: int, bdf: str, rest: str) -> XgmiGpu:
    match = _METRICS.match(rest)
    if not match:
        raise ParseError(f"amd-smi xgmi: LINK METRIC TABLE row of GPU{gpu} is not 'bit_rate max_bandwidth "
                         f"link_type': {shown(rest)}")
    rate, bandwidth, link_type = match.groups()
    if link_type not in LINK_TYPES:
        raise ParseError(f"amd-smi xgmi: GPU{gpu} link_type {shown(link_type)} is none of {', '.join(LINK_TYPES)}")
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


def _port_row(gpu: int, rest: str) -> tuple:
    cells = tuple(rest.split())
    bad = next((c for c in cells if not _PORT.match(c)), None)
    if not cells or bad is not None:
        raise ParseError(f"amd-smi xgmi: GPU LINK PORT STATUS row of GPU{gpu} is not U, D, X or N/A per port: "
                         f"{shown(rest)}")
    return cells


def _letters(cells) -> dict:
    """How many links read U, D and X in ``cells`` (a pair cell ``U/D`` is two links)."""
    links = [part for cell in cells for part in cell.split("/")]
    return {letter: links.count(letter) for letter in "UDX"}


def _check_consistent(report: XgmiReport) -> None:
    """ParseError where the tables cannot be one reading: a pair row with more U, D or X links than the GPU's
    port row (both print the one status array), or a GPU with a link up at 0 Gb/s."""
    for g, info in report.gpus.items():
        row = [cell for (src, _), cell in report.links.items() if src == g]
        pairs, ports = _letters(row), _letters(report.ports.get(g, ()))
        if g in report.ports and any(pairs[x] > ports[x] for x in "UDX"):
            raise ParseError(f"amd-smi xgmi: GPU{g}'s XGMI LINK STATUS row reads {pairs['U']} U / {pairs['D']} D / "
                             f"{pairs['X']} X link(s), its GPU LINK PORT STATUS {ports['U']} U / {ports['D']} D / "
                             f"{ports['X']} X: amd-smi prints both from one status array, so they cannot disagree")
        if (pairs["U"] or ports["U"]) and 0 in (info.bit_rate_gbps, info.max_bandwidth_gbps):
            raise ParseError(f"amd-smi xgmi: GPU{g} has links up (U) at bit_rate {gbps(info.bit_rate_gbps)} Gb/s, "
                             f"max_bandwidth {gbps(info.max_bandwidth_gbps)} Gb/s: a link that is up moves bits, "
                             "so 0 Gb/s is not a reading of it")


def parse_xgmi(text: str) -> XgmiReport:
    """The metric and pair tables of ``amd-smi xgmi``; ParseError unless both are there, whole, for one set
    of GPUs, and the legend that amd-smi prints last closes the output."""
    lines = require_lines(text, "amd-smi xgmi")
    section, peers = None, None
    gpus: dict = {}
    rows: dict = {}
    links: dict = {}
    ports: dict = {}
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
        elif section == "ports":
            if gpu in ports:
                raise ParseError(f"amd-smi xgmi: GPU{gpu} listed twice in the GPU LINK PORT STATUS table")
            ports[gpu] = (bdf, _port_row(gpu, rest))
    if not gpus:
        raise ParseError("amd-smi xgmi: no LINK METRIC TABLE rows")
    if not rows:
        raise ParseError("amd-smi xgmi: no XGMI LINK STATUS table (this amd-smi predates `amd-smi xgmi "
                         "--link-status`, or the output was cut): the per-pair link state was not read")
    if not legend:
        raise ParseError("amd-smi xgmi: the legend amd-smi prints last is missing: the output was cut short")
    if set(rows) != set(gpus) or sorted(peers) != sorted(gpus) or (ports and set(ports) != set(gpus)):
        raise ParseError(f"amd-smi xgmi: the tables disagree on the GPUs: metric {sorted(gpus)}, link status rows "
                         f"{sorted(rows)}, columns {peers}" + (f", port status rows {sorted(ports)}" if ports else ""))
    seen = [(g, b) for g, b in rows.items()] + [(g, b) for g, (b, _) in ports.items()]
    moved = [(g, b) for g, b in seen if b.lower() != gpus[g].bdf.lower()]
    if moved:
        raise ParseError(f"amd-smi xgmi: GPU{moved[0][0]} has bdf {gpus[moved[0][0]].bdf} in one table and "
                         f"{moved[0][1]} in another")
    report = XgmiReport(dict(sorted(gpus.items())), links, {g: cells for g, (_, cells) in sorted(ports.items())})
    _check_consistent(report)
    return report
