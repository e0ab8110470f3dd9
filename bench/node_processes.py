"""Processes the nodes start during a run, counted as the kernel reports them (the proc connector), and the CPU
the nodes' processes have used (``cpu_seconds``).

Every fork and exec on this machine is announced on a netlink socket (root only). A node's processes are
its rig processes at the start (sshd, dockerd, containerd and the shims: what ``seeds`` gives) and every
process any of them forks from then on, however short-lived: a fork by a tracked process is one more
process of the nodes, an exec by one is one more program. Threads are not counted.
"""
from __future__ import annotations

import os
import socket
import struct
import threading

NETLINK_CONNECTOR, CN_IDX_PROC, CN_VAL_PROC = 11, 1, 1
PROC_CN_MCAST_LISTEN, PROC_CN_MCAST_IGNORE = 1, 2
NLMSG_DONE = 3
PROC_EVENT_FORK, PROC_EVENT_EXEC = 0x1, 0x2
_NL_HEAD, _CN_HEAD, _EVENT_HEAD = struct.Struct("=IHHII"), struct.Struct("=IIIIHH"), struct.Struct("=IIQ")


class NodeProcesses:
    """``with NodeProcesses(seeds) as counted:`` ... ``counted.forks``, ``counted.execs`` (the nodes' own)."""

    def __init__(self, seeds):
        self.tracked = set(seeds)
        self.forks = self.execs = 0
        self.lost = False  # the kernel dropped events (its buffer was full): the counts are floors
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_CONNECTOR)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self._sock.bind((0, CN_IDX_PROC))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen, daemon=True)

    def _tell(self, op: int) -> None:
        payload = struct.pack("=I", op)
        cn = _CN_HEAD.pack(CN_IDX_PROC, CN_VAL_PROC, 0, 0, len(payload), 0) + payload
        self._sock.send(_NL_HEAD.pack(_NL_HEAD.size + len(cn), NLMSG_DONE, 0, 0, 0) + cn)

    def __enter__(self):
        self._tell(PROC_CN_MCAST_LISTEN)
        self._sock.settimeout(0.2)
        self._thread.start()
        return self

    def _listen(self) -> None:
        at = _NL_HEAD.size + _CN_HEAD.size
        while not self._stop.is_set():
            try:
                data = self._sock.recv(1 << 16)
            except TimeoutError:
                continue
            except OSError:  # ENOBUFS: events were lost; the count is a floor then
                self.lost = True
                continue
            what = _EVENT_HEAD.unpack_from(data, at)[0]
            body = at + _EVENT_HEAD.size
            if what == PROC_EVENT_FORK:
                _, parent_tgid, child_pid, child_tgid = struct.unpack_from("=IIII", data, body)
                if parent_tgid in self.tracked and child_pid == child_tgid:
                    self.tracked.add(child_tgid)
                    self.forks += 1
            elif what == PROC_EVENT_EXEC:
                _, tgid = struct.unpack_from("=II", data, body)
                if tgid in self.tracked:
                    self.execs += 1

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        try:
            self._tell(PROC_CN_MCAST_IGNORE)
        finally:
            self._sock.close()


def available() -> bool:
    """Whether this machine tells (root, a kernel with the proc connector)."""
    try:
        with NodeProcesses({os.getpid()}):
            return True
    except OSError:
        return False


def cpu_seconds(pids) -> float:
    """CPU seconds so far of processes ``pids`` and of the children they reaped (the kernel's counters); a
    process gone meanwhile counts nothing."""
    import psutil

    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            continue
    return total
