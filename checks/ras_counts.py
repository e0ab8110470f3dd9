"""amdgpu's RAS error counters per GPU and block (reference §31.3, §31.2 signal 3): ``ras/<block>_err_count``
with ``ue`` above 0 is an uncorrectable error of that block (umc = HBM): service the GPU. Correctable errors
(``ce``) are corrected, but a count that rose since the recorded baseline (``k3doctor baseline record``) marks
a degrading board. A counter read as `Query currently inaccessible` (during a RAS interrupt) or garbled is an
ERROR for that GPU; a driver that exposes no counters at all (RAS off or unsupported) is said so (SKIP), not
passed. The kernel-log side of the same errors is kernel-health's (`KERNEL-RAS-*`)."""
from __future__ import annotations

from k3doctor.api import Glob, ParseError, ReadingUnavailable, check, error, fail, passed, remediation, skip, warn
from k3doctor.views.gpu import DRM, card_file
from k3doctor.parsers.gpu_sysfs import parse_err_count

COUNTS_GLOB = f"{DRM}/ras/*_err_count"

UNCORRECTABLE = remediation("GPU-RAS-UE-COUNT", "a GPU counts uncorrectable RAS errors", """
`ras/<block>_err_count` reads `ue: N` with N > 0: the driver counted uncorrectable errors in that block since it
loaded (umc: HBM; §31.3). Keep the GPU out of long runs, read the kernel log (`k3doctor check --only
kernel-health`) and `amd-smi bad-pages`, and open the board's service process; a cold reboot resets the count
but not the fault.
""")
CE_RISING = remediation("GPU-RAS-CE-RISING", "a GPU's correctable RAS errors rose since the baseline", """
Correctable errors are fixed by ECC, but a count that keeps rising between runs is a board degrading (§31.3):
compare the block named with the next runs, watch `amd-smi bad-pages` for retired pages and plan the board's
service before it turns uncorrectable. Record a new baseline after a service or a driver reload (the counts
restart at 0).
""")


def _counts(r) -> tuple:
    """({"cardN/block": {"ue", "ce"}}, [ERROR verdicts]) of every readable counter."""
    counts, errors = {}, []
    for path, reading in sorted(r["counts"].items()):
        located = card_file(path)
        if located is None:
            continue
        card, name = located
        key = f"card{card}/{name.rsplit('/', 1)[-1].removesuffix('_err_count')}"
        try:
            counts[key] = parse_err_count(reading.text())
        except (ReadingUnavailable, ParseError) as exc:
            errors.append(error(f"{key} RAS counter not read: {exc}", gpu=card))
    return counts, errors


def record(r, ctx) -> dict:
    """Baseline entry: each counter's correctable count, to compare a later run with."""
    return {"ce": {key: c["ce"] for key, c in _counts(r)[0].items()}}


@check("gpu-ras-counts", title="no uncorrectable RAS error counted, correctable ones not rising (§31.3)",
       scope="node", remediation=(UNCORRECTABLE, CE_RISING), needs=("amdgpu-driver",), record=record,
       reads={"counts": Glob(COUNTS_GLOB)})
def gpu_ras_counts(r, ctx):
    """§31.3: ue > 0 = FAIL per GPU and block; ce above the baseline's = WARN; unread = ERROR."""
    counts, verdicts = _counts(r)
    if not counts and not verdicts:
        return skip("no ras/*_err_count in sysfs: this driver exposes no RAS counters (RAS off or unsupported)")
    before = ((ctx.baseline or {}).get("ce") or {}) if isinstance(ctx.baseline, dict) else {}
    for key, c in counts.items():
        card = int(key[4:].split("/", 1)[0])
        if c["ue"]:
            verdicts.append(fail(f"{key.replace('/', ' ')}: {c['ue']} uncorrectable RAS error(s) counted since the "
                                 "driver loaded (§31.3)", gpu=card, remediation=UNCORRECTABLE,
                                 evidence={"counter": key, **c}))
        elif isinstance(before.get(key), int) and c["ce"] > before[key]:
            verdicts.append(warn(f"{key.replace('/', ' ')}: correctable RAS errors rose from {before[key]} (baseline) "
                                 f"to {c['ce']} (§31.3)", gpu=card, remediation=CE_RISING,
                                 evidence={"counter": key, "baseline_ce": before[key], **c}))
    return verdicts or passed(f"no uncorrectable RAS error in {len(counts)} counter(s)"
                              + (", correctable counts not above the baseline" if before else ""))
