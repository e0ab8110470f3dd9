"""The nodes a run could not read, as people read them: each cause once, nodes with the same cause together.

An unread node keeps one ERROR per check in the results (JUnit and Prometheus show one entry per check and node,
k3doctor/judging/unread.py), but a first screen of 18 x 4 identical ERRORs buries the one fact that matters: a
missing key, a stopped sshd, an unknown host key (issue 33). The table, HTML and Nagios formats say instead
"4 of 4 nodes (...): identity file ... does not exist", its fix, and how many checks did not run there.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from k3doctor.outputs.text import one_line
from k3doctor.results import Unread

NAMES_SHOWN = 8  # a group names this many of its nodes, then counts the rest


@dataclass
class Group:
    """Nodes not read for the same cause (the same id and words that name no node)."""

    cause: str
    title: str
    summary: str
    nodes: list = field(default_factory=list)
    fixes: dict = field(default_factory=dict)  # node -> its fix (the host, port or file named in it)
    messages: dict = field(default_factory=dict)  # node -> its own words

    def names(self) -> str:
        shown = ", ".join(self.nodes[:NAMES_SHOWN])
        return shown + (f", +{len(self.nodes) - NAMES_SHOWN} more" if len(self.nodes) > NAMES_SHOWN else "")

    def line(self, total: int) -> str:
        """``4 of 4 nodes (ct13, ...): summary [CAUSE]``."""
        return one_line(f"{len(self.nodes)} of {total} node{'s' if total != 1 else ''} ({self.names()}): "
                        f"{self.summary} [{self.cause}]")

    def fix(self) -> str:
        """The fix, once: the first node's where each names its own host ("likewise" for the others)."""
        fixes = [f for f in self.fixes.values() if f]
        if not fixes:
            return ""
        if len(set(fixes)) == 1:
            return one_line(fixes[0])
        return one_line(f"{fixes[0]} (for {self.nodes[0]}; likewise for each of the others)")


def unread_nodes(report) -> dict:
    """node -> Unread of the nodes not read, in inventory order (an endpoint the gate could not reach is words
    only, ``k3doctor gate``: its one ERROR says so, nothing stands for it)."""
    return {n: report.unreachable[n] for n in report.nodes if isinstance(report.unreachable.get(n), Unread)}


def read_results(report) -> list:
    """The results of the nodes that were read, and the cluster's: what the checks found."""
    unread = unread_nodes(report)
    return [r for r in report.results if r.node not in unread]


def not_run(report) -> int:
    """How many check results stand for checks that did not run on an unread node."""
    unread = unread_nodes(report)
    return sum(r.node in unread for r in report.results)


def groups(report) -> list:
    """The unread nodes grouped by cause, in the order their first node comes in the inventory."""
    return groups_of(unread_nodes(report))


def groups_of(unread: dict) -> list:
    """Nodes (node -> Unread, in order) grouped by cause."""
    out: dict = {}
    for node, why in unread.items():
        group = out.setdefault((why.cause, why.summary), Group(why.cause, why.title, why.summary))
        group.nodes.append(node)
        group.fixes[node], group.messages[node] = why.fix, why.message
    return list(out.values())


def nodes_read(report) -> str:
    """``0 of 4 nodes read - identity file missing`` ("" when every node was read): the verdict line's reason."""
    found = groups(report)
    if not found:
        return ""
    titles: dict = {}
    for group in found:
        titles[group.title] = titles.get(group.title, 0) + len(group.nodes)
    unread = sum(titles.values())
    why = next(iter(titles)) if len(titles) == 1 else ", ".join(f"{n} {title}" for title, n in titles.items())
    return f"{len(report.nodes) - unread} of {len(report.nodes)} nodes read - {why}"


def lines(report, checks, verbose: bool) -> list:
    """The table's and Nagios' words about the unread nodes: per cause its line and its fix, the checks not
    run (listed with -v, each node's own words too), and how many nodes the cluster checks judged."""
    found = groups(report)
    if not found:
        return []
    total, unread = len(report.nodes), len(unread_nodes(report))
    ran = [c for c in checks if c.name not in set(report.not_for_platform)]
    cluster = [c for c in ran if c.scope == "cluster"]
    out = []
    for group in found:
        out.append(f"NOT READ {group.line(total)}")
        if group.fix():
            out.append(f"  fix: {group.fix()}")
        if verbose:
            out += [f"  {one_line(n)}: {one_line(group.messages[n])}" for n in group.nodes]
    if verbose:
        out.append(f"  not run on them: {', '.join(c.name for c in ran)}")
    else:
        out.append(f"  {len(ran)} check(s) not run on each of them ({not_run(report)} results; -v lists them)")
    if cluster:
        out.append(f"  {len(cluster)} cluster check(s) judged {total - unread} of {total} nodes")
    return out
