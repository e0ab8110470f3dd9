"""Ending a local child process group for good (a tool run, scontrol, ansible-inventory), within bounds.

SIGKILL takes effect when each member next runs, and a member that left the group (setsid, a daemon) can
hold the output pipes open for ever: so neither "killpg, then read to EOF" nor "killpg returned" is enough.
"""
from __future__ import annotations

import os
import subprocess
import time


def drain_killed(proc: subprocess.Popen, grace_s: float) -> tuple[bytes, bytes]:
    """What a command whose group was just killed had written; given up after ``grace_s`` when something
    outside the group still holds the pipes (the command counts as timed out either way)."""
    try:
        return proc.communicate(timeout=grace_s)
    except subprocess.TimeoutExpired:
        for pipe in (proc.stdout, proc.stderr):
            if pipe:
                pipe.close()
        proc.wait()  # the leader itself was killed with its group: it is gone
        return b"", b""


def wait_group_gone(group: int, within_s: float = 1.0) -> None:
    """Wait, bounded, until no member of ``group`` is left (a zombie awaiting its reaper counts until reaped)."""
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        try:
            os.killpg(group, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.01)
