"""What the watch reads on a node each interval: one bounded remote script over the node's one long-lived SSH
connection (k3doctor/gather/node_script.py: every reading framed, each under its own deadline).

The readings (reference §31.2 signals 1-5): the boot id (a reboot restarts the kernel log), the kernel log
(``dmesg``), every GPU's ``ras/*_err_count``, the engine's ``/metrics`` fetched ON the node (so a server bound to
localhost works; refused = dead, no answer = busy, §31.2) and the process table (engine processes gone, defunct or
in D state); signal 3-4's GPU files (each card's bad-page list, ``gpu_busy_percent``, ``pp_dpm_sclk``, hwmon power,
VRAM use) and, every ``cper_every_s`` only (amd-smi costs ~0.75 s a call, §31.5), the fatal CPER records (``amd-smi
ras --cper --severity fatal``, as gpu-cper-fatal reads them); the engine's server log where one is named, as it
grows (from where the last read stopped, server_log.py). A connection that breaks is closed and opened again, with a
backoff (1 s doubling to 30 s), while the node reads as UNKNOWN: never healthy.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from k3doctor.gather.node_script import gather_shell
from k3doctor.readings import Command, File, Glob
from k3doctor.transport.base import TransportError
from k3doctor.watch import server_log

BOOT_ID = "/proc/sys/kernel/random/boot_id"
RAS_GLOB = "/sys/class/drm/card*/device/ras/*_err_count"
DEVICE_GLOBS = {"bad_pages": "/sys/class/drm/card*/device/ras/gpu_vram_bad_pages",
                "busy": "/sys/class/drm/card*/device/gpu_busy_percent",
                "sclk": "/sys/class/drm/card*/device/pp_dpm_sclk",
                "power": "/sys/class/drm/card*/device/hwmon/hwmon*/power1_*",
                "vram": "/sys/class/drm/card*/device/mem_info_vram_*"}
CPER_ARGS = ("ras", "--cper", "--severity", "fatal")
CPER_EVERY_S = 60.0
BACKOFF_FIRST_S, BACKOFF_MAX_S = 1.0, 30.0
# The metrics read on the node: python3 is there (the gather script's reader needs it). Exit 7 = refused (the
# engine is not listening: dead, or not started), 28 = no answer in time (busy), 22 = an HTTP error - curl's codes.
FETCH = """import socket,sys,urllib.error,urllib.request
try:
    sys.stdout.write(urllib.request.urlopen(sys.argv[1],timeout=float(sys.argv[2])).read(8<<20).decode('utf-8','replace'))
except urllib.error.HTTPError as e:
    sys.stderr.write('HTTP %d' % e.code); sys.exit(22)
except urllib.error.URLError as e:
    r = e.reason; sys.stderr.write(str(r))
    sys.exit(7 if isinstance(r, ConnectionRefusedError) else 28 if isinstance(r, (socket.timeout, TimeoutError)) else 6)
except (socket.timeout, TimeoutError) as e:
    sys.stderr.write('timed out'); sys.exit(28)
except ConnectionRefusedError as e:
    sys.stderr.write(str(e)); sys.exit(7)
"""
FETCH_REFUSED, FETCH_TIMEOUT = 7, 28


@dataclass
class Sample:
    """One interval's readings of one node; ``problem`` set: the node was not read at all (then UNKNOWN)."""

    node: str
    at: float  # wall-clock seconds when the read started
    problem: str | None = None
    readings: dict = field(default_factory=dict)  # "boot_id" | "kernel" | "ras" | "metrics" | "procs" -> reading
    duration_s: float = 0.0


class NodeSource:
    """One node's connection and its reads. ``make_transport()`` gives a fresh, unconnected transport."""

    def __init__(self, node: str, make_transport, *, metrics_url: str | None, read_timeout_s: float,
                 amd_smi: str | None = None, cper_every_s: float = CPER_EVERY_S, server_log_path: str | None = None):
        self.node, self._make, self.metrics_url = node, make_transport, metrics_url
        self.read_timeout_s = read_timeout_s
        self.amd_smi, self.cper_every_s, self._cper_next = amd_smi, cper_every_s, 0.0
        self.server_log_path, self._log_offset = server_log_path, -1  # -1: the first read takes the log's size
        self.transport = None
        self._next_try, self._backoff = 0.0, BACKOFF_FIRST_S
        self._cancelled = False

    def specs(self, cper: bool = False) -> dict:
        t = self.read_timeout_s
        specs = {"boot_id": File(BOOT_ID), "kernel": Command(("dmesg",), t), "ras": Glob(RAS_GLOB),
                 "procs": Command(("ps", "-eo", "pid=,stat=,args="), t),
                 **{name: Glob(pattern) for name, pattern in DEVICE_GLOBS.items()}}
        if cper and self.amd_smi:
            specs["cper"] = Command((self.amd_smi, *CPER_ARGS), t)
        if self.server_log_path:
            specs["server_log"] = server_log.tail(self.server_log_path, self._log_offset, t)
        if self.metrics_url:
            specs["metrics"] = Command(("python3", "-I", "-S", "-c", FETCH, self.metrics_url, f"{max(1.0, t - 1):g}"), t)
        return specs

    def read(self) -> Sample:
        """This interval's sample; a node that cannot be reached (or is in its backoff) is a Sample with a
        ``problem``. Bounded: the connect by the inventory's connect timeout, the script by ``read_timeout_s``
        plus the gather's margins."""
        started, wall = time.monotonic(), time.time()
        if started < self._next_try:
            return Sample(self.node, wall, f"{self._last_error} (next try in {self._next_try - started:.0f}s)")
        try:
            if self.transport is None:
                self.transport = self._make()
            self.transport.connect()
            specs = self.specs(cper=started >= self._cper_next)
            got = gather_shell(self.transport, list(specs.values()), command_timeout_s=self.read_timeout_s,
                               deadline_s=self.read_timeout_s + 5)
        except TransportError as exc:
            if self._cancelled:  # the watch is stopping: cancel() still works on this connection, stop() closes it
                return Sample(self.node, wall, "the watch stopped", duration_s=time.monotonic() - started)
            self._lost(str(exc), started)
            return Sample(self.node, wall, str(exc), duration_s=time.monotonic() - started)
        self._backoff = BACKOFF_FIRST_S
        if "cper" in specs:
            self._cper_next = started + self.cper_every_s
        if "server_log" in specs:
            self._log_offset = server_log.next_offset(got[specs["server_log"]], self._log_offset)
        return Sample(self.node, wall, readings={name: got[spec] for name, spec in specs.items()},
                      duration_s=round(time.monotonic() - started, 3))

    def _lost(self, why: str, now: float) -> None:
        self._last_error = why
        self._next_try = now + self._backoff
        self._backoff = min(self._backoff * 2, BACKOFF_MAX_S)
        self.close()

    def cancel(self) -> None:
        """Stop what runs on the node now (SIGTERM, Ctrl-C): nothing of the watch stays there. The read this
        breaks must not close the connection under the stop it is running (a race that lost the stop)."""
        self._cancelled = True
        if self.transport is not None:
            self.transport.cancel()

    def close(self) -> None:
        if self.transport is not None:
            try:
                self.transport.close()
            finally:
                self.transport = None


def sources_for(inv, *, metrics_ports: dict, metrics_path: str, read_timeout_s: float,
                accept_unknown_hosts: bool, cper_every_s: float = CPER_EVERY_S,
                server_logs: dict | None = None) -> dict:
    """node name -> NodeSource for every node of ``inv``; ``metrics_ports``: node name (or ``*``) -> the engine's
    port on that node (none: the engine is not read there); ``server_logs`` the same for the server log's path."""
    from k3doctor.judging.connections import make_transport
    from k3doctor.judging.runner import RunOptions

    opts = RunOptions(accept_unknown_hosts=accept_unknown_hosts)
    out = {}
    for node in inv.nodes:
        port = metrics_ports.get(node.name, metrics_ports.get("*"))
        url = f"http://127.0.0.1:{port}{metrics_path}" if port else None
        out[node.name] = NodeSource(node.name, lambda node=node: make_transport(node, inv, opts),
                                    metrics_url=url, read_timeout_s=read_timeout_s,
                                    amd_smi=node.settings.tools.get("amd_smi"), cper_every_s=cper_every_s,
                                    server_log_path=(server_logs or {}).get(node.name, (server_logs or {}).get("*")))
    return out
