"""Each GPU's IFoE function bound to the ifoe driver (reference §29, §28): the `.1` PCI function beside every
gfx1250 GPU carries its UALink-over-Ethernet; amd-smi's fabric telemetry is AMDSMI_STATUS_NOT_SUPPORTED for a
GPU whose `.1` function is not under /sys/bus/pci/drivers/ifoe/ (rocm-systems PR #6965).

The function is found from the card itself: ``/sys/class/drm/cardN/device/../<domain:bus:dev>.1/driver``
(``device`` resolves to the GPU's PCI directory, whose parent holds its sibling functions)."""
from __future__ import annotations

import re

from k3doctor.api import Exists, ParseError, ReadingUnavailable, check, error, fail, passed, remediation, sh, skip

# One line per amdgpu card: "<card dir> <.1 function> <driver name | - (no driver) | absent (no such function)>".
# The uevent is read with the shell's own `read` (two programs a card less; the nodes run this at every check).
LISTING = r"""for d in /sys/class/drm/card[0-9]/device /sys/class/drm/card[0-9][0-9]/device; do
  [ -r "$d/uevent" ] || continue
  drv= slot=
  while IFS= read -r l; do
    case $l in DRIVER=*) drv=${l#DRIVER=} ;; PCI_SLOT_NAME=*) slot=${l#PCI_SLOT_NAME=} ;; esac
  done < "$d/uevent"
  [ "$drv" = amdgpu ] || continue
  fn="${slot%.*}.1"
  if l=$(readlink "$d/../$fn/driver" 2>/dev/null); then echo "${d%/device} $fn ${l##*/}"
  elif [ -e "$d/../$fn" ]; then echo "${d%/device} $fn -"
  else echo "${d%/device} $fn absent"; fi
done
exit 0"""
_LINE = re.compile(r"/sys/class/drm/card(\d{1,3}) ([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.1) (\S{1,64})")

UNBOUND = remediation("IFOE-FUNCTION-UNBOUND", "a GPU's IFoE function is not bound to the ifoe driver", """
Every gfx1250 GPU has a `.1` PCI function for UALink over Ethernet; it must be bound to `ifoe`
(`ls /sys/bus/pci/drivers/ifoe/` lists it). Unbound, the GPU has no fabric telemetry (amd-smi says
AMDSMI_STATUS_NOT_SUPPORTED, rocm-systems PR #6965, §29) and its UALink cannot come up. Load ifoe before amdgpu
(`modprobe ifoe`, then reload amdgpu through perf_setup, §5); a function bound to another driver is released
with `echo <bdf> > /sys/bus/pci/drivers/<driver>/unbind` before ifoe can take it.
""")


def parse_listing(text: str) -> dict:
    """{card: (IFoE function, driver | "-" | "absent")} from the listing."""
    out = {}
    for line in text.splitlines():
        match = _LINE.fullmatch(line.strip())
        if not match:
            raise ParseError(f"IFoE function listing: unexpected line {line[:80]!r}")
        out[int(match.group(1))] = (match.group(2).lower(), match.group(3))
    return out


@check("ifoe-bound", title="every GPU's IFoE (.1) function bound to the ifoe driver (§29)", scope="node",
       remediation=(UNBOUND,), needs=("amdgpu-driver",),
       reads={"functions": sh(LISTING), "ifoe": Exists("/sys/module/ifoe")})
def ifoe_bound(r, ctx):
    """§29: one FAIL per GPU whose `.1` function ifoe does not hold; no amdgpu card read is an ERROR. Without the
    ifoe module no function can be bound: amdgpu-driver names that cause once, this check steps aside."""
    if not r["ifoe"]:
        return [skip("follows from amdgpu-driver: ifoe is not loaded, so no IFoE function can be bound to it")]
    try:
        cards = parse_listing(r["functions"].output("the IFoE function listing"))
    except (ReadingUnavailable, ParseError) as exc:
        return [error(f"IFoE functions not read: {exc}")]
    if not cards:
        return [error("no amdgpu card found under /sys/class/drm: the IFoE functions were not judged")]
    out = []
    for card, (function, driver) in sorted(cards.items()):
        if driver == "ifoe":
            continue
        state = {"absent": "does not exist", "-": "is bound to no driver"}.get(driver, f"is bound to {driver}")
        out.append(fail(f"card{card}'s IFoE function {function} {state}, not to ifoe: no fabric telemetry "
                        "(AMDSMI_STATUS_NOT_SUPPORTED) and no UALink for this GPU (§29)", gpu=card,
                        remediation=UNBOUND, evidence={"function": function, "driver": driver}))
    return out or [passed(f"{len(cards)} GPU(s): each IFoE function bound to ifoe "
                          f"({', '.join(f for f, _ in cards.values())})")]
