"""Parse once (issue 35 item 3): a cluster check's part per node (``each_node``) is taken in the node phase, as
soon as the node is read, and its judge only compares; the results are those of parsing every node again in
the cluster phase, and what a node's part raises is an ERROR for that node and check only."""
import pytest

from k3doctor import api, testing
from k3doctor.gather import snapshot
from k3doctor.inventory.load import parse_inventory
from k3doctor.judging import runner
from k3doctor.parsers import ParseError
from k3doctor.readings import File
from k3doctor.registry import REGISTRY, check, load_checks
from k3doctor.results import Status, passed
from tests.field.test_field_corpus import FILES

INVENTORY = """
cluster: {gpus_per_node: 1}
nodes:
  - {name: n1, host: 127.0.0.1}
  - {name: n2, host: 127.0.0.1}
  - {name: n3, host: 127.0.0.1}
"""


def _replayed(path, hand_over: bool):
    """Every result of judging a field corpus file; ``hand_over`` False: the cluster judges get no part
    taken in the node phase, so each node's readings are parsed in the cluster phase (the flow before)."""
    inv, overrides, saved, unreachable = snapshot.load_file(str(path))
    load_checks()
    cluster_phase = runner.judge_cluster

    def without_facts(*args):
        return cluster_phase(*args[:6])

    checks = runner.select_checks(REGISTRY)
    if not hand_over:
        runner.judge_cluster = without_facts
    try:
        report = runner.run_checks(inv, checks, runner.RunOptions(replay=(saved, unreachable)))
    finally:
        runner.judge_cluster = cluster_phase
    return [(r.check, r.node, r.gpu, r.status, r.message, r.evidence, r.remediation, r.figures)
            for r in report.results]


@pytest.mark.parametrize("path", FILES, ids=[f.name.removesuffix(".readings.json") for f in FILES])
def test_the_parts_handed_over_from_the_node_phase_judge_the_field_corpus_as_parsing_again_does(path):
    handed = _replayed(path, hand_over=True)
    assert handed == _replayed(path, hand_over=False)
    assert {c.name for c in REGISTRY.checks.values() if c.each_node} >= {"fabric-domain", "kernel-health",
                                                                         "host-resources"}


def _registry(parsed: list):
    with testing.temporary_registry() as reg:
        def version(r, ctx):
            parsed.append(ctx.node)
            text = r["version"].text()
            if not text[:1].isdigit():
                raise ParseError(f"version {text!r} is not a number")
            return text

        @check("versions-alike", title="t", scope="cluster", reads={"version": File("/sys/module/amdgpu/version")},
               each_node=version)
        def alike(per_node, ctx):
            assert all(isinstance(v, str) for v in per_node.values())  # the parts, not the readings
            return passed(f"{sorted(per_node)} alike") if len(set(per_node.values())) == 1 else api.fail("differ")
    return reg


def _run(reg, versions: dict):
    inv = parse_inventory(INVENTORY)
    saved = {n.name: {spec: testing.as_reading(spec, versions[n.name])
                      for spec in reg.checks["versions-alike"].readings_for(n.settings).values()} for n in inv.nodes}
    return runner.run_checks(inv, reg.ordered(), runner.RunOptions(replay=(saved, {}))).results


def test_a_cluster_check_parses_each_node_once_in_a_run():
    parsed = []
    results = _run(_registry(parsed), {"n1": "6.1\n", "n2": "6.1\n", "n3": "6.1\n"})
    assert sorted(parsed) == ["n1", "n2", "n3"]
    assert [(r.node, r.status, r.message) for r in results] == [(None, Status.PASS, "['n1', 'n2', 'n3'] alike")]


@pytest.mark.parametrize("how", ["run", "testing"])
def test_a_node_whose_part_does_not_parse_is_an_error_for_that_node_and_check_only(how):
    versions = {"n1": "6.1\n", "n2": "garbled\n", "n3": "6.1\n"}
    reg = _registry([])
    results = _run(reg, versions) if how == "run" else \
        testing.judge("versions-alike", {n: {"version": v} for n, v in versions.items()}, registry=reg)
    rows = sorted((r.node or "", r.status, r.message) for r in results)
    assert rows == [("", Status.PASS, "['n1', 'n3'] alike"),
                    ("n2", Status.ERROR, "unparseable output: version 'garbled' is not a number")]


def test_each_node_is_a_cluster_judges_part_only():
    with testing.temporary_registry(), pytest.raises(Exception, match="each_node= is a cluster judge's part"):
        check("x", title="t", reads={"v": File("/v")}, each_node=lambda r, ctx: 1)(lambda r, ctx: passed("ok"))


def test_gpu_inventory_and_fabric_domain_share_one_amd_smi_static_call():
    """§31.5: each `amd-smi static` costs a real node ~1.5 s and its CPU; on a gfx1250 node gpu-inventory (VRAM)
    and fabric-domain (ASIC, bus) declare the same call, which the gatherer reads once (specs are deduplicated).
    gpu-partitions keeps its own: an amd-smi that has no --partition must not take the others' data with it."""
    from k3doctor import platforms
    from k3doctor.inventory.types import Settings

    load_checks()
    fast = [c for c in platforms.applicable(runner.select_checks(REGISTRY), Settings().platform)
            if c.interaction == "passive"]
    specs = {s for got in runner.specs_of(fast, Settings()).values() if isinstance(got, dict) for s in got.values()}
    static = sorted(s.argv[5:] for s in specs if getattr(s, "argv", ())[5:6] == ("static",))
    assert static == [("static", "--asic", "--bus", "--vram", "--json"), ("static", "--partition", "--json")]


def test_every_gpu_tool_call_of_a_nodes_fast_tier_starts_at_once_by_default():
    """§31.5: a node's time is its slowest tool call only if no tool call waits for a slot; a check that adds one
    beyond the default bound makes a second wave (+0.5-0.8 s a node) and must raise the bound or share a call."""
    from k3doctor import platforms
    from k3doctor.deadline import READS_IN_FLIGHT
    from k3doctor.inventory.types import Settings

    load_checks()
    fast = [c for c in platforms.applicable(runner.select_checks(REGISTRY), Settings().platform)
            if c.interaction == "passive"]
    specs = {s for got in runner.specs_of(fast, Settings()).values() if isinstance(got, dict) for s in got.values()}
    tools = [s for s in specs if getattr(s, "argv", ())[3:4] == ("k3doctor-tool",)
             and s.argv[4].rsplit("/", 1)[-1] in ("amd-smi", "rocm-smi")]
    assert len(tools) == 7, sorted(s.argv[4:] for s in tools)
    assert len(tools) <= READS_IN_FLIGHT == parse_inventory("nodes:\n  - {name: a, host: a}\n").ssh.reads_in_flight
