"""Faults that land on a node while it is watched (reference §31.2 signals 3-5), at the hardware boundary:
a kernel-log line appended to the node's ``dmesg`` (the fake replays its recorded output: the new line is in
the next read), a RAS error counter bumped, a bad page retired, a GPU's load, clock and power and its VRAM in
use set in the node's sysfs tree, a fatal CPER record added to what the fake amd-smi lists, and the node's sshd
cut off - its listener and every session it serves - as a node that went down looks from outside.
"""
from __future__ import annotations

import re
import time
from pathlib import Path

import psutil

from .field import bad_page_line
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


def retire_page(tree: Path, card: int, flag: str = "R") -> None:
    """Append one page (R retired, P pending, F unreservable) to ``card``'s ``ras/gpu_vram_bad_pages``."""
    path = tree / f"sys/class/drm/card{card}/device/ras/gpu_vram_bad_pages"
    listed = path.read_text()
    with open(path, "a") as out:
        out.write(bad_page_line(len(listed.splitlines()), flag))


def add_fatal_cper(tree: Path, gpu: int, at: float | None = None) -> None:
    """Add a fatal CPER record of amd-smi GPU ``gpu`` dated ``at`` (default now, UTC) to the fake amd-smi's
    ``ras --cper --severity fatal`` listing, as the driver adds one when a fatal RAS event lands."""
    path = tree / "opt/k3rig/data/amd-smi/ras --cper --severity fatal/stdout"
    stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.gmtime(time.time() if at is None else at))
    with open(path, "a") as out:
        out.write(f"{stamp:<20} {gpu:<7} {'FATAL':<20}\n")


def set_gpu_load(tree: Path, card: int, busy_pct: int, sclk_mhz: int | None = None, watts: int = 140) -> None:
    """``card`` reads ``busy_pct`` % busy, runs at ``sclk_mhz`` (marked current in ``pp_dpm_sclk``, a level of
    its own when it is none of the DPM levels; None: the deep-sleep level) and draws ``watts``."""
    dev = tree / f"sys/class/drm/card{card}/device"
    levels = [line.split("Mhz")[0] for line in (dev / "pp_dpm_sclk").read_text().splitlines()]
    mhz = {key: int(value) for key, value in (level.split(": ") for level in levels)}
    numbered = sorted(v for k, v in mhz.items() if k != "S")
    if sclk_mhz is not None and sclk_mhz not in numbered:
        numbered = sorted([*numbered, sclk_mhz])
    rows = [f"S: {mhz['S']}Mhz {'*' if sclk_mhz is None else ''}"] + [
        f"{i}: {v}Mhz {'*' if v == sclk_mhz else ''}" for i, v in enumerate(numbered)]
    _rewrite(dev / "pp_dpm_sclk", "".join(f"{row}\n" for row in rows))
    _rewrite(dev / "gpu_busy_percent", f"{busy_pct}\n")
    _rewrite(next(dev.glob("hwmon/hwmon*/power1_average")), f"{watts * 10**6}\n")


def hold_vram(tree: Path, card: int, used_bytes: int) -> None:
    """``card``'s ``mem_info_vram_used`` reads ``used_bytes`` (e.g. what a rank killed mid-HIP call left, §29)."""
    _rewrite(tree / f"sys/class/drm/card{card}/device/mem_info_vram_used", f"{used_bytes}\n")


def _rewrite(path: Path, text: str) -> None:
    """In place (the inode is bind-mounted: a new file would not be seen on the node)."""
    with open(path, "w") as out:
        out.write(text)


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
