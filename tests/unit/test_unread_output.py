"""Unread nodes in the human formats (issue 33): each cause once, identical causes grouped, a FAIL still first."""
from types import SimpleNamespace

from k3doctor.judging.runner import RunReport
from k3doctor.judging.unread import unread, unread_results
from k3doctor.outputs import OUTPUTS
from k3doctor.outputs.summary import headline
from k3doctor.results import Result, Status
from k3doctor.transport.ssh import refused

CHECKS = [SimpleNamespace(name="shm-clean", scope="node"), SimpleNamespace(name="hbm-uniform", scope="cluster")]


def report(results, unread_nodes, nodes=("ct13", "ct14", "ct16")):
    results = list(results)
    for node, why in unread_nodes.items():
        results += unread_results(node, CHECKS, why)
    return RunReport(results=results, nodes=list(nodes), duration_s=1.0, unreachable=dict(unread_nodes))


def test_identical_causes_are_one_line_and_a_fix_naming_each_host_is_said_once_for_the_first():
    down = {"ct14": unread(refused("10.0.0.14", 22)), "ct16": unread(refused("10.0.0.16", 22))}
    out = OUTPUTS["table"].render(report([Result("shm-clean", "ct13", Status.PASS, "clean")], down), CHECKS, False)
    lines = out.splitlines()
    assert [line for line in lines if line.startswith("NOT READ")] == [
        "NOT READ 2 of 3 nodes (ct14, ct16): connection refused (no sshd listening?) [NODE-REFUSED]"]
    fix = next(line for line in lines if line.startswith("  fix: "))
    assert "now 10.0.0.14:22" in fix and fix.endswith("(for ct14; likewise for each of the others)")
    assert "  1 cluster check(s) judged 1 of 3 nodes" in lines
    assert lines[-1] == "INCONCLUSIVE: 1 of 3 nodes read - connection refused (1 pass, 4 not run; 1.0s)"
    assert not any(line.startswith("ERROR") for line in lines)


def test_a_fail_on_a_node_that_was_read_leads_the_headline_and_the_unread_nodes_follow():
    down = {"ct16": unread(refused("10.0.0.16", 22))}
    rep = report([Result("shm-clean", "ct13", Status.FAIL, "stale segments", remediation="SHM-STALE")], down)
    assert headline(rep) == ("DO NOT LAUNCH: shm-clean ct13: stale segments [SHM-STALE]; "
                             "2 of 3 nodes read - connection refused")
    nagios = OUTPUTS["nagios"].render(rep, CHECKS, False).splitlines()
    assert nagios[1].startswith("NOT READ 1 of 3 nodes (ct16): connection refused")
    assert sum("node not checked" in line for line in nagios) == 0


def test_an_endpoint_the_gate_could_not_reach_keeps_its_own_error():
    """The gate's unreachable endpoints are words, not a node's cause: its one ERROR is the finding."""
    rep = RunReport(results=[Result("gate-models", "http://x:8000", Status.ERROR, "no answer")],
                    nodes=["http://x:8000"], duration_s=1.0, unreachable={"http://x:8000": "no answer"})
    out = OUTPUTS["table"].render(rep, [SimpleNamespace(name="gate-models", scope="node")], False)
    assert "ERROR gate-models http://x:8000: no answer" in out and "NOT READ" not in out
