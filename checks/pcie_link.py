"""Each GPU's PCIe link trained at its capability (reference §31.3): a link below its own maximum speed or
width (`LnkSta` below `LnkCap`; the kernel's `... PCIe bandwidth, limited by ...`) slows every host transfer
(checkpoint load, KV offload, RDMA through host memory) on that GPU only. Read passively from sysfs
(``current_link_speed`` / ``max_link_speed``, ``current_link_width`` / ``max_link_width`` of the card's PCI
device), no root and no lspci; an attribute that is missing or unreadable on an AMD card is an ERROR for it."""
from __future__ import annotations

from k3doctor.api import Glob, ParseError, ReadingUnavailable, check, error, passed, remediation, warn
from k3doctor.views.gpu import DRM, VENDOR_GLOB, amd_cards, card_of
from k3doctor.parsers.gpu_sysfs import parse_link_speed, parse_link_width

FIELDS = {"current_link_speed": parse_link_speed, "max_link_speed": parse_link_speed,
          "current_link_width": parse_link_width, "max_link_width": parse_link_width}

LINK_DOWNTRAINED = remediation("PCIE-LINK-DOWNTRAINED", "a GPU's PCIe link trained below its capability", """
The GPU's PCIe link runs slower or narrower than both ends support (`lspci -vvv`: `LnkSta` below `LnkCap`;
the kernel logs `... available PCIe bandwidth, limited by ...`): host transfers to that GPU only are cut
(§31.3). Reseat the card or its riser/cable, check the slot's BIOS link settings, and look for AER errors in
the kernel log; a reboot retrains the link. Compare with its peers: one slow GPU slows a whole TP/EP step.
""")


@check("gpu-pcie-link", title="each GPU's PCIe link at its maximum speed and width (sysfs, §31.3)", scope="node",
       remediation=(LINK_DOWNTRAINED,), needs=("amdgpu-driver",),
       reads={"vendors": Glob(VENDOR_GLOB), **{name: Glob(f"{DRM}/{name}") for name in FIELDS}})
def gpu_pcie_link(r, ctx):
    """§31.3: current below max (speed or width) = WARN on that GPU; unread = ERROR, never a PASS."""
    cards = amd_cards(r["vendors"])
    values = {name: {card_of(path): reading for path, reading in r[name].items()} for name in FIELDS}
    verdicts, good = [], []
    for card in cards:
        try:
            link = {name: parse(values[name][card].text()) if card in values[name] else None
                    for name, parse in FIELDS.items()}
        except (ReadingUnavailable, ParseError) as exc:
            verdicts.append(error(f"card{card} PCIe link not read: {exc}", gpu=card))
            continue
        missing = [name for name, value in link.items() if value is None]
        if missing:
            verdicts.append(error(f"card{card} has no {', '.join(missing)} in sysfs: its PCIe link not judged",
                                  gpu=card))
            continue
        low = [f"{what} {link['current_' + what]:g}{unit} of {link['max_' + what]:g}{unit}"
               for what, unit in (("link_speed", " GT/s"), ("link_width", " lanes"))
               if link["current_" + what] < link["max_" + what]]
        if low:
            verdicts.append(warn(f"card{card} PCIe link trained down: {', '.join(low)} (§31.3)", gpu=card,
                                 evidence=link))
        else:
            good.append(f"card{card} {link['current_link_speed']:g} GT/s x{link['current_link_width']}")
    if not cards:
        return error("no AMD card in /sys/class/drm: no PCIe link judged")
    return verdicts or passed(f"every GPU's PCIe link at its maximum: {', '.join(good)}")
