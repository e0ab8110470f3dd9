"""Judge a check on plain readings, exactly as the runner judges it: for check authors' unit tests.

Readings are given by the names the check declared, typed as the gatherer delivers them:

- ``Exists``: ``True`` / ``False`` (a bool, nothing is read);
- ``File``: the file's text, or ``None`` when it does not exist (a ``FileReading``: ``.text()``, ``.exists``);
- ``Glob``: ``{path: text or None}`` (a dict of ``FileReading`` by path; no match is ``{}``);
- ``Command`` (also ``InContainer``, ``EngineFactCommand``): its stdout for a run that exited 0, or
  ``(rc, stdout, stderr)`` (a ``CommandReading``: ``.output()`` raises ``ReadingUnavailable`` unless it
  exited 0, complete and in time); an ``EngineFactCommand`` whose fact the engine could not give is an
  ``Unavailable``;
- ``Docker`` / ``ContainerInspect``: their reading objects.

A reading object (``FileReading``, ``CommandReading``, ``Unavailable``, ...) is passed on as it is, and a
declared reading left out reads as unavailable (the judge's ``ReadingUnavailable`` is an ERROR). The
verdicts come back as the report shows them: through :func:`k3doctor.api.judge_safely`, with the
check's first remediation on a FAIL or WARN that names none.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace

from k3doctor.registry import declarations as _declarations
from k3doctor.registry import discovery as _discovery
from k3doctor.api import Context
from k3doctor.inventory.types import Node, Settings
from k3doctor.judging.evaluate import NodeJudge, as_reported, judge_across
from k3doctor.readings import Command, CommandReading, Exists, File, FileReading, Glob, Readings, Unavailable
from k3doctor.registry import prerequisites_first
from k3doctor.shell import join

__all__ = ["as_reading", "judge", "temporary_registry"]


def as_reading(spec, value):
    """The reading the gatherer would deliver for ``spec`` from a plain ``value`` (see the module doc)."""
    if isinstance(spec, Exists):
        return value if isinstance(value, (bool, Unavailable)) else bool(value)
    if isinstance(spec, File):
        return _file(spec.path, value)
    if isinstance(spec, Glob) and isinstance(value, dict):
        return {path: _file(path, text) for path, text in value.items()}
    if isinstance(spec, Command) and isinstance(value, (str, tuple)):
        rc, stdout, stderr = (0, value, "") if isinstance(value, str) else value
        return CommandReading(join(spec.argv), rc, stdout, stderr, timed_out=rc in (124, 137))
    return value


def _file(path: str, value):
    return FileReading(path, value) if value is None or isinstance(value, str) else value


def _check(chk, registry):
    if not isinstance(chk, str):
        return chk
    registry = registry or _declarations.REGISTRY
    if chk not in registry.checks and registry is _declarations.REGISTRY:
        _discovery.load_checks()
    return registry.checks[chk]


def _settings(chk, settings, params: dict):
    settings = settings or Settings()
    unknown = sorted(set(params) - set(chk.params))
    if unknown:
        raise ValueError(f"check {chk.name!r} declares no parameter {', '.join(unknown)}")
    return replace(settings, checks={**settings.checks, chk.name: {**settings.checks.get(chk.name, {}), **params}})


def _readings(chk, plain, settings) -> dict:
    plain = plain.raw() if isinstance(plain, Readings) else plain
    specs = chk.readings_for(settings)
    return ({name: as_reading(spec, plain[name]) if name in plain else
                     Unavailable(f"{name}: not given to the judge") for name, spec in specs.items()})


def judge(chk, readings: dict, *, node: str = "node1", settings: Settings | None = None, baseline=None,
          nodes: dict | None = None, registry=None, prerequisites: dict | None = None, **params) -> list:
    """The verdicts of check ``chk`` (its name, or the Check) on ``readings``, with ``params`` set, judged
    through the run's own path (k3doctor/judging/evaluate.py).

    Node and GPU checks take ``{reading name: value}`` (or a ``Readings``) for one node, ``node``; cluster checks take
    ``{node: {reading name: value}}`` and ``baseline`` as ``{node: entry}``. ``settings`` is every node's
    (default: ``Settings()``, i.e. the inventory's defaults); a cluster judge's ``ctx.nodes`` are
    ``nodes`` (name -> inventory Node, each with its own settings) where given. ``prerequisites``: the
    readings of checks ``chk`` needs (check name -> readings as above, for a cluster check per node), judged
    first as a run judges them: where one fails, ``chk`` is not evaluated there, as in a run. A prerequisite
    not given is not part of the run and blocks nothing.
    """
    chk = _check(chk, registry)
    settings = _settings(chk, settings, params)
    given = {name: _check(name, registry) for name in (prerequisites or {})}
    if chk.scope == "cluster":
        nodes = {name: Node(name, None, settings) for name in readings} if nodes is None else nodes
        failed = {name: _prerequisites_judged(given, prerequisites, name, settings, per_node=True)
                  for name in readings}
        per_node = {name: _readings(chk, plain, settings) for name, plain in readings.items()}
        ctx = Context(chk, settings, nodes=nodes, baseline=baseline or {})
        left_out, verdicts = judge_across(chk, per_node, failed, ctx)
        return left_out + as_reported(chk, verdicts)
    if chk.judge is None:
        raise ValueError(f"check {chk.name!r} is a probe: it orchestrates nodes and has no judge of readings")
    judge_ = NodeJudge(node, settings, baseline={chk.name: baseline})
    judge_.failed = _prerequisites_judged(given, prerequisites, node, settings)
    return as_reported(chk, judge_.verdicts(chk, _readings(chk, readings, settings)))


def _prerequisites_judged(given: dict, plain: dict, node: str, settings, per_node: bool = False) -> dict:
    """prerequisite -> its blocking results on ``node``, each judged through the run's path in its order."""
    judge_ = NodeJudge(node, settings)
    for prerequisite in prerequisites_first(list(given.values())):
        readings = plain[prerequisite.name]
        readings = readings.get(node, {}) if per_node else readings
        judge_.judge(prerequisite, _readings(prerequisite, readings, settings))
    return judge_.failed


@contextmanager
def temporary_registry():
    """A fresh registry that ``@check`` and ``remediation(...)`` register into while the block runs:
    a test's throwaway check never joins (or clashes with) the real ones."""
    saved, fresh = _declarations.REGISTRY, _declarations.Registry()
    _declarations.REGISTRY = fresh
    try:
        yield fresh
    finally:
        _declarations.REGISTRY = saved
