"""Collective figures the way nccl-tests computes them, and the message sizes the probe sweeps.

Pure arithmetic, shared by the all_reduce / all-to-all probe and the bench comparison, so a
probe figure and an nccl-tests figure at the same size mean the same thing
(nccl-tests doc/PERFORMANCE.md): algbw = bytes / time, where bytes is the per-rank buffer;
busbw = algbw x a per-collective factor that makes it comparable with the link's speed.
All-to-all sizes can be shaped like wide-EP dispatch (reference §19): a per-rank payload of
``tokens`` tokens of hidden 7168 at one of the wire formats the MegaMoE dispatch sends.
"""
from __future__ import annotations

import math

from k3doctor.results import SweepPoint

ALL_REDUCE = "all_reduce"
ALL_TO_ALL = "all_to_all"

HIDDEN = 7168  # Kimi-K3 hidden size (§19)
# §19: wire bytes per token at hidden 7168; fp8/fp4 carry a 256-byte per-token scale row
WIRE_BYTES_PER_TOKEN = {"bf16": 2 * HIDDEN, "fp8": HIDDEN + 256, "fp4": HIDDEN // 2 + 256}


def bus_factor(op: str, world: int) -> float:
    """all_reduce 2(n-1)/n, all-to-all (n-1)/n: the share of the buffer each rank moves over its links."""
    if world < 1:
        raise ValueError(f"world size {world} < 1")
    if op == ALL_REDUCE:
        return 2 * (world - 1) / world
    if op == ALL_TO_ALL:
        return (world - 1) / world
    raise ValueError(f"no bus bandwidth factor for {op!r}")


def algbw_gbs(nbytes: int, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (10^9 bytes, as nccl-tests prints it)."""
    if not (seconds > 0 and math.isfinite(seconds)):  # NaN/inf from a garbled report are no time either
        raise ValueError(f"time {seconds!r} s is not a positive finite number")
    return nbytes / seconds / 1e9


def busbw_gbs(op: str, nbytes: int, seconds: float, world: int) -> float:
    return algbw_gbs(nbytes, seconds) * bus_factor(op, world)


def figures(op: str, nbytes: int, time_us: float, world: int) -> dict:
    """One sweep row: latency (us per collective), algbw and busbw (GB/s), rounded for reports."""
    seconds = time_us / 1e6
    return {"time_us": round(time_us, 2), "algbw_gbs": round(algbw_gbs(nbytes, seconds), 3),
            "busbw_gbs": round(busbw_gbs(op, nbytes, seconds, world), 3)}


def geometric(lo: int, hi: int, factor: int) -> tuple:
    """lo, lo*factor, ... up to hi inclusive."""
    if lo < 1 or factor < 2:
        raise ValueError(f"sizes need lo >= 1 and factor >= 2, got {lo}, {factor}")
    out, size = [], lo
    while size <= hi:
        out.append(size)
        size *= factor
    return tuple(out)


def ep_dispatch_sizes(min_tokens: int, max_tokens: int, factor: int, wires) -> tuple:
    """All-to-all sizes shaped like EP dispatch: ``(bytes, unit, label)`` per wire format and token count.

    ``bytes`` is the per-rank send payload (tokens x wire bytes per token), ``unit`` one token's
    wire bytes - splits between ranks are whole tokens.
    """
    out = []
    for wire in wires:
        if wire not in WIRE_BYTES_PER_TOKEN:
            raise ValueError(f"unknown wire format {wire!r} (one of {', '.join(WIRE_BYTES_PER_TOKEN)})")
        unit = WIRE_BYTES_PER_TOKEN[wire]
        out += [(tokens * unit, unit, f"{tokens} tok {wire}") for tokens in geometric(min_tokens, max_tokens, factor)]
    return tuple(out)


def byte_sizes(lo: int, hi: int, factor: int) -> tuple:
    """All-to-all sizes as nccl-tests' alltoall_perf sweeps them: ``(bytes, 1, "")``."""
    return tuple((size, 1, "") for size in geometric(lo, hi, factor))


def side_by_side(reference: dict, probe_rows: list) -> list:
    """Rows ``(bytes, reference us, reference busbw, probe busbw, ratio)`` at every size both measured.

    ``reference`` maps bytes to (time_us, busbw) - an nccl-tests column; the ratio is
    reference time / probe time, which is probe busbw / reference busbw at any world size
    (also one rank, where both busbw are 0).
    """
    out = []
    for row in sorted(probe_rows, key=lambda r: r["bytes"]):
        ref = reference.get(row["bytes"])
        if ref is None or not ref[0] or not row["time_us"]:
            continue
        out.append((row["bytes"], ref[0], ref[1], row["busbw_gbs"], round(ref[0] / row["time_us"], 3)))
    return out


SWEEPS = {"sizes": ALL_REDUCE, "alltoall": ALL_TO_ALL}  # evidence key of a run's sweep -> its collective


def with_sweep_figures(verdicts: list) -> list:
    """The verdicts, each whole-run one (``node`` None) carrying its sweep rows as typed figures: the
    outputs draw and export those, never the evidence. Rows that are not finite positive numbers (a
    saved file, a damaged run) are left out rather than shown."""
    for v in verdicts:
        ev = v.evidence if isinstance(v.evidence, dict) else {}
        if v.node is not None:
            continue
        for key, collective in SWEEPS.items():
            rows = ev.get(key)
            for row in rows if isinstance(rows, list) else ():
                size, busbw = (finite(row.get("bytes")), finite(row.get("busbw_gbs"))) if isinstance(row, dict) \
                    else (None, None)
                if size is not None and busbw is not None and size > 0:
                    v.figures.append(SweepPoint(collective, int(size), float(busbw), str(ev.get("run", ""))))
    return verdicts


def finite(value):
    """``value`` when it is a finite int or float (not a bool), else None."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return value if ok else None
