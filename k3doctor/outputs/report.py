"""Render a run: a checks x nodes table for people, JSON for programs, JUnit for CI systems.

The JSON schema (``k3doctor.outputs.report/1``) is documented in the README; fields are only ever
added, never renamed, within a schema version.
"""
from __future__ import annotations

import time

from k3doctor import __version__
from k3doctor.outputs import unread
from k3doctor.outputs.text import json_text, one_line, terminal_safe, xml_safe
from k3doctor.registry import REGISTRY
from k3doctor.results import Status, Unread, overall, worst

SCHEMA = "k3doctor.outputs.report/1"
CLUSTER_COLUMN = "cluster"


def where(r) -> str:
    node = r.node or CLUSTER_COLUMN
    return f"{node} gpu{r.gpu}" if r.gpu is not None else node


def findings(results) -> list:
    """The results that are not PASS, worst first (then by check, node, GPU)."""
    return sorted((r for r in results if r.status != Status.PASS),
                  key=lambda r: (-r.status.severity, r.check, r.node or "", r.gpu or -1))


def render_table(report, checks, verbose: bool = False) -> str:
    """The checks x nodes table of the nodes that were read, their findings, the unread nodes once per cause
    (k3doctor/outputs/unread.py), the verdict."""
    results = unread.read_results(report)
    not_read = unread.unread_nodes(report)
    columns = [n for n in report.nodes if n not in not_read]
    if any(r.node is None for r in results):
        columns.append(CLUSTER_COLUMN)
    rows = []
    not_run = set(report.not_for_platform)
    for chk in (c for c in checks if c.name not in not_run):
        mine = [r for r in results if r.check == chk.name]
        row = [chk.name]
        for col in columns:
            cell = worst(r.status for r in mine if (r.node or CLUSTER_COLUMN) == col)
            row.append(cell.value if cell else "-")
        rows.append(row)
    from tabulate import tabulate  # only for the table: it costs the CLI's start ~60 ms (importlib.metadata)

    # Node names and messages come from inventories, bundles and node output: each is one field on one line
    # (a newline in a name would print a forged row, an ESC would drive the terminal).
    lines = [tabulate(rows, headers=["check", *map(one_line, columns)], tablefmt="simple")] if columns else []
    found = findings(results)
    if found and lines:
        lines.append("")
    for r in found:
        code = f"  [{r.remediation}]" if r.remediation else ""
        lines.append(f"{r.status.value:5} {r.check} {one_line(where(r))}: {one_line(r.message)}{code}")
        if verbose:
            lines += [f"        {one_line(k)}: {one_line(v)}" for k, v in r.evidence.items()]
    if verbose:
        passes = [r for r in results if r.status == Status.PASS]
        lines += [""] * bool(passes) + [f"PASS  {r.check} {one_line(where(r))}: {one_line(r.message)}" for r in passes]
        if not_run:
            lines += ["", f"not for this platform ({report.platform}, not run): {', '.join(sorted(not_run))}"]
    said = unread.lines(report, checks, verbose)
    lines += [""] * bool(lines and said) + said
    verdict = overall(report.results)
    first = next((r.remediation for r in found if r.remediation), None)  # the most severe finding's
    tail = f" - see `k3doctor explain {first}`" if first else ""
    read = unread.nodes_read(report)
    counts = [_counts(results)] if results or not read else []
    if read:
        counts.append(f"{unread.not_run(report)} not run")
    lines += [""] * bool(lines) + [f"{verdict.text}{': ' + read if read else ''} ({', '.join(counts)}; "
                                   f"{report.duration_s:.1f}s){tail}"]
    return terminal_safe("\n".join(lines))


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
                   "error": str(report.unreachable[n]) if n in report.unreachable else None,
                   **_cause(report.unreachable.get(n)), "round_trips": report.round_trips.get(n, 0)}
                  for n in report.nodes],
        "results": [r.to_dict() for r in report.results],
    }
    return json_text(doc, indent=2, sort_keys=False, default=str)


def _cause(why) -> dict:
    """An unread node's cause id and fix (added in k3doctor.outputs.report/1: fields are only ever added)."""
    return {"cause": why.cause, "fix": why.fix} if isinstance(why, Unread) else {}


def render_junit(report, checks, remediations=None) -> str:
    """One testcase per check x node x GPU (cluster checks: one per check), names unique within a check.

    GitLab keeps only the first of duplicate testcases, so results of one check on one place
    (several fabric pairs of a GPU) share their testcase. A finding's <failure> carries the
    remediation text ``k3doctor explain`` prints; a node not read keeps one testcase per check, an <error> with
    the node's cause id, words and fix. Node text is made XML-safe (NUL, escapes).
    """
    remediations = REGISTRY.remediations if remediations is None else remediations
    import xml.etree.ElementTree as ET  # only this format needs it

    suite = ET.Element("testsuite", name="k3doctor", time=f"{report.duration_s:.3f}")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    not_read = unread.unread_nodes(report)
    for chk in checks:
        cells: dict = {}
        for r in report.results:
            if r.check == chk.name:
                cells.setdefault(where(r), []).append(r)
        for place, cell in cells.items():
            case = ET.SubElement(suite, "testcase", classname=f"k3doctor.{chk.name}", name=xml_safe(place))
            counts["tests"] += 1
            status = worst(r.status for r in cell)
            text = xml_safe("\n".join(f"{r.status.value} {where(r)}: {r.message}"
                                      + (f" [{r.remediation}]" if r.remediation else "") for r in cell))
            first = next(r for r in cell if r.status == status)
            message = xml_safe(first.message)
            if status in (Status.FAIL, Status.ERROR):
                fixes = [remediations[c] for c in dict.fromkeys(r.remediation for r in cell if r.status == status)
                         if c in remediations]
                detail = text + "".join(xml_safe(f"\n\n{f.code}: {f.title}\n{f.text}") for f in fixes)
                if cell[0].node in not_read:  # the node's one cause: its fix, as a finding's remediation text
                    detail += xml_safe(f"\n\nfix: {not_read[cell[0].node].fix}")
                tag = "failure" if status == Status.FAIL else "error"
                ET.SubElement(case, tag, message=message, type=status.value).text = detail
                counts["failures" if status == Status.FAIL else "errors"] += 1
            elif status == Status.SKIP:
                ET.SubElement(case, "skipped", message=message)
                counts["skipped"] += 1
            ET.SubElement(case, "system-out").text = text
    for key, value in counts.items():
        suite.set(key, str(value))
    return ET.tostring(suite, encoding="unicode", xml_declaration=True)  # every node text went through xml_safe
