"""Dead nodes cost the TCP probe, not the SSH connect timeout, and are one clear ERROR each, never a PASS:
real sshd light nodes beside a node whose port is closed and one whose SYNs are dropped (blackholed)."""
import re

import pytest
from k3rig.light import LightRack

from k3doctor.transport.ssh import PROBE_TIMEOUT_S
from tests.conftest import light_nodes_unavailable
from tests.e2e.cli import k3json

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def light(tmp_path_factory):
    reason = light_nodes_unavailable()
    if reason:
        pytest.skip(reason)
    with LightRack(tmp_path_factory.mktemp("dead"), nodes=2, dead=2) as rack:
        yield rack


def test_a_closed_and_a_blackholed_node_are_one_error_each_and_the_live_ones_are_read(light):
    (refused, _), (blackholed, _) = light.dead_hosts
    # a connect timeout far above the probe's: were the handshake tried on the blackholed node, it would say so
    rc, doc = k3json("check", "--nodes", light.inventory_path, "--only", "shm-clean,amdgpu-driver",
                     "--connect-timeout", "60")
    by_node = {}
    for r in doc["results"]:
        by_node.setdefault(r["node"], []).append(r)
    assert rc == 2 and doc["verdict"] == "INCONCLUSIVE"
    assert by_node[refused][0]["message"] == (
        f"node not checked: connection refused by {light.dead_hosts[0][1]}:2222 (no sshd listening?)")
    for node in (refused, blackholed):
        assert [r["status"] for r in by_node[node]] == ["ERROR", "ERROR"]  # one per check, no PASS
        assert all("\n" not in r["message"] for r in by_node[node])
    assert re.fullmatch(rf"node not checked: unreachable: no TCP answer from {re.escape(light.dead_hosts[1][1])}:2222 "
                        rf"within {PROBE_TIMEOUT_S:g}s \(node down, or the port filtered\?\); SSH was not tried",
                        by_node[blackholed][0]["message"])
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert [n for n in nodes if not nodes[n]["reachable"]] == [refused, blackholed]
    assert nodes[blackholed]["round_trips"] == 0  # nothing was tried past the probe
    for name, _, _ in light.hosts:  # the live nodes were read and judged
        assert {r["status"] for r in by_node[name]} == {"PASS"}, by_node[name]
