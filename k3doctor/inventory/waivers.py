"""Waivers: a known finding a team has accepted for a while, written down where the gate reads it.

A waiver names a finding code (what ``k3doctor explain`` knows), where it applies (a node or node set,
a GPU; none: everywhere), why (``reason``), who tracks the fix (``ticket``) and until when
(``expires``). It lives in the inventory (``waivers:``) or in a file of its own beside it (``--waivers
FILE``, a YAML file with the same ``waivers:`` list); both are read with the inventory's schema rules,
so every mistake is ``file:line: key: message`` and exit 3 before anything runs. ``expires`` is
required: a waiver that never ends is how a gate stops gating. ``ticket`` is required too: a waiver
nobody owns is never closed. Judging applies them (k3doctor/judging/waivers.py).
"""
from __future__ import annotations

import datetime
import difflib
from dataclasses import dataclass

import yaml

from k3doctor.deadline import MAX_GPUS_PER_NODE
from k3doctor.inventory import nodesets
from k3doctor.inventory.safeyaml import SchemaReader, YAMLInputError, by_line, compose
from k3doctor.inventory.safeyaml import read_file as read_yaml_file
from k3doctor.inventory.schema import node_name_rule


@dataclass(frozen=True)
class Waiver:
    """One accepted finding: ``code`` on ``nodes`` (None: every node and the cluster-wide rows), ``gpu``
    (None: any), until ``expires`` (the first day it no longer applies); ``source`` is its ``file:line``."""

    code: str
    reason: str
    ticket: str
    expires: datetime.date
    source: str
    node: str | None = None  # as written: a name or a node set
    nodes: frozenset | None = None
    gpu: int | None = None

    def covers(self, result) -> bool:
        """Whether ``result`` is the finding this waiver names, where it names it (its status aside)."""
        return (result.remediation == self.code
                and (self.nodes is None or result.node in self.nodes)
                and (self.gpu is None or result.gpu == self.gpu))

    def expired(self, today: datetime.date) -> bool:
        return today >= self.expires

    def as_dict(self) -> dict:
        """What a report carries of it (JSON ``waiver``)."""
        return {"code": self.code, "node": self.node, "gpu": self.gpu, "reason": self.reason,
                "ticket": self.ticket, "expires": self.expires.isoformat(), "source": self.source}


def _text(v):
    return isinstance(v, str) and v.strip() != "" and not any(c in v for c in "\n\t"), "a non-empty one-line string"


def _gpu(v):
    return (isinstance(v, int) and not isinstance(v, bool) and 0 <= v < MAX_GPUS_PER_NODE,
            f"a GPU index from 0 to {MAX_GPUS_PER_NODE - 1}")


def _date(v):
    """A calendar day: YAML reads ``2027-01-31`` as one (safeyaml refuses one that is no date), a quoted
    ``"2027-01-31"`` is taken too; a time of day (``2027-01-31 10:00``) is not: a waiver ends on a day."""
    return (isinstance(_day(v), datetime.date), "a date YYYY-MM-DD (the first day the waiver no longer applies)")


def _day(v) -> datetime.date | None:
    if isinstance(v, str) and len(v) == 10:
        try:
            return datetime.date.fromisoformat(v)
        except ValueError:
            return None
    return v if isinstance(v, datetime.date) and not isinstance(v, datetime.datetime) else None


WAIVER_KEYS = {"code": _text, "node": _text, "gpu": _gpu, "reason": _text, "ticket": _text, "expires": _date}
REQUIRED = ("code", "reason", "ticket", "expires")


def read(reader: SchemaReader, node, key: str, codes) -> list:
    """The waivers of a ``waivers:`` list, every problem reported to ``reader`` as ``file:line``.

    ``codes``: the finding codes k3doctor knows (None: not checked, e.g. an inventory read ahead)."""
    if not isinstance(node, yaml.SequenceNode):
        reader.problem(node, key, "expected a list of waivers (- code: ..., reason: ..., ticket: ..., expires: ...)")
        return []
    out = []
    for i, item in enumerate(node.value):
        where = f"{key}[{i}]"
        entry = reader.mapping(item, where, WAIVER_KEYS)
        if not isinstance(item, yaml.MappingNode):
            continue
        given = {k.value for k, _ in item.value}
        missing = [k for k in REQUIRED if k not in given]
        if missing:
            reader.problem(item, where, f"missing {', '.join(missing)} (a waiver needs code, reason, ticket and "
                                        "expires: who accepted what, and until when)")
            continue
        if set(REQUIRED) - set(entry):  # a required value that was wrong: reported already
            continue
        if codes is not None and entry["code"] not in codes:
            close = difflib.get_close_matches(entry["code"], sorted(codes), n=1)
            reader.problem(item, f"{where}.code", f"unknown finding code {entry['code']!r}" + (
                f" (did you mean '{close[0]}'?)" if close else "; see `k3doctor list -v` and `k3doctor explain CODE`"))
            continue
        nodes = _nodes(reader, item, f"{where}.node", entry.get("node"))
        if nodes is False:
            continue
        out.append(Waiver(code=entry["code"], reason=entry["reason"], ticket=entry["ticket"],
                          expires=_day(entry["expires"]), source=f"{reader.path}:{item.start_mark.line + 1}",
                          node=entry.get("node"), nodes=nodes, gpu=entry.get("gpu")))
    return out


def _nodes(reader: SchemaReader, item, where: str, pattern):
    """The node names of ``node:`` (None: not given, every node), or False where it is not a node set."""
    if pattern is None:
        return None
    try:
        names = nodesets.expand(pattern)
    except nodesets.NodeSetError as exc:
        reader.problem(item, where, str(exc))
        return False
    for name in names:
        ok, expected = node_name_rule(name)
        if not ok:
            reader.problem(item, where, f"{name!r} is not {expected}")
            return False
    return frozenset(names)


class _FileReader(SchemaReader):
    def __init__(self, path: str, codes):
        super().__init__(path)
        self.codes = codes

    def named(self, vnode, where: str, rule: str):
        return read(self, vnode, where, self.codes)


def load_file(path: str, codes) -> tuple:
    """The waivers of a ``--waivers`` file (``waivers:`` and its list, as in the inventory), or
    YAMLInputError with every problem as ``file:line: key: message``."""
    root = compose(read_yaml_file(path, "waivers file"), path)
    reader = _FileReader(path, codes)
    if root is None:
        raise YAMLInputError([f"{path}:1: the waivers file is empty; it needs `waivers:` and a list"])
    top = reader.mapping(root, "", {"waivers": "waivers"})
    if "waivers" not in top and not reader.problems:
        reader.problem(root, "waivers", "missing; the file holds `waivers:` and a list, as an inventory does")
    if reader.problems:
        raise YAMLInputError(by_line(reader.problems, path))
    return tuple(top["waivers"])


def known_codes(registry) -> set | None:
    """Every finding code k3doctor knows: the checks' and plugins' remediation codes and those of the rule
    tables beside them (what ``k3doctor explain`` knows). None without a registry (nothing checked)."""
    if registry is None:
        return None
    from k3doctor.registry import REGISTRY, load_rule_tables

    if registry is REGISTRY:
        load_rule_tables()
    return set(registry.remediations)
