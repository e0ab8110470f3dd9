"""Checks and remediation texts as declared: ``@check`` and ``remediation()`` register them in ``REGISTRY``.

A check names what it reads (a mapping of names to reading specs, or a function of the node's settings returning
one) and a pure ``judge`` from those readings to verdicts; active probes (deep tier) provide ``probe(ctx)``
instead. The registry validates each declaration once, when it is made, and orders checks by ``after=`` and
``needs=``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from k3doctor.readings import Command
from k3doctor.registry.parameters import as_param
from k3doctor.results import Status

SCOPES = ("node", "gpu", "cluster", "node-pair")
TIERS = ("fast", "deep")
INTERACTIONS = ("passive", "active", "disruptive")


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
