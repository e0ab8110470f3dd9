"""`iommu=pt` on the kernel command line (reference §29): RCCL warns `Missing "iommu=pt" from kernel command
line which can lead to system instablity or hang!` on MI300X/MI355X (ROCm/rccl #1026)."""
from __future__ import annotations

from k3doctor.api import File, check, error, passed, remediation, warn

IOMMU_PT = remediation("IOMMU-PT", "iommu=pt missing from the kernel command line", """
Add `iommu=pt` to the kernel command line (GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub and a
reboot; §29): without it RCCL warns of instability or hangs on MI300X/MI355X. The fine-grain PCIe setting
(HSA_FORCE_FINE_GRAIN_PCIE) does not matter on XGMI.
""")


@check("iommu-pt", title="iommu=pt on the kernel command line", scope="node",
       remediation=(IOMMU_PT,), reads={"cmdline": File("/proc/cmdline")})
def iommu_pt(r, ctx):
    """§29: RCCL's own warning names the missing word; a node without it may hang collectives."""
    reading = r["cmdline"]
    words = reading.text().split()
    if not words:
        return [error("/proc/cmdline is empty: the kernel command line could not be read")]
    if "iommu=pt" in words:
        return [passed("iommu=pt on the kernel command line")]
    iommu = [w for w in words if w.startswith(("iommu=", "amd_iommu="))]
    return [warn("iommu=pt is not on the kernel command line" + (f" (it has {' '.join(iommu)})" if iommu else "") +
                 ": RCCL warns `Missing \"iommu=pt\" from kernel command line which can lead to system instablity or "
                 "hang!` (§29)", evidence={"iommu words": iommu})]
