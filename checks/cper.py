"""Fatal CPER records newer than the node's boot (reference §31.3, §31.2 signal 3).

amdgpu keeps the CPER (Common Platform Error Record) of every fatal RAS event; `amd-smi ras --cper --severity
fatal` lists them per GPU. A fatal record written since this boot is a GPU that failed while up (BLOCK: it
may be wedged, or fail again under load); a record older than the boot is history a reboot already dealt with,
or the false AFID 19 record of amdgpu >= 30.30.1 - said (INFO), never a finding, since stale fatal CPERs
cordoning working GPUs is the fault users report (device-metrics-exporter #506/#507). The boot time is
/proc/stat's ``btime``. No ``--folder``: reading never writes files on the node. Either reading unread = ERROR.
"""
from __future__ import annotations

import time

from k3doctor.api import File, ParseError, ReadingUnavailable, check, error, fail, passed, remediation, tool
from k3doctor.parsers.cper import parse_btime, parse_cper_list

FATAL_SINCE_BOOT = remediation("GPU-CPER-FATAL", "a GPU logged a fatal RAS error (CPER) since the node booted", """
amdgpu wrote a fatal CPER record for this GPU after the last boot (§31.3): an uncorrectable error took the GPU
down or reset it while the node was up. Keep the GPU out of the launch, dump the records for the vendor
(`sudo amd-smi ras --cper --severity fatal --folder <dir>`: the `.cper` files and their AFIDs), read the kernel
log (`k3doctor check --only kernel-health`) and `amd-smi bad-pages`, then cold-reboot; a record that comes back
after the reboot means the board needs service.
""")


def _reads(settings) -> dict:
    return {"cper": tool(settings.tools["amd_smi"], "ras", "--cper", "--severity", "fatal",
                         container=settings.container), "stat": File("/proc/stat")}


def _utc(epoch_s: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch_s))


@check("gpu-cper-fatal", title="no fatal CPER record since the node booted (amd-smi ras --cper, §31.3)",
       scope="node", reads=_reads, remediation=FATAL_SINCE_BOOT, needs=("amdgpu-driver",))
def gpu_cper_fatal(r, ctx):
    """§31.3: a fatal record at or after boot = FAIL on its GPU; older = INFO in the PASS line; unread = ERROR."""
    try:
        records = [c for c in parse_cper_list(r["cper"].output("`amd-smi ras --cper --severity fatal`"))
                   if c.severity == "FATAL"]
        boot = parse_btime(r["stat"].text())
    except (ReadingUnavailable, ParseError) as exc:
        return error(f"fatal CPER records not judged: {exc}")
    newer: dict = {}
    for record in records:
        if record.epoch_s >= boot:
            newer.setdefault(record.gpu, []).append(record.epoch_s)
    verdicts = [fail(f"GPU {gpu}: {len(stamps)} fatal CPER record(s) since the boot at {_utc(boot)}, the last at "
                     f"{_utc(max(stamps))} (§31.3)", gpu=gpu,
                     evidence={"amd-smi GPU": gpu, "records": len(stamps), "last": _utc(max(stamps)),
                               "boot": _utc(boot)})
                for gpu, stamps in sorted(newer.items())]
    older = sorted({c.gpu for c in records if c.epoch_s < boot})
    note = (f"; INFO: {sum(c.epoch_s < boot for c in records)} fatal CPER record(s) older than the boot on GPU "
            f"{', '.join(map(str, older))} (history, or amdgpu >= 30.30.1's false AFID 19 record)" if older else "")
    return verdicts or passed(f"no fatal CPER record since the boot at {_utc(boot)}{note}")
