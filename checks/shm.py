"""/dev/shm stale segments (reference §15): a crashed run's psm_*/nccl-* segments wedge the
next rendezvous. With --fix, exactly the listed segments are removed, never by glob."""
from __future__ import annotations

import re

from k3doctor.checks.rack import KFD_PROC_GLOB

from k3doctor.readings import Command, Glob
from k3doctor.registry import check, remediation
from k3doctor.results import error, fail, passed, skip
from k3doctor.shell import join

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


def stale_entries(listing: str) -> list:
    """(name, size) of each stale segment from ``find -printf '%f\\t%s\\0'``; others ignored."""
    out = []
    for record in listing.split("\0"):
        name, _, size = record.partition("\t")
        if name and STALE.match(name):
            out.append((name, int(size) if size.isdigit() else None))
    return sorted(out)


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
        out.append(passed(f"--fix removed {', '.join(paths)}", evidence={"removed": paths}))
    return out


@check("shm-clean", title="no stale psm_*/nccl-* segments in /dev/shm", scope="node", remediation=SHM_STALE,
       reads={"shm": Command(("find", SHM, "-mindepth", "1", "-maxdepth", "1", "(", "-name", "psm_*", "-o",
                                  "-name", "nccl-*", ")", "-printf", "%f\\t%s\\0")),
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
    return fail(f"{len(names)} stale segment(s) in {SHM}: {', '.join(names)}{note}",
                evidence={"names": names, "sizes": dict(entries), "gpu_processes": busy})
