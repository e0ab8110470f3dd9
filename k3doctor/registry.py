"""The check registry: checks are small declarative units registered with ``@check``.

A check names what it reads (a mapping of names to reading specs, or a function of the
node's settings returning one) and a pure ``judge`` from those readings to verdicts.
Active probes (deep tier) instead provide ``probe(ctx)``, which orchestrates through the
transports. Built-in checks live in ``k3doctor.checks``; third-party packages add theirs
through the ``k3doctor.checks`` entry-point group (pluggy-style discovery, no pluggy).
"""
from __future__ import annotations

import importlib
import math
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from k3doctor.deadline import MAX_GPUS_PER_NODE, MAX_MAGNITUDE, MAX_SECONDS  # bounds every value keeps
from k3doctor.readings import Command
from k3doctor.results import Status

SCOPES = ("node", "gpu", "cluster", "node-pair")
TIERS = ("fast", "deep")
INTERACTIONS = ("passive", "active", "disruptive")
ENTRY_POINT_GROUP = "k3doctor.checks"


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


@dataclass(frozen=True)
class Remediation:
    code: str
    title: str
    text: str


@dataclass
class Check:
    name: str
    title: str
    scope: str
    reads: dict | Callable | None = None
    judge: Callable | None = None
    probe: Callable | None = None
    tier: str = "fast"
    interaction: str = "passive"
    after: tuple = ()
    # Active probes: checks whose FAIL on any node means the rack is in use by someone else; the probe then
    # does not start at all (one SKIP saying so), as peer tools refuse to load GPUs another job holds.
    exclusive: tuple = ()
    timeout_s: float | None = None
    remediations: tuple = ()
    params: dict = field(default_factory=dict)  # tunables: name -> default or Param; inventory `checks:` overrides
    # Prerequisites on the same node: check name -> None (the whole check needs it) or the names of the
    # readings that need it. Where a prerequisite's blocking finding stands, the runner does not evaluate
    # what needs it and says so once ("not evaluated: <prerequisite> failed") as a SKIP.
    needs: dict = field(default_factory=dict)
    blocking: tuple = ()  # remediation codes of this check's FAIL/ERROR findings that stop its dependants (): any
    record: Callable | None = None  # judges: (readings, ctx) -> this node's entry kept by `k3doctor baseline record`
    record_run: Callable | None = None  # probes: (verdicts, ctx) -> {node: entry}, the entries of the nodes it ran on
    fixer: Callable | None = None  # (transport, verdicts, ctx) -> verdicts; runs only with --fix
    each_node: Callable | None = None  # cluster judges: (readings, ctx) -> one node's facts (see ``check``)
    doc: str = ""
    param_specs: dict = field(default_factory=dict, init=False)  # name -> Param (``params`` keeps the defaults)

    def __post_init__(self):
        self.param_specs = {name: as_param(name, p) for name, p in self.params.items()}
        self.params = {name: spec.default for name, spec in self.param_specs.items()}

    @property
    def keeps_baseline(self) -> bool:
        """Whether `k3doctor baseline record` keeps something of this check."""
        return self.record is not None or self.record_run is not None

    def with_default_remediation(self, verdicts) -> list:
        """The verdicts as reported: a FAIL or WARN naming no remediation gets the check's first one,
        so ``k3doctor explain`` has a text for every finding."""
        if not self.remediations:
            return list(verdicts)
        return [replace(v, remediation=self.remediations[0])
                if not v.remediation and v.status in (Status.FAIL, Status.WARN) else v for v in verdicts]

    def param_problem(self, name: str, value, nodes=None) -> str | None:
        """What is wrong with ``value`` for parameter ``name`` (None: acceptable)."""
        return self.param_specs[name].problem(value, nodes)

    def readings_for(self, settings) -> dict:
        """The check's reading specs for one node, given that node's settings."""
        if self.reads is None:
            return {}
        specs = dict(self.reads(CheckSettings(settings, self)) if callable(self.reads) else self.reads)
        if self.timeout_s is None:
            return specs
        return {name: replace(spec, timeout_s=self.timeout_s)
                if isinstance(spec, Command) and spec.timeout_s is None else spec
                for name, spec in specs.items()}


class CheckSettings:
    """A node's settings as one check sees them: every setting, plus ``param(name)`` for this check's
    tunables (the inventory's value, else the check's default), so a check never looks itself up."""

    def __init__(self, settings, check: Check):
        self._settings, self._check = settings, check

    def __getattr__(self, name):
        return getattr(self._settings, name)

    def param(self, name: str):
        return self._settings.param(self._check, name)


class RegistryError(Exception):
    pass


class Registry:
    def __init__(self):
        self.checks: dict = {}
        self.remediations: dict = {}

    def add(self, chk: Check) -> Check:
        if chk.name in self.checks:
            raise RegistryError(f"check {chk.name!r} registered twice")
        for what, value, allowed in (("scope", chk.scope, SCOPES), ("tier", chk.tier, TIERS),
                                     ("interaction", chk.interaction, INTERACTIONS)):
            if value not in allowed:
                raise RegistryError(f"check {chk.name!r}: {what} {value!r} not one of {', '.join(allowed)}")
        if (chk.judge is None) == (chk.probe is None):
            raise RegistryError(f"check {chk.name!r} needs exactly one of judge= or probe=")
        if (chk.record if chk.probe else chk.record_run) is not None:
            raise RegistryError(f"check {chk.name!r}: a probe keeps its baseline with record_run=(verdicts, ctx), "
                                "a judge with record=(readings, ctx)")
        if chk.each_node is not None and (chk.scope != "cluster" or chk.judge is None):
            raise RegistryError(f"check {chk.name!r}: each_node= is a cluster judge's part per node")
        self.checks[chk.name] = chk
        return chk

    def add_remediation(self, code: str, title: str, text: str) -> str:
        self.remediations[code] = Remediation(code, title, text.strip())
        return code

    def ordered(self, names=None) -> list:
        """Checks in registration order, with ``after=`` respected (stable topological order)."""
        wanted = sorted((c for c in self.checks.values() if names is None or c.name in names),
                        key=lambda c: TIERS.index(c.tier))  # fast tier first, registration order within
        return dependency_order(wanted, lambda chk: chk.after)


def dependency_order(checks: list, deps_of: Callable) -> list:
    """``checks`` in their order, each moved after those of ``deps_of(check)`` (names) among them."""
    by_name = {c.name: c for c in checks}
    placed, out = set(), []

    def place(chk, stack=()):
        if chk.name in placed:
            return
        if chk.name in stack:
            raise RegistryError(f"check ordering cycle: {' -> '.join(stack + (chk.name,))}")
        for dep in deps_of(chk):
            if dep in by_name:
                place(by_name[dep], stack + (chk.name,))
        placed.add(chk.name)
        out.append(chk)

    for chk in checks:
        place(chk)
    return out


def prerequisites_first(checks: list) -> list:
    """The order a node's judges run in: every check after the prerequisites it ``needs``."""
    return dependency_order(checks, lambda chk: chk.needs)


REGISTRY = Registry()


def check(name: str, *, title: str, scope: str = "node", reads=None, tier: str = "fast",
          interaction: str = "passive", after=(), timeout_s=None, remediation=(), params=None,
          needs=(), blocking=(), record=None, record_run=None, fixer=None, exclusive=(),
          each_node=None, registry: Registry = None):
    """Register the decorated function as a check's judge (passive) or probe (active).

    ``needs`` names the checks that must not have failed on a node for this one to be evaluated
    there (``exclusive``, probes: checks whose FAIL anywhere keeps the probe from starting at all, e.g.
    ``("rack-free",)``: a foreign container or GPU process means the rack is someone else's now):
    ``("amdgpu-driver",)`` for the whole check, or ``{"amdgpu-driver": ("pids",)}`` for only
    those readings (the judge then gets :class:`~k3doctor.readings.NotEvaluated` for them). A
    prerequisite's ``blocking`` codes say which of its findings count (default: any FAIL or ERROR),
    so a finding that leaves the dependants readable (wrong module parameters) does not hide them.
    A prerequisite that was not selected for the run blocks nothing; prerequisites are node or GPU checks
    (judged per node before their dependants).

    ``record`` (optional, judges) turns the check's readings into the node's baseline entry:
    ``record(readings, ctx) -> entry``; ``record_run`` (optional, probes) turns a probe's verdicts
    into the entries of the nodes it ran on: ``record_run(verdicts, ctx) -> {node: entry}``.
    ``ctx.baseline`` then holds that entry (active and cluster checks: node -> entry) for drift
    judgement. ``fixer`` (optional)
    repairs exactly what the verdicts' evidence names, and runs only when the user
    passed ``--fix``.

    ``each_node`` (optional, cluster judges): ``each_node(readings, ctx) -> facts``, one node's part - its
    readings parsed, what can be judged of it alone - run once per node as soon as that node's readings are
    in (beside the other nodes' reads), with the node's own ``ctx``; the judge then gets ``{node: facts}``
    instead of ``{node: readings}`` and only compares. Without it every node's raw output would be parsed
    again after the last node is read, the wait a user sees at the end of a large run (issue 35). Where it
    raises (ParseError, ReadingUnavailable, a bug), that node gets the ERROR and is left out of the judge.
    """
    def decorate(fn):
        kind = "probe" if interaction != "passive" else "judge"
        registry_ = registry or REGISTRY
        registry_.add(Check(
            name=name, title=title, scope=scope, reads=reads, tier=tier, interaction=interaction,
            after=tuple(after), exclusive=tuple(exclusive), timeout_s=timeout_s,
            needs=dict(needs) if isinstance(needs, dict) else dict.fromkeys(needs),
            blocking=(blocking,) if isinstance(blocking, str) else tuple(blocking),
            remediations=(remediation,) if isinstance(remediation, str) else tuple(remediation),
            params=dict(params or {}), record=record, record_run=record_run, fixer=fixer, each_node=each_node,
            doc=(fn.__doc__ or "").strip(),
            **{kind: fn}))
        return fn
    return decorate


def remediation(code: str, title: str, text: str, registry: Registry = None, unique: bool = False) -> str:
    """Register the text ``k3doctor explain CODE`` prints; returns the code for use in verdicts.
    ``unique``: a code registered already is an error (rule rows that make their own codes)."""
    registry = registry or REGISTRY
    if unique and code in registry.remediations:
        raise RegistryError(f"remediation code {code} is already registered")
    return registry.add_remediation(code, title, text)


_loaded = False
# Rule tables that name findings besides the checks (triage's log and stack rules, the sanity gate's steps,
# --slurm-drain's, kernel-health's rows): `list` and `explain` load them by name, as the checks are, with no import
# to remember. (family, module): a module's ``RULES`` rows are listed as ``<family> rule <row>``.
RULE_TABLES = (("triage", "k3doctor.rules.triage"), ("triage", "k3doctor.triage.judge"),
               ("triage", "k3doctor.triage.stacks"), ("probes", "k3doctor.probes.gate"),
               ("fleet", "k3doctor.fleet.slurm"), ("kernel-health", "k3doctor.rules.kernel_log"))


def load_checks() -> tuple:
    """Import the built-in checks and every entry-point plugin; returns plugin load errors."""
    global _loaded
    errors = []
    if _loaded:
        return ()
    _loaded = True
    builtin = importlib.import_module("k3doctor.checks")  # discovered, as plugins are: no import arrow

    order = getattr(builtin, "ORDER", ())
    names = sorted((m.name for m in pkgutil.iter_modules(builtin.__path__)),
                   key=lambda n: (order.index(n) if n in order else len(order), n))
    for name in names:
        importlib.import_module(f"{builtin.__name__}.{name}")
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception as exc:  # a broken plugin must not take the built-in checks down
            errors.append(f"plugin {ep.name} ({ep.value}) failed to load: {exc}")
    return tuple(errors)


def load_rule_tables() -> None:
    """Register the remediation codes of every built-in rule table (see RULE_TABLES)."""
    for _, name in RULE_TABLES:
        importlib.import_module(name)


def rule_table_rows() -> list:
    """(``<family> rule <row>``, remediation code) for every row of a built-in rule table that is rows (a
    module's ``RULES`` of rows with ``name`` and ``remediation``), in table order: what `list -v` shows."""
    found = []
    for family, name in RULE_TABLES:
        rows = getattr(importlib.import_module(name), "RULES", ())
        found += [(f"{family} rule {row.name}", row.remediation) for row in rows
                  if hasattr(row, "name") and hasattr(row, "remediation")]
    return found


def rule_rows(code: str) -> list:
    """The rule rows that give remediation ``code``: what `explain` lists besides the checks."""
    return [row for row, given in rule_table_rows() if given == code]
