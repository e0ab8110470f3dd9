"""/dev/shm stale segments (reference §15): a crashed run's psm_*/nccl-* segments wedge the
next rendezvous. With --fix, exactly the listed segments are removed, never by glob."""
from __future__ import annotations

import re

from k3doctor.api import Command, Glob, ParseError, check, error, fail, join, passed, remediation, skip
from k3doctor.views.gpu import KFD_PROC_GLOB

SHM = "/dev/shm"
STALE = re.compile(r"^(psm_|nccl-)[^/\0]*$")
FIX_TIMEOUT_S = 30.0

SHM_STALE = remediation("SHM-STALE", "stale psm_*/nccl-* segments in /dev/shm", """
Shared-memory segments left by a crashed run wedge the next rendezvous (§15). The
container runs with --ipc=host, so they live in the host's /dev/shm. With no engine
running (§3: no GPU processes), remove them: `rm -f /dev/shm/psm_* /dev/shm/nccl-*`, or
`k3doctor check --only shm-clean --fix`, which removes exactly the names it listed, by full
path. While an engine runs they are live: stop it first.
""")


# size first, then the name up to the NUL: a name may hold TABs and newlines, never a NUL or '/'
LISTING_FORMAT = "%s\\t%f\\0"
_RECORD = re.compile(r"([0-9]{1,20})\t([^/\0]+)")


def stale_entries(listing: str) -> list:
    """(name, size) of each stale segment from ``find -printf '%s\\t%f\\0'``; other names ignored.

    The size comes first because it cannot hold a TAB: with the name first, ``psm_a<TAB>b``
    read as ``psm_a`` and --fix would remove a different file.  Every record ends with a NUL,
    so a listing that does not end with one was cut inside a name: ParseError, since a cut
    name is also a different file.
    """
    if listing and not listing.endswith("\0"):
        raise ParseError(f"find {SHM}: listing does not end with a NUL: cut off inside a name")
    out = []
    for record in listing.split("\0")[:-1]:
        match = _RECORD.fullmatch(record)
        if not match:
            raise ParseError(f"find {SHM}: unexpected record {record[:80]!r} (want size<TAB>name)")
        size, name = match.groups()
        if STALE.fullmatch(name):
            out.append((name, int(size)))
    return sorted(out)


def shown(name: str) -> str:
    """A segment name for a message: as is, or escaped when it holds TABs, newlines or other controls."""
    return name if name.isprintable() else repr(name)


def remove_stale(transport, verdicts, ctx) -> list:
    """Remove exactly the names the FAIL listed, by quoted full path; refuse anything else."""
    out = []
    for v in verdicts:
        names = v.evidence.get("names") if v.evidence else None
        if not names:
            continue
        if v.evidence.get("gpu_processes"):
            out.append(skip(f"not removing {', '.join(names)}: GPU processes are running (segments may be live)"))
            continue
        refused = [n for n in names if not isinstance(n, str) or not STALE.match(n)]
        if refused:
            out.append(error(f"refusing to remove {refused!r}: not a psm_*/nccl-* name directly in {SHM}"))
            continue
        paths = [f"{SHM}/{n}" for n in names]
        result = transport.run(join(["rm", "-f", "--", *paths]), timeout_s=FIX_TIMEOUT_S)
        if not result.ok:
            out.append(error(f"rm failed (rc {result.rc}): {(result.stderr or result.stdout).strip()[:300]}",
                             evidence={"removing": paths}))
            continue
        out.append(passed(f"--fix removed {', '.join(map(shown, paths))}", evidence={"removed": paths}))
    return out


@check("shm-clean", title="no stale psm_*/nccl-* segments in /dev/shm", scope="node", remediation=SHM_STALE,
       reads={"shm": Command(("find", SHM, "-mindepth", "1", "-maxdepth", "1", "(", "-name", "psm_*", "-o",
                                  "-name", "nccl-*", ")", "-printf", LISTING_FORMAT)),
              "kfd": Glob(KFD_PROC_GLOB)},
       fixer=remove_stale)
def shm_clean(r, ctx):
    """§15: block until removed; say whether --fix may remove them (not while GPU processes run)."""
    entries = stale_entries(r["shm"].output())
    if not entries:
        return passed(f"no psm_*/nccl-* entries in {SHM}")
    busy = sorted(r["kfd"])
    names = [name for name, _ in entries]
    note = (f"; {len(busy)} GPU process(es) running, so they may be live: --fix will not touch them"
            if busy else "; no GPU process is running, `--fix` removes exactly these")
    return fail(f"{len(names)} stale segment(s) in {SHM}: {', '.join(map(shown, names))}{note}",
                evidence={"names": names, "sizes": dict(entries), "gpu_processes": busy})
