"""One node's judgement, interval after interval: its sample -> the conditions active on it now.

The node's state is plain JSON (``--once`` keeps it in its state file between node-problem-detector's runs): the
baseline (boot id, kernel-log mark, RAS counts, bad pages, fatal CPER records, engine PIDs), the engine's per-rank
progress and pressure, each card's load reads in a row, and the sticky conditions - a kernel-log line, a RAS count,
a retired page, a fatal CPER record or a server-log line is a fact of this boot, active until the node reboots,
while an engine condition is judged afresh each interval and clears when its evidence goes. A node not read is
UNKNOWN and keeps what was known of it (a lost node is never reported healthy, nor its faults cleared, §31.2 item
5).
"""
from __future__ import annotations

from k3doctor.readings import FileReading
from k3doctor.watch.device import judge_device
from k3doctor.watch.engine import judge_engine
from k3doctor.watch.events import Condition
from k3doctor.watch.gpu_events import judge_bad_pages, judge_cper
from k3doctor.watch.hardware import judge_kernel, judge_processes, judge_ras
from k3doctor.watch.server_log import judge_server_log
from k3doctor.watch.sources import Sample


class Settings:
    """What the judge is tuned by (the command line's options)."""

    def __init__(self, stall_s: float = 60.0, engine_process: str | None = None):
        from k3doctor.watch.hardware import DEFAULT_ENGINE_PROCESS

        self.stall_s = stall_s
        self.engine_process = engine_process or DEFAULT_ENGINE_PROCESS


def judge_node(node: str, state: dict, sample: Sample, held: list, settings: Settings) -> list:
    """The conditions active on ``node`` after ``sample``; ``held``: those active before (kept, beside
    NODE-UNREAD, when the node was not read). ``state`` is updated in place."""
    if sample.problem is not None:
        kept = [c for c in held if c.severity != "unknown"]
        return kept + [Condition("NODE-UNREAD", node, "node", "unknown",
                                 f"not read: {sample.problem}; its last known state is kept", "§31.2")]
    got, unknown = sample.readings, []
    sticky = state.setdefault("sticky", {})
    baseline = not state.get("baseline")
    boot = got.get("boot_id")
    if isinstance(boot, FileReading) and boot.content and boot.content.strip():
        boot_id = boot.content.strip()[:64]
        if state.get("boot_id") not in (None, boot_id):
            # retired pages and CPER records outlive a reboot (the board keeps them): their baseline stays
            for key in ("kernel_mark", "ras", "engine_pids", "dstate", "ranks", "serving", "device"):
                state.pop(key, None)
            sticky.clear()
            rebooted = Condition("NODE-REBOOTED", node, "node", "warn",
                                 f"the node rebooted during the watch (boot id {state['boot_id'][:8]}... -> "
                                 f"{boot_id[:8]}...): its kernel log is read from the new boot's start", "§31.2")
            sticky[rebooted.key] = rebooted.to_json()
        state["boot_id"] = boot_id
    else:
        unknown.append(Condition("BOOT-ID-UNREAD", node, "node", "unknown",
                                 "boot id not read: a reboot would go unseen", "§31.2"))
    kernel, why = judge_kernel(node, state, got.get("kernel"), baseline)
    unknown += [why] if why else []
    ras, ras_unknown = judge_ras(node, state, got.get("ras"))
    unknown += ras_unknown
    pages, pages_unknown = judge_bad_pages(node, state, got.get("bad_pages"))
    cper, cper_unknown = judge_cper(node, state, got.get("cper"))
    logged, log_unknown = judge_server_log(node, got.get("server_log"))
    unknown += pages_unknown + [c for c in (cper_unknown, log_unknown) if c]
    for cond in kernel + ([] if baseline else ras) + pages + cper + logged:
        sticky.setdefault(cond.key, cond.to_json())
    live = judge_processes(node, state, got.get("procs"), settings.engine_process)
    live += judge_engine(node, state, got.get("metrics"), sample.at, settings.stall_s)
    live += judge_device(node, state, got)
    live += held_while_unread(live, held)
    state["baseline"] = True
    state["last_success"] = sample.at
    return [Condition.from_json(doc) for doc in sticky.values()] + live + unknown


def serving(state: dict) -> bool:
    return bool(state.get("serving"))


METRICS_UNKNOWN = frozenset({"METRICS-NO-ANSWER", "METRICS-UNREAD"})
FROM_PROCESSES = frozenset({"ENGINE-PROCESS-GONE"})  # where "engine" too, but judged from the process table


def held_while_unread(live: list, held: list) -> list:
    """The engine's conditions judged from its metrics (a stalled rank, KV pressure, down), kept while this
    interval's metrics were not read: a page that did not answer in time is UNKNOWN, never the all-clear of a
    stall (which would then start again, and be captured again, at the next read, §31.2 item 5)."""
    if not any(c.code in METRICS_UNKNOWN for c in live):
        return []
    return [c for c in held if c.severity != "unknown" and c.code not in FROM_PROCESSES
            and (c.where == "engine" or c.where.startswith("dp_rank "))]
