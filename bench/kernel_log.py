#!/usr/bin/env python3
"""Figures for kernel-health: CPU time to judge one node's kernel log at the gather's 4 MiB cap.

    python3 bench/kernel_log.py            # a synthetic 4 MiB dmesg built from real corpus lines

The log repeats the shared corpus' page-fault / ring-timeout / RAS captures between ordinary boot
lines, so every signature, detail and [Hardware Error] path is exercised.  Prints figures; asserts
nothing (speed targets live here, not in timed tests).
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from k3doctor.views.kernel_log import KernelLog  # noqa: E402
from k3doctor.parsers.dmesg import parse_line, scan  # noqa: E402
from k3doctor.readings import CommandReading, FileReading  # noqa: E402
from k3doctor.rules.kernel_log import SIGNATURES  # noqa: E402

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
CAP = 4 << 20


def corpus_lines() -> list:
    out = []
    for name in ("dmesg-amdgpu-pagefault-noretry.txt", "dmesg-amdgpu-ring-timeout-gpu-reset.txt",
                 "dmesg-iso-amdgpu-ras-nodescraper-fixture.txt"):
        out += [parse_line(line).text for line in (CORPUS / name).read_text().splitlines() if not line.startswith("#")]
    return out


def synthetic_log() -> str:
    lines, size, t, texts = [], 0, 1.0, corpus_lines()
    while size < CAP:
        for text in texts:
            line = f"[{t:12.6f}] {text}\n"
            lines.append(line)
            size += len(line)
            t += 0.013
    return "".join(lines)[:CAP].rsplit("\n", 1)[0] + "\n"


def main() -> None:
    log = synthetic_log()
    reading = CommandReading("dmesg", 0, log, "")
    uptime = FileReading("/proc/uptime", "900000.00 1.00\n")
    times, findings = [], 0
    for _ in range(3):
        started = time.process_time()
        parsed = KernelLog.read(reading, uptime)
        findings = len(scan(parsed.lines, SIGNATURES))
        times.append(time.process_time() - started)
    print(f"kernel log {len(log) / 2**20:.1f} MiB, {log.count(chr(10))} lines, {findings} findings: "
          f"parse + scan CPU time median {statistics.median(times):.2f}s (min {min(times):.2f}s, 3 runs)")


if __name__ == "__main__":
    main()
