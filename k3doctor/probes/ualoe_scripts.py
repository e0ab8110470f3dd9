"""The node-side shell snippets of the ualoe-fabric probe: process and socket listings, kills by PID (§8).

Every value that reaches a shell is quoted (k3doctor.shell); the listings' output is parsed by
:mod:`k3doctor.parsers.ubench`.
"""
from __future__ import annotations

from k3doctor.shell import quote

# Candidates are pre-selected with a cheap substring grep (a superset); the decision below is
# the exact basename of argv[0], never a substring of the whole command line (§8 pitfall 2).
PROCS_SCRIPT = r"""
echo "self $$ $(readlink /proc/$$/ns/mnt)"
p=$$
while [ "$p" -gt 1 ] 2>/dev/null; do
  s=$(cat /proc/$p/stat 2>/dev/null) || break
  echo "anc $p"; s=${s##*) }; set -- $s; p=$2
done
for f in $(grep -l -a -e ualoe_bw.exe -e ualoe_p2p.exe /proc/[0-9]*/cmdline 2>/dev/null); do
  d=${f%/cmdline}; s=$(cat $d/stat 2>/dev/null) || continue
  s=${s##*) }; set -- $s
  printf 'proc %s %s %s ' "${d#/proc/}" "$2" "$(readlink $d/ns/mnt 2>/dev/null)"
  tr '\0\n' '\037 ' < $f 2>/dev/null; echo
done
"""


LISTEN_SCRIPT = ('pid=$(cat {pidfile} 2>/dev/null) && [ -d /proc/"$pid" ] && echo "alive $pid" '
                 '&& ls -l /proc/"$pid"/fd 2>/dev/null; cat /proc/net/tcp /proc/net/tcp6 2>/dev/null')
# Kill by PID, and only while that PID still runs one of the ubench tools (no PID-reuse accidents).
KILL_FN = r"""
k() {
  a0=$(tr '\0' '\n' < /proc/"$1"/cmdline 2>/dev/null | head -n 1)
  case "${a0##*/}" in ualoe_p2p.exe|ualoe_bw.exe) ;; *) return;; esac
  kill -TERM "$1" 2>/dev/null; i=0
  while [ -d /proc/"$1" ] && [ $i -lt 10 ]; do sleep 0.1; i=$((i+1)); done
  kill -KILL "$1" 2>/dev/null; echo "killed $1"
}
"""


def kill_recorded(pidfiles) -> str:
    words = " ".join(quote(f) for f in pidfiles)
    return KILL_FN + (f'for f in {words}; do pid=$(cat "$f" 2>/dev/null); rm -f "$f"; '
                      '[ -n "$pid" ] && k "$pid"; done; true')


def kill_pids(pids) -> str:
    return KILL_FN + f'for p in {" ".join(str(int(p)) for p in pids)}; do k "$p"; done; true'


ACCEL_SCRIPT = ('for f in /sys/class/drm/card*/device/ualink/accel_id; do '
                '[ -e "$f" ] && printf "%s %s\\n" "$f" "$(cat "$f" 2>/dev/null)"; done; true')
