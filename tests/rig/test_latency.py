"""The rig's GPU tools take real-node time when asked (k3rig/latency.py, reference §31.5): each call its
start outside any lock and its query under the node's lock, so overlapping a node's calls saves their
starts, never their queries. Lower bounds only: a loaded machine makes a call slower, never faster."""
from __future__ import annotations

import subprocess
import time

import pytest
from k3rig import latency
from k3rig.light import LightRack
from tests.conftest import light_nodes_unavailable

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def light(tmp_path_factory):
    reason = light_nodes_unavailable()
    if reason:
        pytest.skip(reason)
    with LightRack(tmp_path_factory.mktemp("latency"), nodes=1) as rack:
        yield rack


def timed(rack, command: str) -> tuple[float, str]:
    """(seconds the remote command took, as the node's own shell measured it, its stdout)."""
    _, host, _ = rack.hosts[0]
    script = f"set -e; s=$(date +%s.%N); {command}; e=$(date +%s.%N); echo \"took $s $e\""
    run = subprocess.run(["ssh", "-F", "/dev/null", "-i", str(rack.identity_file), "-o", "BatchMode=yes",
                          "-o", f"UserKnownHostsFile={rack.known_hosts}", "-p", "2222", f"root@{host}", script],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    *out, last = run.stdout.splitlines()
    _, start, end = last.split()
    return float(end) - float(start), "\n".join(out)


def test_real_node_profile_times_each_call_and_serialises_only_the_queries(light):
    recorded, _ = timed(light, "/opt/rocm/bin/amd-smi static --json >/dev/null")
    latency.apply(latency.trees(light), "real-node")
    try:
        took, out = timed(light, "/opt/rocm/bin/amd-smi static --json")
        assert took >= 1.5 and '"vram"' in out  # 1.4 s start + 0.1 s query, the recorded output as before
        took, _ = timed(light, "/opt/rocm/bin/rocm-smi --showpids >/dev/null")
        assert took >= 0.5
        # two calls at once: their starts overlap, their queries take the lock one after the other
        static = "/opt/rocm/bin/amd-smi static --json >/dev/null"
        took, _ = timed(light, f"{static} & {static} & wait")
        assert took >= 1.4 + 2 * 0.1
        assert latency.slowest_s("real-node") == 1.5
    finally:
        latency.apply(latency.trees(light), "zero")
    assert not list(latency.trees(light)[0].glob("**/@latency"))
    assert recorded < 1.4  # the suite's profile: no wait (far below the profile's, however loaded the box)


def test_an_unknown_profile_is_refused(tmp_path):
    with pytest.raises(ValueError, match="real-node"):
        latency.apply([tmp_path], "realnode")
