"""The Docker API channel end to end: straight to the engine socket through the node's sshd (streamlocal), and
``docker system dial-stdio`` where the node's sshd refuses that, over the rig's real sshd and dockerd.

Which way a node's engine was read is seen on the node itself: every start of the docker CLI there is
recorded (tests.e2e.faults.docker_cli_recorded), so a node read through streamlocal has no ``dial-stdio``
line and one read through the fallback has.
"""
import contextlib
import re

import pytest

from tests.conftest import private_rack
from tests.e2e.cli import k3json
from tests.e2e.faults import docker_cli_recorded

pytestmark = pytest.mark.e2e

ENGINE_CHECKS = ("rack-free", "launch-config", "host-resources")  # read through the Docker API on every node


def check(inventory):
    return k3json("check", "--nodes", inventory, timeout=240)


def findings(doc):
    return sorted((r["check"], r["node"], r["status"], r["message"]) for r in doc["results"]
                  if r["status"] not in ("PASS", "SKIP"))


@contextlib.contextmanager
def recorded(nodes):
    """A function giving {node name: the docker CLI starts recorded there} while inside."""
    with contextlib.ExitStack() as stack:
        starts = {n.name: stack.enter_context(docker_cli_recorded(n)) for n in nodes}
        yield lambda: {name: got() for name, got in starts.items()}


def dialed(seen) -> dict:
    return {name: [line for line in lines if "dial-stdio" in line] for name, lines in seen.items()}


def engine_results(doc, rack, node):
    """(check, status, message) of the checks that read the engine, on ``node``, node names and addresses
    taken out."""
    own = re.compile("|".join(rf"\b{re.escape(word)}\b" for n in rack.nodes for word in (n.name, n.host)))
    return sorted((r["check"], r["status"], own.sub("NODE", r["message"]))
                  for r in doc["results"] if r["node"] == node and r["check"] in ENGINE_CHECKS)


def test_healthy_rack_reads_every_engine_with_no_docker_process_on_the_nodes(rig):
    rig.apply("healthy")  # whatever an earlier module left on the shared rack
    with recorded(rig.nodes) as starts:
        rc, doc = check(rig.inventory_path)
        seen = starts()
    assert (rc, findings(doc)) == (0, [])
    for node in rig.nodes:  # the engine was read: its checks passed there
        assert {c for c, status, _ in engine_results(doc, rig, node.name) if status == "PASS"} == set(ENGINE_CHECKS)
    assert all(seen.values()), seen  # the recorder sees the docker CLI (the container log's `docker logs`)
    assert [line for lines in seen.values() for line in lines if line.startswith("exec")] == []  # exec: the API
    assert dialed(seen) == {n.name: [] for n in rig.nodes}


@pytest.fixture(scope="module")
def refusing_rack(tmp_path_factory):
    """Two nodes; ct14's sshd refuses streamlocal channels (ct13's allows them, as OpenSSH does by default)."""
    yield from private_rack(tmp_path_factory, "refusing-rack", nodes=2,
                            sshd_options={"ct14": ("AllowStreamLocalForwarding no",)})


def test_a_node_whose_sshd_refuses_streamlocal_is_read_through_dial_stdio(refusing_rack):
    with recorded(refusing_rack.nodes) as starts:
        rc, doc = check(refusing_rack.inventory_path)
        used = dialed(starts())
    assert (rc, findings(doc)) == (0, [])
    assert used["ct13"] == [] and used["ct14"], used  # the fallback on exactly the refusing node
    via_dial_stdio, via_streamlocal = (engine_results(doc, refusing_rack, name) for name in ("ct14", "ct13"))
    assert via_dial_stdio == via_streamlocal  # the same readings either way
    assert {c for c, status, _ in via_dial_stdio if status == "PASS"} == set(ENGINE_CHECKS)
