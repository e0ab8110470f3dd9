"""Retired HBM pages read in-band with ``amd-smi bad-pages`` (reference §29, §30, §28).

MI300/MI350-class GPUs raise no out-of-band CPER when retired pages pass the bad-page threshold (ROCm/TheRock
#7882), and RDC's health check never evaluates memory (rocm-systems #11468): only the in-band page list shows a
degrading board before the driver logs ``Saved bad pages N reaches threshold value M`` (kernel-health's rule).
AMD's own node agent (Primus-SaFE ``gpu_bad_pages_003.sh``) fails a node on any listed page address; here a GPU
with retired, pending or unreservable pages is a WARN naming the counts, and a listing that could not be read is
an ERROR (never "no bad pages" from what was not read). The output is bounded by the gatherer's cap (#7888).
"""
from __future__ import annotations

from k3doctor.api import ParseError, ReadingUnavailable, check, error, passed, remediation, tool, warn
from k3doctor.parsers.amdsmi import BAD_PAGE_KINDS, parse_bad_pages

CHECK = "gpu-bad-pages"

BAD_PAGES = remediation("GPU-BAD-PAGES", "a GPU has retired (bad) HBM pages", """
`amd-smi bad-pages` lists HBM pages the driver retired after uncorrectable (or repeated correctable) errors:
RETIRED (reserved, no longer used), PENDING (retired at the next reset) and UN_RES (could not be reserved).
A few retired pages keep the GPU usable, but they mark a degrading board: compare with the last run (new
pages since then = the board is getting worse), watch the kernel log for `Saved bad pages N reaches threshold
value M` (kernel-health fails the GPU there), and open the board's RMA process before the threshold is reached
(§28, §29, §30). PENDING pages are retired only by a GPU reset: plan one (§11) before a long run.
""")


def _reads(settings) -> dict:
    return {"pages": tool(settings.tools["amd_smi"], "bad-pages", "--json", container=settings.container)}


@check(CHECK, title="no retired, pending or unreservable HBM pages (amd-smi bad-pages, in-band)", scope="node",
       reads=_reads, remediation=BAD_PAGES, needs=("amdgpu-driver",))
def gpu_bad_pages(r, ctx):
    """§29/§30: the in-band page list is the only early sign on MI300/MI350-class boards; unread = ERROR."""
    try:
        pages = parse_bad_pages(r["pages"].output("`amd-smi bad-pages --json`"))
    except (ReadingUnavailable, ParseError) as exc:
        return error(f"bad pages not read: {exc}")
    verdicts, unknown = [], []
    for gpu, counts in sorted(pages.items()):
        if any(n is None for n in counts.values()):
            unknown.append(f"GPU {gpu}")
        listed = {kind: n for kind, n in counts.items() if n}
        if listed:
            said = ", ".join(f"{n} {kind.replace('_', '-')}" for kind, n in listed.items())
            verdicts.append(warn(f"{said} HBM page(s) listed by amd-smi bad-pages: a degrading board (§29, §30)",
                                 gpu=gpu, remediation=BAD_PAGES, evidence={"amd-smi GPU": gpu, **listed}))
    if unknown:
        verdicts.append(error(f"amd-smi could not read the bad pages of {', '.join(unknown)} (N/A): not judged",
                              evidence={"unknown": unknown}))
    if verdicts:
        return verdicts
    return passed(f"no bad pages on {len(pages)} GPU(s) ({'/'.join(BAD_PAGE_KINDS)} all empty, amd-smi bad-pages)")
