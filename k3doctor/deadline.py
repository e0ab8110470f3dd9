"""Time budgets the runtime can trust: every value finite and bounded, every deadline absolute (and the
bound on any other number a user gives).

Settings are validated where they are read (inventory, command line), but anything that reaches
the runtime (a check's ``timeout_s``, a probe's deadline, a plugin's value) is clamped again here,
so no ``inf``, ``nan`` or absurd number ever becomes a remote ``timeout`` or a socket timeout.
"""
from __future__ import annotations

import math
import time

MAX_MAGNITUDE = 2 ** 63  # no count, size or port beyond what an int64 holds
MAX_GPUS_PER_NODE = 64  # a node of any vendor holds 8 today (gfx1250 racks: 4); 64 leaves room, 10**7 is a typo
MAX_SECONDS = 86400.0  # a day: no run waits longer for anything (a bigger value is a typo or `.inf`)
MIN_SECONDS = 0.1
# A node's readings in flight at once (ssh.reads_in_flight): its slow GPU tools overlap (reference §31.5: a
# node's time is its slowest read, not the sum); 1 takes them one after another. Eight: every GPU tool call of
# a gfx1250 node's fast tier (seven: amd-smi five times, rocm-smi twice) starts at once, so the node's time is
# its slowest call plus what the tools' own lock queues (4 left a second wave: +0.5-0.8 s); the processes a
# node starts are the same, its CPU +2-4 % (bench/results/fast-tier-table-2026-12-07).
READS_IN_FLIGHT = 8
MAX_READS_IN_FLIGHT = 16


def seconds(value, default: float) -> float:
    """``value`` as a usable number of seconds: non-numbers and NaN give ``default``, the rest is
    clamped to [MIN_SECONDS, MAX_SECONDS] (``inf`` becomes a day)."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    if math.isnan(number):
        number = float(default)
    return min(max(number, MIN_SECONDS), MAX_SECONDS)


class Deadline:
    """An absolute point on the monotonic clock; ``remaining()`` is what is left of the budget."""

    def __init__(self, budget_s: float, default: float = 120.0):
        self.budget_s = seconds(budget_s, default)
        self.at = time.monotonic() + self.budget_s

    def remaining(self) -> float:
        return max(0.0, self.at - time.monotonic())

    @property
    def expired(self) -> bool:
        return self.remaining() <= 0.0


FUTURE_SLACK_S = 86400.0  # a node's clock may run ahead of ours, but not by more than a day


def plausible_clock(seconds) -> bool:
    """Whether ``seconds`` (epoch) can be a real clock reading now: finite, after 1970 and not more than
    FUTURE_SLACK_S ahead of this machine (``9999-12-31`` in one rank's log made every other rank look
    stalled for 4193436360 min; a NaN ``now`` turned DO NOT LAUNCH into READY)."""
    return isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and math.isfinite(seconds) \
        and 0 <= seconds <= time.time() + FUTURE_SLACK_S
