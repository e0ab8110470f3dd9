"""A check's tunables and what each may be: declared once, enforced wherever a value comes in.

Every number is bounded by what its name says it measures (``NAME_BOUNDS``), so an inventory typo cannot turn a
parameter into a 10**9-element range; checks declare tighter ranges with ``Param(minimum=, maximum=)``.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from k3doctor.deadline import MAX_GPUS_PER_NODE, MAX_MAGNITUDE, MAX_SECONDS  # bounds every value keeps


@dataclass(frozen=True)
class Param:
    """A check parameter: its documented default and what else it accepts, declared once and
    enforced wherever a value comes in (inventory ``checks:``, ``--set``, ``--pairs``), before
    anything runs. A plain default in ``params=`` means "a value of the default's kind"; numbers
    are always finite, and a name ending in ``_s`` / ``_min`` is a duration, bounded by a day.

    ``validate(value, nodes)`` may add a rule of its own: it returns what is wrong (``None``:
    fine); ``nodes`` are the inventory's node names, or ``None`` where they are not known yet.
    """

    default: object
    choices: tuple = ()
    minimum: float | None = None
    maximum: float | None = None
    validate: Callable | None = None

    def problem(self, value, nodes=None) -> str | None:
        """None when ``value`` is acceptable, else what is expected (``a number like ...``)."""
        if self.choices:
            if value not in self.choices:
                return f"one of {', '.join(map(str, self.choices))}"
        else:
            ok, expected = like(self.default, elements=self.validate is None)(value)
            if not ok:
                return expected
        if _is_number(value):
            if not math.isfinite(value) or abs(value) > MAX_MAGNITUDE:
                return "a finite number"
            if (self.minimum is not None and value < self.minimum) or \
                    (self.maximum is not None and value > self.maximum):
                low = "" if self.minimum is None else _shown(self.minimum)
                high = "" if self.maximum is None else _shown(self.maximum)
                return f"a number in [{low}, {high}]" if low and high else \
                    f"a number >= {low}" if low else f"a number <= {high}"
        return self.validate(value, nodes) if self.validate else None


def whole_number(least: int | None = None) -> Callable:
    """A ``Param(validate=...)`` for counts, ports, indices and byte sizes: a whole number (2.5 iterations is
    a typo, not a request), from ``least`` where given; the upper bound stays the one the name gives
    (NAME_BOUNDS)."""
    def problem(value, nodes=None) -> str | None:
        if not float(value).is_integer():
            return "a whole number" + ("" if least is None else f" >= {least}")
        return None if least is None or value >= least else f"a whole number >= {least}"
    return problem


def _shown(bound) -> str:
    """A bound as a user types it: whole numbers in full (1125899906842624, not 1.1259e+15)."""
    return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def like(default, elements: bool = True):
    """Rule ``value -> (ok, expected)`` accepting values of the same kind as a parameter's default.

    With ``elements`` a list's items and a mapping's values are checked too (a ``[{a: 1}]`` where names
    are expected would otherwise reach the judge and crash it there): like the default's first item, or -
    for an empty default - plain strings in a list and scalar values in a mapping. A parameter with a
    ``validate`` of its own (rule tables, file maps) checks its elements there instead."""
    if isinstance(default, bool):
        return lambda v: (isinstance(v, bool), "true or false")
    if _is_number(default):
        return lambda v: (_is_number(v), f"a number like the default {default!r}")
    if isinstance(default, (list, tuple)):
        item = (like(default[0]) if default else like("")) if elements else None
        said = f"a list like the default {list(default)!r}" if default else "a list of strings"
        return lambda v: (isinstance(v, list) and (item is None or all(item(x)[0] for x in v)), said)
    if isinstance(default, dict):
        first = next(iter(default.values()), None)
        value = (like(first) if default else _scalar) if elements else None
        return lambda v: (isinstance(v, dict) and (value is None or all(
            _is_scalar(k) and k is not None and value(x)[0] for k, x in v.items())),
            "a mapping of names to plain values")
    if default is None:  # "not pinned" by default: any scalar pins it
        return _scalar
    return lambda v: (isinstance(v, str), "a string")


def _is_scalar(v) -> bool:
    return v is None or isinstance(v, (str, int, float))


def _scalar(v):
    return _is_scalar(v), "a string or number"
# What a number may be, by what its name says it measures: bounded by what hardware has, so no parameter
# becomes a 10**9-element range, a set of every GPU id up to 2**63 or a port past 65535. A check that knows
# a tighter range declares it (``Param(minimum=, maximum=)``); the rest get these. Rules are data: the first
# suffix that matches wins, and a number that matches none is a count (GPUs, ranks, entries, iterations).
NAME_BOUNDS = (
    (("_s",), 0, MAX_SECONDS),
    (("_min",), 0, MAX_SECONDS / 60),
    (("port",), 1, 65535),
    (("_pct",), 0, 100),
    (("_bytes",), 0, 1 << 50),  # a PiB: more than any node's memory or disk
    (("_gib", "_gb"), 0, 1 << 20),
    (("_gbps",), 0, 100_000),
    (("_per_node", "gpu"), 0, MAX_GPUS_PER_NODE),  # ranks per node, a GPU index
)
MAX_COUNT = 1_000_000


def as_param(name: str, declared) -> Param:
    """A ``params=`` entry as a :class:`Param`; a number without a maximum of its own gets the bounds its
    name says (NAME_BOUNDS), else MAX_COUNT."""
    param = declared if isinstance(declared, Param) else Param(declared)
    if not _is_number(param.default) or param.choices or param.maximum is not None:
        return param
    low, high = next(((low, high) for suffixes, low, high in NAME_BOUNDS if name.endswith(suffixes)),
                     (None, MAX_COUNT))
    return replace(param, minimum=low if param.minimum is None else param.minimum, maximum=high)

