"""ATOM server logs: lines attributed to their DP rank, each tagged with the line shapes its caller reads (§19–§25).

A node's container log interleaves its ranks; each line says whose it is by a marker
(``EngineCore_DP<n>``, ``DP<n>``, ``Engine <nnn>:``, ``[rank<n>]``). tqdm writes ``\\r`` (§20): it is
turned into line breaks so progress counts as progress. ``docker logs --timestamps`` prefixes an
RFC 3339 time, kept per line so "how long ago did this rank last move" can be answered. What a line means is
not this parser's: the shapes come from the caller (triage's rows, ``k3doctor.rules.triage``), as layer 1 may
not import the rule tables of layer 5.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from k3doctor.deadline import plausible_clock
from k3doctor.parsers import ParseError

_LINE = re.compile(r"([^\r\n]*)(?:\r\n|\r|\n|$)")  # \r (tqdm), \r\n and \n each end a line
MAX_LINE = 4096  # longer lines are cut before matching: every regex below stays linear
_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d) ")
_RANK_MARKERS = (re.compile(r"EngineCore_DP(\d{1,3})\b"), re.compile(r"\bEngine (\d{3}):"),
                 re.compile(r"\bDP(\d{1,3})(?:TP\d{1,3})?\b"), re.compile(r"\[rank(\d{1,3})\]"))
_CONTINUATION = re.compile(r"^(?:\s|Traceback |\w*(?:Error|Exception)\b)")
_FIELD = re.compile(r"(\w{1,40})=(-?\d{1,12}(?:\.\d{1,9})?)(GB)?\b")


@dataclass(frozen=True)
class Shape:
    """A line shape: ``kind`` names what a matching line carries (``LogLine.signals``), ``fields`` how its fields are
    taken: ``groups`` (the named groups of the first match), ``numbers`` (every ``name=number`` of the line, as
    floats) or ``counts`` (every match's first group, as ints, under ``counts``)."""

    kind: str
    pattern: str
    fields: str = "groups"


class LineShapes:
    """The line shapes a log is read for, compiled once. The shapes are the caller's (triage's rule rows,
    ``k3doctor.rules.triage``): this parser knows how a log is laid out (ranks, time stamps, line ends), not what
    its lines mean."""

    def __init__(self, shapes):
        self.shapes = tuple((s.kind, re.compile(s.pattern), s.fields) for s in shapes)
        kinds = [kind for kind, _, _ in self.shapes]
        if len(kinds) != len(set(kinds)):
            raise ValueError(f"line shapes: a kind named twice: {sorted(k for k in kinds if kinds.count(k) > 1)}")
        # Any shape at all, in one search: most lines carry none, and a log of millions of lines then costs one
        # search per line instead of one per shape (the per-shape searches run only on the lines this finds).
        self._any = re.compile("|".join(f"(?:{re.sub(r'[(][?]P<[a-z_]+>', '(?:', p.pattern)})"
                                        for _, p, _ in self.shapes))

    def classify(self, text: str) -> dict:
        """Every shape one line carries, kind -> captured fields (empty for a line no shape knows)."""
        found = {}
        if not self.shapes or not self._any.search(text):
            return found
        for kind, pattern, fields in self.shapes:
            if fields == "counts":
                counts = [int(n) for n in pattern.findall(text)]
                if counts:
                    found[kind] = {"counts": counts}
                continue
            m = pattern.search(text)
            if m:
                found[kind] = ({k: float(v) for k, v, _ in _FIELD.findall(text)} if fields == "numbers" else
                               {k: v for k, v in m.groupdict().items() if v is not None})
        return found


@dataclass
class LogLine:
    lineno: int
    text: str
    rank: int | None
    ts: float | None = None
    signals: dict = field(default_factory=dict)  # signal kind -> the fields it captured
    source: str | None = None  # the log (file or node) the line came from, where the reader named it

    def has(self, kind: str) -> bool:
        return kind in self.signals


def _timestamp(line: str):
    """(epoch seconds or None, rest of the line) for a ``docker logs --timestamps`` line."""
    m = _TS.match(line)
    if not m:
        return None, line
    base, frac, zone = m.groups()
    try:
        stamp = datetime.fromisoformat(base + ("+00:00" if zone == "Z" else zone))
    except ValueError:
        return None, line
    seconds = stamp.timestamp() + (int(frac) / 10 ** len(frac) if frac else 0.0)
    if not plausible_clock(seconds):
        raise ParseError(f"time stamp {base}{zone} is more than a day ahead of this machine's clock: "
                         "the log's times cannot be trusted")
    return seconds, line[m.end():]


def rank_marker(text: str) -> int | None:
    """The DP rank a line names, or None."""
    for pattern in _RANK_MARKERS:
        m = pattern.search(text)
        if m:
            return int(m.group(1))
    return None


def iter_log(text, shapes: LineShapes, *, default_rank: int | None = None, source: str | None = None):
    """The lines of a server log as LogLine, one at a time (a log of millions of lines is never held
    parsed at once), each naming ``source`` and carrying the ``shapes`` it matches; ParseError, at once, for
    non-text."""
    if not isinstance(text, str):
        raise ParseError(f"server log: expected text, got {type(text).__name__}")
    if "\x00" in text[:4096]:
        raise ParseError("server log: binary data, not a log")
    return _lines(text, shapes, default_rank, source)


def _lines(text: str, shapes: LineShapes, default_rank: int | None, source: str | None):
    carried = default_rank
    for lineno, match in enumerate(_LINE.finditer(text), 1):  # lazily: no list of millions of lines
        try:
            ts, line = _timestamp(match.group(1)[:MAX_LINE])
        except ParseError as exc:
            raise ParseError(f"server log line {lineno}: {exc}") from None
        if not line.strip():
            continue
        rank = rank_marker(line)
        if rank is None:
            rank = carried if _CONTINUATION.match(line) else default_rank
        else:
            carried = rank
        yield LogLine(lineno, line.rstrip(), rank, ts, shapes.classify(line), source)


def parse_log(text, shapes: LineShapes, *, default_rank: int | None = None) -> list:
    """Every line of a server log as LogLine, with rank, time and shapes; ParseError for non-text."""
    return list(iter_log(text, shapes, default_rank=default_rank))


