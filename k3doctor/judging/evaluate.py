"""The one judging path: prerequisites' gate -> context -> ``judge_safely`` -> per-GPU skip -> default
remediation -> ``Result``.

A run (judging/runner.py), ``merge`` (fleet/merge.py, through :func:`judge_across`) and check authors'
tests (``k3doctor.testing``) all judge through these functions, so a check judged in a unit test goes
through exactly what a run does, its prerequisites included (judging/prerequisites.py says why a
dependant of a failed check is not evaluated).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from k3doctor.api import Context, failure_verdict, judge_safely
from k3doctor.judging.prerequisites import Gate, blocking_findings
from k3doctor.readings import Readings
from k3doctor.results import Result


def as_reported(chk, verdicts) -> list:
    """Verdicts as a report shows them: a FAIL or WARN that names no remediation gets the check's first."""
    return chk.with_default_remediation(verdicts)


def to_results(chk, node: str | None, verdicts) -> list:
    """Verdicts placed on their check and node (a cluster judge's verdict may name its own node)."""
    return [Result(check=chk.name, node=v.node or node, status=v.status, message=v.message, gpu=v.gpu,
                   evidence=v.evidence, remediation=v.remediation, figures=list(v.figures))
            for v in as_reported(chk, verdicts)]


@dataclass
class NodeJudge:
    """One node's node- and GPU-scope checks, judged in prerequisite order.

    ``failed`` remembers each judged check's blocking findings there (prerequisite -> results), which
    gate the checks that need it."""

    node: str
    settings: object
    baseline: dict = field(default_factory=dict)  # check name -> its baseline entry for this node
    fix: bool = False
    failed: dict = field(default_factory=dict)
    facts: dict = field(default_factory=dict)  # cluster check with ``each_node`` -> this node's Facts

    def context(self, chk) -> Context:
        return Context(chk, self.settings, node=self.node, baseline=self.baseline.get(chk.name), fix=self.fix)

    def verdicts(self, chk, readings: dict) -> list:
        """``chk``'s raw verdicts on ``readings`` (name -> reading): one SKIP where a prerequisite failed for
        the whole node, readings a failed prerequisite withholds replaced, a GPU it failed on skipped."""
        gate = Gate(chk, self.failed)
        return gate.skipped() or gate.per_gpu(
            judge_safely(chk.judge, Readings(gate.readings(readings)), self.context(chk)))

    def settle(self, chk, results: list) -> list:
        """``chk``'s results on this node are final: what of them blocks its dependants is remembered."""
        self.failed[chk.name] = blocking_findings(chk, results)
        return results

    def judge(self, chk, readings: dict) -> list:
        """``chk``'s results on this node."""
        return self.settle(chk, to_results(chk, self.node, self.verdicts(chk, readings)))

    def take_facts(self, chk, readings: dict) -> None:
        """A cluster check's part on this node (``each_node``), kept for its judge; none where a
        prerequisite failed for the whole node (the judge leaves the node out and says so)."""
        gate = Gate(chk, self.failed)
        if not gate.whole:
            self.facts[chk.name] = node_facts(chk, gate.readings(readings), self.context(chk))


@dataclass
class Facts:
    """One node's ``each_node`` part of a cluster check: its value, or the ERROR verdicts that replace it."""

    value: object = None
    errors: list = field(default_factory=list)


def node_facts(chk, readings: dict, ctx: Context) -> Facts:
    """``chk.each_node`` on one node's readings; what it raises is that node's ERROR (as a judge's would be)."""
    try:
        return Facts(chk.each_node(Readings(readings), ctx))
    except Exception as exc:  # a bug in one node's part must not hide the other nodes' results
        return Facts(errors=[replace(failure_verdict(exc), node=ctx.node)])


def judge_across(chk, per_node: dict, failed_by_node: dict, ctx: Context, facts: dict | None = None) -> tuple:
    """A cluster-scope check over the nodes' readings (node -> {name: reading}).

    A node where a prerequisite failed for the whole node is left out and says so once; readings a
    failed prerequisite withholds are replaced. A check with ``each_node`` is judged on each node's facts:
    those the run took in its node phase (``facts``: node -> Facts), else taken here; a node whose part
    raised is left out with its ERROR. Returns (the left-out nodes' SKIPs and ERRORs, each naming its node;
    the judge's verdicts), raw, for the caller to label (e.g. with a rack) and place."""
    gates = {node: Gate(chk, failed_by_node.get(node, {})) for node in per_node}
    left_out = [replace(v, node=node) for node, gate in gates.items() for v in gate.skipped()]
    evaluated = {node: gates[node].readings(readings) for node, readings in per_node.items()
                 if not gates[node].whole}
    if chk.each_node is None:
        evaluated = {node: Readings(readings) for node, readings in evaluated.items()}
    else:
        facts = facts or {}
        taken = {node: facts[node] if node in facts else node_facts(chk, readings, _node_context(chk, ctx, node))
                 for node, readings in evaluated.items()}
        left_out += [v for got in taken.values() for v in got.errors]
        evaluated = {node: got.value for node, got in taken.items() if not got.errors}
    if not evaluated:
        return left_out, []
    ctx.nodes = {name: node for name, node in ctx.nodes.items() if name in evaluated}
    return left_out, judge_safely(chk.judge, evaluated, ctx)


def _node_context(chk, ctx: Context, node: str) -> Context:
    """The context a node phase gives ``chk`` on ``node`` (its own settings and baseline entry)."""
    return Context(chk, ctx.node_settings(node), node=node, baseline=(ctx.baseline or {}).get(node), fix=ctx.fix)
