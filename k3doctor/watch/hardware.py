"""The node's own signals (reference §31.2 signals 3 and 5): kernel-log lines newer than the watch's start,
judged by the kernel-health rule table (k3doctor/rules/kernel_log.py: the same rows ``check`` and ``triage``
use, §10/§29/§31.3), RAS counters rising since the start (§31.3: a new ``ue`` is BLOCK, ``ce`` rising WARN) and
the engine's processes (gone, defunct, stuck in D state).

Only what happened after the watch started is news: the first reading of a node is its baseline (the kernel
log's last timestamp, every RAS count, the engine's PIDs), and a stale line or count is never reported. A new
boot id starts the kernel log (and the counts) over: the lines of the new boot are all news.
"""
from __future__ import annotations

import re

from k3doctor.parsers import ParseError
from k3doctor.parsers.dmesg import parse_log, scan
from k3doctor.parsers.gpu_sysfs import parse_err_count
from k3doctor.readings import CommandReading, FileReading
from k3doctor.rules.kernel_log import RULES, SIGNATURES, UNKNOWN_SIGNATURE
from k3doctor.watch.events import Condition

RULE_BY_SIGNATURE = {rule.signature: rule for rule in RULES if rule.signature != UNKNOWN_SIGNATURE
                     and rule.severity != "info"}
_RAS_PATH = re.compile(r"/(?P<card>card[0-9]{1,4})/device/ras/(?P<block>[a-z0-9_]{1,40})_err_count$")
DEFAULT_ENGINE_PROCESS = r"ATOM::|atom\.entrypoints|vllm\.entrypoints|vllm serve"


def _unread(code: str, node: str, what: str, why) -> Condition:
    return Condition(code, node, what, "unknown", f"{what} not read: {getattr(why, 'reason', why)}", "§31.2")


def judge_kernel(node: str, state: dict, reading, baseline: bool) -> tuple:
    """(new sticky conditions, unknown or None). ``state['kernel_mark']``: seconds since boot of the last line
    already seen; the lines after it are judged (continuation lines go with the line before them)."""
    if not isinstance(reading, CommandReading) or reading.rc != 0 or reading.truncated:
        why = reading if not isinstance(reading, CommandReading) else (
            "output cut at the cap" if reading.truncated else (reading.stderr.strip()[-120:] or f"exit {reading.rc}"))
        return [], _unread("KERNEL-LOG-UNREAD", node, "kernel log", why)
    try:
        lines = parse_log(reading.stdout)
    except ParseError as exc:
        return [], _unread("KERNEL-LOG-UNREAD", node, "kernel log", exc)
    mark = state.get("kernel_mark", -1.0)
    new, after, last = [], False, mark
    for line in lines:
        if line.seconds is not None:
            after = line.seconds > mark
            last = max(last, line.seconds)
        if after:
            new.append(line)
    state["kernel_mark"] = last
    if baseline:
        return [], None
    found = []
    for hit in scan(new, SIGNATURES):
        rule = RULE_BY_SIGNATURE.get(hit.signature)
        if rule is None:
            continue
        where = f"gpu {hit.bdf}" if hit.bdf else "node"
        found.append(Condition(rule.id, node, where, rule.severity,
                               f"{rule.what}: {hit.line.strip()[:200]}", rule.section))
    return found, None


def judge_ras(node: str, state: dict, reading) -> tuple:
    """(new sticky conditions, unknown conditions): every ``ras/<block>_err_count`` against its count at the start."""
    if not isinstance(reading, dict):
        return [], [_unread("RAS-UNREAD", node, "RAS counters", reading)]
    base, found, unknown = state.setdefault("ras", {}), [], []
    for path, file in sorted(reading.items()):
        where = _RAS_PATH.search(path)
        if where is None or not isinstance(file, FileReading):
            continue
        card, block = where.group("card"), where.group("block")
        try:
            if file.content is None or file.truncated:
                raise ParseError(file.error or "not read")
            counts = parse_err_count(file.content)
        except ParseError as exc:  # e.g. `Query currently inaccessible` during a RAS interrupt (§31.2)
            unknown.append(_unread("RAS-UNREAD", node, card, f"ras/{block}_err_count: {exc}"))
            continue
        was = base.setdefault(path, [counts["ue"], counts["ce"]])
        if counts["ue"] > was[0]:
            found.append(Condition("RAS-UE-RISING", node, card, "fail",
                                   f"{card} {block}: uncorrectable errors {was[0]} -> {counts['ue']} during the watch: "
                                   "service the GPU (§31.3)", "§31.3"))
        if counts["ce"] > was[1]:
            found.append(Condition("RAS-CE-RISING", node, card, "warn",
                                   f"{card} {block}: correctable errors {was[1]} -> {counts['ce']} during the watch",
                                   "§31.3"))
    return found, unknown


def judge_processes(node: str, state: dict, reading, pattern: str) -> list:
    """The engine's processes: one the watch saw that is gone, one defunct, one in D state two reads in a row."""
    if not isinstance(reading, CommandReading) or reading.rc != 0:
        return [_unread("PROCESSES-UNREAD", node, "process table", reading if not isinstance(
            reading, CommandReading) else (reading.stderr.strip()[-120:] or f"exit {reading.rc}"))]
    engine, wanted = {}, re.compile(pattern)
    for row in reading.stdout.splitlines():
        fields = row.split(None, 2)
        if len(fields) == 3 and fields[0].isdigit() and wanted.search(fields[2]):
            engine[fields[0]] = (fields[1], fields[2][:120])
    seen = state.get("engine_pids") or {}
    if engine and not set(seen) & set(engine):
        seen = {pid: args for pid, (_, args) in engine.items()}  # first seen, or a restarted engine
    state["engine_pids"] = seen
    state["engine_exited"] = bool(seen) and not engine  # what the GPUs still hold then is residue (device.py)
    found, stuck = [], set(state.get("dstate", []))
    gone = [pid for pid in seen if pid not in engine]
    if gone:
        found.append(Condition("ENGINE-PROCESS-GONE", node, "engine", "fail",
                               f"{len(gone)} engine process(es) gone since the watch saw them (pid {', '.join(gone[:4])}:"
                               f" {seen[gone[0]]})", "§31.2"))
    for pid, (stat, args) in engine.items():
        if stat.startswith("Z"):
            found.append(Condition("ENGINE-DEFUNCT", node, f"pid {pid}", "fail",
                                   f"engine process {pid} is defunct: {args}", "§31.2"))
        elif stat.startswith("D") and pid in stuck:
            found.append(Condition("ENGINE-D-STATE", node, f"pid {pid}", "warn",
                                   f"engine process {pid} in uninterruptible sleep (D) for two reads: {args}", "§31.2"))
    state["dstate"] = [pid for pid, (stat, _) in engine.items() if stat.startswith("D")]
    return found
