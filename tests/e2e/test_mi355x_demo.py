"""`k3doctor demo --platform mi355x` end to end: its own two-node MI355X rack, torn down after.

A module of its own, so that no other rack of the suite is up while it runs: the rig's nodes share the host's
PID namespace (each has a mount namespace of its own, not a PID namespace), and launch-config reads the model
server from the node's processes, so a server left running by another module's rack (test_mi355x_node's, in
the last state a test applied) would be judged as the demo nodes' own. On a real node the PID namespace is the
node's.
"""
import pytest

from tests.e2e.cli import k3

pytestmark = pytest.mark.e2e


def test_demo_on_mi355x_shows_the_failing_node_and_its_gpu_pair():
    rc, out, err = k3("demo", "--platform", "mi355x", timeout=300)  # its own two-node rack, torn down after
    assert rc == 1, out + err
    assert [ln.split(":")[0] for ln in out.splitlines() if ln.startswith(("FAIL", "ERROR", "WARN"))] == \
        ["FAIL  xgmi-links ct14 gpu2"], out
    assert "gpu2<->gpu5 XGMI link down: GPU2 (0000:65:00.0) reads D, GPU5 (0000:95:00.0) reads D" in out
    assert out.rstrip().splitlines()[-1].startswith("DO NOT LAUNCH") and "XGMI-LINK-DOWN" in out.splitlines()[-1]
    assert "starting a simulated 2-node mi355x rack (scenario mi355x-demo)" in err
