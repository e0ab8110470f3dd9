"""table, json and junit: the formats k3doctor always had (rendered by k3doctor.outputs.report)."""
from __future__ import annotations

from k3doctor.outputs.registry import output
from k3doctor.outputs.report import render_json, render_junit, render_table


@output("table", "checks x nodes table, then the findings and the verdict (people)")
def table(report, checks, verbose):
    return render_table(report, checks, verbose=verbose)


@output("json", "the k3doctor.outputs.report/1 JSON document (programs)")
def json_(report, checks, verbose):
    return render_json(report)


@output("junit", "JUnit XML, one testcase per check x node x GPU (CI systems)")
def junit(report, checks, verbose):
    return render_junit(report, checks)
