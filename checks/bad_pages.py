"""Retired HBM pages per GPU (reference §29, §30, §31.3, §28).

MI300/MI350-class GPUs raise no out-of-band CPER when retired pages pass the bad-page threshold (ROCm/TheRock
#7882), and RDC's health check never evaluates memory (rocm-systems #11468): only the in-band page list shows a
degrading board before the driver logs ``Saved bad pages N reaches threshold value M`` (kernel-health's rule).
AMD's own node agent (Primus-SaFE ``gpu_bad_pages_003.sh``) fails a node on any listed page address; here a GPU
with retired (R), pending (P) or unreservable (F) pages is a WARN naming the counts, and a list that could not be
read is an ERROR (never "no bad pages" from what was not read).

The list is the driver's own ``ras/gpu_vram_bad_pages`` per card (§31.3); `amd-smi bad-pages` is the same file
re-read through rocm_smi (``kDevMemPageBadFName``), so the two are one fact: sysfs is judged where the driver
exposes the file (by card number, no tool call that can hang), amd-smi only where no card has it, and a GPU is
never named from both (amd-smi's GPU index is not the card number). The driver creates the file only when
``bad_page_threshold`` is not 0 (amdgpu_ras.c). That parameter is said (INFO) when it is not the default: per
mainline amdgpu_drv.c ``MODULE_PARM_DESC(bad_page_threshold, "Bad page threshold(-1 = auto(default value), 0 =
disable bad page retirement, -2 = ignore bad page threshold)")`` and a positive value is a user threshold; an
amd-gfx series proposed swapping -1 and -2, so the INFO quotes the value with mainline's meaning, nothing more.
The amd-smi output is bounded by the gatherer's cap (#7888).
"""
from __future__ import annotations

from k3doctor.api import File, Glob, ParseError, ReadingUnavailable, check, error, passed, remediation, tool, warn
from k3doctor.views.gpu import DRM, VENDOR_GLOB, amd_cards, card_of
from k3doctor.parsers.amdsmi import BAD_PAGE_KINDS, parse_bad_pages
from k3doctor.parsers.gpu_sysfs import parse_bad_page_threshold, parse_vram_bad_pages

CHECK = "gpu-bad-pages"
SYSFS_LIST = f"{DRM}/ras/gpu_vram_bad_pages"
THRESHOLD = "/sys/module/amdgpu/parameters/bad_page_threshold"
THRESHOLD_MEANS = {-1: "auto, the default", 0: "bad page retirement disabled", -2: "the threshold ignored"}

BAD_PAGES = remediation("GPU-BAD-PAGES", "a GPU has retired (bad) HBM pages", """
`amd-smi bad-pages` lists HBM pages the driver retired after uncorrectable (or repeated correctable) errors:
RETIRED (reserved, no longer used), PENDING (retired at the next reset) and UN_RES (could not be reserved).
A few retired pages keep the GPU usable, but they mark a degrading board: compare with the last run (new
pages since then = the board is getting worse), watch the kernel log for `Saved bad pages N reaches threshold
value M` (kernel-health fails the GPU there), and open the board's RMA process before the threshold is reached
(§28, §29, §30). PENDING pages are retired only by a GPU reset: plan one (§11) before a long run.
""")


def _reads(settings) -> dict:
    return {"pages": tool(settings.tools["amd_smi"], "bad-pages", "--json", container=settings.container),
            "vendors": Glob(VENDOR_GLOB), "sysfs": Glob(SYSFS_LIST), "threshold": File(THRESHOLD)}


def _sysfs_lists(r) -> tuple:
    """({card: counts or None (unread)}, [unread notes]) of the AMD cards' own lists; ({}, []) when no card has one."""
    lists = {card_of(path): reading for path, reading in r["sysfs"].items() if reading.exists}
    cards = amd_cards(r["vendors"])
    if not lists.keys() & set(cards):
        return {}, []
    counts, unread = {}, []
    for card in cards:
        try:
            if card not in lists:
                raise ReadingUnavailable("no ras/gpu_vram_bad_pages while its peers have one")
            counts[card] = parse_vram_bad_pages(lists[card].text())
        except (ReadingUnavailable, ParseError) as exc:
            counts[card] = None
            unread.append(f"card{card}: {exc}")
    return counts, unread


def _threshold_note(r) -> str:
    """'' for the default (-1) or no parameter; the INFO sentence for an override (mainline's meaning)."""
    try:
        value = parse_bad_page_threshold(r["threshold"].text()) if r["threshold"].exists else -1
    except (ReadingUnavailable, ParseError) as exc:
        return f"; bad_page_threshold not read ({exc})"
    if value == -1:
        return ""
    return (f"; INFO: amdgpu bad_page_threshold={value} ({THRESHOLD_MEANS.get(value, 'a user-set page count')}; "
            "default -1 = auto, §31.3)")


@check(CHECK, title="no retired, pending or unreservable HBM pages (ras/gpu_vram_bad_pages or amd-smi bad-pages)",
       scope="node", reads=_reads, remediation=BAD_PAGES, needs=("amdgpu-driver",))
def gpu_bad_pages(r, ctx):
    """§29/§30/§31.3: the page list per card (sysfs, else amd-smi); listed pages = WARN; unread = ERROR."""
    pages, unread = _sysfs_lists(r)
    source, name = "ras/gpu_vram_bad_pages", "card{}"
    if not pages:
        source, name = "amd-smi bad-pages", "GPU {}"
        try:
            pages = parse_bad_pages(r["pages"].output("`amd-smi bad-pages --json`"))
        except (ReadingUnavailable, ParseError) as exc:
            return error(f"bad pages not read: {exc}")
    verdicts, note = [], _threshold_note(r)
    for gpu, counts in sorted(pages.items()):
        if counts is None:
            continue
        if any(n is None for n in counts.values()):
            unread.append(f"{name.format(gpu)} (N/A)")
        listed = {kind: n for kind, n in counts.items() if n}
        if listed:
            said = ", ".join(f"{n} {kind.replace('_', '-')}" for kind, n in listed.items())
            verdicts.append(warn(f"{said} HBM page(s) listed by {source}: a degrading board (§29, §30, §31.3)"
                                 + note,
                                 gpu=gpu, remediation=BAD_PAGES, evidence={"source": source, "gpu": gpu, **listed}))
    if unread:
        verdicts.append(error(f"the bad pages of {', '.join(unread)} could not be read: not judged",
                              evidence={"unknown": unread}))
    if verdicts:
        return verdicts
    return passed(f"no bad pages on {len(pages)} GPU(s) ({'/'.join(BAD_PAGE_KINDS)} all empty, {source})" + note)
