"""The §31.3 field readings of a healthy node, at the hardware boundary: each GPU's PCIe link attributes,
its RAS error counters and bad-page list in sysfs (the card's ``retired_pages`` as R lines, the same list amd-smi
bad-pages re-reads), amdgpu's default ``bad_page_threshold``, the node's ``kernel.numa_balancing``, its PCI
devices (each GPU and the root port above it, with its ACS capability) and the fake amd-smi's partition and
CPER outputs.

``kernel.numa_balancing`` is a per-node kernel value (each real node has its own kernel); the rig's nodes
share the host's, so each node gets a stand-in file bind-mounted over that one file (``STAND_INS``, as the boot
id), never over /proc/sys. ``/sys/bus/pci/devices`` is a stand-in directory for the same reason (the host's PCI
tree is not the node's); its entries are directories here, symlinks into /sys/devices on a real node, which
pcie-acs does not rely on (it reads bus ranges from config space). A scenario makes a node faulty through ``files:`` (tree-relative path -> content),
which ``write_tree`` writes after these healthy values, e.g.::

    files: {proc/sys/kernel/numa_balancing: "1\\n", sys/class/drm/card2/device/current_link_width: "8\\n"}
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

NUMA_BALANCING = "proc/sys/kernel/numa_balancing"
PCI_DEVICES = "sys/bus/pci/devices"  # the PCI devices pcie-acs reads: each GPU and the root port above it
STAND_INS = (NUMA_BALANCING, PCI_DEVICES)  # kernel paths each node needs its own view of (bind-mounted)
LINK_SPEED = "32.0 GT/s PCIe"  # PCIe Gen5 x16, trained at its capability
LINK_WIDTH = 16
RAS_BLOCKS = ("umc", "gfx", "sdma", "xgmi_wafl")  # ras/<block>_err_count of an MI300-class GPU
BAD_PAGE_THRESHOLD = -1  # amdgpu's default (auto) in mainline amdgpu_drv.c
# Per-card overrides a scenario may set (``cards:``): partition modes; ``cper_fatal``, the fatal CPER records
# amd-smi lists for the card as seconds after the node's boot (negative: before it, e.g. the 15 h old AFID 19);
# ``acs_ctrl``, the ACS control register of the root port above the card (0x1d: SrcValid+ with P2P redirects).
CARD_FIELDS = ("compute_partition", "memory_partition", "cper_fatal", "acs_ctrl")
CPER_WARNING = ("WARNING: No CPER files will be dumped unless --folder=<folder_name> is specified and cper entries "
                "exist.\n")
PARTITION = {"compute_partition": "SPX", "memory_partition": "NPS1"}  # TP8 on a whole GPU (§31.4)


def bad_page_line(index: int, flag: str = "R") -> str:
    """One ``ras/gpu_vram_bad_pages`` line as amdgpu_ras.c prints it (``0x%08x : 0x%08x : %c``)."""
    return f"0x{0x27f5d43 + 8 * index:08x} : 0x00001000 : {flag}\n"


def install(tree: Path, state: Any, write_file: Callable[..., None]) -> None:
    """Write the healthy §31.3 readings of every GPU of ``state`` and the node's stand-in kernel files."""
    write_file(tree, NUMA_BALANCING, "0\n")
    _write_pci(tree, state, write_file)
    write_file(tree, "sys/module/amdgpu/parameters/bad_page_threshold", f"{BAD_PAGE_THRESHOLD}\n")
    for card in range(state.gpus):
        dev = f"sys/class/drm/card{card}/device"
        for which in ("current", "max"):
            write_file(tree, f"{dev}/{which}_link_speed", f"{LINK_SPEED}\n")
            write_file(tree, f"{dev}/{which}_link_width", f"{LINK_WIDTH}\n")
        for block in RAS_BLOCKS:
            write_file(tree, f"{dev}/ras/{block}_err_count", "ue: 0\nce: 0\n")
        write_file(tree, f"{dev}/ras/gpu_vram_bad_pages",
                   "".join(bad_page_line(i) for i in range(state.card(card)["retired_pages"])))


def bridge_config(bus: int, acs_ctrl: int) -> bytes:
    """A root port's 4 KiB config space: AMD's vendor id, class 0x0604, secondary = subordinate = ``bus`` and an
    ACS extended capability at 0x100 (id 0x000d, version 1, last) whose control register (+6) is ``acs_ctrl``."""
    config = bytearray(4096)
    config[0:2], config[0x0a:0x0c], config[0x0e] = (0x1022).to_bytes(2, "little"), b"\x04\x06", 0x01
    config[0x19], config[0x1a] = bus, bus
    config[0x100:0x104] = (0x0001000D).to_bytes(4, "little")
    config[0x104:0x106], config[0x106:0x108] = (0x001F).to_bytes(2, "little"), acs_ctrl.to_bytes(2, "little")
    return bytes(config)


def _write_pci(tree: Path, state: Any, write_file: Callable[..., None]) -> None:
    """Each GPU (class 0x120000, vendor 0x1002) and the root port above it (``<domain>:00:<card+1>.1``), with the
    bus-number attributes a bridge has in sysfs (decimal, as pci-sysfs.c prints them) beside its config space."""
    for card in range(state.gpus):
        gpu = state.bdf(card)
        domain, bus = gpu.split(":")[0], int(gpu.split(":")[1], 16)
        port = f"{PCI_DEVICES}/{domain}:00:{card + 1:02x}.1"
        for rel, content in ((f"{PCI_DEVICES}/{gpu}/class", "0x120000\n"), (f"{PCI_DEVICES}/{gpu}/vendor", "0x1002\n"),
                             (f"{port}/class", "0x060400\n"), (f"{port}/vendor", "0x1022\n"),
                             (f"{port}/secondary_bus_number", f"{bus}\n"),
                             (f"{port}/subordinate_bus_number", f"{bus}\n"),
                             (f"{port}/config", bridge_config(bus, state.card(card).get("acs_ctrl", 0)))):
            write_file(tree, rel, content)


def boot_time() -> int:
    """The host kernel's boot time (/proc/stat btime): the rig's nodes share it, so a record placed relative to
    it is newer or older than the boot the check reads."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return int(line.split()[1])
    raise RuntimeError("/proc/stat has no btime")


def amd_smi_outputs(state: Any, as_json: Callable[..., str]) -> dict[str, str]:
    """The fake amd-smi's recorded outputs of §31.3 (key: its arguments): each card's partition modes and its
    fatal CPER records, in the table amd-smi prints without --folder."""
    partitions = [{"gpu": c, "partition": {key: state.card(c).get(key, value) for key, value in PARTITION.items()}
                   | {"partition_id": 0}} for c in range(state.gpus)]
    boot = boot_time()
    records = sorted((boot + after, c) for c in range(state.gpus) for after in state.card(c).get("cper_fatal", ()))
    cper = CPER_WARNING + f"{'timestamp':<20} {'gpu_id':<7} {'severity':<20}\n" + "".join(
        f"{time.strftime('%Y/%m/%d %H:%M:%S', time.gmtime(at)):<20} {c:<7} {'FATAL':<20}\n" for at, c in records)
    return {"static --partition --json": as_json(state, partitions), "ras --cper --severity fatal": cper}
