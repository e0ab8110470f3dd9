"""The sandbox runner's stream read back (`recipe diff --script`, k3doctor/recipes/sandbox.py): the records of the
programs the script started, its exit, the bounds it ran into and the absolute paths its shell ran.

Stream: ``X rc``, ``O`` (the record store filled), ``E`` + the head of the script's stderr, ``T`` + the head of its
shell's trace, ``R name n`` + n NUL-terminated fields per record file, ``END``. A record is ``K3REC argc argv...
envc env... filec (path text)... END``: one cut short (the store filled mid-write) is counted, never half-read.
The stderr and the trace hold the script's values: only bash's messages of a bound and the program paths are
taken from them, and neither is ever shown whole.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

MAX_CALLS = 2000  # records judged; past it the diff is an ERROR that says so (k3doctor counts, not the recorder)
CALLS_BYTES = 32 << 20  # the record store: full, a call is cut or lost, and the diff is an ERROR that says so
LIMITS = {"nproc": 256, "fsize_kb": 32 << 10, "as_kb": 2 << 20}  # CPU: the timeout, rounded up, + 1 s
# bash's own words when the script runs into a limit (the sandbox binds no translations: they are English)
BOUNDS = ((f"the process limit ({LIMITS['nproc']} processes)", (b"fork: retry: Resource temporarily unavailable",
                                                                b"fork: Resource temporarily unavailable")),
          (f"the file size limit ({LIMITS['fsize_kb'] >> 10} MiB)", (b"File size limit exceeded",)),
          ("the CPU time limit", (b"CPU time limit exceeded",)))
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")


@dataclass
class Call:
    argv: list
    env: dict
    files: dict  # --env-file path -> its text, as the program saw it


@dataclass
class ScriptRun:
    calls: list
    returncode: int | None  # None: ended by the deadline
    base_env: dict
    errors: list = field(default_factory=list)  # what was not read, or a bound that cut the script short
    lost: bool = False  # the runner did not report: nothing was read
    traced: list = field(default_factory=list)  # absolute paths the script's shell ran as programs (its trace)
    missing: list = field(default_factory=list)  # those of them the sandbox did not have


def _fields(data: bytes, pos: int, count: int) -> tuple:
    """``count`` NUL-terminated fields from ``pos``: (fields, next position), or (None, pos) where they are cut."""
    out = []
    for _ in range(count):
        end = data.find(b"\0", pos)
        if end < 0:
            return None, pos
        out.append(data[pos:end])
        pos = end + 1
    return out, pos


def _call(fields: list) -> Call | None:
    """One record (``K3REC argc argv... envc env... filec (path text)... END``), or None where it is cut short."""
    try:
        if fields[0] != b"K3REC" or fields[-1] != b"END":
            return None
        i, text = 1, [f.decode("utf-8", "replace") for f in fields]
        argc = int(fields[i])
        argv, i = text[i + 1:i + 1 + argc], i + 1 + argc
        envc = int(fields[i])
        env = dict(e.split("=", 1) for e in text[i + 1:i + 1 + envc] if "=" in e)
        i += 1 + envc
        filec = int(fields[i])
        files = {text[i + 1 + 2 * k]: text[i + 2 + 2 * k] for k in range(filec)}
        if i + 1 + 2 * filec != len(fields) - 1:
            return None
    except (IndexError, ValueError):
        return None
    return Call(argv, env, files)


def parse_records(data: bytes, env: dict) -> ScriptRun:
    """The runner's stream: ``X rc``, ``O`` (the record store filled), ``E`` + the stderr's head, ``R name n`` + n
    fields per record file, ``END``. The stderr is read for bash's messages only (never kept, never shown)."""
    pos, rc, full, records, stderr, trace, lost, cut = 0, None, False, [], b"", b"", True, 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        if nl < 0:
            break
        head, pos = data[pos:nl].decode("ascii", "replace").split(), nl + 1
        if head[:1] == ["X"] and len(head) == 2 and head[1].isdigit():
            rc = int(head[1])
        elif head == ["O"]:
            full = True
        elif head in (["E"], ["T"]):
            end = data.find(b"\0", pos)
            section, pos = (data[pos:end], end + 1) if end >= 0 else (data[pos:], len(data))
            stderr, trace = (section, trace) if head == ["E"] else (stderr, section)
        elif head[:1] == ["R"] and len(head) == 3 and head[2].isdigit():
            fields, pos = _fields(data, pos, int(head[2]))
            if fields is None:
                break
            call = _call(fields)
            if call is None:
                cut += 1
            else:
                records.append((_order(head[1]), call))
        elif head == ["END"]:
            lost = False
            break
        else:
            break
    calls = [c for _, c in sorted(records, key=lambda r: r[0])]
    errors = [f"the script ran into {bound}: what it would have done after that was not recorded"
              for bound, marks in BOUNDS if any(m in stderr for m in marks)]
    if full or cut:
        errors.append(f"the sandbox's record store ({CALLS_BYTES >> 20} MiB) filled after {len(calls)} program "
                      "calls: the calls past that were not recorded, a launch among them is not compared")
    if len(calls) > MAX_CALLS:
        errors.append(f"the script made more than {MAX_CALLS} program calls ({len(calls)}): the calls past "
                      f"{MAX_CALLS} were not read, a launch among them is not compared")
    if lost and (rc is not None or calls):
        errors.append("the sandbox's runner was cut off before it reported every record: not all were read")
    timed_out = rc in (124, 137) or rc is None
    return ScriptRun(calls=calls[:MAX_CALLS], returncode=None if timed_out else rc, base_env=dict(env),
                     errors=errors, lost=lost and rc is None and not calls, traced=_programs(trace))


def _programs(trace: bytes) -> list:
    """The absolute paths a bash trace (``set -x``, default PS4) shows run as programs: each command's first word
    after its assignments, and the word after exec/command. Trace lines hold the script's values: only these paths
    are kept, and never shown unless the sandbox did not have them."""
    found = {}
    for line in trace.decode("utf-8", "replace").splitlines():
        words = line.split(" ")
        if not words or not words[0] or words[0].strip("+"):
            continue
        words = [w for w in words[1:] if w]
        while words and (_ASSIGNMENT.match(words[0]) or words[0] in ("exec", "command") or
                         (words[0].startswith("-") and len(words) > 1)):
            words = words[1:]
        if words and words[0].startswith("/") and "'" not in words[0]:
            found[os.path.normpath(words[0])] = True
    return list(found)[:256]


def _order(name: str) -> tuple:
    stamp, _, pid = name.split(".", 1)[0].partition("-")
    return (int(stamp) if stamp.isdigit() else 0, int(pid) if pid.isdigit() else 0)
