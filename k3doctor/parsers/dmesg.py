"""Kernel log lines (dmesg / journalctl) and the amdgpu/UALink signatures that gate a node.

A node with a wedged GPU, MES/SDMA residue, no-retry page faults or a fatal BERT record is
excluded even at 0% VRAM (reference §3, §10); fabric faults show up only in the importer's
dmesg (§8); UALink activation lines say when a card went ACTIVE (§6).  The log flavours
differ only in their prefix, so every line is first reduced to (timestamp, level, text).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from k3doctor.parsers import ParseError
from k3doctor.parsers._common import require_text

_DECODED = re.compile(r"^(?P<facility>[a-z]+)\s*:(?P<level>[a-z]+)\s*:\s?(?P<rest>.*)$")  # dmesg --decode
_STAMPS = (
    re.compile(r"^\[\s*(?P<ts>\d+\.\d+)\]\s?(?P<text>.*)$"),  # [ 4778.915423]
    re.compile(r"^\[(?P<ts>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\]\s?(?P<text>.*)$"),  # dmesg -T
    re.compile(r"^(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[,.]?\d*(?:[+-]\d\d:?\d\d|Z)?) (?P<text>.*)$"),  # iso
)
_JOURNAL = re.compile(  # journalctl -k (short / short-iso)
    r"^(?P<ts>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT\S+) \S+ kernel: (?P<text>.*)$"
)
_BDF = re.compile(r"\bamdgpu (?P<bdf>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]):")

BLOCK, WARN, INFO = "BLOCK", "WARN", "INFO"  # severity hints, as in the reference's §0.3 table

# (name, severity hint, pattern).  First match wins; named groups land in Finding.details
# (``accid`` goes to Finding.accid).
_SIGNATURES = tuple((name, severity, re.compile(pattern, flags)) for name, severity, pattern, flags in (
    # §10 wedged GPU / post-fault residue
    ("mes_remove_queue_failed", BLOCK, r"MES.*remove.?queue", re.IGNORECASE),
    ("mes_ring_full", BLOCK, r"MES ring buffer is full", 0),
    ("fence_fallback_timer_expired", BLOCK, r"fence fallback timer expired on ring (?P<ring>\S+)", re.IGNORECASE),
    ("no_retry_page_fault", BLOCK,
     r"\[(?P<hub>\w+)\] no-retry page fault(?: \(src_id:\d+ ring:\d+ vmid:(?P<vmid>\d+) pasid:(?P<pasid>\d+)\))?", 0),
    ("ring_timeout", BLOCK, r"\bring (?P<ring>\S+) timeout", 0),
    ("gpu_reset", BLOCK, r"GPU reset begin", 0),
    ("fatal_hw_error", BLOCK, r"event severity: fatal", 0),  # BERT/APEI fatal: real host crash
    ("ras_poison_consumed", BLOCK, r"poison is consumed", re.IGNORECASE),
    ("ras_bad_page_threshold", BLOCK,
     r"Saved bad pages (?P<bad_pages>\d+) reaches threshold value (?P<threshold>\d+)", 0),
    # §8 fabric data path (importer side)
    ("npa_rsp_timeout", BLOCK, r"IMPORT: NPA-RSP timeout from remote AccId:\s*(?P<accid>\d+)", 0),
    ("lsdma_pio_error", BLOCK, r"LSDMA PIO error status bits (?P<status>0x[0-9a-fA-F]+)", 0),
    ("lsdma_pio_copy_failed", BLOCK, r"LSDMA PIO failed to copy memory", 0),
    ("hello_send_failed", BLOCK, r"HELLO: Send failed to remote AccId:\s*(?P<accid>\d+)", 0),
    ("import_setup_failed", BLOCK, r"IMPORT: connection setup failed with remote AccId:\s*(?P<accid>\d+)", 0),
    ("xa_import_failed", BLOCK, r"IMPORT: XA import failed for handle:\s*(?P<handle>\S+)", 0),
    # §6 UALink bring-up
    ("ualink_activating", INFO,
     r"UALINK: activating accelerator accel_id=(?P<accid>\d+) \(accel_state=(?P<accel_state>\d+)\)", 0),
    ("ualink_active", INFO, r"UALINK: accelerator accel_id=(?P<accid>\d+) is now ACTIVE", 0),
    ("ualink_deactivating", WARN, r"UALINK: deactivating accelerator", 0),
    ("ualink_npa_config_failed", BLOCK, r"Failed to set NPA config", 0),
    ("ualink_manager_failed", BLOCK, r"Failed to start UALink manager", 0),
    ("ualink_sw_init_failed", BLOCK, r"Failed to init UALink sw r=(?P<r>-?\d+)", 0),
))

# Follow-up lines of a page fault / ring timeout (same BDF) that complete its details.
_DETAIL_LINES = tuple(re.compile(p) for p in (
    r"(?:for process|Process) (?P<process>\S+) pid (?P<pid>\d+)",
    r"in page starting at address (?P<address>0x[0-9a-fA-F]+) from IH client 0x[0-9a-fA-F]+ \((?P<ih_client>\w+)\)",
    r"VM_L2_PROTECTION_FAULT_STATUS:\s*(?P<fault_status>0x[0-9a-fA-F]+)",
    r"Faulty UTCL2 client ID: (?P<faulty_client>\S+)",
    r"PERMISSION_FAULTS: (?P<permission_faults>0x[0-9a-fA-F]+)",
))
_WITH_DETAILS = {"no_retry_page_fault", "ring_timeout"}


@dataclass(frozen=True)
class LogLine:
    """One kernel log line: ``text`` without the flavour-specific prefix, ``raw`` as read."""

    timestamp: str | None  # as printed: "4778.915423", "Sat Jan  7 14:25:56 2023", ISO, "Jan 07 14:25:56"
    level: str | None  # only from ``dmesg --decode`` ("err", "warn", ...)
    text: str
    raw: str


@dataclass
class Finding:
    """A signature hit: ``severity`` is a hint (BLOCK/WARN/INFO); ``line`` is the raw line."""

    signature: str
    severity: str
    line: str
    timestamp: str | None = None
    bdf: str | None = None
    accid: int | None = None
    details: dict = field(default_factory=dict)


def parse_line(line: str) -> LogLine:
    """Strip a ``dmesg`` / ``dmesg -T`` / ``dmesg --decode --time-format iso`` / journalctl prefix."""
    level = None
    rest = line
    decoded = _DECODED.match(line)
    if decoded:
        level, rest = decoded.group("level"), decoded.group("rest")
    for pattern in (_JOURNAL, *_STAMPS):
        match = pattern.match(rest)
        if match:
            return LogLine(match.group("ts"), level, match.group("text"), line)
    return LogLine(None, level, rest, line)


def parse_log(text: str) -> list:
    """All non-blank lines as ``LogLine``; raises ParseError if none carries a known prefix.

    A capture with no timestamped line is not a kernel log (e.g. ``dmesg: read kernel buffer
    failed: Operation not permitted``) and must not read as "no signatures found".
    """
    require_text(text, "kernel log")
    lines = [parse_line(line) for line in text.splitlines() if line.strip()]
    if all(line.timestamp is None and line.level is None for line in lines):
        raise ParseError(f"kernel log: no dmesg/journalctl line prefix found in {lines[0].text!r:.80}")
    return lines


def find_signatures(text: str) -> list:
    """``list[Finding]`` for the §6/§8/§10 signatures in a kernel log, in log order.

    Host noise from §10 (``mce`` warm-reboot records, ``mana … -71``) matches nothing here.
    Page-fault and ring-timeout findings collect details (process, pid, IH client, faulty
    UTCL2 client, fault status, PERMISSION_FAULTS) from the following lines of the same BDF.
    """
    findings: list = []
    open_finding: Finding | None = None
    for entry in parse_log(text):
        bdf_match = _BDF.search(entry.text)
        bdf = bdf_match.group("bdf") if bdf_match else None
        for name, severity, pattern in _SIGNATURES:
            match = pattern.search(entry.text)
            if match:
                details = {k: v for k, v in match.groupdict().items() if v is not None}
                accid = details.pop("accid", None)
                open_finding = Finding(name, severity, entry.raw, entry.timestamp, bdf,
                                       None if accid is None else int(accid), details)
                findings.append(open_finding)
                if name not in _WITH_DETAILS:
                    open_finding = None
                break
        else:
            if open_finding is not None and bdf == open_finding.bdf:
                for pattern in _DETAIL_LINES:
                    match = pattern.search(entry.text)
                    if match:
                        for key, value in match.groupdict().items():
                            open_finding.details.setdefault(key, value)
    return findings


def accid_to_location(accid: int, gpus_per_node: int = 4) -> tuple:
    """Global AccId -> (tray 1-based, position within the tray's AccId range) (§6).

    Tray N owns AccIds 4(N-1)…4(N-1)+3, so AccId 51 is CT13, 4th accelerator: ``(13, 3)``.
    The position is not the card index (``local_accels`` can read ``3 2 1 0``); map it to a
    card through each card's ``accel_id``.
    """
    if accid < 0 or gpus_per_node <= 0:
        raise ValueError(f"invalid AccId {accid} / gpus_per_node {gpus_per_node}")
    return accid // gpus_per_node + 1, accid % gpus_per_node
