"""GPU events newer than the watch's start (reference §31.2 signal 3, §31.3): HBM pages the driver retires and
fatal CPER records it writes while the cluster serves.

Both are read and parsed as the pre-launch checks read them (gpu-bad-pages: each card's
``ras/gpu_vram_bad_pages``, ``parse_vram_bad_pages``; gpu-cper-fatal: ``amd-smi ras --cper --severity fatal``,
``parse_cper_list``), and judged against the watch's own baseline instead of the boot: a page listed or a fatal
record written before the watch started is history that ``check`` reports, never news (a stale fatal CPER must
not cordon a working GPU, device-metrics-exporter #506/#507). A record is news when it was not in the baseline's
list (compared as (GPU, time) records, so the node's clock is never compared with the watcher's). Both are facts
of this boot: sticky until the node reboots. A list that cannot be read is UNKNOWN for its card (or node); a node
whose driver keeps no bad-page file (``bad_page_threshold`` 0) shows no list and is not judged on it.
"""
from __future__ import annotations

import re
import time
from collections import Counter

from k3doctor.parsers import ParseError
from k3doctor.parsers.cper import parse_cper_list
from k3doctor.parsers.gpu_sysfs import parse_vram_bad_pages
from k3doctor.readings import CommandReading, FileReading
from k3doctor.watch.events import Condition, live

_CARD = re.compile(r"/(card[0-9]{1,4})/device/")


def card_of(path: str) -> str | None:
    match = _CARD.search(path)
    return match.group(1) if match else None


def judge_bad_pages(node: str, state: dict, reading) -> tuple:
    """(new sticky conditions, unknown conditions): each card's page counts against its counts when the watch
    first read them (its baseline)."""
    if reading is None:
        return [], []
    if not isinstance(reading, dict):
        return [], [Condition("BAD-PAGES-UNREAD", node, "node", "unknown",
                              f"bad-page lists not read: {getattr(reading, 'reason', reading)}", "§31.2")]
    base, found, unknown = state.setdefault("bad_pages", {}), [], []
    for path, file in sorted(reading.items()):
        card = card_of(path)
        if card is None or not isinstance(file, FileReading) or not file.exists:
            continue
        try:
            if file.content is None or file.truncated:
                raise ParseError(file.error or "not read whole")
            counts = parse_vram_bad_pages(file.content)
        except ParseError as exc:
            unknown.append(Condition("BAD-PAGES-UNREAD", node, card, "unknown",
                                     f"{card} ras/gpu_vram_bad_pages not read: {exc}", "§31.2"))
            continue
        was = base.setdefault(card, counts)
        grew = {kind: n - was.get(kind, 0) for kind, n in counts.items() if n > was.get(kind, 0)}
        if grew:
            said = ", ".join(f"{n} {kind.replace('_', '-')}" for kind, n in grew.items())
            found.append(live("GPU-BAD-PAGES-NEW", node, card,
                              f"{card}: {said} HBM page(s) newly listed in ras/gpu_vram_bad_pages during the watch "
                              f"(now {', '.join(f'{n} {k}' for k, n in counts.items() if n)}): a degrading board, "
                              "open its RMA before the bad-page threshold (§31.3)"))
    return found, unknown


def judge_cper(node: str, state: dict, reading) -> tuple:
    """(new sticky conditions, unknown condition or None) from this interval's CPER listing; ``reading`` None:
    not read this interval (amd-smi is read every ``--cper-every``): what the last read said stands."""
    if reading is None:
        return [], _held(node, state)
    why = None
    if not isinstance(reading, CommandReading):
        why = getattr(reading, "reason", reading)
    elif reading.rc != 0 or reading.truncated or reading.timed_out:
        why = ("output cut at the cap" if reading.truncated else "no answer in time" if reading.timed_out
               else reading.stderr.strip()[-120:] or f"exit {reading.rc}")
    else:
        try:
            records = [[c.gpu, c.epoch_s] for c in parse_cper_list(reading.stdout) if c.severity == "FATAL"]
        except ParseError as exc:
            why = exc
    state["cper_unread"] = None if why is None else f"fatal CPER records not read: {why}"
    if why is not None:
        return [], _held(node, state)
    if "cper" not in state:
        state["cper"] = records  # the first listing is the baseline: every record in it is history
        return [], None
    new = Counter(map(tuple, records)) - Counter(map(tuple, state["cper"]))
    state["cper"] = records
    by_gpu: dict = {}
    for (gpu, stamp), n in new.items():
        by_gpu.setdefault(gpu, []).extend([stamp] * n)
    found = [live("GPU-CPER-FATAL-NEW", node, f"amd-smi GPU {gpu}",
                  f"amd-smi GPU {gpu}: {len(stamps)} fatal CPER record(s) written during the watch, the last dated "
                  f"{_utc(max(stamps))}: an uncorrectable error took the GPU down or reset it (§31.3)")
             for gpu, stamps in sorted(by_gpu.items())]
    return found, None


def _held(node: str, state: dict):
    said = state.get("cper_unread")
    return Condition("CPER-UNREAD", node, "node", "unknown", said, "§31.2") if said else None


def _utc(epoch_s: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch_s))
