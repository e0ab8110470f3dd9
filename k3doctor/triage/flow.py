"""``k3doctor triage`` and ``k3doctor judge BUNDLE`` from start to report: what the command line only wires.

A triage reads every node's server log (or log files copied off the cluster), adds the kernel log's
verdict (``kernel-health``: the fabric or a wedged GPU, §8/§10, which a server log cannot tell) and the
sanity gate where asked, and can keep all of it in a bundle that ``k3doctor judge`` re-judges offline.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from k3doctor.gather import snapshot
from k3doctor.inventory.types import InventoryError
from k3doctor.judging.runner import RunOptions, RunReport, make_transport, run_checks, select_checks
from k3doctor.probes.gate import STEPS as GATE_STEPS
from k3doctor.probes.gate import Step, run_gate, unreachable
from k3doctor.registry import REGISTRY
from k3doctor.triage import bundle as bundles
from k3doctor.triage import judge_all, read_log_dir, read_node_logs
from k3doctor.triage.rank_logs import STEPS, Layout

KERNEL_HEALTH = "kernel-health"  # joins triage's report: the kernel log of every node


class TriageInputError(ValueError):
    """Options or a bundle that cannot be used: one line, exit 3."""


@dataclass
class Triage:
    """What one triage read and found: the report, and what a bundle keeps to judge it again."""

    report: RunReport
    steps: list
    layout: Layout
    texts: dict = field(default_factory=dict)
    dumps: dict = field(default_factory=dict)
    now: float | None = None
    problems: dict = field(default_factory=dict)
    kernel: RunReport | None = None


def log_paths(items, inv) -> dict:
    """``--log NODE=/path`` options as {node: path}."""
    paths = {}
    for item in items:
        node, sep, path = item.partition("=")
        if not sep or node not in {n.name for n in inv.nodes} or not path.startswith("/"):
            raise TriageInputError(f"--log {item!r}: expected NODE=/absolute/path with a node of the inventory")
        paths[node] = path
    return paths


def run_triage(inv, *, named: bool, logs_dir=None, paths=None, stepping=None, tail: int, endpoint=None,
               py_spy=None, timeout_s: float, accept_unknown_hosts=False) -> Triage:
    """Read the logs (``logs_dir``: files copied off the cluster; else every node, over SSH), judge every rank,
    add the kernel log of live nodes and the gate of ``endpoint``. ``named``: the inventory names the nodes
    (offline logs without one are laid out as node0, node1, ...)."""
    if logs_dir and py_spy:
        raise TriageInputError("--stacks reads live processes: it cannot be combined with --logs")
    started = time.monotonic()
    layout = Layout(nodes=tuple(n.name for n in inv.nodes) if named else (), per_node=inv.cluster.gpus_per_node,
                    stepping=stepping or inv.cluster.stepping, board_gib=inv.cluster.hbm_gib_per_gpu)
    dumps, now, kernel = {}, None, None
    if logs_dir:
        texts, unread = read_log_dir(logs_dir)
        problems = {logs_dir: "; ".join(unread)} if unread else {}
    else:
        opts = RunOptions(accept_unknown_hosts=accept_unknown_hosts)
        texts, problems, now, dumps = read_node_logs(
            inv, lambda node: make_transport(node, inv, opts), tail=tail, paths=paths or {},
            deadline_s=timeout_s + 5, timeout_s=timeout_s, py_spy=py_spy)
    results = judge_all(texts, dumps, layout, now=now, problems=problems)
    if not logs_dir:
        kernel = run_checks(inv, select_checks(REGISTRY, only=(KERNEL_HEALTH,)), RunOptions(
            accept_unknown_hosts=accept_unknown_hosts, command_timeout_s=timeout_s, node_deadline_s=timeout_s + 5))
        results += kernel.results
    if endpoint:
        try:
            results += run_gate(endpoint)[1]
        except ValueError as exc:
            raise TriageInputError(f"--endpoint: {exc}") from None
    report, steps = triage_report(results, layout, time.monotonic() - started, gate=bool(endpoint))
    return Triage(report, steps, layout, texts, dumps, now, problems, kernel)


def write_bundle(path: str, triage: Triage, inv_text: str, report_json: str) -> None:
    """The logs, stacks, layout and kernel readings of a triage in one ``.tar.gz``, to judge again offline. The
    kernel readings keep the nodes' own names (the layout, the logs and the report in the bundle name them too,
    secrets redacted): judged again, a finding is on the node the on-call engineer saw it on."""
    lay = triage.layout
    manifest = {"layout": {"nodes": list(lay.nodes), "per_node": lay.per_node, "stepping": lay.stepping,
                           "board_gib": lay.board_gib},
                "now": triage.now, "problems": triage.problems, "duration_s": triage.report.duration_s}
    bundles.write(path, texts=triage.texts, dumps=triage.dumps, manifest=manifest, report_json=report_json,
                  readings=snapshot.dump(triage.kernel, inv_text, keep_identifiers=True) if triage.kernel else None)


def judge_bundle(path: str) -> tuple:
    """(report, steps) of a triage bundle's logs and stacks judged again, with its kernel log's readings."""
    started = time.monotonic()
    try:
        manifest, texts, dumps, readings = bundles.read(path)
        lay, now, problems = bundles.layout_of(manifest, path)
        layout = Layout(**lay)
        saved = snapshot.load(readings) if readings else None
        inv = snapshot.saved_inventory(saved[0], saved[2], path) if saved else None
    except (bundles.BundleError, snapshot.SnapshotError, InventoryError, KeyError, TypeError, ValueError) as exc:
        raise TriageInputError(f"cannot judge {path}: {exc}") from None
    results = judge_all(texts, dumps, layout, now=now, problems=problems)
    if saved:  # the kernel log as it was read, judged again
        results += run_checks(inv, select_checks(REGISTRY, only=(KERNEL_HEALTH,)),
                              RunOptions(replay=(saved[2], saved[3]))).results
    return triage_report(results, layout, time.monotonic() - started)


def triage_report(results, layout, duration_s, gate=False) -> tuple:
    """(RunReport, steps) of a triage: nodes in layout order, then any other node a result names."""
    nodes = list(dict.fromkeys([*layout.nodes, *(r.node for r in results if r.node)]))
    steps = [Step(name, name) for name in (*STEPS, KERNEL_HEALTH)] + (list(GATE_STEPS) if gate else [])
    return RunReport(results=results, nodes=nodes, duration_s=round(duration_s, 3),
                     unreachable=unreachable(results)), steps
