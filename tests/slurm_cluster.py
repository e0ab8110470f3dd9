"""A real one-node Slurm cluster for the tests: munged, slurmctld and slurmd (Debian's slurm-wlm) as
child processes of the test, every file (key, config, state, spool, logs, sockets) under one directory.

The node is named ``k3node`` (``slurmd -N``) whatever this machine's hostname is, on 127.0.0.1, on free
ports, so several clusters (parallel test runs) can coexist. ``stop()`` ends the daemons' process groups
(TERM, then KILL) and waits for them, so nothing is left running.
"""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from k3rig.fixtures import BIND_PATHS

NODE = "k3node"
DAEMONS = ("munged", "slurmctld", "slurmd")
SBIN_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
START_TIMEOUT_S = 60.0  # a loaded 2-core box: slurmctld's first start writes its state files
# The rig's fake hardware paths that this machine's own k3doctor may see: not /root and /mnt, which
# hold the test's python (pyenv) and nothing the passive checks used here read.
FAKE_HARDWARE = tuple(rel for rel in BIND_PATHS if rel not in ("root", "mnt"))


def missing() -> str | None:
    """Why no cluster can run here (None when it can)."""
    absent = [d for d in (*DAEMONS, "scontrol", "sinfo") if shutil.which(d, path=SBIN_PATH) is None]
    if absent:
        return "Slurm not installed (no " + ", ".join(absent) + "): apt-get install slurm-wlm (scripts/install.sh)"
    if os.geteuid() != 0:
        return "the Slurm cluster runs slurmd as root"
    return None


def _free_ports(count: int) -> list[int]:
    socks = []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class SlurmCluster:
    """``with SlurmCluster(workdir) as cluster:`` a started cluster whose one node is idle."""

    def __init__(self, workdir: Path, *, health_check: str | None = None, health_interval_s: int = 0,
                 ready: tuple = ("idle",)):
        self.dir = Path(workdir).resolve()
        self.ready = ready  # sinfo states that mean slurmd registered (a health check may drain it at once)
        self.conf = self.dir / "slurm.conf"
        self.munge_socket = self.dir / "munge" / "munge.socket"
        self.health_check = health_check
        self.health_interval_s = health_interval_s
        self.procs: dict[str, subprocess.Popen] = {}

    @property
    def env(self) -> dict[str, str]:
        """The environment Slurm's client commands need to reach this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def __enter__(self) -> SlurmCluster:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ----------------------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        try:
            self._write_files()
            self._spawn("munged", ["munged", "--foreground", "--force", f"--socket={self.munge_socket}",
                                   f"--key-file={self.dir / 'munge' / 'munge.key'}",
                                   f"--pid-file={self.dir / 'munge' / 'munged.pid'}",
                                   f"--seed-file={self.dir / 'munge' / 'munged.seed'}",
                                   f"--log-file={self.dir / 'munge' / 'munged.log'}"])
            self._wait(lambda: self.munge_socket.is_socket(), "munged socket")
            self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
            self._wait(self._controller_answers, "slurmctld to answer")
            self._spawn("slurmd", ["slurmd", "-D", "-N", NODE, "-f", str(self.conf)])
            self._wait(lambda: self.state() in self.ready, f"{NODE} {' or '.join(self.ready)} in sinfo")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """TERM every daemon's process group (slurmd first), KILL what is left, reap them all."""
        for name in reversed(DAEMONS):
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        for proc in self.procs.values():  # whatever a daemon forked into its group (slurmstepd, scripts)
            _signal_group(proc.pid, signal.SIGKILL)
        self.procs.clear()

    def pids(self) -> list[int]:
        """Live processes of this cluster: the daemons (their command lines name its directory) and
        whatever ran with its SLURM_CONF (health checks, the k3doctor they start, its reads)."""
        marks = (str(self.dir).encode(), f"SLURM_CONF={self.conf}\0".encode())
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in _ancestors():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    if fh.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                        continue
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    cmdline = fh.read()
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    environ = fh.read()
            except OSError:
                continue
            if marks[0] in cmdline or marks[1] in environ:
                found.append(int(entry))
        return found

    def gone(self, timeout_s: float = 30.0) -> list[int]:
        """What is still running of this cluster after ``timeout_s`` (k3doctor's own reads end by their deadlines)."""
        end = time.monotonic() + timeout_s
        while self.pids() and time.monotonic() < end:
            time.sleep(0.2)
        return self.pids()

    # ----------------------------------------------------------------------------------------- client side

    def run(self, *argv: str, timeout_s: float = 30.0) -> subprocess.CompletedProcess:
        """A Slurm client command (``scontrol``, ``sinfo``) against this cluster; raises if it fails."""
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout_s,
                              check=True)

    def state(self) -> str:
        """The node's state as sinfo prints it (``idle``, ``drained``, ``draining``, ``down*`` ...)."""
        try:
            return self.run("sinfo", "-h", "-N", "-n", NODE, "-o", "%T", timeout_s=10).stdout.strip()
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
            return ""

    def drain_state(self) -> str:
        """``state()`` less sinfo's ``*`` (not responding: slurmctld missed a ping of slurmd, as on a loaded
        box), which drain and resume neither set nor clear."""
        return self.state().rstrip("*")

    def reason(self) -> str:
        """The node's drain/down reason as sinfo prints it (``none`` when there is none)."""
        return self.run("sinfo", "-h", "-N", "-n", NODE, "-o", "%E", timeout_s=10).stdout.strip()

    def drain(self, reason: str) -> None:
        """What an admin types: ``scontrol update nodename=X state=drain reason=...``."""
        self.run("scontrol", "update", f"nodename={NODE}", "state=drain", f"reason={reason}")

    def resume(self) -> None:
        self.run("scontrol", "update", f"nodename={NODE}", "state=resume")

    def back_in_service(self) -> None:
        """Undrain the node if anything drained it, and wait until it is idle again."""
        if self.state().startswith(("drain", "down")):
            self.resume()
        self._wait(lambda: self.state() == "idle", f"{NODE} idle again")

    def wait_for(self, predicate, what: str, timeout_s: float = START_TIMEOUT_S) -> None:
        self._wait(predicate, what, timeout_s)

    # ----------------------------------------------------------------------------------------- internals

    def _controller_answers(self) -> bool:
        try:
            self.run("scontrol", "ping", timeout_s=10)
            return True
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
            return False

    def _spawn(self, name: str, argv: list[str]) -> None:
        with open(self.dir / f"{name}.out", "wb") as log:  # the daemon keeps its own copy of the descriptor
            self.procs[name] = subprocess.Popen(
                [shutil.which(argv[0], path=SBIN_PATH), *argv[1:]], stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True, env=self.env, cwd=self.dir)

    def _wait(self, predicate, what: str, timeout_s: float = START_TIMEOUT_S) -> None:
        end = time.monotonic() + timeout_s
        while not predicate():
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            if dead or time.monotonic() > end:
                why = f"{', '.join(dead)} exited" if dead else f"no {what} after {timeout_s:g} s"
                raise RuntimeError(f"Slurm cluster in {self.dir} did not start: {why}\n{self._logs()}")
            time.sleep(0.2)

    def _logs(self) -> str:
        tails = []
        for path in sorted(self.dir.glob("*.log")) + sorted(self.dir.glob("*.out")):
            tails.append(f"--- {path.name}\n" + path.read_text(errors="replace")[-1500:])
        return "\n".join(tails)

    def _write_files(self) -> None:
        munge = self.dir / "munge"
        for sub in (munge, self.dir / "state", self.dir / "spool"):
            sub.mkdir(parents=True, exist_ok=True, mode=0o700)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        ctld_port, slurmd_port = _free_ports(2)
        health = ([f"HealthCheckProgram={self.health_check}", f"HealthCheckInterval={self.health_interval_s}",
                   "HealthCheckNodeState=IDLE"] if self.health_check else [])
        lines = [
            "ClusterName=k3test",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={self.dir / 'state'}",
            f"SlurmdSpoolDir={self.dir / 'spool'}",
            f"SlurmctldPidFile={self.dir / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.dir / 'slurmd.pid'}",
            f"SlurmctldLogFile={self.dir / 'slurmctld.log'}",
            f"SlurmdLogFile={self.dir / 'slurmd.log'}",
            "SlurmdParameters=config_overrides",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SwitchType=switch/none",
            "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres",
            "ReturnToService=2",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=60",
            *health,
            f"NodeName={NODE} NodeAddr=127.0.0.1 NodeHostname=localhost CPUs=1 RealMemory=100 State=UNKNOWN",
            f"PartitionName=k3 Nodes={NODE} Default=YES MaxTime=INFINITE State=UP",
        ]
        self.conf.write_text("\n".join(lines) + "\n")


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _ancestors() -> set[int]:
    """This process and its parents (their command lines may name the directory too)."""
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        with open(f"/proc/{pid}/stat", "rb") as fh:
            pid = int(fh.read().rsplit(b")", 1)[1].split()[1])
    return pids


def on_fake_hardware(tree: Path, argv: list[str]) -> list[str]:
    """``argv`` run in a mount namespace of its own that sees ``tree`` (a rig fixture tree,
    rig/k3rig/fixtures.py) where the GPUs' sysfs, amd-smi, dmesg and meminfo are, the way the rig's
    nodes see theirs; everything else (Slurm, munge, the network) is this machine's."""
    binds = [shlex.join(["mount", "--bind", str(tree / rel), f"/{rel}"]) + " || exit 99" for rel in FAKE_HARDWARE]
    script = "\n".join([*binds, shlex.join(["exec", *argv])])
    return ["unshare", "-m", "--propagation", "private", "--", "/bin/sh", "-c", script]


def k3doctor_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "k3doctor.cli", *args]
