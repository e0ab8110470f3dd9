"""``py-spy dump`` output: processes, their threads (idle/active) and frames, innermost first (§20)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from k3doctor.parsers import ParseError
from k3doctor.parsers.common import require_text

_PROCESS = re.compile(r"^Process (\d{1,10}): (.{0,2000})$")
_THREAD = re.compile(r"^Thread (0x[0-9A-Fa-f]{1,16}|\d{1,10}) \((idle|active|gil)\)(?:: \"(.{0,200})\")?")
_FRAME = re.compile(r"^\s{2,}(\S.{0,500}?) \((.{1,1000}):(\d{1,9})\)$")


@dataclass
class Thread:
    ident: str
    state: str  # idle | active | gil
    name: str | None
    frames: list = field(default_factory=list)  # (function, file, line), innermost first


@dataclass
class Process:
    pid: int
    command: str
    threads: list = field(default_factory=list)


def parse_dump(text: str) -> list:
    """Every process of one or more concatenated dumps; ParseError when a process has no thread."""
    require_text(text, "py-spy dump")
    procs, thread = [], None
    for line in text.splitlines():
        if m := _PROCESS.match(line):
            procs.append(Process(int(m.group(1)), m.group(2).strip()))
            thread = None
        elif m := _THREAD.match(line):
            if not procs:
                raise ParseError("py-spy dump: thread before any `Process <pid>:` line")
            thread = Thread(m.group(1), m.group(2), m.group(3))
            procs[-1].threads.append(thread)
        elif (m := _FRAME.match(line)) and thread is not None:
            thread.frames.append((m.group(1), m.group(2), int(m.group(3))))
    if not procs:
        raise ParseError("py-spy dump: no `Process <pid>:` line")
    for proc in procs:
        if not proc.threads or not any(t.frames for t in proc.threads):
            raise ParseError(f"py-spy dump of pid {proc.pid}: no thread with frames (cut off?)")
    return procs
