"""Automatic NUMA balancing off (reference §31.3): with ``kernel.numa_balancing`` on, the kernel migrates the
job's pages between NUMA nodes under it and RCCL itself warns `NUMA auto balancing enabled which can lead to
variability in the RCCL performance!`. Read from the kernel's own /proc/sys file (its read semantics: §31.1);
a kernel built without NUMA balancing has no such file, which is "off", not an unread value."""
from __future__ import annotations

from k3doctor.api import File, check, error, passed, remediation, warn

PATH = "/proc/sys/kernel/numa_balancing"

NUMA_BALANCING = remediation("NUMA-BALANCING", "automatic NUMA balancing is on", """
`kernel.numa_balancing` is not 0: the kernel unmaps and migrates pages between NUMA nodes while the engine
runs, and RCCL warns of variable performance (§31.3). Turn it off on every node, now and for later boots:
`sysctl -w kernel.numa_balancing=0` and `kernel.numa_balancing = 0` in /etc/sysctl.d/.
""")


@check("numa-balancing", title="kernel.numa_balancing is 0 (§31.3)", scope="node", remediation=(NUMA_BALANCING,),
       reads={"numa": File(PATH)})
def numa_balancing(r, ctx):
    """§31.3: RCCL's own warning; 1 (and 2, memory tiering) migrate pages under the job."""
    reading = r["numa"]
    if not reading.exists:
        return passed(f"{PATH} absent: this kernel has no automatic NUMA balancing")
    value = reading.text()
    if not value.isdigit() or len(value) > 3:
        return error(f"{PATH} reads {value[:40]!r}, not a number: not judged")
    if int(value) == 0:
        return passed("kernel.numa_balancing = 0")
    return warn(f"kernel.numa_balancing = {value}: the kernel migrates pages under the job; RCCL warns `NUMA auto "
                "balancing enabled which can lead to variability in the RCCL performance!` (§31.3)",
                evidence={PATH: value})
