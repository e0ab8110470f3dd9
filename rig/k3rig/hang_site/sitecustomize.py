"""The rig's hang drill inside a python that k3doctor's all_reduce worker runs in (see k3rig.hang).

Loaded only where the rig's wrapper puts this directory on PYTHONPATH, with K3RIG_HANG=LOCAL@STAGE and
K3RIG_HANG_ONCE=<marker path or empty>. The worker's agent forks its ranks in local-rank order, so the
LOCAL-th child is that rank; it stops itself with SIGSTOP (a stopped process runs no watchdog, like a rank
stuck in the driver) right after it writes its ``begin`` event for STAGE, or at once for ``start``.
"""
import json
import os
import signal

_LOCAL, _, _STAGE = os.environ.get("K3RIG_HANG", "").partition("@")
_MARKER = os.environ.get("K3RIG_HANG_ONCE", "")
_real_fork, _real_write = os.fork, os.write
_forked = 0


def _stop():
    """Stop this rank, unless a once-only hang already fired (then the node is healthy again)."""
    if _MARKER:
        try:
            os.close(os.open(_MARKER, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            return
    os.kill(os.getpid(), signal.SIGSTOP)


def _write_then_maybe_stop(fd, data):
    written = _real_write(fd, data)
    if data.startswith(b"K3PROBE "):
        try:
            event = json.loads(data[8:])
        except ValueError:
            return written
        if event.get("ev") == "begin" and event.get("stage") == _STAGE:
            _stop()
    return written


def _fork():
    global _forked
    local, _forked = _forked, _forked + 1
    pid = _real_fork()
    if pid == 0 and str(local) == _LOCAL:
        if _STAGE == "start":
            _stop()
        else:
            os.write = _write_then_maybe_stop
    return pid


if _LOCAL.isdigit() and _STAGE:
    os.fork = _fork
