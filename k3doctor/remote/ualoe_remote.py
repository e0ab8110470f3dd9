"""What the ualoe-fabric probe starts on nodes and how it is all stopped: shell snippets, PID files, kills (§8).

Every remote process records its PID in a file and is killed by that PID (never by a pattern);
every value that reaches a shell is quoted (k3doctor.shell); the listings' output is parsed by
:mod:`k3doctor.parsers.ubench`.
"""
from __future__ import annotations

import threading
import uuid

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


def pidfile_word(name: str) -> str:
    """The shell word for PID file ``name`` in the node's own temp directory (``$TMPDIR`` as the login
    sets it, else /tmp, as gather's scratch directory): a shared /tmp is not the only place it may go."""
    return '"${TMPDIR:-/tmp}"/' + quote(name)


def kill_recorded(pidfiles) -> str:
    words = " ".join(pidfile_word(f) for f in pidfiles)
    return KILL_FN + (f'for f in {words}; do pid=$(cat "$f" 2>/dev/null); rm -f "$f"; '
                      '[ -n "$pid" ] && k "$pid"; done; true')


def kill_pids(pids) -> str:
    return KILL_FN + f'for p in {" ".join(str(int(p)) for p in pids)}; do k "$p"; done; true'


ACCEL_SCRIPT = ('for f in /sys/class/drm/card*/device/ualink/accel_id; do '
                '[ -e "$f" ] && printf "%s %s\\n" "$f" "$(cat "$f" 2>/dev/null)"; done; true')
SHORT_S = 15.0  # bookkeeping commands (process tables, kills, kernel log)


class Launches:
    """Every remote process this probe started, as (node, PID file name), for the final kill."""

    def __init__(self, transports: dict):
        self.transports = transports
        self.token = uuid.uuid4().hex[:12]
        self.pidfiles: dict = {}
        self.lock = threading.Lock()
        self.closed = False

    def pidfile(self, node: str, role: str) -> str:
        """The name of a new PID file on ``node``; its shell word there is ``pidfile_word(name)``."""
        name = f"k3doctor-ualoe.{self.token}.{role}.pid"
        with self.lock:
            if self.closed:  # the probe is being torn down (Ctrl-C): start nothing more
                raise RuntimeError("probe stopped")
            self.pidfiles.setdefault(node, set()).add(name)
        return name

    def kill(self, node: str, only=None) -> None:
        with self.lock:
            files = sorted(only if only is not None else self.pidfiles.get(node, ()))
            self.pidfiles[node] = self.pidfiles.get(node, set()) - set(files)
        if files:
            try:
                self.transports[node].run(kill_recorded(files), timeout_s=SHORT_S)
            except Exception:  # noqa: BLE001 - cleanup must reach every node; the node-side timeout still applies
                pass

    def kill_all(self) -> None:
        with self.lock:
            self.closed = True
        for node in list(self.pidfiles):
            self.kill(node)


class Background:
    """A blocking transport command run in a daemon thread (the exporter/listener side)."""

    def __init__(self, transport, command: str, timeout_s: float):
        self.reading, self.exc = None, None
        self.thread = threading.Thread(target=self._run, args=(transport, command, timeout_s), daemon=True)
        self.thread.start()

    def _run(self, transport, command, timeout_s):
        try:
            self.reading = transport.run(command, timeout_s=timeout_s)
        except Exception as exc:  # noqa: BLE001 - surfaced to the pair's verdict
            self.exc = exc

    def wait(self, seconds: float):
        self.thread.join(seconds)
        return not self.thread.is_alive()

    def output(self) -> str:
        if self.exc is not None:
            return f"(transport failed: {self.exc})"
        if self.reading is None:
            return "(still running)"
        return (self.reading.stdout + self.reading.stderr).strip()
