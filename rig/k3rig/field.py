"""The §31.3 field readings of a healthy node, at the hardware boundary: each GPU's PCIe link attributes,
its RAS error counters and bad-page list in sysfs, and the node's ``kernel.numa_balancing``.

``kernel.numa_balancing`` is a per-node kernel value (each real node has its own kernel); the rig's nodes
share the host's, so each node gets a stand-in file bind-mounted over that one file (``STAND_INS``, as the boot
id), never over /proc/sys. A scenario makes a node faulty through ``files:`` (tree-relative path -> content),
which ``write_tree`` writes after these healthy values, e.g.::

    files: {proc/sys/kernel/numa_balancing: "1\\n", sys/class/drm/card2/device/current_link_width: "8\\n"}
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

NUMA_BALANCING = "proc/sys/kernel/numa_balancing"
STAND_INS = (NUMA_BALANCING,)  # kernel files each node needs its own value of (bind-mounted, one file each)
LINK_SPEED = "32.0 GT/s PCIe"  # PCIe Gen5 x16, trained at its capability
LINK_WIDTH = 16
RAS_BLOCKS = ("umc", "gfx", "sdma", "xgmi_wafl")  # ras/<block>_err_count of an MI300-class GPU


def install(tree: Path, state: Any, write_file: Callable[..., None]) -> None:
    """Write the healthy §31.3 readings of every GPU of ``state`` and the node's stand-in kernel files."""
    write_file(tree, NUMA_BALANCING, "0\n")
    for card in range(state.gpus):
        dev = f"sys/class/drm/card{card}/device"
        for which in ("current", "max"):
            write_file(tree, f"{dev}/{which}_link_speed", f"{LINK_SPEED}\n")
            write_file(tree, f"{dev}/{which}_link_width", f"{LINK_WIDTH}\n")
        for block in RAS_BLOCKS:
            write_file(tree, f"{dev}/ras/{block}_err_count", "ue: 0\nce: 0\n")
        write_file(tree, f"{dev}/ras/gpu_vram_bad_pages", "")
