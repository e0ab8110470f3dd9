"""Every shipped XGMI platform as a rig node, end to end (reference §30, §31.4): the real CLI over real SSH and a
real dockerd against the rig's XGMI node kind with that platform's numbers (gfx target, device id, HBM, host
RAM). A healthy node is quiet: no FAIL, WARN or ERROR, and the checks the platform file turns off are not run.
A new XGMI platform file is tested here without a test edit (the rig must know its kind: rig/k3rig/mi355x.py).
"""
import pytest

from k3doctor import platforms
from tests.conftest import private_rack
from tests.e2e.cli import k3json

pytestmark = pytest.mark.e2e

XGMI = [name for name in platforms.names() if platforms.get(name).fabric == "xgmi"]


@pytest.fixture(scope="module", params=XGMI)
def node(request, tmp_path_factory):
    yield from private_rack(tmp_path_factory, request.param, nodes=1, platform=request.param)


def test_a_healthy_node_of_each_xgmi_platform_is_quiet(node):
    p = platforms.get(node.platform)
    rc, doc = k3json("check", "--nodes", node.inventory_path)
    loud = [(r["check"], r["status"], r["message"]) for r in doc["results"] if r["status"] not in ("PASS", "SKIP")]
    assert (rc, loud) == (0, []), doc
    ran = {r["check"]: r for r in doc["results"]}
    assert not set(ran) & p.not_for_platform
    assert {"xgmi-links", "gpu-platform", "gpu-inventory", "gpu-partitions"} <= set(ran)
    device = f" and a {p.name} device id" if p.device_ids else ""
    assert ran["gpu-platform"]["message"].endswith(f"({p.gfx}){device}, platform {p.name} as declared")
    assert f"{p.gpus_per_node} GPUs" in ran["gpu-inventory"]["message"]
    assert f"{p.hbm_gib_per_gpu} GiB" in ran["gpu-inventory"]["message"]
    assert ran["xgmi-links"]["message"].startswith(f"all {p.gpus_per_node * (p.gpus_per_node - 1) // 2} GPU pairs")
