"""PCIe ACS Source Validation on a bridge above a GPU or NIC (reference §31.3).

With ACS on (`lspci -vvv`: `ACSCtl: SrcValid+`) a switch port sends peer-to-peer traffic up to the root complex
instead of across: GPU P2P and GPUDirect RDMA hang or crawl, and BIOSes turn it back on at every boot, so it has
to be undone after each reboot. Read without lspci (often not installed, and it reads the same file): each
bridge's bus range (the kernel's ``secondary_bus_number`` / ``subordinate_bus_number``, else its header's
bytes 0x19 and 0x1a in ``/sys/bus/pci/devices/<bdf>/config``) says whether a GPU or NIC lies below it, and the
ACS extended capability in its config space (id 0x000d; control register at +6, bit 0 = Source Validation) says
whether it is on. The kernel returns only the first 64 bytes of config space to a reader without CAP_SYS_ADMIN,
as it does to lspci, so without root ACS is not judged (SKIP, said), never passed.

A node holds dozens of bridges and each capability list several entries: the listing reads a bridge's whole
extended config space with one ``od`` and walks the list in shell arithmetic (no program per capability), and
takes the bus range from the attributes (no program at all), so the check costs a node a program per bridge
above a GPU or NIC, not five per capability of every bridge.
"""
from __future__ import annotations

from k3doctor.api import ParseError, check, error, passed, remediation, sh, skip, warn

ACS_ON = remediation("PCIE-ACS-SRCVALID", "PCIe ACS Source Validation is on above a GPU or NIC", """
A PCIe bridge above a GPU or NIC has ACS Source Validation (and with it usually P2P request/completion
redirect) enabled (`lspci -vvv`: `ACSCtl: SrcValid+`): P2P and RDMA traffic is forced up through the root
complex, which hangs or slows GPU peer-to-peer and GPUDirect RDMA (§31.3; a BLOCK for multi-node RDMA). Turn
it off for the bridges named (`setpci -s <bdf> ECAP_ACS+0x6.w=0000`, as NCCL's troubleshooting guide does, or
the BIOS option "ACS Enable" / "PCIe ACS" off) and make it part of boot: the setting comes back after every
reboot.
""")

# First every GPU (AMD, display or processing-accelerator class) and NIC (network class) as "@endpoint <bdf>"; then
# each bridge whose bus range holds one: "@bridge <bdf> <secondary> <subordinate> <ACS control hex|none|unread>".
# "none": the capability list ended without ACS. "unread": config space past 64 bytes not readable (not root), a
# header of all ones (the device gone), a capability whose control register would lie past the 4 KiB, or a list
# that does not end within 64 entries (a loop): never read as "off".
_LIST = r"""eps=
for d in /sys/bus/pci/devices/*; do
  read -r c 2>/dev/null < "$d/class" || continue; read -r v 2>/dev/null < "$d/vendor" || v=
  b=${d##*/}
  case $c in 0x02*) ;; 0x03*|0x12*) [ "$v" = 0x1002 ] || continue ;; *) continue ;; esac
  echo "@endpoint $b"; eps="$eps ${b%:*}"
done
for d in /sys/bus/pci/devices/*; do
  read -r c 2>/dev/null < "$d/class" || continue
  case $c in 0x0604*) ;; *) continue ;; esac
  b=${d##*/} dom=${d##*/}; dom=${dom%%:*}
  if ! { read -r sec 2>/dev/null < "$d/secondary_bus_number" && read -r sub 2>/dev/null < "$d/subordinate_bus_number" &&
         [ "$sec" -ge 0 ] 2>/dev/null && [ "$sub" -ge 0 ] 2>/dev/null; }; then
    set -- $(od -An -tu1 -j25 -N2 "$d/config" 2>/dev/null)
    [ $# -eq 2 ] || { echo "@bridge $b - - unread"; continue; }
    sec=$1 sub=$2
  fi
  below=0
  for e in $eps; do
    [ "${e%%:*}" = "$dom" ] || continue
    bus=$((0x${e#*:})); [ "$bus" -ge "$sec" ] && [ "$bus" -le "$sub" ] && below=1
  done
  [ "$below" = 1 ] || continue
  set -- $(od -An -v -tu4 -j256 -N3840 "$d/config" 2>/dev/null)
  [ $# -eq 960 ] || { echo "@bridge $b $sec $sub unread"; continue; }
  off=256 n=0 acs=unread
  while :; do
    [ "$off" -ge 256 ] || { acs=none; break; }
    [ "$off" -le 4088 ] && [ "$n" -lt 64 ] || break
    eval "w=\${$(((off - 256) / 4 + 1))}"
    [ "$w" != 4294967295 ] || break
    if [ $((w & 0xffff)) -eq 13 ]; then eval "acs=\${$(((off - 256) / 4 + 2))}"; break; fi
    off=$(((w >> 20) & 0xffc)) n=$((n + 1))
  done
  case $acs in none|unread) echo "@bridge $b $sec $sub $acs" ;;
    *) printf '@bridge %s %s %s %04x\n' "$b" "$sec" "$sub" $(((acs >> 16) & 0xffff)) ;; esac
done"""


def parse_listing(text: str) -> tuple:
    """([endpoint bdf], [(bridge bdf, ACS control int, or None without ACS, or "unread")]); else a ParseError."""
    endpoints, bridges = [], []
    for line in text.splitlines():
        fields = line.split()
        if fields[:1] == ["@endpoint"] and len(fields) == 2:
            endpoints.append(fields[1])
        elif fields[:1] == ["@bridge"] and len(fields) == 5:
            acs = fields[4]
            if acs not in ("none", "unread") and (len(acs) != 4 or any(ch not in "0123456789abcdef" for ch in acs)):
                raise ParseError(f"ACS listing: bad control value in {line[:100]!r}")
            bridges.append((fields[1], None if acs == "none" else acs if acs == "unread" else int(acs, 16)))
        elif line.strip():
            raise ParseError(f"ACS listing: unexpected line {line[:100]!r}")
    return endpoints, bridges


@check("pcie-acs", title="no ACS Source Validation on a PCIe bridge above a GPU or NIC (§31.3)", scope="node",
       remediation=ACS_ON, reads={"acs": sh(_LIST)})
def pcie_acs(r, ctx):
    """§31.3: SrcValid+ on a bridge above a GPU/NIC = WARN naming the bridge; unreadable config = SKIP (root)."""
    endpoints, bridges = parse_listing(r["acs"].output("the PCIe ACS listing"))
    if not endpoints:
        return error("no GPU or NIC in /sys/bus/pci/devices: the PCIe path was not read")
    on = [bdf for bdf, ctrl in bridges if isinstance(ctrl, int) and ctrl & 1]
    unread = [bdf for bdf, ctrl in bridges if ctrl == "unread"]
    verdicts = [warn(f"PCIe bridge {bdf} above a GPU/NIC has ACS Source Validation on (ACSCtl: SrcValid+): P2P and "
                     "RDMA go through the root complex (§31.3)", evidence={"bridge": bdf}) for bdf in on]
    if verdicts:
        return verdicts
    if unread:
        return skip(f"ACS of {len(unread)} bridge(s) above the GPUs/NICs not readable (config space past 64 bytes "
                    "needs root): not judged")
    return passed(f"ACS Source Validation off on all {len(bridges)} bridge(s) above {len(endpoints)} GPU(s)/NIC(s)")
