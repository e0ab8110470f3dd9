"""The serving engine's signals (reference §31.2 signals 1 and 2, §20), judged from its ``/metrics`` page.

Forward progress, per DP rank where the page has per-rank samples (``dp_rank`` or vLLM's ``engine`` label; else
the totals, as rank ``all``): work pending (``requests_running`` > 0) while no progress counter moves for the
stall threshold. Every progress counter counts (generated and prompt tokens, finished requests, iterations): a
long prefill moves prompt tokens while generated tokens stay flat, and is progress. Never ``/health`` (it
answers ``ok`` unconditionally) and never ``metrics_last_refresh_timestamp_seconds`` (the API server stamps its
last snapshot anew: a hung engine keeps it fresh).

KV pressure: ``kv_cache_usage_ratio`` >= 0.95 while ``requests_waiting`` grows; one rank full while the others
idle is the §20 precursor (imbalance). An engine that never answered is "not serving" (no alarm); one that
answered and then refuses is down; one that does not answer in time is busy: UNKNOWN (§31.2). LMCache and
preemption pressure per rank: pressure.py.
"""
from __future__ import annotations

import statistics

from k3doctor.parsers import ParseError
from k3doctor.parsers.atom_metrics import parse_metrics
from k3doctor.readings import CommandReading
from k3doctor.watch import pressure
from k3doctor.watch.events import Condition
from k3doctor.watch.sources import FETCH_REFUSED, FETCH_TIMEOUT

PREFIXES = ("atom:", "vllm:")
RUNNING, WAITING, KV = "requests_running", "requests_waiting", "kv_cache_usage_ratio"
# vLLM spells two of them differently (num_requests_*, gpu_cache_usage_perc); the judge reads either.
ALIASES = {"num_requests_running": RUNNING, "num_requests_waiting": WAITING, "gpu_cache_usage_perc": KV,
           "request_success_total": "requests_finished_total", **pressure.ALIASES}
PROGRESS = ("generation_tokens_total", "requests_finished_total", "prompt_tokens_total", "iterations_total")
RANK_LABELS = ("dp_rank", "engine")
KV_FULL = 0.95
KV_IDLE = 0.5  # the other ranks' median below this while one is full: imbalance (§20)


def by_rank(samples: dict) -> dict:
    """rank -> {short family name -> value summed over the rank's samples}, for the families the judge reads."""
    wanted = {RUNNING, WAITING, KV, *PROGRESS, *pressure.FAMILIES}
    ranks: dict = {}
    for name, rows in samples.items():
        prefix = next((p for p in PREFIXES if name.startswith(p)), None)
        if prefix is None:
            continue
        short = ALIASES.get(name[len(prefix):], name[len(prefix):])
        if short not in wanted:
            continue
        for labels, value in rows:
            rank = next((labels[k] for k in RANK_LABELS if k in labels), "all")
            fam = ranks.setdefault(rank, {})
            fam[short] = fam.get(short, 0.0) + value if short != KV else max(fam.get(short, 0.0), value)
    if len(ranks) > 1:
        ranks.pop("all", None)  # per-rank families present: the totals beside them hide one hung rank
    return ranks


def judge_engine(node: str, state: dict, reading, now: float, stall_s: float) -> list:
    """Conditions of the engine on ``node`` from this interval's metrics reading; ``state`` (JSON-able) keeps
    what the next interval needs: whether it ever served, each rank's progress and since when it is frozen."""
    if reading is None:
        return []
    if not isinstance(reading, CommandReading):
        return [Condition("METRICS-UNREAD", node, "engine", "unknown",
                          f"engine metrics not read: {getattr(reading, 'reason', reading)}", "§31.2")]
    if reading.rc == FETCH_REFUSED:
        if state.get("serving"):
            return [Condition("ENGINE-DOWN", node, "engine", "fail",
                              "engine metrics refused after it served: the engine is down (refused = dead, §31.2)",
                              "§31.2")]
        return []  # never served: "not serving", no alarm
    if reading.rc == FETCH_TIMEOUT or reading.timed_out:
        return [Condition("METRICS-NO-ANSWER", node, "engine", "unknown",
                          "engine metrics did not answer in time (busy, §31.2): progress not judged", "§31.2")]
    if reading.rc != 0 or reading.truncated:
        said = (reading.stderr or "").strip()[-120:] or f"exit {reading.rc}"
        return [Condition("METRICS-UNREAD", node, "engine", "unknown", f"engine metrics not read: {said}", "§31.2")]
    try:
        ranks = by_rank(parse_metrics(reading.stdout))
    except ParseError as exc:
        return [Condition("METRICS-UNREAD", node, "engine", "unknown", f"engine metrics unreadable: {exc}", "§31.2")]
    state["serving"] = True
    found = _progress(node, state, ranks, now, stall_s) + _pressure(node, state, ranks)
    for rank, fam in ranks.items():
        found += pressure.judge_rank(node, _where(rank), state["ranks"].setdefault(rank, {}), fam, now, stall_s)
    return found


def _where(rank: str) -> str:
    return "engine" if rank == "all" else f"dp_rank {rank}"


def _progress(node: str, state: dict, ranks: dict, now: float, stall_s: float) -> list:
    found, kept = [], state.setdefault("ranks", {})
    for rank, fam in ranks.items():
        mark = kept.setdefault(rank, {})
        counters = [fam.get(name) for name in PROGRESS]
        running = fam.get(RUNNING)
        if running is None or all(c is None for c in counters):
            found.append(Condition("METRICS-NO-PROGRESS-COUNTERS", node, _where(rank), "unknown",
                                   "engine metrics lack requests_running or every progress counter: forward "
                                   "progress not judged", "§31.2"))
            continue
        if running <= 0 or counters != mark.get("progress"):
            mark["since"] = now
        mark["progress"] = counters
        frozen = now - mark.get("since", now)
        if running > 0 and frozen >= stall_s:
            found.append(Condition("ENGINE-STALLED", node, _where(rank), "fail",
                                   f"{_where(rank)}: {running:g} request(s) running, no progress counter moved for "
                                   f"{frozen:.0f}s (>= {stall_s:g}s); /health and the metrics timestamp stay fresh "
                                   "on a hung engine: take py-spy stacks before any restart (§20, §31.2)", "§31.2"))
    return found


def _pressure(node: str, state: dict, ranks: dict) -> list:
    found, kept = [], state.setdefault("ranks", {})
    kv = {rank: fam[KV] for rank, fam in ranks.items() if KV in fam}
    for rank, ratio in kv.items():
        mark = kept.setdefault(rank, {})
        waiting = ranks[rank].get(WAITING, 0.0)
        grew = waiting > mark.get("waiting", 0.0)
        full = ratio >= KV_FULL and waiting > 0 and (grew or mark.get("kv_full", False))
        mark["waiting"], mark["kv_full"] = waiting, full
        if full:
            found.append(Condition("KV-PRESSURE", node, _where(rank), "warn",
                                   f"{_where(rank)}: KV cache {ratio:.0%} full with {waiting:g} request(s) waiting "
                                   "and growing (§31.2 signal 2)", "§31.2"))
        others = [v for r, v in kv.items() if r != rank]
        if ratio >= KV_FULL and others and statistics.median(others) < KV_IDLE:
            found.append(Condition("KV-RANK-IMBALANCE", node, _where(rank), "warn",
                                   f"{_where(rank)}: KV cache {ratio:.0%} full while the other ranks' median is "
                                   f"{statistics.median(others):.0%}: the §20 precursor of one rank failing",
                                   "§20, §31.2"))
    return found
