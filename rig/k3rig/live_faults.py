"""Faults that land on a node while it is watched (reference §31.2 signal 3 and 5), at the hardware boundary:
a kernel-log line appended to the node's ``dmesg`` (the fake replays its recorded output: the new line is in
the next read), a RAS error counter bumped in the node's sysfs tree, and the node's sshd cut off - its listener
and every session it serves - as a node that went down looks from outside.
"""
from __future__ import annotations

import re
from pathlib import Path

import psutil

from .tools import DMESG_ERRORS_KEY

_STAMP = re.compile(r"^\[\s*([0-9]+\.[0-9]+)\]")


def append_kernel_line(tree: Path, text: str, error: bool = True) -> str:
    """Append ``text`` to the node's kernel log, 1 s after its last line; the line as ``dmesg`` prints it."""
    data = tree / "opt/k3rig/data/dmesg"
    log = data / "@noargs/stdout"
    stamps = [float(m.group(1)) for m in map(_STAMP.match, log.read_text().splitlines()) if m]
    line = f"[{max(stamps, default=0.0) + 1.0:12.6f}] {text}\n"
    with open(log, "a") as out:
        out.write(line)
    if error:
        with open(data / DMESG_ERRORS_KEY / "stdout", "a") as out:
            out.write(line)
    return line


def bump_ras(tree: Path, card: int, block: str = "umc", ue: int = 1, ce: int = 0) -> None:
    """Add ``ue``/``ce`` errors to ``card``'s ``ras/<block>_err_count``."""
    path = tree / f"sys/class/drm/card{card}/device/ras/{block}_err_count"
    counts = dict(line.split(": ") for line in path.read_text().splitlines())
    path.write_text(f"ue: {int(counts['ue']) + ue}\nce: {int(counts['ce']) + ce}\n")


def cut_sshd(listener_pids: list, config_name: str) -> int:
    """Kill the sshd listening with ``config_name`` and every session under it (so an open connection drops
    too); how many processes were killed."""
    killed = 0
    for pid in listener_pids:
        try:
            proc = psutil.Process(pid)
            if not any(arg.endswith(config_name) for arg in proc.cmdline()):
                continue
            for victim in [*proc.children(recursive=True), proc]:
                victim.kill()
                killed += 1
        except psutil.NoSuchProcess:
            continue
    return killed
