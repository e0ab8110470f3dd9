"""The check author's API in one module: what a check declares, what its judge gets and returns.

A check is one file in ``checks/`` (or a plugin module): readings declared as data (``File``,
``Exists``, ``Glob``, ``Command``, ``EngineFactCommand``, ``Docker``, ``ContainerInspect``),
registered with ``@check`` together with its remediation texts, and a pure judge
``(readings, ctx) -> verdicts``. A judge that raises :class:`ReadingUnavailable` or
:class:`ParseError` gets an ERROR for that node and check, :class:`NotEvaluated` a SKIP
(:func:`judge_safely`, the one place that says so). What the judge knows besides its readings is
the :class:`Context`. ``k3doctor.testing`` judges a check on
plain readings the same way the runner does.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from k3doctor.registry import declarations as _registry
from k3doctor.deadline import MAX_SECONDS
from k3doctor.parsers import ParseError
from k3doctor.readings import (
    FIND_TOOL,
    Command,
    ContainerInspect,
    Docker,
    EngineFactCommand,
    Exists,
    File,
    Glob,
    InContainer,
    NotEvaluated,
    Readings,
    ReadingUnavailable,
    beside_tool,
    in_container,
    sh,
    sh_with_fact,
    tool,
    tool_script,
)
from k3doctor.registry import CheckSettings, Param, check, remediation, whole_number
from k3doctor.results import (
    CardId,
    PairRate,
    Status,
    SweepPoint,
    Verdict,
    error,
    fail,
    human_bytes,
    passed,
    skip,
    verdict,
    warn,
)
from k3doctor.shell import join, quote

__all__ = [
    "FIND_TOOL", "MAX_SECONDS", "CardId", "CheckSettings", "Command", "ContainerInspect", "Context", "Docker",
    "EngineFactCommand", "Exists", "File", "Glob", "InContainer", "NotEvaluated", "PairRate", "Param", "ParseError",
    "ReadingUnavailable", "Readings", "Status", "SweepPoint", "Verdict", "check", "error", "fail", "human_bytes",
    "in_container", "join", "judge_safely", "passed", "quote", "remediation", "remediation_text", "sh", "sh_with_fact",
    "skip", "tool", "tool_script", "beside_tool", "verdict", "warn", "whole_number",
]


@dataclass
class Context:
    """What a judge or probe may know besides its readings: settings, params, baseline."""

    check: object
    settings: object
    node: str | None = None
    nodes: dict = field(default_factory=dict)  # cluster/probe scope: node name -> Node
    baseline: object = None  # this check's baseline entry (cluster scope: node -> entry)
    transports: dict = field(default_factory=dict)  # probes only
    blocked: dict = field(default_factory=dict)  # probes only: node -> why it may not take part
    fix: bool = False
    deadline_s: float = 60.0

    def __post_init__(self):
        if not isinstance(self.settings, CheckSettings):
            self.settings = CheckSettings(self.settings, self.check)

    def param(self, name: str):
        return self.settings.param(name)

    def node_settings(self, node: str) -> CheckSettings:
        """One node's settings as this check sees them: its own `tools:`, gpus_per_node and params win
        (a node the context does not know, e.g. in a unit test: the check's settings)."""
        return CheckSettings(self.nodes[node].settings, self.check) if node in self.nodes else self.settings


def remediation_text(code: str) -> str:
    """The text registered for remediation ``code``: a rule row's own text can quote its family's."""
    return _registry.REGISTRY.remediations[code].text


def _as_list(verdicts) -> list:
    if verdicts is None:
        return []
    if isinstance(verdicts, Verdict):
        return [verdicts]
    return list(verdicts)


def judge_safely(fn, *args) -> list:
    """Run a judge or probe; whatever goes wrong becomes ERROR verdicts, never a traceback."""
    try:
        verdicts = _as_list(fn(*args))
        return verdicts or [error("check returned no verdict (bug in the check)")]
    except Exception as exc:  # a bug in one check must not hide the others' results
        return [failure_verdict(exc)]


def failure_verdict(exc: Exception) -> Verdict:
    """The verdict for what a judge (or a cluster judge's ``each_node``) raised: SKIP for NotEvaluated, else ERROR."""
    if isinstance(exc, NotEvaluated):
        return skip(str(exc))
    if isinstance(exc, ReadingUnavailable):
        return error(f"could not read: {exc}")
    if isinstance(exc, ParseError):
        return error(f"unparseable output: {exc}")
    # imported here, not above: a check that imports this module does not load paramiko (a probe that
    # raised TransportError has it loaded already)
    from k3doctor.transport.base import TransportError

    if isinstance(exc, TransportError):
        return error(str(exc))
    return error(f"internal error in check: {type(exc).__name__}: {exc}")
