"""Render a run: a checks x nodes table for people, JSON for programs, JUnit for CI systems.

The JSON schema (``k3doctor.report/1``) is documented in the README; fields are only ever
added, never renamed, within a schema version.
"""
from __future__ import annotations

import json
import re
import time
import xml.etree.ElementTree as ET

from tabulate import tabulate

from . import __version__
from .results import Status, overall, worst

SCHEMA = "k3doctor.report/1"
CLUSTER_COLUMN = "cluster"
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ufffe\uffff]")


def printable(text: str) -> str:
    """Report text with control characters from readings (ESC, NUL, ...) shown as ``\\xNN``: they
    can neither drive the terminal nor make the JUnit file invalid XML."""
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _where(r) -> str:
    node = r.node or CLUSTER_COLUMN
    return f"{node} gpu{r.gpu}" if r.gpu is not None else node


def render_table(report, checks, verbose: bool = False) -> str:
    columns = list(report.nodes)
    if any(r.node is None for r in report.results):
        columns.append(CLUSTER_COLUMN)
    rows = []
    for chk in checks:
        mine = [r for r in report.results if r.check == chk.name]
        row = [chk.name]
        for col in columns:
            cell = worst(r.status for r in mine if (r.node or CLUSTER_COLUMN) == col)
            row.append(cell.value if cell else "-")
        rows.append(row)
    lines = [tabulate(rows, headers=["check", *columns], tablefmt="simple")]
    findings = sorted((r for r in report.results if r.status != Status.PASS),
                      key=lambda r: (-r.status.severity, r.check, r.node or "", r.gpu or -1))
    if findings:
        lines.append("")
    for r in findings:
        code = f"  [{r.remediation}]" if r.remediation else ""
        lines.append(f"{r.status.value:5} {r.check} {_where(r)}: {r.message}{code}")
        if verbose:
            lines += [f"        {k}: {v}" for k, v in r.evidence.items()]
    if verbose:
        passes = [r for r in report.results if r.status == Status.PASS]
        lines += [""] + [f"PASS  {r.check} {_where(r)}: {r.message}" for r in passes]
    verdict = overall(report.results)
    first = next((r.remediation for r in findings if r.remediation), None)  # the most severe finding's
    lines.append("")
    tail = f" - see `k3doctor explain {first}`" if first else ""
    lines.append(f"{verdict.text} ({_counts(report.results)}; {report.duration_s:.1f}s){tail}")
    return printable("\n".join(lines))


def _counts(results) -> str:
    counts = {s: 0 for s in Status}
    for r in results:
        counts[r.status] += 1
    return ", ".join(f"{n} {s.value.lower()}" for s, n in counts.items() if n) or "no results"


def render_json(report) -> str:
    verdict = overall(report.results)
    doc = {
        "schema": SCHEMA,
        "k3doctor_version": __version__,
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "verdict": verdict.text,
        "exit_code": verdict.exit_code,
        "duration_s": report.duration_s,
        "nodes": [{"name": n, "reachable": n not in report.unreachable,
                   "error": report.unreachable.get(n), "round_trips": report.round_trips.get(n, 0)}
                  for n in report.nodes],
        "results": [r.to_dict() for r in report.results],
    }
    return json.dumps(doc, indent=2, sort_keys=False, default=str)


def render_junit(report, checks) -> str:
    """One testcase per check x node (cluster checks: one per check) so CI renders a grid."""
    suite = ET.Element("testsuite", name="k3doctor", time=f"{report.duration_s:.3f}")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for chk in checks:
        mine = [r for r in report.results if r.check == chk.name]
        for where in dict.fromkeys(r.node or CLUSTER_COLUMN for r in mine):
            cell = [r for r in mine if (r.node or CLUSTER_COLUMN) == where]
            case = ET.SubElement(suite, "testcase", classname=f"k3doctor.{chk.name}", name=where)
            counts["tests"] += 1
            status = worst(r.status for r in cell)
            text = "\n".join(f"{r.status.value} {_where(r)}: {r.message}"
                             + (f" [{r.remediation}]" if r.remediation else "") for r in cell)
            bad = [r for r in cell if r.status == status]
            if status == Status.FAIL:
                ET.SubElement(case, "failure", message=bad[0].message, type="FAIL").text = text
                counts["failures"] += 1
            elif status == Status.ERROR:
                ET.SubElement(case, "error", message=bad[0].message, type="ERROR").text = text
                counts["errors"] += 1
            elif status == Status.SKIP:
                ET.SubElement(case, "skipped", message=bad[0].message)
                counts["skipped"] += 1
            ET.SubElement(case, "system-out").text = text
    for key, value in counts.items():
        suite.set(key, str(value))
    return printable(ET.tostring(suite, encoding="unicode", xml_declaration=True))
