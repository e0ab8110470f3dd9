"""The deep tier's measured figures, taken out of result evidence for the outputs that show them.

The all_reduce probe keeps its sweep in the whole-run result's evidence (``sizes``: all_reduce,
``alltoall``: the expert all-to-all, one row per message size with ``bytes`` and ``busbw_gbs``);
the fabric probe keeps each node pair's figures (``pair``, ``exporter``, ``importer``, ``gbps``
per direction) on both nodes' results. Evidence can come from a saved file: anything that is not
a finite number is left out rather than shown.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from k3doctor.results import Status, worst

SWEEPS = {"sizes": "all_reduce", "alltoall": "all_to_all"}  # evidence key -> collective
TCP_FALLBACK = "UALOE-TCP-FALLBACK"  # the fabric probe's remediation code for a pair at TCP speed


def number(value):
    """``value`` when it is a finite int or float (not a bool), else None."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return value if ok else None


def _evidence(r) -> dict:
    return r.evidence if isinstance(r.evidence, dict) else {}


@dataclass(frozen=True)
class SweepPoint:
    check: str
    run: str
    collective: str
    bytes: int
    busbw_gbs: float


def busbw_points(results) -> list:
    """Every (collective, size, busbw) row of the whole-run results (``node`` None), in report order."""
    out = []
    for r in results:
        ev = _evidence(r)
        if r.node is not None:
            continue
        for key, collective in SWEEPS.items():
            rows = ev.get(key)
            for row in rows if isinstance(rows, list) else ():
                if not isinstance(row, dict):
                    continue
                size, busbw = number(row.get("bytes")), number(row.get("busbw_gbs"))
                if size is not None and busbw is not None and size > 0:
                    out.append(SweepPoint(r.check, str(ev.get("run", "")), collective, int(size), float(busbw)))
    return out


@dataclass
class Pair:
    """One measured node pair: its worst result, figures per direction, and why it is marked."""

    check: str
    name: str
    exporter: str
    importer: str
    gbps: dict = field(default_factory=dict)  # direction -> GB/s
    results: list = field(default_factory=list)

    @property
    def status(self) -> Status:
        return worst(r.status for r in self.results)

    @property
    def tcp_fallback(self) -> bool:
        return any(r.remediation == TCP_FALLBACK for r in self.results)

    @property
    def gpus(self) -> list:
        """The GPUs the pair's results name (the probe's GPU, or the card a kernel log blamed)."""
        return sorted({r.gpu for r in self.results if r.gpu is not None})

    @property
    def message(self) -> str:
        return next(r.message for r in self.results if r.status == self.status)


def fabric_pairs(results) -> list:
    """The node pairs a fabric probe measured (each once, though both nodes carry its result)."""
    pairs: dict = {}
    for r in results:
        ev = _evidence(r)
        name, exporter, importer = ev.get("pair"), ev.get("exporter"), ev.get("importer")
        if not (isinstance(name, str) and isinstance(exporter, str) and isinstance(importer, str)):
            continue
        pair = pairs.setdefault((r.check, name), Pair(r.check, name, exporter, importer))
        pair.results.append(r)
        gbps = ev.get("gbps")
        for direction, value in (gbps.items() if isinstance(gbps, dict) else ()):
            if number(value) is not None:
                pair.gbps.setdefault(str(direction), float(value))
    return list(pairs.values())
