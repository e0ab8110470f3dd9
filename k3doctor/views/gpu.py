"""The GPU/sysfs view checks and probes share: AMD cards, PCI address -> card, accel id -> node + card,
the processes holding a KFD context, the GPUs of the KFD topology (their gfx target and device id).

Card numbers come from sysfs paths (``/sys/class/drm/cardN/device/...``); a card's PCI address from
its ``uevent`` (``PCI_SLOT_NAME``); its global UALink accelerator id only from its own
``ualink/accel_id`` file (§6: never card index = AccId mod 4).  A kernel-log line printed by the
IFoE/AFM function ``.1`` belongs to the GPU at ``.0`` on the same bus (§28: map by bus).
"""
from __future__ import annotations

import re
from typing import NamedTuple

from k3doctor.parsers import ParseError
from k3doctor.parsers.common import UINT32_MAX
from k3doctor.readings import Command, tool

DRM = "/sys/class/drm/card*/device"
VENDOR_GLOB = f"{DRM}/vendor"
UEVENT_GLOB = f"{DRM}/uevent"
VRAM_GLOB = f"{DRM}/mem_info_vram_total"
UALINK_DIR = f"{DRM}/ualink"
UALINK_GLOB = f"{UALINK_DIR}/*"  # every ualink file of every card (accel_id among them)
AMD_VENDOR = "0x1002"
# One `amd-smi static` serves every check that reads a static section (gpu-inventory its VRAM, fabric-domain its
# ASIC and bus): a call costs a real node ~1.5 s and its CPU (reference §31.5), while each parser takes its own
# sections out of the one JSON by name. Declared alike by both checks, the gatherer reads it once.
STATIC_SECTIONS = ("--asic", "--bus", "--vram")
STATIC_LABEL = f"`amd-smi static {' '.join(STATIC_SECTIONS)} --json`"
KFD_PROC_GLOB = "/sys/class/kfd/kfd/proc/*"  # one directory per process holding a KFD (GPU) context
KFD_NODES_GLOB = "/sys/class/kfd/kfd/topology/nodes/*/properties"  # one KFD topology node each (CPUs too)
_KFD_NODE = re.compile(r"/nodes/([0-9]{1,6})/properties$")
_CARD_FILE = re.compile(r"/card(\d+)/device/(.+)$")  # the one place a sysfs path becomes a card number
_KFD_PID = re.compile(r"/proc/(\d+)$")
_SLOT = re.compile(r"^PCI_SLOT_NAME=(?P<bdf>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s*$", re.MULTILINE)


def card_file(path: str):
    """(card number, path below ``device/``) of a ``/sys/class/drm/cardN/device/...`` path; None for another path."""
    match = _CARD_FILE.search(path)
    return (int(match.group(1)), match.group(2)) if match else None


def card_of(path: str) -> int:
    """Card number of a ``/sys/class/drm/cardN/device/<file>`` path."""
    located = card_file(path)
    if located is None:
        raise ParseError(f"{path}: not a /sys/class/drm/cardN/device/ path")
    return located[0]


def amd_cards(vendors: dict) -> list:
    """Card indices whose PCI vendor is AMD (a BMC's VGA card is card0 on many servers)."""
    return sorted(card_of(p) for p, reading in vendors.items()
                  if reading.exists and reading.text().lower() == AMD_VENDOR)


def hbm_gib(vendors: dict, vram: dict) -> dict:
    """AMD card -> HBM size in whole GiB (mem_info_vram_total, rounded: drivers reserve a few MiB); None
    where the card has no such file."""
    by_card = {card_of(p): reading for p, reading in vram.items()}
    out = {}
    for card in amd_cards(vendors):
        if card not in by_card:
            out[card] = None
            continue
        text = by_card[card].text()
        if not text.isdigit():
            raise ParseError(f"card{card} mem_info_vram_total is not a byte count: {text!r:.40}")
        out[card] = round(int(text) / 2**30)
    return out


def card_bdfs(uevents: dict) -> dict:
    """card -> PCI address (lower case) from each card's ``device/uevent`` reading; unreadable ones left out."""
    out = {}
    for path, reading in uevents.items():
        located = card_file(path)
        slot = _SLOT.search(reading.content or "") if located and not reading.error else None
        if slot:
            out[located[0]] = slot.group("bdf").lower()
    return dict(sorted(out.items()))


def pci_bus(bdf: str) -> str:
    """``domain:bus`` of a PCI address (lower case): the GPU (.0) and its IFoE function (.1) share it (§28)."""
    return bdf.lower().rsplit(":", 1)[0]


def card_buses(uevents: dict) -> dict:
    """PCI ``domain:bus`` -> card number, from each card's ``device/uevent`` reading."""
    return {pci_bus(bdf): card for card, bdf in card_bdfs(uevents).items()}


def card_for_bdf(bdf: str, bdfs: dict):
    """The card at PCI address ``bdf``, matched by domain:bus:device (function .1 is the GPU's IFoE device)."""
    want = bdf.lower().rsplit(".", 1)[0]
    for card, address in bdfs.items():
        if address.rsplit(".", 1)[0] == want:
            return card
    return None


def _accel_entry(path: str, value: str):
    """(accel id, card) for one accel_id file, None when unset (UINT32_MAX) or not a number."""
    located = card_file(path)
    value = (value or "").strip()
    if not located or located[1] != "ualink/accel_id" or not value.isascii() or not value.isdigit() \
            or int(value) == UINT32_MAX:
        return None
    return int(value), located[0]


def accel_ids(ualink_files: dict) -> dict:
    """{accel id: card} from the ``ualink/*`` glob readings (only the accel_id files are used)."""
    entries = (_accel_entry(p, r.content) for p, r in ualink_files.items() if not r.error and r.content)
    return dict(e for e in entries if e is not None)


def parse_accel_ids(text: str) -> dict:
    """{accel id: card} from ``<path> <value>`` lines of ualink/accel_id (unset ids skipped)."""
    entries = (_accel_entry(*line.rsplit(None, 1)) for line in text.splitlines() if len(line.split()) == 2)
    return dict(e for e in entries if e is not None)


def accid_to_location(accid: int, gpus_per_node: int) -> tuple:
    """Global AccId -> (tray 1-based, position within the tray's AccId range) (§6).

    Tray N owns AccIds 4(N-1)…4(N-1)+3, so AccId 51 is CT13, 4th accelerator: ``(13, 3)``.
    The position is not the card index (``local_accels`` can read ``3 2 1 0``); map it to a
    card through each card's ``accel_id``.
    """
    if accid < 0 or gpus_per_node <= 0:
        raise ValueError(f"invalid AccId {accid} / gpus_per_node {gpus_per_node}")
    return accid // gpus_per_node + 1, accid % gpus_per_node


def locate_accid(accid: int, accel_ids_by_node: dict, gpus_per_node: int) -> tuple:
    """(node or None, card or None, how): every node's sysfs accel_id files first, the §6 formula otherwise.

    Two nodes claiming one id (a fabric misconfiguration) are both named in ``how``.
    """
    owners = [(node, ids[accid]) for node, ids in accel_ids_by_node.items() if accid in ids]
    if owners:
        others = "".join(f"; also claimed by {n} card{c}" for n, c in owners[1:])
        return owners[0][0], owners[0][1], f"sysfs accel_id{others}"
    tray, position = accid_to_location(accid, gpus_per_node)
    return None, None, f"§6 formula: tray CT{tray}, accelerator {position} of that tray (no inventory node " \
                       "reports this accel_id)"


def kfd_pids(kfd: dict) -> set:
    """Process ids holding a KFD context, from the :data:`KFD_PROC_GLOB` reading."""
    return {int(m.group(1)) for path in kfd if (m := _KFD_PID.search(path))}


class KfdGpu(NamedTuple):
    """What one GPU node of the KFD topology says it is (§29, §31.4: the gfx target, and the PCI device id that
    tells products of one target apart, MI300X from MI300A)."""

    gfx_target_version: int
    device_id: int | None  # None: the kernel's properties file has no device_id line


def kfd_gpus(nodes: dict) -> dict | None:
    """KFD topology node -> KfdGpu of the nodes that are GPUs (non-zero gfx_target_version), in node order, from
    the :data:`KFD_NODES_GLOB` reading; None when no node's properties could be read. The one reader of the
    topology: the GPU count (amdgpu-driver) and the platform (gpu-platform) come from here.

    Reference §29/§0.2: the GPU count is the KFD topology's, never ``/dev/dri/renderD*`` (a gfx1250
    tray showed 32 render nodes for 4 GPUs); CPU agents are nodes with ``gfx_target_version 0``.
    A properties file without a numeric gfx_target_version (or with a device_id that is no number) is a
    ParseError, never a CPU."""
    readable = {path: reading for path, reading in nodes.items() if reading.exists}
    if not readable:
        return None
    out = {}
    for path, reading in readable.items():
        match = _KFD_NODE.search(path)
        if match is None:
            continue
        fields = dict(line.split(None, 1) for line in reading.text().splitlines() if len(line.split(None, 1)) == 2)
        value, device = fields.get("gfx_target_version", "").strip(), fields.get("device_id")
        if not value.isdigit() or len(value) > 10:
            raise ParseError(f"{path}: no gfx_target_version line (with a number)")
        if device is not None and not (device.strip().isdigit() and len(device.strip()) <= 10):
            raise ParseError(f"{path}: device_id {device.strip()[:20]!r} is not a number")
        if int(value):
            out[int(match.group(1))] = KfdGpu(int(value), int(device) if device is not None else None)
    return dict(sorted(out.items()))


def amdsmi_static(settings) -> Command:
    """The node's one ``amd-smi static`` reading (STATIC_SECTIONS), where the inventory says amd-smi runs."""
    return tool(settings.tools["amd_smi"], "static", *STATIC_SECTIONS, "--json", container=settings.container)
