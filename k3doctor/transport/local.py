"""This machine as a node: the same bounded commands through ``sh -c`` (``k3doctor check`` without SSH,
``k3doctor node``), every process group it started stopped on cancel."""
from __future__ import annotations

import os
import signal
import subprocess
import time

from k3doctor.deadline import Deadline
from k3doctor.transport.base import DOCKER_OP_TIMEOUT_S, KILL_GRACE_S, STOP_GRACE_S, Transport
from k3doctor.transport.procs import drain_killed


class LocalTransport(Transport):
    """This machine, through ``sh -c``: useful for ``k3doctor check`` on the node you are on."""

    def _execute(self, command, stdin, deadline_s):
        proc = subprocess.Popen(["sh", "-c", self._as_user(command)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        self._track(proc, proc.pid)
        try:
            if self._cancelled.is_set():
                self._stop([(proc, proc.pid)])
            out, err = proc.communicate(stdin, timeout=deadline_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            _killpg(proc.pid, 9)
            out, err = drain_killed(proc, KILL_GRACE_S)
            timed_out = True
        finally:
            self._untrack(proc)
        self._refuse_if_cancelled()
        cap = self.max_output_bytes
        return proc.returncode, out[:cap], err[:cap], len(out) > cap or len(err) > cap, timed_out

    def _stop(self, live):
        """TERM every process group of the commands' sessions (each command runs in a session of its
        own, and `timeout` leads a group of its own in it), then KILL what is left after the grace."""
        for handle, group in live:
            if group is None:  # a Docker engine socket
                handle.close()
        sessions = {group for _, group in live if group}
        for group in _groups_in(sessions):
            _killpg(group, signal.SIGTERM)
        end = time.monotonic() + STOP_GRACE_S  # gather's trap needs a moment to stop its reading and clean up
        while time.monotonic() < end and _groups_in(sessions):
            time.sleep(0.1)
        for group in _groups_in(sessions):
            _killpg(group, signal.SIGKILL)

    def docker(self, deadline: Deadline):
        """The local engine, bounded by ``deadline`` the same way as over SSH (see dockerssh)."""
        from k3doctor.transport.docker_api import LocalEngineChannel, docker_over_ssh, local_engine_socket

        op_timeout_s = max(0.1, min(DOCKER_OP_TIMEOUT_S, deadline.remaining()))
        path = local_engine_socket()
        if path is None:  # a TCP engine: the SDK's own client, bounded per call only
            import docker

            return docker.from_env(timeout=op_timeout_s)
        def open_channel():
            chan = LocalEngineChannel(path)
            self._track(chan)
            return chan

        return docker_over_ssh(open_channel, lambda chan, deadline_hit: self._untrack(chan), deadline,
                               op_timeout_s=op_timeout_s)


def _groups_in(sessions: set) -> set:
    """Process groups of the live (not zombie) processes in these sessions, from Linux /proc."""
    groups = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    state, _ppid, group, session = fh.read().rsplit(b")", 1)[1].split()[:4]
            except (OSError, ValueError):
                continue
            if int(session) in sessions and state != b"Z":
                groups.add(int(group))
    return groups


def _killpg(group: int, sig: int) -> None:
    try:
        os.killpg(group, sig)
    except (ProcessLookupError, PermissionError):
        pass

