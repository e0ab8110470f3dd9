"""``--format nagios``: a Nagios / Icinga plugin (status line, perfdata, exit 0/1/2/3).

Plugin API: OK 0, WARNING 1, CRITICAL 2, UNKNOWN 3. k3doctor's DO NOT LAUNCH is CRITICAL,
INCONCLUSIVE (nothing could be evaluated somewhere) is UNKNOWN, a ready run with warnings
is WARNING. The first line is ``K3DOCTOR STATE - summary | perfdata``; each finding follows
as a line of long output (Nagios 3+ / Icinga show it as details).
"""
from __future__ import annotations

from collections import Counter

from k3doctor.outputs import unread
from k3doctor.outputs.registry import output
from k3doctor.outputs.report import findings, where
from k3doctor.outputs.summary import headline
from k3doctor.outputs.text import one_line
from k3doctor.results import LaunchVerdict, Status, overall

STATES = {"OK": 0, "WARNING": 1, "CRITICAL": 2, "UNKNOWN": 3}
MAX_LONG_LINES = 50


def state(report) -> str:
    verdict = overall(report.results)
    if verdict == LaunchVerdict.DO_NOT_LAUNCH:
        return "CRITICAL"
    if verdict == LaunchVerdict.INCONCLUSIVE:
        return "UNKNOWN"
    return "WARNING" if any(r.status == Status.WARN for r in report.results) else "OK"


def _plain(text: str) -> str:
    """'|' starts perfdata in plugin output: never let node text contain one."""
    return one_line(text).replace("|", "/")


def exit_code(report) -> int:
    return STATES[state(report)]


@output("nagios", "Nagios/Icinga plugin output: status line with perfdata, exit 0/1/2/3", exit_code=exit_code)
def render(report, checks, verbose):
    counts = Counter(r.status for r in report.results)
    perf = [f"{s.value.lower()}={counts[s]};;;0" for s in (Status.FAIL, Status.ERROR, Status.WARN, Status.SKIP,
                                                            Status.PASS)]
    perf += [f"unreachable={len(report.unreachable)};;;0;{len(report.nodes)}",
             f"duration={report.duration_s:.3f}s;;;0"]
    lines = [f"K3DOCTOR {state(report)} - {_plain(headline(report))} | {' '.join(perf)}"]
    lines += [_plain(line) for line in unread.lines(report, checks, verbose)]
    found = [r for r in findings(unread.read_results(report)) if verbose or r.status != Status.SKIP]
    for r in found[:MAX_LONG_LINES]:
        code = f" [{r.remediation}]" if r.remediation else ""
        lines.append(_plain(f"{r.status.value} {r.check} {where(r)}: {r.message}{code}"))
    if len(found) > MAX_LONG_LINES:
        lines.append(f"... {len(found) - MAX_LONG_LINES} more finding(s): run `k3doctor check` for all")
    return "\n".join(lines)
