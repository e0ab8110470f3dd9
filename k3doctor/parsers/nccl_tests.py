"""rccl-tests / nccl-tests result tables (``all_reduce_perf`` and friends).

A collective probe is how the doctor tells a platform fault from a recipe problem
(reference §20) and how a fabric is judged against a known-good pair (§8).  Columns are
mapped from the tool's own ``# size count type ...`` header, so layouts with or without a
``root`` column both parse; ``#`` lines are tool output here (corpus INDEX).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from k3doctor.parsers import ParseError
from k3doctor.parsers.common import require_lines, shown, to_float, to_int

_RANK = re.compile(r"^#\s+Rank\s+(\d+)\b")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(\S*)")
# a row starts with a number-like token; a garbled size (1_000, 1e3, 0x10) is a bad row, not an
# ignored line (NCCL_DEBUG lines start with a hostname, which has letters or ':')
_ROW = re.compile(r"^\s*\d[\d_.,xXeE+-]*(?:\s|$)")
_MEASURES = ("time", "algbw", "busbw", "#wrong")


@dataclass(frozen=True)
class Measure:
    """One half (out-of-place or in-place) of a row; ``None`` where the tool printed ``N/A``."""

    time_us: float | None
    algbw: float | None  # GB/s
    busbw: float | None  # GB/s
    wrong: int | None


@dataclass(frozen=True)
class Row:
    size: int  # bytes
    count: int  # elements
    type: str
    redop: str | None
    root: int | None
    out_of_place: Measure
    in_place: Measure


@dataclass(frozen=True)
class BenchResult:
    rows: list
    avg_busbw: float  # GB/s, "# Avg bus bandwidth"
    out_of_bounds: int | None  # "# Out of bounds values : N OK"
    nranks: int | None  # from the "#  Rank  n ..." device lines

    def row(self, size: int) -> Row:
        """The row for ``size`` bytes (KeyError if the run did not cover it)."""
        for row in self.rows:
            if row.size == size:
                return row
        raise KeyError(size)


def busbw(algbw: float, nranks: int) -> float:
    """all_reduce bus bandwidth: ``algbw * 2(n-1)/n`` (nccl-tests PERFORMANCE.md).

    ParseError (never ZeroDivisionError or a nan) for a rank count below 1 or an algbw that is
    not a finite, non-negative number: callers pass values read from a run's output.
    """
    if isinstance(nranks, bool) or not isinstance(nranks, int) or nranks < 1:
        raise ParseError(f"busbw: rank count {shown(nranks)} is not a positive integer")
    number = to_float(algbw, "busbw: algbw")
    if number is None:
        raise ParseError(f"busbw: no algbw ({shown(algbw)})")
    return number * 2 * (nranks - 1) / nranks


def _measure(values: dict, what: str) -> Measure:
    wrong = values.get("#wrong")
    return Measure(
        time_us=to_float(values.get("time"), f"{what} time"),
        algbw=to_float(values.get("algbw"), f"{what} algbw"),
        busbw=to_float(values.get("busbw"), f"{what} busbw"),
        wrong=None if wrong is None else to_int(wrong.rstrip("*"), f"{what} #wrong"),
    )


def parse_perf(text: str) -> BenchResult:
    """One ``*_perf`` run's stdout -> :class:`BenchResult`.

    Tolerates a leading shell prompt or ``<snip>``, trailing spaces and a time column that
    drops its decimals past 10000 us.  The ``# Avg bus bandwidth`` summary is the run's last
    word: without it (run cut short), with a row or a second table after it, or with sizes
    that do not grow row by row (two runs glued, a line repeated), it raises ParseError —
    never a merged table.
    """
    what = "nccl-tests"
    header = None
    rows, ranks, avg, oob = [], set(), None, None
    for line in require_lines(text, what):
        tokens = line.split()
        if line.startswith("#") and tokens[1:3] == ["size", "count"]:
            if header is not None:
                raise ParseError(f"{what}: a second result table: several runs in one output")
            header = tokens[1:]
        elif _RANK.match(line):
            ranks.add(to_int(_RANK.match(line).group(1), f"{what}: rank"))
        elif _AVG.match(line):
            if avg is not None:
                raise ParseError(f"{what}: a second 'Avg bus bandwidth' summary: several runs in one output")
            avg = to_float(_AVG.match(line).group(1), f"{what}: Avg bus bandwidth")
        elif _OOB.match(line):
            oob = to_int(_OOB.match(line).group(1), f"{what}: Out of bounds values")
        elif header and _ROW.match(line):
            if avg is not None:
                raise ParseError(f"{what}: result row after the 'Avg bus bandwidth' summary: several runs glued")
            row = _row(header, tokens, line)
            if rows and row.size <= rows[-1].size:
                raise ParseError(f"{what}: size {row.size} after {rows[-1].size}: rows repeated or runs glued")
            rows.append(row)
    if header is None or not rows:
        raise ParseError(f"{what}: no result table")
    if avg is None:
        raise ParseError(f"{what}: no 'Avg bus bandwidth' summary (run cut short?)")
    return BenchResult(rows=rows, avg_busbw=avg, out_of_bounds=oob, nranks=len(ranks) or None)


def _row(header: list, tokens: list, line: str) -> Row:
    what = f"nccl-tests row {shown(line.strip())}"
    if len(tokens) != len(header):
        raise ParseError(f"{what}: {len(tokens)} columns, header has {len(header)}")
    halves: list = [{}, {}]
    plain = {}
    for name, token in zip(header, tokens, strict=True):
        if name in _MEASURES:
            half = 0 if name not in halves[0] else 1
            halves[half][name] = token
        else:
            plain[name] = token
    size, count = to_int(plain.get("size"), f"{what} size"), to_int(plain.get("count"), f"{what} count")
    if size is None or count is None:
        raise ParseError(f"{what}: no size or count")
    return Row(
        size=size,
        count=count,
        type=plain.get("type", ""),
        redop=plain.get("redop"),
        root=to_int(plain.get("root"), f"{what} root", minimum=-1),
        out_of_place=_measure(halves[0], f"{what} out-of-place"),
        in_place=_measure(halves[1], f"{what} in-place"),
    )
