"""Node sets in the syntax admins already use: ClusterShell's NodeSet (``ct[13-14,16-17]``, ``a,b``,
``ct[13-17]!ct15``, ``@group`` from a group table such as an Ansible inventory's groups)."""
from __future__ import annotations

import re

_GROUP = re.compile(r"@([A-Za-z0-9_.+-]+)")


class NodeSetError(ValueError):
    """A node set that cannot be read; the message says why in one line."""


def expand(pattern: str, groups: dict | None = None) -> list:
    """The node names of ``pattern`` in NodeSet order; ``groups`` maps a group name to its members.

    Unlike NodeSet itself, an unknown group and a pattern that names no node are errors here: either
    would silently check fewer nodes than meant."""
    if not isinstance(pattern, str) or not pattern.strip():
        raise NodeSetError("empty node set")
    named = _GROUP.findall(pattern)
    if named and groups is None:
        raise NodeSetError(f"node set {pattern!r} names a group (@{named[0]}); groups come from an Ansible "
                           "inventory (--ansible-inventory PATH, or Ansible's own default inventory)")
    unknown = [g for g in named if g not in (groups or {})]
    if unknown:
        known = ", ".join(sorted(groups)) or "none"
        raise NodeSetError(f"node set {pattern!r}: no group {unknown[0]!r} in the Ansible inventory (groups: {known})")
    from ClusterShell.NodeSet import NodeSet, NodeSetException  # only where a node set is given (CLI start-up)
    from ClusterShell.NodeUtils import GroupResolver, GroupSource

    table = {name: ",".join(members) or "" for name, members in (groups or {}).items()}
    try:
        names = list(NodeSet(pattern, resolver=GroupResolver(GroupSource("inventory", table))))
    except NodeSetException as exc:
        raise NodeSetError(f"bad node set {pattern!r}: {exc}") from None
    if not names:
        raise NodeSetError(f"node set {pattern!r} names no node")
    return names


def looks_like_nodeset(text: str) -> bool:
    """Whether a ``--nodes`` value is meant as node names rather than a file: no path separator and no
    inventory file extension."""
    return "/" not in text and not text.endswith((".yaml", ".yml", ".ini", ".json", ".cfg"))
