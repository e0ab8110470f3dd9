"""The inventory's kill switch: `skip:` for the cluster and per node, for checks a site cannot run."""
import pytest

from k3doctor import testing
from k3doctor.inventory.load import parse_inventory
from k3doctor.inventory.types import InventoryError
from k3doctor.judging import runner
from k3doctor.results import Status
from tests.unit.test_judging_path import PLAIN, _checks


def _run(reg, text):
    inv = parse_inventory(text, registry=reg)
    saved = {n.name: {spec: testing.as_reading(spec, PLAIN[n.name][name])
                      for chk in reg.checks.values() for name, spec in chk.readings_for(n.settings).items()}
             for n in inv.nodes}
    return inv, runner.run_checks(inv, reg.ordered(), runner.RunOptions(replay=(saved, {}))).results


def test_a_check_switched_off_for_the_cluster_is_not_run_anywhere():
    reg = _checks()
    inv, results = _run(reg, "cluster: {skip: [cards]}\nnodes:\n  - {name: n1, host: a}\n  - {name: n2, host: b}\n")
    assert inv.cluster.skip == ("cards",) and {r.check for r in results} == {"driver", "drivers-alike"}


def test_a_node_of_its_own_switches_a_check_off_there_only_and_says_so():
    reg = _checks()
    _, results = _run(reg, "nodes:\n  - {name: n1, host: a, skip: [drivers-alike, cards]}\n  - {name: n2, host: b}\n")
    on_n1 = {(r.check, r.status) for r in results if r.node == "n1"}
    assert on_n1 == {("driver", Status.FAIL), ("cards", Status.SKIP), ("drivers-alike", Status.SKIP)}
    assert all("skip:" in r.message for r in results if r.node == "n1" and r.status == Status.SKIP)
    alike = [r for r in results if r.check == "drivers-alike" and r.node is None]
    assert [(r.status, r.message) for r in alike] == [(Status.PASS, "1 node(s) alike")]  # n2 alone
    assert any(r.check == "cards" and r.node == "n2" and r.status == Status.FAIL for r in results)


def test_an_unknown_name_in_skip_is_an_inventory_error_with_its_line():
    reg = _checks()
    with pytest.raises(InventoryError, match=r"<inventory>:1: cluster.skip: 'card': no such check \(did you mean"):
        parse_inventory("cluster: {skip: [card]}\nnodes:\n  - {name: n1, host: a}\n", registry=reg)
    with pytest.raises(InventoryError, match="expected a list of check names"):
        parse_inventory("cluster: {skip: cards}\nnodes:\n  - {name: n1, host: a}\n", registry=reg)
