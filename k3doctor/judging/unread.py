"""A node that cannot be read is one cause, not one ERROR per check in words of its own (issue 33).

The machine formats keep one result per check and node (JUnit testcases and Prometheus series that alerts and
test histories follow): each of an unread node's results is an ERROR carrying the node's one cause id (as its
remediation code) and message. The run also keeps the node's :class:`~k3doctor.results.Unread`, by which the
human formats say the cause once per node, nodes with the same cause together, with its fix.
"""
from __future__ import annotations

from k3doctor.results import Result, Status, Unread
from k3doctor.transport.base import CAUSES, TransportError

NOT_CHECKED = "node not checked: "


def unread(exc: BaseException) -> Unread:
    """The cause a connection or a read of a node ended with (a TransportError names it; anything else is a
    bug of this side, said as such)."""
    if isinstance(exc, TransportError):
        return Unread(exc.cause, CAUSES.get(exc.cause, ("read", "not read"))[1], exc.summary, str(exc), exc.fix)
    why = f"{type(exc).__name__}: {exc}"
    return Unread("NODE-NOT-READ", "internal error", why, why, "report it: this is a bug of k3doctor")


def unread_results(node: str, checks, why: Unread) -> list:
    """One ERROR per check on a node that was not read, each carrying the node's one cause."""
    return [Result(c.name, node, Status.ERROR, NOT_CHECKED + why.message, remediation=why.cause) for c in checks]
