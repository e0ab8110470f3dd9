"""Kernel log lines (dmesg / journalctl) and a scanner for the signatures its caller hands it.

The log flavours differ only in their prefix, so every line is first reduced to (timestamp, level,
text). Which line shapes matter (a wedged GPU, page faults, fabric faults, UALink activation: reference
§6, §8, §10, §28) is the kernel-log rule table's business (``k3doctor.rules.kernel_log``, one row per
rule with its pattern): this module, below that table in the layers, only scans for what it is given
(``scan(lines, signatures)``). What stays here is the log's own structure: the follow-up lines that
complete a fault (process, pid, fault status) and the ``[Hardware Error]`` records (APEI/BERT, ACA
banks: the vocabulary of AMD's node tooling, §28) grouped into one hit each.

Every pattern here is bounded (no unbounded ``.*`` / ``\\S+``), so a 40 kB line costs linear time,
and any input either parses or raises :class:`ParseError`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from k3doctor.parsers import ParseError
from k3doctor.parsers.common import require_lines

_DECODED = re.compile(r"^(?P<facility>[a-z]{1,10})\s{0,8}:(?P<level>[a-z]{1,10})\s{0,8}:\s?(?P<rest>.*)$",
                      re.DOTALL)  # dmesg --decode
_MONOTONIC = re.compile(r"^\[\s{0,12}(?P<ts>[0-9]{1,12}\.[0-9]{1,9})\]\s?(?P<text>.*)$", re.DOTALL)  # [ 47.9]
_STAMPS = (
    _MONOTONIC,
    re.compile(r"^\[(?P<ts>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\]\s?(?P<text>.*)$",
               re.DOTALL),  # dmesg -T
    re.compile(r"^(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[,.][0-9]{1,9})?(?:[+-]\d\d:?\d\d|Z)?) (?P<text>.*)$",
               re.DOTALL),  # iso
)
_JOURNAL = re.compile(  # journalctl -k (short / short-iso)
    r"^(?P<ts>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT[0-9:.,+Z-]{8,40}) [^\s]{1,255} kernel: "
    r"(?P<text>.*)$", re.DOTALL)
# journalctl separators: "-- Boot <id> --" (systemd >= 246), "-- Reboot --", "-- Logs begin at ... --"
_MARKER = re.compile(r"^-- (?:Boot (?P<boot>[0-9a-f]{32}) --|Reboot --|.{0,200} --)$")
_BDF = re.compile(r"\bamdgpu (?P<bdf>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]):")
_DRM_TAG = re.compile(r"^\[(?P<tag>drm:[\w.]{1,80}) \[amdgpu\]\]")  # [drm:amdgpu_job_timedout [amdgpu]]


@dataclass(frozen=True)
class Signature:
    """One line shape the scanner looks for, handed over by its caller: the rows of the kernel-log rule table
    (``k3doctor.rules.kernel_log``, layer 5) compiled, so that a signature is spelled once, in its row. The
    first signature that matches a line names it; its named groups land in ``SignatureHit.details``
    (``accid`` in ``SignatureHit.accid``)."""

    name: str
    pattern: re.Pattern
    details: bool = False  # the lines after it from the same source complete it (process, pid, fault status)


# Follow-up lines of a page fault / ring timeout (same source) that complete its details; the old
# ring-timeout wording says `Process information: process <name> pid <n>`.
_DETAIL_LINES = tuple(re.compile(p) for p in (
    r"(?:for process|Process information: process|Process) (?P<process>[^\s]{1,64}) pid (?P<pid>\d{1,10})",
    r"in page starting at address (?P<address>0x[0-9a-fA-F]{1,16}) from IH client 0x[0-9a-fA-F]{1,8} "
    r"\((?P<ih_client>\w{1,32})\)",
    r"VM_L2_PROTECTION_FAULT_STATUS:\s?(?P<fault_status>0x[0-9a-fA-F]{1,16})",
    r"Faulty UTCL2 client ID: (?P<faulty_client>[^\s]{1,32})",
    r"PERMISSION_FAULTS: (?P<permission_faults>0x[0-9a-fA-F]{1,8})",
    r"Ring (?P<ring_reset_ring>[^\s]{1,64}) reset (?P<ring_reset>failure|failed|succeeded)",  # per-ring reset (6.12+)
    r"Starting (?P<ring_reset_started>[^\s]{1,64}) ring reset",
    r"Check your (?P<coredump>/sys/class/drm/card\d{1,4}/device/devcoredump/data)",
))
# The rest of the VM_L2 fault-status dump: part of the event, nothing kept from it.
_DUMP_LINE = re.compile(r"\s(?:MORE_FAULTS|WALKER_ERROR|MAPPING_ERROR|RW|CID): 0x[0-9a-fA-F]{1,8}$")

# RAS / APEI / BERT / ACA records: `[Hardware Error]:` lines that belong together (§10, §28).  The tag
# before `[Hardware Error]` (`{N}` and/or `amdgpu <BDF>:`) says which record a line belongs to; an
# `mce: [Hardware Error]: ...` line is a one-line machine-check report, not part of such a record.
# Wordings: HW_ERR "[Hardware Error]: " (6.9+), "[Hardware error] " (amdgpu_mca.c in 6.7/6.8); before it
# dev_info's "amdgpu: " (up to 6.9) or RAS_EVENT_LOG's "{%llu}" event id (dev_printk, 6.10+).
_HW = re.compile(r"^(?P<tag>(?:amdgpu [0-9a-fA-F:.]{12}: )?(?:amdgpu: )?(?:\{\d{1,20}\})?)"
                 r"\[Hardware [Ee]rror\](?::|(?= [A-Za-z])) ?(?P<body>.*)$", re.DOTALL)
_HW_START = re.compile(r"^Hardware error from APEI Generic Hardware Error Source: ?(?P<source>\d{1,6})")
_HW_SEVERITY = re.compile(r"^event severity: (?P<severity>\w{1,20})")
_HW_FIELDS = tuple(re.compile(p) for p in (
    r"^\s{0,8}fru_text: (?P<fru_text>.{1,40})$",
    r"^\s{0,8}section_type: (?P<section_type>.{1,60})$",
    r"^\s{0,8}MSR Address: (?P<msr>0x[0-9a-fA-F]{1,16})",
    r"^\s{0,8}device_id: (?P<device>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])",
    r"^\s{0,8}vendor_id: (?P<vendor_id>0x[0-9a-fA-F]{1,4}), device_id: (?P<device_id>0x[0-9a-fA-F]{1,4})",
))
_ACA_START = "Accelerator Check Architecture events logged"
_EVENT = re.compile(r"\{(\d{1,20})\}")  # RAS_EVENT_LOG's event id: every line of one RAS event carries it
# amdgpu_aca.c "ACA[%02d/%02d].%s=0x%016llx" (6.9+) and amdgpu_mca.c "aca entry[%02d].%s=0x%016llx" (6.7+).
_ACA_REG = re.compile(r"^(?:ACA\[(?P<bank>\d{1,3}/\d{1,3})\]|aca entry\[(?P<entry>\d{1,3})\])"
                      r"\.(?P<reg>[A-Z_0-9]{1,16})=(?P<value>0x[0-9a-fA-F]{1,16})")
_ACA_STATUS_BITS = {"valid": 63, "uc": 61, "pcc": 57, "deferred": 44, "poison": 43}  # MCA_STATUS (AMD)
# The records the scanner groups from `[Hardware Error]` lines, by their own severity or MCA status bits: the
# names their hits carry (rows of the rule table name them; they have no line pattern of their own).
RECORD_KINDS = ("fatal_hw_error", "recoverable_hw_error", "hw_error_record", "aca_uncorrectable", "aca_correctable")


@dataclass(frozen=True)
class LogLine:
    """One kernel log line: ``text`` without the flavour-specific prefix, ``raw`` as read."""

    timestamp: str | None  # as printed: "4778.915423", "Sat Jan  7 14:25:56 2023", ISO, "Jan 07 14:25:56"
    level: str | None  # only from ``dmesg --decode`` ("err", "warn", ...)
    text: str
    raw: str

    @property
    def seconds(self) -> float | None:
        """Seconds since boot for the monotonic ``[ 4778.915423]`` stamp; None for wall-clock flavours."""
        if self.timestamp is None or not _MONOTONIC.match(f"[{self.timestamp}]"):
            return None
        return float(self.timestamp)


@dataclass
class SignatureHit:
    """A kernel-log signature hit (not a verdict: the rule row of that name says what it means and how bad it
    is); ``line`` is the raw first line.

    ``index`` is the position of that line in the parsed log (windows are cut by position, so
    they work for every flavour); ``lines`` holds every raw line of a multi-line record.
    """

    signature: str
    line: str
    timestamp: str | None = None
    bdf: str | None = None
    accid: int | None = None
    details: dict = field(default_factory=dict)
    index: int = 0
    seconds: float | None = None
    lines: list = field(default_factory=list)


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


def boot_marker(line: LogLine):
    """``(True, boot id or None)`` for a journalctl ``-- Boot <id> --`` / ``-- Reboot --`` line, else None."""
    if line.timestamp is not None or line.level is not None:
        return None
    match = _MARKER.match(line.raw.strip())
    if match is None or not (match.group("boot") or line.raw.strip() == "-- Reboot --"):
        return None
    return True, match.group("boot")


def parse_log(text: str) -> list:
    """All non-blank lines as ``LogLine``; raises ParseError unless most lines carry a known prefix.

    A capture whose lines are mostly unprefixed is not a kernel log (e.g. ``dmesg: read kernel
    buffer failed: Operation not permitted``, a wrapper's usage text) and must not read as "no
    signatures found". A capture whose last line has no newline was cut (``no-retry page fa``): it is
    not read at all, since the line cut is the one that would have been the finding. Unprefixed
    continuation lines and journalctl ``-- ... --`` separators are kept (they belong to the log) but
    do not count as evidence that it is one.
    """
    lines = [parse_line(line) for line in require_lines(text, "kernel log") if line.strip()]
    if not lines:
        raise ParseError("kernel log: no line with text")
    content = [line for line in lines if not _MARKER.match(line.raw.strip())]
    prefixed = sum(1 for line in content if line.timestamp is not None or line.level is not None)
    if not content or 2 * prefixed <= len(content):
        sample = (content or lines)[0].raw
        raise ParseError(f"kernel log: {len(content) - prefixed} of {len(content)} line(s) carry no "
                         f"dmesg/journalctl prefix, e.g. {sample!r:.80}")
    return lines


def find_signatures(text: str, signatures) -> list:
    """``list[SignatureHit]`` for ``signatures`` (and the grouped records) in a kernel log text, in log order."""
    return scan(parse_log(text), signatures)


def scan(lines: list, signatures) -> list:
    """``list[SignatureHit]`` for ``signatures`` (``Signature``: the caller's rule rows) in parsed lines.

    Host noise from §10 (``mce`` warm-reboot records, ``mana … -71``) matches no signature.
    Page-fault and ring-timeout findings collect details (process, pid, IH client, faulty
    UTCL2 client, fault status, PERMISSION_FAULTS) from the following lines of the *same source*
    (the line's PCI address, else its ``[drm:func [amdgpu]]`` tag): a line with neither never
    completes another event.  ``[Hardware Error]`` lines are grouped into one finding per record:
    APEI/BERT records by severity (``fatal_hw_error``, ``recoverable_hw_error``, other severities
    ``hw_error_record``), ACA bank dumps into ``aca_uncorrectable`` / ``aca_correctable`` from
    each bank's MCA STATUS bits.
    """
    findings: list = []
    detail_open: SignatureHit | None = None
    record: _Record | None = None
    for index, entry in enumerate(lines):
        hw = _HW.match(entry.text)
        if hw is not None:
            record = _hw_line(record, hw.group("tag"), hw.group("body"), entry, index, findings)
            detail_open = None
            continue
        if record is not None:
            findings.append(record.finish())
            record = None
        source = _source(entry.text)
        for signature in signatures:
            match = signature.pattern.search(entry.text)
            if match:
                details = {k: v for k, v in match.groupdict().items() if v is not None}
                accid = details.pop("accid", None)
                finding = SignatureHit(signature.name, entry.raw, entry.timestamp, _bdf(entry.text),
                                       None if accid is None else int(accid), details, index, entry.seconds,
                                       [entry.raw])
                findings.append(finding)
                detail_open = (finding, source) if signature.details and source is not None else None
                break
        else:
            if detail_open is not None and source == detail_open[1]:
                if not _add_details(detail_open[0], entry):
                    detail_open = None  # the event's own source moved on: later lines are not its details
    if record is not None:
        findings.append(record.finish())
    findings.sort(key=lambda f: f.index)
    return findings


def _bdf(text: str) -> str | None:
    match = _BDF.search(text[:200])
    return match.group("bdf").lower() if match else None


def _source(text: str) -> str | None:
    """Who printed a line: its PCI address, else its ``[drm:func [amdgpu]]`` tag, else unknown (None)."""
    bdf = _bdf(text)
    if bdf is not None:
        return bdf
    tag = _DRM_TAG.match(text)
    return tag.group("tag") if tag else None


def _add_details(finding: SignatureHit, entry: LogLine) -> bool:
    found = False
    for pattern in _DETAIL_LINES:
        match = pattern.search(entry.text)
        if match:
            found = True
            for key, value in match.groupdict().items():
                finding.details.setdefault(key, value)
    if found or _DUMP_LINE.search(entry.text):
        finding.lines.append(entry.raw)
        return True
    return False


@dataclass
class _Record:
    """An APEI/BERT or ACA ``[Hardware Error]`` record being collected."""

    kind: str  # "apei" | "aca"
    tag: str
    first: LogLine
    index: int
    details: dict = field(default_factory=dict)
    banks: dict = field(default_factory=dict)  # ACA bank "01/01" or "00" -> {register: value}
    dumps: int = 1  # "events logged" headers merged into this record
    lines: list = field(default_factory=list)

    def finish(self) -> SignatureHit:
        bdf = _bdf(self.tag)
        if self.kind == "aca":
            name = self._aca()
        else:
            level = self.details.get("severity", "").lower()
            name = {"fatal": "fatal_hw_error", "recoverable": "recoverable_hw_error"}.get(level, "hw_error_record")
            bdf = bdf or (self.details.get("devices") or [None])[0]
        details = {k: v for k, v in self.details.items() if k != "devices"}
        return SignatureHit(name, self.first.raw, self.first.timestamp, bdf, None, details, self.index,
                            self.first.seconds, self.lines)

    def _aca(self) -> str:
        """Worst bank: valid with UC, PCC, deferred or poison set is uncorrectable; valid otherwise correctable."""
        worst, classes = None, {}
        for bank, regs in self.banks.items():
            status = int(regs.get("STATUS", "0x0"), 16)
            bits = {name for name, bit in _ACA_STATUS_BITS.items() if status >> bit & 1}
            if "valid" not in bits:
                continue
            classes[bank] = sorted(bits - {"valid"}) or ["corrected"]
            bad = bits & {"uc", "pcc", "deferred", "poison"}
            worst = "uncorrectable" if bad or worst == "uncorrectable" else "correctable"
        self.details["banks"] = {b: {"status": r.get("STATUS"), "ipid": r.get("IPID"), "class": classes.get(b)}
                                 for b, r in self.banks.items()}
        if worst == "uncorrectable":
            return "aca_uncorrectable"
        return "aca_correctable" if worst else "hw_error_record"


def _hw_line(record, tag: str, body: str, entry: LogLine, index: int, findings: list):
    """Add one ``[Hardware Error]`` line to the open record, or close it and open the next."""
    start = _HW_START.match(body)
    severity = _HW_SEVERITY.match(body)
    new_kind = "aca" if body.startswith(_ACA_START) else "apei" if start else None
    if new_kind == "aca" and record is not None and record.kind == "aca" and record.tag == tag:
        new_kind = None  # the next bank of the same dump / RAS event: one record per {event id} and GPU
        record.dumps += 1
    if severity and (record is None or record.tag != tag or record.kind != "apei" or "severity" in record.details):
        new_kind = "apei"
    aca = _ACA_REG.match(body)
    if aca and (record is None or record.tag != tag or record.kind != "aca"):
        new_kind = "aca"
    if record is not None and (new_kind is not None or record.tag != tag):
        findings.append(record.finish())
        record = None
    if record is None:
        record = _Record(new_kind or "apei", tag, entry, index)
    record.lines.append(entry.raw)
    if start:
        record.details["source"] = start.group("source")
    if severity:
        record.details["severity"] = severity.group("severity")
    if aca:
        bank = aca.group("bank") or aca.group("entry")
        if aca.group("reg") in record.banks.get(bank, {}):
            bank = f"{bank}#{record.dumps}"  # amdgpu_mca.c numbers each query's banks from 00 again
        record.banks.setdefault(bank, {})[aca.group("reg")] = aca.group("value")
        event = _EVENT.search(tag)
        if event:
            record.details["event"] = event.group(1)
    for pattern in _HW_FIELDS:
        match = pattern.match(body)
        if match:
            for key, value in match.groupdict().items():
                if key == "msr":
                    record.details.setdefault("msr", []).append(value.lower())
                elif key == "device":
                    record.details.setdefault("devices", []).append(value.lower())
                else:
                    record.details.setdefault(key, value.strip())
    return record
