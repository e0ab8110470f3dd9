"""aiter JIT build locks ("batons") left in the engine's container (reference §29; issue 21 item 2).

aiter serialises its JIT builds with lock files: ``<jit_dir>/build/lock_<module>`` (``jit/core.py``
``mp_lock``), ``<module>/build/lock`` (``jit/utils/cpp_extension.py``) and ninja's ``.ninja_lock``;
``<jit_dir>`` is ``$AITER_JIT_DIR``, else the package's own writable ``aiter/jit``, else
``~/.aiter/jit``.  A server killed mid-build leaves its lock behind and the next start waits on it for
ever (``waiting for baton release at <path>``, silent at WARNING).  aiter breaks a stale lock itself
only since aiter #4153 (2026-07-09), and never another host's.  So, in the container: a lock whose
holder is dead (or on another host) with no compiler running is a stale lock - BLOCK before #4153
(or when aiter's version is unknown), a note after it (aiter will break it), always BLOCK for another
host's lock; a lock with a live holder or a compiler running is a build in progress (INFO).

PyTorch's C++/HIP extension builds (``torch.utils.cpp_extension.load``, as vLLM's EP kernels use) take the same
kind of baton: ``<build root>/<py..._rocm...>/<name>/lock`` under ``$TORCH_EXTENSIONS_DIR``, else
``${XDG_CACHE_HOME:-~/.cache}/torch_extensions``. torch's ``FileBaton`` writes no holder into it and never breaks
a stale one, whatever the version, so such a lock with no compiler running is always a BLOCK: the ~8 h vLLM EP
startup deadlock of reference §31.3 (InferenceX #1964).
"""
from __future__ import annotations

from dataclasses import dataclass

from k3doctor.api import Param, ParseError, check, fail, in_container, passed, remediation
from k3doctor.views.env_rules import edges_from, edges_problem
from k3doctor.views.versions import parse_probe, probe, side

CHECK = "aiter-jit-locks"
EDGE = "aiter-4153"  # k3doctor.views.env_rules.EDGES: where aiter started breaking stale locks itself
COMPILERS = ("hipcc", "clang", "clang++", "ninja", "cc1plus", "ld.lld")
MAX_LOCKS = 200

STALE = remediation("AITER-STALE-LOCK", "a stale aiter JIT lock blocks the next start", """
A JIT build lock whose holder is gone makes every rank that needs that module wait for ever at start
(`[pid=... pname=...] waiting for baton release at <path>`, only visible at AITER_LOG_LEVEL INFO; py-spy
shows the ranks in `FileBaton.wait` / `mp_lock`). Nothing is compiling, so nothing will release it:
with the engine stopped, delete the lock file named in the finding (`rm <path>` inside the container),
then start again. aiter breaks stale locks itself only since #4153, and never a lock taken on another
host (a shared JIT directory): those always need the delete (§29).
""")

TORCH_STALE = remediation("TORCH-STALE-LOCK", "a stale torch_extensions build lock blocks the next start", """
A PyTorch extension build lock (`<torch_extensions>/<py..._rocm...>/<name>/lock`) with nothing compiling: every
rank that loads that extension waits on it for ever (`FileBaton.wait`; seen as a ~8 h startup deadlock of vLLM
EP, §31.3). torch never breaks it and records no holder. With the engine stopped, delete the lock file named in
the finding (`rm <path>` inside the container) and start again; keep TORCH_EXTENSIONS_DIR per container, not
on a shared file system.
""")

# First "@host <hostname>" and "@torch <dir>" (the torch_extensions build root: locks below it are torch's); each
# lock: "@lock <age_s>\t<holder pid or ->\t<holder alive 1|0>\t<holder host or ->\t<path>"; each running
# compiler: "@compiler <pid> <comm>". Content of a lock never leaves the node
# beyond the pid and host it names.
_LIST = r"""echo "@host $(hostname 2>/dev/null || cat /etc/hostname 2>/dev/null)"
torch=${TORCH_EXTENSIONS_DIR:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/torch_extensions}
echo "@torch $torch"
py=$(command -v python3 || command -v python)
pkg=$([ -n "$py" ] && "$py" -c 'import importlib.util as u, os
s = u.find_spec("aiter")
print(os.path.join(os.path.dirname(s.origin), "jit") if s and s.origin else "")' 2>/dev/null)
now=$(date +%s)
for d in "${AITER_JIT_DIR:-}" "$pkg" "${HOME:-/root}/.aiter/jit" "$torch"; do
  [ -n "$d" ] && [ -d "$d" ] || continue
  find "$d" -maxdepth 4 -type f \( -name 'lock_*' -o -name lock -o -name .ninja_lock \) 2>/dev/null
done | sort -u | head -n 200 | while IFS= read -r f; do
  body=$(head -c 200 "$f" 2>/dev/null | tr -c 'A-Za-z0-9:._-' ' ')
  pid= host=
  for w in $body; do
    case $w in
      pid|host|lock) ;;
      *[!0-9]*) case $w in *[A-Za-z]*) [ -n "$host" ] || host=${w%%:*}
                  t=${w##*:}; case $t in ''|*[!0-9]*) ;; *) [ -n "$pid" ] || pid=$t ;; esac ;; esac ;;
      *) [ -n "$pid" ] || pid=$w ;;
    esac
  done
  alive=0; [ -n "$pid" ] && [ -d "/proc/$pid" ] && alive=1
  printf '@lock %s\t%s\t%s\t%s\t%s\n' "$((now - $(stat -c %Y "$f")))" "${pid:--}" "$alive" "${host:--}" "$f"
done
for p in /proc/[0-9]*; do
  read -r c 2>/dev/null < "$p/comm" || continue
  case $c in hipcc|clang|clang++|ninja|cc1plus|ld.lld) echo "@compiler ${p#/proc/} $c" ;; esac
done
exit 0"""


@dataclass(frozen=True)
class Lock:
    path: str
    age_s: int
    holder: int | None
    holder_alive: bool
    holder_host: str | None


def parse_listing(text: str) -> tuple:
    """(hostname, [Lock], [(pid, compiler)], torch_extensions dir) from the listing; any other line is a ParseError."""
    host, locks, compilers, torch = None, [], [], None
    for line in text.splitlines():
        if line.startswith("@host "):
            host = line[6:].strip() or None
        elif line.startswith("@torch "):
            torch = line[7:].strip().rstrip("/") or None
        elif line.startswith("@lock "):
            fields = line[6:].split("\t")
            if len(fields) != 5 or not fields[0].lstrip("-").isdigit():
                raise ParseError(f"aiter lock listing: bad line {line[:100]!r}")
            age, pid, alive, holder_host, path = fields
            locks.append(Lock(path, int(age), int(pid) if pid.isdigit() else None, alive == "1",
                              None if holder_host == "-" else holder_host))
        elif line.startswith("@compiler "):
            pid, _, comm = line[10:].partition(" ")
            compilers.append((pid, comm))
        elif line.strip():
            raise ParseError(f"aiter lock listing: unexpected line {line[:100]!r}")
    if len(locks) >= MAX_LOCKS:
        raise ParseError(f"aiter lock listing: {len(locks)} locks or more (cut at {MAX_LOCKS}): not all read")
    return host, locks, compilers, torch


def _reads(settings) -> dict:
    return {"locks": in_container(settings.container, "sh", "-c", _LIST), "versions": probe(settings.container)}


@check(CHECK, title="no stale aiter JIT or torch_extensions build lock in the engine's container (§29, §31.3)",
       scope="node", reads=_reads, remediation=(STALE, TORCH_STALE),
       params={"version_edges": Param({}, validate=edges_problem)})
def aiter_jit_locks(r, ctx):
    """§29: a lock with no live holder and no compiler running blocks the next start (strict unless aiter is known
    to break it, #4153); a lock with a live holder or a running compiler is a build in progress."""
    host, locks, compilers, torch = parse_listing(r["locks"].output("the aiter lock listing"))
    if not locks:
        return passed("no aiter JIT or torch_extensions lock in the container")
    edge = edges_from(ctx.param("version_edges"))[EDGE]
    where, why = side(edge, parse_probe(r["versions"].output("the version probe"), None))
    out, building = [], []
    for lock in locks:
        foreign = lock.holder_host is not None and host is not None and lock.holder_host != host
        if (lock.holder_alive and not foreign) or (compilers and not foreign):
            building.append(lock.path)
            continue
        if torch and lock.path.startswith(torch + "/"):
            out.append(fail(f"stale torch_extensions build lock {lock.path} (no holder recorded, no compiler running, "
                            f"{lock.age_s}s old): torch never breaks it, the next start waits on it for ever - delete "
                            "it (§31.3)", remediation=TORCH_STALE,
                            evidence={"path": lock.path, "age_s": lock.age_s, "compilers": 0}))
            continue
        holder = (f"holder pid {lock.holder} on {lock.holder_host}" if foreign else
                  f"holder pid {lock.holder} is gone" if lock.holder is not None else "no holder recorded")
        ev = {"path": lock.path, "age_s": lock.age_s, "holder": lock.holder, "holder_host": lock.holder_host,
              "compilers": len(compilers), "aiter": why}
        if foreign or where != "since":
            reason = ("another host's lock: aiter never breaks it" if foreign else why)
            out.append(fail(f"stale aiter JIT lock {lock.path} ({holder}, no compiler running, {lock.age_s}s old): "
                            f"the next start waits on it for ever - delete it ({reason}; §29)", remediation=STALE,
                            evidence=ev))
        else:
            building.append(f"{lock.path} (stale, aiter breaks it itself: {why})")
    if out:
        return out
    return passed(f"JIT build lock(s) with a build in progress or broken by aiter itself: {', '.join(building)} "
                  f"({len(compilers)} compiler process(es) running)", evidence={"locks": building})
