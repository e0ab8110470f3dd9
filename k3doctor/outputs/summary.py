"""The one-line summary monitors show: verdict, then the worst finding and where it is."""
from __future__ import annotations

from k3doctor.outputs import unread
from k3doctor.outputs.report import findings, where
from k3doctor.outputs.text import one_line
from k3doctor.results import Status, overall


def headline(report, limit: int | None = None) -> str:
    """``DO NOT LAUNCH: check node gpuN: message [CODE] (+N more)``, or the verdict and counts. Nodes not read
    come first unless a node that was read FAILed: ``INCONCLUSIVE: 0 of 4 nodes read - host key unknown``."""
    verdict = overall(report.results)
    found = findings(unread.read_results(report))
    shown = [r for r in found if r.status.severity > 1] or found  # a SKIP only when nothing worse
    read = unread.nodes_read(report)
    if read and not (shown and shown[0].status == Status.FAIL):
        more = f" (+{len(shown)} more)" if shown else ""
        return one_line(f"{verdict.text}: {read}", None if limit is None else limit - len(more)) + more
    if not shown:
        return one_line(f"{verdict.text}: {len(report.results)} result(s) pass", limit)
    top = shown[0]
    code = f" [{top.remediation}]" if top.remediation else ""
    more = f" (+{len(shown) - 1} more)" if len(shown) > 1 else ""
    more += f"; {read}" if read else ""
    text = f"{verdict.text}: {top.check} {where(top)}: {one_line(top.message)}{code}"
    if limit is not None and len(text) + len(more) > limit:
        return one_line(text, limit - len(more)) + more
    return one_line(text + more)
