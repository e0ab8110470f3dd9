"""``amd-smi ras --cper --severity fatal`` (no ``--folder``: k3doctor writes nothing on a node) and the boot time
it is judged against (reference §31.3, §31.2 signal 3).

amdsmi_commands.py prints, without a folder, ``WARNING: No CPER files will be dumped unless --folder=...`` and a
``timestamp gpu_id severity`` table, one row per record: ``2000/06/27 10:45:13  0       FATAL`` (its doc; the
MxGPU doc prints ``07/10/2025 09:03:09  0  fatal``). The CPER header's time is the driver's wall clock (UTC).
amd-smi printed nothing at all when there were no entries (its changelog: `ras --cper --json` "emitting nothing
when there are no CPER entries"), so an empty listing is no record; any other line is a ParseError.
"""
from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass

from k3doctor.parsers import ParseError
from k3doctor.parsers.common import MAX_DIGITS, shown

_WARNING = re.compile(r"^WARNING: No CPER files will be dumped")
_HEADER = re.compile(r"^timestamp\s+gpu_id\s+severity(\s+file_name\s+list of afids)?$")
_ROW = re.compile(r"^(?P<stamp>\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}|\d{2}/\d{2}/\d{4} \d{2}:\d{2}:\d{2})\s+"
                  r"(?P<gpu>\d{1,3})\s+(?P<severity>[A-Za-z_-]{1,32})(?:\s+\S+(?:\s+[\d ]+)?)?$")
_BTIME = re.compile(rf"^btime (\d{{1,{MAX_DIGITS}}})$", re.MULTILINE)


@dataclass(frozen=True)
class CperRecord:
    gpu: int
    severity: str  # upper case: FATAL, NONFATAL-UNCORRECTED, ...
    epoch_s: int  # the record's UTC time


def _epoch(stamp: str) -> int:
    form = "%Y/%m/%d %H:%M:%S" if stamp[4] == "/" else "%m/%d/%Y %H:%M:%S"
    try:
        return calendar.timegm(time.strptime(stamp, form))
    except ValueError as exc:
        raise ParseError(f"CPER timestamp {shown(stamp)}: {exc}") from None


def parse_cper_list(text: str) -> list:
    """[CperRecord] of the summary table (empty: no record)."""
    if not isinstance(text, str):
        raise ParseError(f"amd-smi ras --cper: expected text, got {type(text).__name__}")
    records = []
    for line in text.splitlines():
        line = line.strip()
        if not line or _WARNING.match(line) or _HEADER.match(line):
            continue
        match = _ROW.match(line)
        if not match:
            raise ParseError(f"amd-smi ras --cper: unexpected line {shown(line)}")
        records.append(CperRecord(int(match.group("gpu")), match.group("severity").upper(),
                                  _epoch(match.group("stamp"))))
    return records


def parse_btime(text: str) -> int:
    """Boot time (UTC epoch seconds) from /proc/stat's ``btime`` line."""
    match = _BTIME.search(text) if isinstance(text, str) else None
    if not match or int(match.group(1)) <= 0:
        raise ParseError("/proc/stat has no btime line")
    return int(match.group(1))
