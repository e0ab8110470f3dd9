"""Registry, runner and reports exercised together on a private registry and the local transport."""
import json
import xml.etree.ElementTree as ET

import pytest

from k3doctor.inventory.load import parse_inventory
from k3doctor.judging.runner import RunOptions, run_checks, select_checks
from k3doctor.outputs.report import render_json, render_junit, render_table
from k3doctor.readings import Command, File
from k3doctor.registry import Registry, RegistryError, check, remediation
from k3doctor.results import LaunchVerdict, Status, error, fail, overall, passed, warn


@pytest.fixture
def registry(tmp_path):
    reg = Registry()
    (tmp_path / "state").write_text("active\n")
    code = remediation("DEMO-BAD", "demo", "do the thing", registry=reg)

    @check("file-state", title="state file reads active", reads={"s": File(str(tmp_path / "state"))},
           remediation=code, registry=reg)
    def file_state(r, ctx):
        state = r["s"].text()
        return passed("ok") if state == "active" else fail(f"state {state}", evidence={"state": state})

    @check("per-gpu", title="two gpus", scope="gpu", reads={"c": Command(("echo", "0 1"))}, registry=reg)
    def per_gpu(r, ctx):
        return [warn("gpu is slow", gpu=int(g)) if g == "1" else passed("fine", gpu=int(g))
                for g in r["c"].output().split()]

    @check("broken", title="raises", reads={"s": File("/nonexistent/k3")}, registry=reg)
    def broken(r, ctx):
        return passed(r["s"].text())  # missing file -> ReadingUnavailable -> ERROR

    @check("cluster-same", title="all nodes agree", scope="cluster", reads={"c": Command(("echo", "x"))},
           registry=reg, after=("file-state",))
    def cluster_same(per_node, ctx):
        values = {n: r["c"].output() for n, r in per_node.items()}
        return passed(f"{len(values)} nodes agree") if len(set(values.values())) == 1 else fail("differ")

    reg.state_file = tmp_path / "state"
    return reg


def inventory(n=2):
    nodes = "".join(f"  - {{name: n{i}, transport: local}}\n" for i in range(n))
    return parse_inventory("nodes:\n" + nodes, "inv.yaml")


def test_runner_judges_every_node_in_one_round_trip_each(registry):
    report = run_checks(inventory(), registry.ordered(), RunOptions())
    by = {(r.check, r.node, r.gpu): r for r in report.results}
    assert by[("file-state", "n0", None)].status == Status.PASS
    assert by[("per-gpu", "n1", 1)].status == Status.WARN
    assert by[("per-gpu", "n1", 0)].status == Status.PASS
    assert by[("broken", "n0", None)].status == Status.ERROR
    assert "no such file" in by[("broken", "n0", None)].message
    assert by[("cluster-same", None, None)].message == "2 nodes agree"
    assert report.round_trips == {"n0": 1, "n1": 1}
    assert overall(report.results) == LaunchVerdict.INCONCLUSIVE


def test_a_failure_outranks_an_error_and_carries_its_remediation(registry):
    registry.state_file.write_text("unconfigured\n")
    report = run_checks(inventory(1), registry.ordered(), RunOptions())
    (bad,) = [r for r in report.results if r.check == "file-state"]
    assert (bad.status, bad.remediation, bad.evidence) == (Status.FAIL, "DEMO-BAD", {"state": "unconfigured"})
    assert overall(report.results) == LaunchVerdict.DO_NOT_LAUNCH


def test_reports_render_the_same_results(registry):
    checks = registry.ordered()
    report = run_checks(inventory(), checks, RunOptions())
    table = render_table(report, checks)
    assert table.splitlines()[0].split() == ["check", "n0", "n1", "cluster"]
    assert "WARN  per-gpu n0 gpu1: gpu is slow" in table
    assert table.rstrip().splitlines()[-1].startswith("INCONCLUSIVE")
    doc = json.loads(render_json(report))
    assert doc["schema"] == "k3doctor.outputs.report/1" and doc["exit_code"] == 2
    assert {n["name"]: n["round_trips"] for n in doc["nodes"]} == {"n0": 1, "n1": 1}
    assert {"check", "node", "gpu", "status", "message", "evidence", "remediation"} == set(doc["results"][0])
    suite = ET.fromstring(render_junit(report, checks))
    cases = suite.findall("testcase")
    assert len(cases) == int(suite.get("tests")) == 2 + 2 * 2 + 2 + 1  # per GPU for per-gpu; cluster: one case
    assert int(suite.get("errors")) == 2 and int(suite.get("failures")) == 0
    broken = [c for c in cases if c.get("classname") == "k3doctor.broken"]
    assert broken[0].find("error") is not None


def test_a_judge_that_crashes_becomes_an_error_not_a_traceback():
    reg = Registry()

    @check("crash", title="bug", reads={}, registry=reg)
    def crash(r, ctx):
        return {}["missing"]

    report = run_checks(inventory(1), reg.ordered(), RunOptions())
    (only,) = report.results
    assert only.status == Status.ERROR and "internal error in check: KeyError" in only.message


def test_registry_rejects_bad_declarations_and_orders_by_after():
    reg = Registry()
    check("b", title="b", after=("a",), registry=reg)(lambda r, c: passed("b"))
    check("a", title="a", registry=reg)(lambda r, c: passed("a"))
    assert [c.name for c in reg.ordered()] == ["a", "b"]
    with pytest.raises(RegistryError, match="registered twice"):
        check("a", title="again", registry=reg)(lambda r, c: None)
    with pytest.raises(RegistryError, match="scope 'rack'"):
        check("c", title="c", scope="rack", registry=reg)(lambda r, c: None)
    deep = Registry()
    check("fast1", title="f", registry=deep)(lambda r, c: None)
    check("deep1", title="d", tier="deep", interaction="active", registry=deep)(lambda c: None)
    assert [c.name for c in select_checks(deep)] == ["fast1"]
    assert [c.name for c in select_checks(deep, tier="deep")] == ["fast1", "deep1"]
    assert [c.name for c in select_checks(deep, only=("deep1",))] == ["deep1"]
    with pytest.raises(KeyError):
        select_checks(deep, only=("nope",))


def test_probes_see_blocked_nodes_and_report_per_node():
    reg = Registry()
    check("gate", title="g", registry=reg)(lambda r, c: fail("no") if c.node == "n1" else passed("ok"))

    @check("probe", title="p", scope="cluster", tier="deep", interaction="active", after=("gate",),
           registry=reg)
    def probe(ctx):
        return [error(f"blocked: {why}", node=n) for n, why in ctx.blocked.items()] + [
            passed("probed", node=n) for n in ctx.nodes if n not in ctx.blocked]

    report = run_checks(inventory(), reg.ordered(), RunOptions())
    got = {(r.check, r.node): (r.status, r.message) for r in report.results if r.check == "probe"}
    assert got == {("probe", "n1"): (Status.ERROR, "blocked: gate is FAIL"),
                   ("probe", "n0"): (Status.PASS, "probed")}


def test_a_checks_timeout_applies_to_its_commands_without_their_own():
    reg = Registry()
    check("slow", title="s", timeout_s=7, reads={"a": Command(("x",)), "b": Command(("y",), timeout_s=2)},
          registry=reg)(lambda r, c: None)
    specs = reg.checks["slow"].readings_for(None)
    assert (specs["a"].timeout_s, specs["b"].timeout_s) == (7, 2)


def test_a_node_missing_from_the_baseline_is_flagged_not_silently_skipped():
    reg = Registry()
    seen = {}

    @check("drift", title="d", registry=reg)
    def drift(r, ctx):
        seen[ctx.node] = ctx.baseline
        return passed("ok")

    report = run_checks(inventory(2), reg.ordered(), RunOptions(baseline={"n0": {"drift": {"x": 1}}}))
    assert seen == {"n0": {"x": 1}, "n1": None}
    flagged = [(r.check, r.node, r.status) for r in report.results if r.check == "baseline"]
    assert flagged == [("baseline", "n1", Status.WARN)]


def test_nothing_verified_is_inconclusive_not_ready():
    from k3doctor.results import Result

    assert overall([Result("a", "n", Status.SKIP, "skipped")]) == LaunchVerdict.INCONCLUSIVE
    assert overall([Result("a", "n", Status.SKIP, "s"), Result("b", "n", Status.WARN, "w")]) == LaunchVerdict.READY


def test_active_probes_bring_their_prerequisites_and_are_blocked_without_them():
    reg = Registry()
    check("gate", title="g", registry=reg)(lambda r, c: passed("ok"))
    check("other", title="o", registry=reg)(lambda r, c: passed("ok"))

    @check("probe", title="p", scope="cluster", tier="deep", interaction="active", after=("gate",),
           registry=reg)
    def probe(ctx):
        return [error(f"blocked: {why}", node=n) for n, why in ctx.blocked.items()] or passed("probed")

    assert [c.name for c in select_checks(reg, only=("probe",))] == ["gate", "probe"]
    assert [c.name for c in select_checks(reg, tier="deep", skip=("gate",))] == ["other", "probe"]
    report = run_checks(inventory(1), [reg.checks["probe"]], RunOptions())  # called without its gate
    assert [(r.node, r.message) for r in report.results] == [("n0", "blocked: prerequisite gate was not run")]


def test_docker_api_version_is_the_newest_both_sides_speak():
    from docker.constants import DEFAULT_DOCKER_API_VERSION

    from k3doctor.transport.docker_api import negotiate

    assert negotiate("1.41") == "1.41"  # Debian's docker.io 20.10
    assert negotiate("1.52") == DEFAULT_DOCKER_API_VERSION  # an engine newer than this docker SDK
