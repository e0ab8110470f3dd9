"""The KFD topology is read in one place (k3doctor/views/gpu.py: its path and its parser): the GPU count of
amdgpu-driver and the platform of gpu-platform come from the same reading of the same files (issue 34)."""
import ast
from pathlib import Path

import pytest

from k3doctor.views.gpu import KFD_NODES_GLOB, KfdGpu, kfd_gpus
from k3doctor.parsers import ParseError
from k3doctor.readings import FileReading

ROOT = Path(__file__).resolve().parents[2]


def topology(*blocks) -> dict:
    return {KFD_NODES_GLOB.replace("*", str(i)): FileReading(KFD_NODES_GLOB.replace("*", str(i)), b)
            for i, b in enumerate(blocks)}


def test_gpu_nodes_with_their_target_and_device_id():
    cpu = "cpu_cores_count 64\ngfx_target_version 0\n"
    gpu = "simd_count 304\ngfx_target_version 90402\ndevice_id 29857\n"
    assert kfd_gpus(topology(cpu, gpu, "gfx_target_version 120500\n")) == {
        1: KfdGpu(90402, 0x74A1), 2: KfdGpu(120500, None)}
    assert kfd_gpus({}) is None


@pytest.mark.parametrize("block", ["simd_count 0\n", "gfx_target_version x\n", "gfx_target_version 1\ndevice_id ?\n"])
def test_a_node_that_says_no_number_is_a_parse_error(block):
    with pytest.raises(ParseError):
        kfd_gpus(topology(block))


def test_the_path_is_written_once():
    """No other module names the topology's files as a value (prose in a remediation text may)."""
    named = []
    for path in [*(ROOT / "k3doctor").rglob("*.py"), *(ROOT / "checks").glob("*.py")]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        prose = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose \
                    and len(node.value) < 100 and "kfd/topology" in node.value:
                named.append(str(path.relative_to(ROOT)))
    assert named == ["k3doctor/views/gpu.py"]
