"""``--format prom``: node_exporter textfile-collector metrics (write with ``-o DIR/k3doctor.prom``).

Every series is a gauge of the last run. Status values follow k3doctor's severity order, so
``k3doctor_check_status >= 3`` alerts on ERROR and FAIL. A check with several results on one
place (fabric pairs of a GPU) gives its worst, once: a duplicate series would make
node_exporter drop the whole file. Bandwidths are in bytes/s (Prometheus base units), from
the evidence of the all_reduce probe (busbw per message size) and the fabric probe (per pair).
"""
from __future__ import annotations

import time

from k3doctor.outputs.figures import busbw_points, fabric_pairs
from k3doctor.outputs.registry import output
from k3doctor.outputs.unread import unread_nodes
from k3doctor.results import LaunchVerdict, Status, overall, worst

PREFIX = "k3doctor"
GB = 1e9


def _label(value) -> str:
    """A label value as the text format needs it: backslash, quote and newline escaped."""
    text = "" if value is None else str(value)
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")  # lone surrogates cannot be encoded
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class _Family:
    def __init__(self, name: str, help_text: str):
        self.name, self.help, self.samples = f"{PREFIX}_{name}", help_text, {}

    def set(self, value: float, **labels) -> None:
        self.samples.setdefault(tuple(labels.items()), float(value))  # first one wins: never a duplicate

    def lines(self) -> list:
        out = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} gauge"]
        for labels, value in self.samples.items():
            inner = ",".join(f'{k}="{_label(v)}"' for k, v in labels)
            out.append(f"{self.name}{{{inner}}} {value!r}" if inner else f"{self.name} {value!r}")
        return out


def _status_values() -> str:
    return ", ".join(f"{s.severity} {s.value}" for s in sorted(Status, key=lambda s: s.severity))


@output("prom", "Prometheus text format for node_exporter's textfile collector (use -o FILE.prom)",
        private=False)
def render(report, checks, verbose):
    status = _Family("check_status", f"Worst result of a check on a node (\"\" cluster) and GPU (\"\" none): "
                                     f"{_status_values()}")
    cells: dict = {}
    for r in report.results:
        cells.setdefault((r.check, r.node or "", "" if r.gpu is None else str(r.gpu)), []).append(r.status)
    for (check, node, gpu), statuses in cells.items():
        status.set(worst(statuses).severity, check=check, node=node, gpu=gpu)
    verdict = _Family("verdict", "Launch verdict of the last run: 1 for the verdict reached, 0 for the others")
    reached = overall(report.results)
    for v in LaunchVerdict:
        verdict.set(int(v == reached), verdict=v.text)
    reachable = _Family("node_reachable", "1 if k3doctor could read the node in the last run")
    for node in report.nodes:
        reachable.set(int(node not in report.unreachable), node=node)
    cause = _Family("node_unread", "1 for a node not read in the last run, with why (its cause id): join it to "
                                   "check_status on node")
    for node, why in unread_nodes(report).items():
        cause.set(1, node=node, cause=why.cause)
    duration = _Family("run_duration_seconds", "Wall time of the last k3doctor run")
    duration.set(round(report.duration_s, 3))
    finished = _Family("last_run_timestamp_seconds", "When the last k3doctor run finished (alert when stale)")
    finished.set(round(time.time(), 3))
    busbw, fabric = _bandwidths(report)
    families = [verdict, status, reachable, cause, duration, finished, busbw, fabric]
    return "\n".join(line for f in families if f.samples for line in f.lines()) + "\n"


def _bandwidths(report):
    busbw = _Family("allreduce_busbw_bytes_per_second", "all_reduce bus bandwidth per message size (deep tier)")
    fabric = _Family("fabric_bandwidth_bytes_per_second",
                     "GPU-to-GPU fabric bandwidth of a node pair per direction (deep tier)")
    for point in busbw_points(report.results):
        if point.collective == "all_reduce":
            busbw.set(point.busbw_gbs * GB, check=point.check, run=point.run, bytes=point.bytes)
    for pair in fabric_pairs(report.results):
        for direction, value in pair.gbps.items():
            fabric.set(value * GB, check=pair.check, pair=pair.name, exporter=pair.exporter,
                       importer=pair.importer, direction=direction)
    return busbw, fabric
