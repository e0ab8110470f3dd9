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
from k3doctor.parsers._common import require_text, shown, to_float, to_int

_RANK = re.compile(r"^#\s+Rank\s+(\d+)\b")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(\S*)")
_ROW = re.compile(r"^\s*\d+\s")
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
    """all_reduce bus bandwidth: ``algbw * 2(n-1)/n`` (nccl-tests PERFORMANCE.md)."""
    return algbw * 2 * (nranks - 1) / nranks


def _measure(values: dict, what: str) -> Measure:
    wrong = values.get("#wrong")
    return Measure(
        time_us=to_float(values.get("time"), f"{what} time"),
        algbw=to_float(values.get("algbw"), f"{what} algbw"),
        busbw=to_float(values.get("busbw"), f"{what} busbw"),
        wrong=None if wrong is None else to_int(wrong.rstrip("*"), f"{what} #wrong"),
    )


def parse_perf(text: str) -> BenchResult:
    """A ``*_perf`` run's stdout -> :class:`BenchResult`.

    Tolerates a leading shell prompt or ``<snip>``, trailing spaces and a time column that
    drops its decimals past 10000 us.  A row with the wrong number of columns or a missing
    ``Avg bus bandwidth`` summary (run cut short) raises ParseError.
    """
    what = "nccl-tests"
    require_text(text, what)
    header = None
    rows, ranks, avg, oob = [], set(), None, None
    for line in text.splitlines():
        tokens = line.split()
        if line.startswith("#") and tokens[1:3] == ["size", "count"]:
            header = tokens[1:]
        elif _RANK.match(line):
            ranks.add(int(_RANK.match(line).group(1)))
        elif _AVG.match(line):
            avg = to_float(_AVG.match(line).group(1), f"{what}: Avg bus bandwidth")
        elif _OOB.match(line):
            oob = int(_OOB.match(line).group(1))
        elif header and _ROW.match(line):
            rows.append(_row(header, tokens, line))
    if header is None or not rows:
        raise ParseError(f"{what}: no result table")
    if avg is None:
        raise ParseError(f"{what}: no 'Avg bus bandwidth' summary (run cut short?)")
    return BenchResult(rows=rows, avg_busbw=avg, out_of_bounds=oob, nranks=len(ranks) or None)


def _row(header: list, tokens: list, line: str) -> Row:
    what = f"nccl-tests row {shown(line.strip(), 60)}"
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
    return Row(
        size=to_int(plain.get("size"), f"{what} size"),
        count=to_int(plain.get("count"), f"{what} count"),
        type=plain.get("type", ""),
        redop=plain.get("redop"),
        root=to_int(plain.get("root"), f"{what} root"),
        out_of_place=_measure(halves[0], f"{what} out-of-place"),
        in_place=_measure(halves[1], f"{what} in-place"),
    )
