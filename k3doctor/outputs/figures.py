"""The figures outputs draw and export, read from the results' typed figures (never from evidence keys
or readings): each check fills its own (k3doctor.results: SweepPoint, PairRate, CardId), so renaming a
piece of evidence cannot silently empty a chart or the rack map."""
from __future__ import annotations

from dataclasses import dataclass, field

from k3doctor.results import CardId, PairRate, Status, SweepPoint, worst

TCP_FALLBACK = "UALOE-TCP-FALLBACK"  # the fabric probe's remediation code for a pair at TCP speed


@dataclass(frozen=True)
class Point:
    check: str
    run: str
    collective: str
    bytes: int
    busbw_gbs: float


def busbw_points(results) -> list:
    """Every (collective, size, busbw) point of the whole-run results (``node`` None), in report order."""
    return [Point(r.check, f.run, f.collective, f.bytes, f.busbw_gbs)
            for r in results if r.node is None for f in r.figures if isinstance(f, SweepPoint)]


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
        for f in (f for f in r.figures if isinstance(f, PairRate)):
            pair = pairs.setdefault((r.check, f.pair), Pair(r.check, f.pair, f.exporter, f.importer))
            pair.results.append(r)
            for direction, value in f.gbps:
                pair.gbps.setdefault(direction, value)
    return list(pairs.values())


def cards(results, nodes) -> dict:
    """node -> the GPU indices the rack map shows: every card a result names or a check found."""
    found = {n: set() for n in nodes}
    for r in results:
        if r.node in found:
            found[r.node].update([r.gpu] if r.gpu is not None else [])
            found[r.node].update(f.gpu for f in r.figures if isinstance(f, CardId))
    return {n: sorted(c) for n, c in found.items()}


def accel_ids(results) -> dict:
    """node -> {card: AccId}, where a check found one."""
    out: dict = {}
    for r in results:
        for f in r.figures:
            if isinstance(f, CardId) and f.acc_id is not None and r.node is not None:
                out.setdefault(r.node, {})[f.gpu] = f.acc_id
    return out

