"""One judging path: a check judged by ``k3doctor.testing`` and by a run gives the same results, its
prerequisites included (k3doctor/judging/evaluate.py)."""
from k3doctor import api, testing
from k3doctor.inventory.load import parse_inventory
from k3doctor.judging import runner
from k3doctor.readings import Exists, File, Glob
from k3doctor.registry import check
from k3doctor.results import Status, fail, passed

INVENTORY = """
cluster: {gpus_per_node: 2}
nodes:
  - {name: n1, host: 127.0.0.1}
  - {name: n2, host: 127.0.0.1}
"""


def _checks():
    """driver (node) <- cards (gpu, needs driver) and drivers-alike (cluster, needs driver)."""
    with testing.temporary_registry() as reg:
        api.remediation("DRIVER", "t", "t")
        api.remediation("CARD", "t", "t")

        @check("driver", title="t", reads={"kfd": Exists("/dev/kfd")}, remediation="DRIVER")
        def driver(r, ctx):
            return passed("loaded") if r["kfd"] else fail("no /dev/kfd")

        @check("cards", title="t", scope="gpu", reads={"state": Glob("/sys/card*/state")}, remediation="CARD",
               needs=("driver",))
        def cards(r, ctx):
            return [passed(f"card {n} up", gpu=n) if text.text() == "up" else fail(f"card {n} down", gpu=n)
                    for n, (_, text) in enumerate(sorted(r["state"].items()))]

        @check("drivers-alike", title="t", scope="cluster", reads={"version": File("/sys/module/amdgpu/version")},
               remediation="DRIVER", needs=("driver",))
        def alike(per_node, ctx):
            versions = {n: r["version"].text() for n, r in per_node.items()}
            return passed(f"{len(versions)} node(s) alike") if len(set(versions.values())) <= 1 else \
                fail("versions differ")
    return reg


PLAIN = {
    "n1": {"kfd": False, "state": {"/sys/card0/state": "up\n", "/sys/card1/state": "up\n"}, "version": "6.1\n"},
    "n2": {"kfd": True, "state": {"/sys/card0/state": "up\n", "/sys/card1/state": "down\n"}, "version": "6.1\n"},
}


def _run(reg):
    inv = parse_inventory(INVENTORY)
    saved = {}
    for node in inv.nodes:
        for chk in reg.checks.values():
            specs = chk.readings_for(node.settings)
            saved.setdefault(node.name, {}).update(
                {spec: testing.as_reading(spec, PLAIN[node.name][name]) for name, spec in specs.items()})
    return runner.run_checks(inv, reg.ordered(), runner.RunOptions(replay=(saved, {}))).results


def _rows(items, node=None):
    return [(getattr(v, "node", None) or node, v.status, v.gpu, v.message, v.remediation) for v in items]


def test_a_dependant_is_judged_by_testing_exactly_as_by_a_run_prerequisites_included():
    reg = _checks()
    run = _run(reg)
    for node in ("n1", "n2"):
        judged = testing.judge("cards", {"state": PLAIN[node]["state"]}, node=node, registry=reg,
                               prerequisites={"driver": {"kfd": PLAIN[node]["kfd"]}})
        assert _rows(judged, node) == _rows(r for r in run if r.check == "cards" and r.node == node)
    on_n1 = [r for r in run if r.check == "cards" and r.node == "n1"]
    assert [(r.status, r.message) for r in on_n1] == [(Status.SKIP, "not evaluated: driver failed")]


def test_a_cluster_check_leaves_out_a_node_whose_prerequisite_failed_in_testing_as_in_a_run():
    reg = _checks()
    run = [r for r in _run(reg) if r.check == "drivers-alike"]
    judged = testing.judge("drivers-alike", {n: {"version": PLAIN[n]["version"]} for n in PLAIN}, registry=reg,
                           prerequisites={"driver": {n: {"kfd": PLAIN[n]["kfd"]} for n in PLAIN}})
    assert _rows(judged) == _rows(run)
    assert [(r.node, r.status) for r in run] == [("n1", Status.SKIP), (None, Status.PASS)]
    assert run[1].message == "1 node(s) alike"


def test_a_prerequisite_not_given_blocks_nothing_as_one_not_selected_for_a_run():
    reg = _checks()
    [down] = [v for v in testing.judge("cards", {"state": PLAIN["n2"]["state"]}, registry=reg)
              if v.status != Status.PASS]
    assert (down.gpu, down.status, down.remediation) == (1, Status.FAIL, "CARD")
