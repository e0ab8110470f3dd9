"""The platform file is the one source of a platform's numbers (issue 34): Settings' GPUs per node and HBM per GPU
come from the chosen platform's file wherever settings are made (an inventory, the localhost run, a test's
``Settings()``) unless the inventory sets them, and the default platform is named once."""
import re
import shutil
from pathlib import Path

import pytest

from k3doctor import platforms
from k3doctor.inventory.load import localhost_inventory, parse_inventory
from k3doctor.inventory.types import Settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def two_gpu_default(tmp_path, monkeypatch):
    """The shipped platform files, the default one saying 2 GPUs per node and 96 GiB of HBM."""
    folder = tmp_path / "platforms"
    shutil.copytree(platforms.DIR, folder, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    path = folder / f"{platforms.DEFAULT}.yaml"
    text = re.sub(r"(?m)^gpus_per_node: \d+", "gpus_per_node: 2", path.read_text())
    path.write_text(re.sub(r"(?m)^hbm_gib_per_gpu: \S+", "hbm_gib_per_gpu: 96", text))
    monkeypatch.setattr(platforms, "DIR", folder)
    platforms.get.cache_clear()
    yield
    platforms.get.cache_clear()


def test_settings_made_anywhere_read_the_platform_file(two_gpu_default):
    assert (Settings().gpus_per_node, Settings().hbm_gib_per_gpu) == (2, 96)
    assert localhost_inventory().cluster.gpus_per_node == 2
    inv = parse_inventory("nodes:\n  - {name: n0, transport: local}\n", "inv.yaml")
    assert (inv.cluster.gpus_per_node, inv.nodes[0].settings.gpus_per_node) == (2, 2)


def test_a_value_the_inventory_sets_wins(two_gpu_default):
    inv = parse_inventory("cluster: {gpus_per_node: 8, hbm_gib_per_gpu: 288}\nnodes:\n"
                          "  - {name: n0, transport: local}\n  - {name: n1, transport: local, gpus_per_node: 3}\n",
                          "inv.yaml")
    assert [(n.settings.gpus_per_node, n.settings.hbm_gib_per_gpu) for n in inv.nodes] == [(8, 288), (3, 288)]
    assert Settings(gpus_per_node=1).gpus_per_node == 1


@pytest.mark.parametrize("name", platforms.names())
def test_each_shipped_platform_gives_its_own_numbers(name):
    p = platforms.get(name)
    inv = parse_inventory(f"cluster: {{platform: {name}}}\nnodes:\n  - {{name: n0, transport: local}}\n", "inv.yaml")
    assert (inv.nodes[0].settings.gpus_per_node, inv.nodes[0].settings.hbm_gib_per_gpu) == (p.gpus_per_node,
                                                                                             p.hbm_gib_per_gpu)
    assert Settings(platform=name).gpus_per_node == p.gpus_per_node


def test_the_default_platform_is_named_once():
    """No platform's name as a value in the code but platforms.DEFAULT (comments and prose may name it)."""
    named = []
    for path in [*(ROOT / "k3doctor").rglob("*.py"), *(ROOT / "checks").glob("*.py")]:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(rf"""["']{platforms.DEFAULT}["']""", line):
                named.append(f"{path.relative_to(ROOT)}:{n}")
    assert named == ["k3doctor/platforms/__init__.py:26"]
