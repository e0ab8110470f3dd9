"""Waivers applied to a run's results, once, after judging and before any output (k3doctor/inventory/waivers.py
reads them).

A FAIL or WARN whose finding code, node and GPU an unexpired waiver names becomes WAIVED: every format shows
it (with the reason, ticket and expiry) and no verdict counts it. An expired waiver accepts nothing: the
finding stays what it was and says the waiver expired, so a gate that was quiet for a quarter speaks again
on the day the team said the fix would be in. An ERROR is never waived (nothing was read: there is no known
fault to accept), nor a SKIP. A waiver that covered nothing this run is said once in the report's notes,
so stale ones get removed, and so is one that runs for more than :data:`LONG_DAYS` more days.
"""
from __future__ import annotations

import dataclasses
import datetime

from k3doctor.results import Result, Status

WAIVABLE = (Status.FAIL, Status.WARN)
LONG_DAYS = 90  # a quarter: longer is allowed, and said on every run


def today_utc() -> datetime.date:
    """The date waivers are judged on: UTC's, so a CI runner's time zone does not move an expiry."""
    return datetime.datetime.now(datetime.timezone.utc).date()


def apply(results: list, waivers, today: datetime.date | None = None) -> tuple:
    """(``results`` with the waivers applied, order kept; the notes about the waivers themselves).

    The first unexpired waiver that covers a finding accepts it; where only expired ones cover it, the
    first of those is named on it. A result already WAIVED (a node's own run, merged) stays as it is and
    counts as covered."""
    today = today or today_utc()
    if not waivers:
        return results, []
    used = set()
    out = []
    for r in results:
        covering = [w for w in waivers if w.covers(r)] if r.status in (*WAIVABLE, Status.WAIVED) else []
        used.update(covering)
        live = next((w for w in covering if not w.expired(today)), None)
        if r.status == Status.WAIVED or not covering:
            out.append(r)
        elif live is not None:
            out.append(_waived(r, live))
        else:
            out.append(_expired(r, covering[0]))
    return out, _notes(waivers, used, today)


def _waived(r: Result, w) -> Result:
    return dataclasses.replace(
        r, status=Status.WAIVED, message=f"{r.message} (waived until {w.expires}, {w.ticket}: {w.reason})",
        waiver={**w.as_dict(), "finding": r.status.value})


def _expired(r: Result, w) -> Result:
    return dataclasses.replace(
        r, message=f"{r.message} (waiver {w.ticket} expired on {w.expires}: {w.source})",
        waiver={**w.as_dict(), "finding": r.status.value, "expired": True})


def _notes(waivers, used: set, today: datetime.date) -> list:
    notes = []
    for w in waivers:
        what = f"waiver {w.source} ({w.code}{_place(w)}, {w.ticket})"
        if w not in used:
            gone = " and expired on " + str(w.expires) if w.expired(today) else ""
            notes.append(f"{what} matched no finding{gone}: remove it if the fault is fixed")
        elif (w.expires - today).days > LONG_DAYS:
            notes.append(f"{what} runs until {w.expires}, more than {LONG_DAYS} days ahead: review it sooner")
    return notes


def _place(w) -> str:
    where = f" on {w.node}" if w.node else ""
    return where + (f" gpu{w.gpu}" if w.gpu is not None else "")
