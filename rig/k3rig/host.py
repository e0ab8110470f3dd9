"""What the rig needs of the host and does on it, below any one node: the binaries it runs, device nodes, the
processes it looks for and ends, listening ports and mount namespaces.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
from collections.abc import Callable
from pathlib import Path

import psutil

START_TIMEOUT_S = 60
BINARIES = ("unshare", "nsenter", "mount", "mknod", "sshd", "ssh-keygen", "dockerd", "containerd", "runc", "busybox")
SBIN_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def missing_requirements() -> list[str]:
    """What this host lacks to run the rig (empty list: it can run)."""
    missing = [] if os.geteuid() == 0 else ["root (mount namespaces, sshd and dockerd need it)"]
    missing += [f"{b} (not on PATH)" for b in BINARIES if shutil.which(b, path=SBIN_PATH) is None]
    busybox = shutil.which("busybox", path=SBIN_PATH)
    if busybox and _elf_interpreter(Path(busybox)):
        missing.append(f"a static busybox ({busybox} is dynamically linked: install busybox-static)")
    return missing


def _elf_interpreter(path: Path) -> bool:
    """True when an ELF64 binary names a program interpreter (i.e. is dynamically linked)."""
    data = path.read_bytes()[:65536]
    phoff = int.from_bytes(data[32:40], "little")
    phentsize = int.from_bytes(data[54:56], "little")
    phnum = int.from_bytes(data[56:58], "little")
    headers = (data[phoff + i * phentsize : phoff + i * phentsize + 4] for i in range(phnum))
    return any(int.from_bytes(h, "little") == 3 for h in headers)  # PT_INTERP


def _mknod(path: Path, device: int, present: bool) -> None:
    if path.exists():
        path.unlink()
    if present:
        os.mknod(path, stat.S_IFCHR | 0o666, device)
        os.chmod(path, 0o666)


def _named_processes(titles: set[str]) -> set[str]:
    found = set()
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] in titles:
            found.add(proc.info["name"])
    return found


def _accepts(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False


def _listens(pid: int, host: str, port: int) -> bool:
    proc = psutil.Process(pid)
    connections = getattr(proc, "net_connections", None) or proc.connections  # psutil < 6: connections()
    try:
        return any(c.status == psutil.CONN_LISTEN and c.laddr == (host, port) for c in connections(kind="tcp"))
    except psutil.NoSuchProcess:
        return False


def _mount_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def _kill(select: Callable[[psutil.Process], bool]) -> None:
    """SIGKILL every selected process (and its descendants) until none is left."""
    for _ in range(50):
        victims = []
        for proc in psutil.process_iter():
            try:
                if proc.pid != os.getpid() and select(proc):
                    victims += [proc] + proc.children(recursive=True)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        if not victims:
            return
        for proc in victims:
            try:
                proc.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(victims, timeout=2)
    raise RuntimeError("processes of the rig survive SIGKILL")
