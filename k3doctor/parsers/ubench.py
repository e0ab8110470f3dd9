"""ubench 07_ualoe output: p2p RESULT lines, the bandwidth table, and the probe's /proc listings (reference §8).

The tools' exact wording is not documented (§27 item 4), so each parser accepts the spellings
the reference shows and raises ParseError on a torn table rather than guessing.
"""
from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from k3doctor.parsers import ParseError

METRICS = ("read", "write", "bidir")

_RESULT = re.compile(r"RESULT\s*(?P<word>[A-Za-z]+)?\s*:?\s*(?P<n>\d+)\s*/\s*(?P<m>\d+)\s*pairs?"
                     r"(?:\s+(?P<verdict>[A-Za-z]+))?", re.IGNORECASE)


@dataclass(frozen=True)
class P2PResult:
    ok: bool
    passed: int
    total: int
    line: str


def parse_p2p(text: str) -> P2PResult | None:
    """The last ``RESULT <word>: n/m pairs <verdict>`` line, or None when there is none.

    Aggregate mode (no ``-gpu``) prints an n/m over all GPU pairs whose exact wording is not
    documented (§27 item 4), so any word/verdict spelling is accepted; OK means n == m > 0 and
    neither word says FAIL.
    """
    found = None
    for line in text.splitlines():
        m = _RESULT.search(line)
        if m:
            words = {(m.group("word") or "").upper(), (m.group("verdict") or "").upper()}
            n, total = int(m.group("n")), int(m.group("m"))
            bad = any(w.startswith(("FAIL", "ERR")) for w in words)
            found = P2PResult(ok=n == total > 0 and not bad, passed=n, total=total, line=line.strip())
    return found


_NUMBER = r"\d[\d,]*(?:\.\d+)?"
_TOTAL_ROW = re.compile(r"^\s*(total|sum|aggregate|all)\b", re.IGNORECASE)
_HEADER_WORDS = {"read": re.compile(r"\bread\b", re.I), "write": re.compile(r"\bwrite\b", re.I),
                 "bidir": re.compile(r"\bbi-?dir(?:ectional)?\b", re.I)}
_KV = re.compile(rf"^\s*(?P<metric>read|write|bi-?dir(?:ectional)?)\b\D*?(?P<value>{_NUMBER})\s*"
                 r"(?P<unit>[GTM]B/s)?", re.IGNORECASE)
_UNIT = {"GB/S": 1.0, "TB/S": 1000.0, "MB/S": 0.001}


def _num(text: str) -> float:
    return float(text.replace(",", ""))


@dataclass(frozen=True)
class Bandwidth:
    read: float
    write: float
    bidir: float
    rows: int  # GPU pairs seen (1 for a key: value summary)

    def as_dict(self) -> dict:
        return {m: round(getattr(self, m), 1) for m in METRICS}


def parse_bw(text: str) -> Bandwidth | None:
    """read / write / bidir GB/s from the connect side of ``ualoe_bw.exe``, or None if no table.

    The labels are inferred (§27 item 4), so two layouts are accepted: a header naming the
    read, write and bidir columns followed by one row per GPU pair (a ``total``/``sum`` row
    is the aggregate, else the rows are summed), or ``read: <n> GB/s`` lines.  A header with
    no numeric rows is a torn table: ParseError.
    """
    lines = text.splitlines()
    for i, line in enumerate(lines):
        cols = {m: rx.search(line) for m, rx in _HEADER_WORDS.items()}
        if not all(cols.values()):
            continue
        order = sorted(METRICS, key=lambda m: cols[m].start())
        rows, total = [], None
        for row in lines[i + 1:]:
            numbers = re.findall(_NUMBER, row)
            if len(numbers) < 3:
                if rows or total:
                    break
                continue
            values = dict(zip(order, (_num(n) for n in numbers[-3:]), strict=True))
            if _TOTAL_ROW.match(row):
                total = values
            else:
                rows.append(values)
        if total is None and not rows:
            raise ParseError(f"ualoe_bw table header {line.strip()!r} has no numeric rows")
        agg = total or {m: sum(r[m] for r in rows) for m in METRICS}
        return Bandwidth(rows=len(rows) or 1, **agg)
    found = {}
    for line in lines:
        m = _KV.match(line)
        if m:
            metric = "bidir" if m.group("metric").lower().startswith("bi") else m.group("metric").lower()
            if metric in found:
                raise ParseError(f"ualoe_bw output: {metric} reported twice and no table header to tell "
                                 "per-pair rows from the total")
            found[metric] = _num(m.group("value")) * _UNIT[(m.group("unit") or "GB/s").upper()]
    if not found:
        return None
    if set(found) != set(METRICS):
        raise ParseError(f"ualoe_bw output has {', '.join(sorted(found))} but not "
                         f"{', '.join(m for m in METRICS if m not in found)}")
    return Bandwidth(rows=1, **found)


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    argv: tuple
    mnt: str

    @property
    def tool(self) -> str:
        return posixpath.basename(self.argv[0]) if self.argv else ""


def parse_procs(text: str) -> tuple:
    """(self mount namespace, {ancestor pids incl. self}, [Proc]) from ``ualoe_remote.PROCS_SCRIPT`` output."""
    self_mnt, ancestors, procs = None, set(), []
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "self":
            pid, _, self_mnt = rest.partition(" ")
            ancestors.add(int(pid))
        elif kind == "anc":
            ancestors.add(int(rest))
        elif kind == "proc":
            parts = rest.split(" ", 3)
            if len(parts) < 4 or not parts[0].isdigit() or not parts[1].isdigit():
                raise ParseError(f"process table line not understood: {line!r:.120}")
            argv = tuple(a for a in parts[3].split("\x1f") if a)
            procs.append(Proc(int(parts[0]), int(parts[1]), argv, parts[2]))
    if self_mnt is None:
        raise ParseError("process table: no 'self' line (the listing script did not run)")
    return self_mnt, ancestors, procs


def listening(text: str, port: int) -> bool | None:
    """From ``ualoe_remote.LISTEN_SCRIPT`` output: True when the recorded PID owns a LISTEN socket on ``port``.

    None: the process is gone (or never wrote its PID).  Matching the socket inode to the PID
    means a stale listener of another round holding the port does not count as ours.
    """
    inodes, listen, alive = set(), set(), False
    for line in text.splitlines():
        if line.startswith("alive "):
            alive = True
        for m in re.finditer(r"socket:\[(\d+)\]", line):
            inodes.add(m.group(1))
        fields = line.split()
        if len(fields) > 9 and fields[3] == "0A" and ":" in fields[1]:
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                listen.add(fields[9])
    if not alive:
        return None
    return bool(inodes & listen)
