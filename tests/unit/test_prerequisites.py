"""Root cause first: a check whose prerequisite failed on a node is not evaluated there (one SKIP).

Private registries on the local transport; the prerequisite fails on node n1 only (judges decide
by ``ctx.node``), so every test also shows the healthy node n0 evaluated as usual.
"""
import pytest

from k3doctor.inventory.load import parse_inventory
from k3doctor.judging.runner import RunOptions, run_checks
from k3doctor.outputs.report import render_table
from k3doctor.readings import Command
from k3doctor.registry import Registry, RegistryError, check
from k3doctor.results import Status, error, fail, passed

NOT_LOADED, PARAMS = "DRIVER-NOT-LOADED", "DRIVER-PARAMS"


def inventory(n=2):
    return parse_inventory("nodes:\n" + "".join(f"  - {{name: n{i}, transport: local}}\n" for i in range(n)),
                           "inv.yaml")


def driver(reg, on_n1=lambda: fail("driver not loaded", remediation=NOT_LOADED), **kw):
    """The prerequisite: fails on n1 with ``on_n1()``, passes elsewhere; only NOT_LOADED blocks."""
    check("driver", title="driver loaded", blocking=(NOT_LOADED,), registry=reg, **kw)(
        lambda r, ctx: on_n1() if ctx.node == "n1" else passed("loaded"))


def rows(report, name):
    return sorted(((r.node, r.gpu, r.status, r.message) for r in report.results if r.check == name),
                  key=lambda row: (row[0] or "", -1 if row[1] is None else row[1]))


def test_a_dependant_says_once_that_its_prerequisite_failed_and_is_not_judged_there():
    reg, judged = Registry(), []

    @check("sysfs", title="per-GPU sysfs", scope="gpu", needs=("driver",), registry=reg)
    def sysfs(r, ctx):
        judged.append(ctx.node)
        return [passed("ok", gpu=0), passed("ok", gpu=1)]

    driver(reg)  # registered after its dependant: the runner still judges it first
    report = run_checks(inventory(), reg.ordered(), RunOptions())
    assert judged == ["n0"]
    assert rows(report, "sysfs") == [("n0", 0, Status.PASS, "ok"), ("n0", 1, Status.PASS, "ok"),
                                     ("n1", None, Status.SKIP, "not evaluated: driver failed")]
    [skipped] = [r for r in report.results if r.check == "sysfs" and r.node == "n1"]
    assert skipped.evidence == {"driver": "driver not loaded"}
    assert [r.check for r in report.results if r.node == "n1"] == ["sysfs", "driver"]  # registry order kept
    table = render_table(report, reg.ordered())
    assert [line.split()[0] for line in table.splitlines() if line.startswith(("FAIL", "SKIP", "ERROR"))] == [
        "FAIL", "SKIP"]


def test_a_finding_that_is_not_blocking_leaves_the_dependants_evaluated():
    reg = Registry()
    driver(reg, on_n1=lambda: [fail("wrong parameters", remediation=PARAMS), error("log unreadable")])
    check("sysfs", title="s", needs=("driver",), registry=reg)(lambda r, ctx: fail(f"bad on {ctx.node}"))
    report = run_checks(inventory(), reg.ordered(), RunOptions())
    assert rows(report, "sysfs") == [("n0", None, Status.FAIL, "bad on n0"), ("n1", None, Status.FAIL, "bad on n1")]


def test_without_blocking_codes_any_fail_or_error_of_the_prerequisite_blocks():
    reg = Registry()
    check("container", title="c", registry=reg)(lambda r, ctx: error("engine down") if ctx.node == "n1"
                                               else passed("up"))
    check("files", title="f", needs=("container",), registry=reg)(lambda r, ctx: passed("ok"))
    report = run_checks(inventory(), reg.ordered(), RunOptions())
    assert rows(report, "files") == [("n0", None, Status.PASS, "ok"),
                                     ("n1", None, Status.SKIP, "not evaluated: container failed")]


def test_a_prerequisite_that_failed_on_one_gpu_skips_only_that_gpu():
    reg = Registry()
    driver(reg, on_n1=lambda: [passed("card0 up", gpu=0), fail("card1 down", gpu=1, remediation=NOT_LOADED)],
           scope="gpu")
    check("lanes", title="l", scope="gpu", needs=("driver",), registry=reg)(
        lambda r, ctx: [fail("lanes odd", gpu=0), fail("lanes odd", gpu=1), passed("node-level note")])
    report = run_checks(inventory(), reg.ordered(), RunOptions())
    assert [row for row in rows(report, "lanes") if row[0] == "n1"] == [
        ("n1", None, Status.PASS, "node-level note"), ("n1", 0, Status.FAIL, "lanes odd"),
        ("n1", 1, Status.SKIP, "not evaluated: driver failed")]
    assert [row[2] for row in rows(report, "lanes") if row[0] == "n0"] == [Status.PASS, Status.FAIL, Status.FAIL]


def test_only_the_readings_that_need_the_prerequisite_are_withheld():
    reg, seen = Registry(), {}
    driver(reg)

    @check("free", title="f", needs={"driver": ("gpu",)}, registry=reg,
           reads={"gpu": Command(("echo", "gpu")), "engine": Command(("echo", "engine"))})
    def free(r, ctx):
        seen[ctx.node] = (r.not_evaluated("gpu"), r["engine"].output().strip())
        return passed(r["gpu"].output().strip())  # n1: NotEvaluated, which the runner turns into a SKIP

    report = run_checks(inventory(), reg.ordered(), RunOptions())
    assert seen == {"n0": (None, "engine"), "n1": ("not evaluated: driver failed", "engine")}
    assert rows(report, "free") == [("n0", None, Status.PASS, "gpu"),
                                    ("n1", None, Status.SKIP, "not evaluated: driver failed")]


def test_a_cluster_judge_leaves_out_the_node_whose_prerequisite_failed_and_says_so_once():
    reg, given = Registry(), []
    driver(reg)

    @check("uniform", title="u", scope="cluster", needs=("driver",), registry=reg,
           reads={"c": Command(("echo", "x"))})
    def uniform(per_node, ctx):
        given.append((sorted(per_node), sorted(ctx.nodes)))
        return passed(f"{len(per_node)} node(s) agree")

    report = run_checks(inventory(3), reg.ordered(), RunOptions())
    assert given == [(["n0", "n2"], ["n0", "n2"])]
    got = [(r.node, r.status, r.message) for r in report.results if r.check == "uniform"]
    assert got == [("n1", Status.SKIP, "not evaluated: driver failed"), (None, Status.PASS, "2 node(s) agree")]


def test_a_prerequisite_left_out_of_the_run_blocks_nothing():
    reg = Registry()
    driver(reg)
    check("sysfs", title="s", needs=("driver",), registry=reg)(lambda r, ctx: passed("read"))
    report = run_checks(inventory(), [reg.checks["sysfs"]], RunOptions())
    assert rows(report, "sysfs") == [("n0", None, Status.PASS, "read"), ("n1", None, Status.PASS, "read")]


def test_a_probe_does_not_run_where_its_prerequisite_was_not_evaluated():
    reg = Registry()
    driver(reg)
    check("ualink", title="u", needs=("driver",), registry=reg)(lambda r, ctx: passed("active"))

    @check("probe", title="p", scope="cluster", tier="deep", interaction="active", after=("ualink",),
           registry=reg)
    def probe(ctx):
        return [error(f"blocked: {why}", node=n) for n, why in ctx.blocked.items()] + [
            passed("probed", node=n) for n in ctx.nodes if n not in ctx.blocked]

    report = run_checks(inventory(), reg.ordered(), RunOptions())
    assert rows(report, "probe") == [("n0", None, Status.PASS, "probed"),
                                     ("n1", None, Status.ERROR, "blocked: ualink is SKIP")]


def test_a_cycle_of_prerequisites_is_refused():
    reg = Registry()
    check("a", title="a", needs=("b",), registry=reg)(lambda r, ctx: passed("a"))
    check("b", title="b", needs=("a",), registry=reg)(lambda r, ctx: passed("b"))
    with pytest.raises(RegistryError, match="cycle"):
        run_checks(inventory(1), reg.ordered(), RunOptions())


def test_an_invasive_probe_does_not_start_on_a_busy_rack():
    """A foreign container on one node: the probe says once that the rack is in use and loads nothing."""
    reg, probed = Registry(), []
    check("rack", title="nobody else here", registry=reg)(
        lambda r, ctx: fail("foreign container sglang-bench holds 4 GPUs") if ctx.node == "n1" else passed("free"))

    @check("probe", title="load the fabric", scope="cluster", tier="deep", interaction="active", after=("rack",),
           exclusive=("rack",), registry=reg)
    def probe(ctx):
        probed.append(sorted(ctx.nodes))
        return passed("fabric fine")

    report = run_checks(inventory(), reg.ordered(), RunOptions())
    assert probed == []
    assert rows(report, "probe") == [(None, None, Status.SKIP, "not started: the rack is in use (rack failed on n1: "
                                                               "foreign container sglang-bench holds 4 GPUs)")]


def test_the_invasive_probes_refuse_a_busy_rack():
    from k3doctor.registry import REGISTRY, load_checks

    load_checks()
    assert {c.name for c in REGISTRY.checks.values() if c.interaction != "passive"} == {
        c.name for c in REGISTRY.checks.values() if "rack-free" in c.exclusive}
