"""LMCache and preemption pressure per DP rank, from the engine's ``/metrics`` (reference §31.2 signal 2, §25).

The families (``atom:`` or ``vllm:`` prefixed, per rank where the page has per-rank samples):
``lmcache_load_failures_total`` rising is LMCache failing; ``lmcache_loads_pending`` above zero while
``lmcache_loaded_tokens_total`` does not move for the window is loads stuck; loaded tokens flat for the window
while ``lmcache_saved_tokens_total`` grows is the §25 failure (32 GiB per rank: everything saved, nothing
loaded back); ``preemptions_total`` (vLLM: ``num_preemptions_total``) rising in two reads of the window is the
scheduler evicting running work for KV room - one preemption in a burst is the scheduler doing its job.

Counters are judged by their deltas during the watch (a count at the start is history), over the same window as a
stall (``--stall``, and at least the last three reads): a condition holds while its evidence is in the window and
clears once the window passes without it. A counter that goes down is an engine that restarted: its new values are a
new baseline.
"""
from __future__ import annotations

from k3doctor.watch.events import live

FAILURES, PENDING, LOADED, SAVED = ("lmcache_load_failures_total", "lmcache_loads_pending",
                                    "lmcache_loaded_tokens_total", "lmcache_saved_tokens_total")
PREEMPTED = "preemptions_total"
FAMILIES = (FAILURES, PENDING, LOADED, SAVED, PREEMPTED)
ALIASES = {"num_preemptions_total": PREEMPTED}  # vLLM's spelling
PREEMPTION_RISES = 2
HOLD_READS = 3  # the reads a rise is held for at least (this one and the two before)


def _rises(mark: dict, key: str, value, now: float, window_s: float) -> tuple:
    """(reads in the window in which the counter ``key`` rose, by how much in all); ``mark`` keeps the last value,
    a count of its reads and the rises (time, delta, read) in the window. The window is never shorter than the
    last ``HOLD_READS`` reads: when reads come slower than the window, a counter rising at every read still
    holds its condition (no start/clear at every interval)."""
    if value is None:
        return 0, 0.0
    n = mark.get(f"{key}_reads", 0) + 1
    last = mark.get(key)
    rises = [r for r in mark.get(f"{key}_rises", []) if now - r[0] < window_s or n - r[2] < HOLD_READS]
    if last is not None and value > last:
        rises.append([now, value - last, n])
    elif last is not None and value < last:
        rises = []  # a restarted engine: its counters start over
    mark[key], mark[f"{key}_reads"], mark[f"{key}_rises"] = value, n, rises
    return len(rises), sum(delta for _, delta, _ in rises)


def judge_rank(node: str, where: str, mark: dict, fam: dict, now: float, window_s: float) -> list:
    """The pressure conditions of one rank (``fam``: its families this interval; ``mark``: kept between them)."""
    found = []
    window = f"{window_s:g}s"
    rises, by = _rises(mark, "lmcache_failures", fam.get(FAILURES), now, window_s)
    if rises:
        found.append(live("LMCACHE-LOAD-FAILURES", node, where,
                          f"{where}: {by:g} LMCache load failure(s) in the last {window} "
                          f"(lmcache_load_failures_total now {fam[FAILURES]:g}; §31.2 signal 2)"))
    rises, by = _rises(mark, "preemptions", fam.get(PREEMPTED), now, window_s)
    if rises >= PREEMPTION_RISES:
        found.append(live("PREEMPTIONS-RISING", node, where,
                          f"{where}: {by:g} request(s) preempted in the last {window}, rising in {rises} reads: "
                          "the KV cache is exhausted (§31.2 signal 2)"))
    loaded, pending, saved = fam.get(LOADED), fam.get(PENDING), fam.get(SAVED)
    if loaded is None:
        return found
    if loaded != mark.get("lmcache_loaded"):
        mark["lmcache_loaded_since"], mark["lmcache_saved_then"] = now, saved
    mark["lmcache_loaded"] = loaded
    flat = now - mark["lmcache_loaded_since"]
    if flat < window_s:
        return found
    if pending:
        found.append(live("LMCACHE-LOADS-STUCK", node, where,
                          f"{where}: {pending:g} LMCache load(s) pending and no token loaded for {flat:.0f}s "
                          f"(>= {window}; §31.2 signal 2)"))
    elif saved is not None and mark["lmcache_saved_then"] is not None and saved > mark["lmcache_saved_then"]:
        found.append(live("LMCACHE-LOADS-FLAT", node, where,
                          f"{where}: LMCache saved {saved - mark['lmcache_saved_then']:g} token(s) and loaded none "
                          f"back for {flat:.0f}s (>= {window}): the offload tier is not serving (§25, §31.2)"))
    return found
