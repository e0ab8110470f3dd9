"""Compute and memory partitions of every GPU (reference §31.3, §31.4).

A partition change (`amd-smi set --compute-partition` / `--memory-partition`) that was only half applied leaves
some GPUs in CPX while others read ``N/A`` (legacy ROCm #4439; amdsmi #100 `AMDSMI_STATUS_AMDGPU_RESTART_ERR`,
the driver could not be reloaded): the ranks then see a different number of devices per GPU and the TP group
never forms. Every GPU of the node must read the same modes, and where the platform names the layout its
engine needs (``tp_partition``: SPX + NPS1 for TP8 on MI300X/MI325X/MI355X, §31.4) that layout; a site may set
another (``expected_partition: CPX/NPS4``). ``N/A`` on every GPU is a driver without partitions (said, not
judged); output that cannot be read is an ERROR.
"""
from __future__ import annotations

from k3doctor import platforms
from k3doctor.api import Param, ParseError, ReadingUnavailable, check, error, fail, passed, remediation, tool
from k3doctor.parsers.amdsmi import COMPUTE_PARTITIONS, MEMORY_PARTITIONS, parse_partitions

PARTITION = remediation("GPU-PARTITION", "GPU partitions differ between GPUs or from what the engine needs", """
The GPUs of a node are not all in the compute/memory partition the launch expects (§31.3): a half-applied
`amd-smi set --compute-partition` / `--memory-partition` (legacy ROCm #4439; `AMDSMI_STATUS_AMDGPU_RESTART_ERR`,
amdsmi #100, when the driver could not be reloaded) leaves some GPUs in the new mode and others `N/A` or in the
old one. Stop every GPU process, set both modes on all GPUs (`amd-smi set -C SPX` and `amd-smi set -M NPS1` for
TP8, §31.4), reload amdgpu or reboot, and check `amd-smi static --partition` again.
""")


def _layout(text) -> str | None:
    """Problem of an ``expected_partition`` setting (``SPX/NPS1``), said when the inventory is read."""
    parts = str(text).upper().split("/") if text is not None else []
    if text is None or (len(parts) == 2 and parts[0] in COMPUTE_PARTITIONS and parts[1] in MEMORY_PARTITIONS):
        return None
    return f"<compute>/<memory>, one of {'/'.join(COMPUTE_PARTITIONS)} and one of {'/'.join(MEMORY_PARTITIONS)}"


def _reads(settings) -> dict:
    return {"partitions": tool(settings.tools["amd_smi"], "static", "--partition", "--json",
                               container=settings.container)}


def _said(modes) -> str:
    return "/".join(m or "N/A" for m in modes)


@check("gpu-partitions", title="every GPU in the same compute/memory partition, the one the engine needs (§31.3)",
       scope="node", reads=_reads, remediation=PARTITION, needs=("amdgpu-driver",),
       params={"expected_partition": Param(None, validate=lambda value, nodes: _layout(value))})
def gpu_partitions(r, ctx):
    """§31.3/§31.4: modes differing between GPUs = FAIL naming the odd GPUs; all alike but not the layout the
    platform (or site) expects = FAIL; all N/A = no partitions (PASS, said); unread = ERROR."""
    try:
        gpus = parse_partitions(r["partitions"].output("`amd-smi static --partition --json`"))
    except (ReadingUnavailable, ParseError) as exc:
        return error(f"partitions not read: {exc}")
    setting = ctx.param("expected_partition")
    want = tuple(setting.upper().split("/")) if setting else platforms.get(ctx.settings.platform).tp_partition
    layouts: dict = {}
    for gpu, modes in sorted(gpus.items()):
        layouts.setdefault(modes, []).append(gpu)
    if len(layouts) > 1:
        common = max(layouts, key=lambda m: (len(layouts[m]), m == want))
        return [fail(f"GPU {gpu} reads {_said(modes)} while {len(layouts[common])} GPU(s) read {_said(common)}: "
                     "a half-applied partition change (§31.3)", gpu=gpu, evidence={"gpu": gpu, "partition":
                     _said(modes), "others": _said(common)})
                for modes, odd in layouts.items() if modes != common for gpu in odd]
    [(modes, _)] = layouts.items()
    if modes == (None, None):
        return passed(f"no compute/memory partitions on {len(gpus)} GPU(s) (amd-smi reads N/A on every GPU)")
    if want and modes != want:
        return fail(f"every GPU reads {_said(modes)} but the engine needs {_said(want)} (§31.4)",
                    evidence={"partition": _said(modes), "expected": _said(want)})
    return passed(f"all {len(gpus)} GPU(s) in {_said(modes)}" + (" as the engine needs" if want else ""))
