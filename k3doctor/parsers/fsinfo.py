"""File-system figures from coreutils: ``stat -f`` (statvfs) lines and ``find -printf`` listings.

``stat -f -c STATFS_FORMAT PATH`` prints one line per path: file-system id (hex), fundamental block
size, total blocks, blocks available to non-root users (what ``df`` calls Available), free blocks,
then the path as given. ``find ... -printf FIND_FORMAT`` prints one NUL-terminated record per file:
type letter (``f`` regular, ``l`` broken symlink under ``-L``, ``d`` directory ...), size in bytes,
name. A listing that does not end in NUL was cut off. ``stat -c STAT_SIZE_FORMAT FILES`` prints
``bytes path`` per file it found; ``wc -l`` and ``grep -c`` print one count.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from k3doctor.parsers import ParseError
from k3doctor.parsers.common import to_int

STATFS_FORMAT = "%i %S %b %a %f %n"
FIND_FORMAT = "%y %s %f\\0"
STAT_SIZE_FORMAT = "%s %n"
_STATFS = re.compile(r"^([0-9a-f]+) ([0-9]+) ([0-9]+) ([0-9]+) ([0-9]+) (/.*)$")
_STAT_LINE = re.compile(r"^([0-9]+) (/.*)$")
_FIND = re.compile(r"^([a-zA-Z]) ([0-9]+) ([^/]+)$", re.DOTALL)


@dataclass(frozen=True)
class StatFs:
    """statvfs of the file system holding ``path``."""

    path: str
    fsid: str
    block_size: int
    blocks: int
    available_blocks: int  # f_bavail: what non-root writers get, as `df` shows it
    free_blocks: int  # f_bfree: including the root-reserved blocks

    @property
    def total_bytes(self) -> int:
        return self.blocks * self.block_size

    @property
    def available_bytes(self) -> int:
        return self.available_blocks * self.block_size


@dataclass(frozen=True)
class ListedFile:
    name: str
    type: str  # find %y
    size: int  # bytes (of the link itself when it is a broken symlink)


def parse_statfs_line(line: str) -> StatFs:
    """One ``stat -f -c STATFS_FORMAT`` line; ParseError unless it has every field and adds up."""
    match = _STATFS.match(line)
    if not match:
        raise ParseError(f"stat -f: unexpected line {line!r:.120}")
    fsid, size, blocks, avail, free, path = match.groups()
    size, blocks, avail, free = (to_int(n, f"stat -f {path}") for n in (size, blocks, avail, free))
    fs = StatFs(path, fsid, size, blocks, avail, free)
    if fs.block_size == 0 or fs.available_blocks > fs.blocks or fs.free_blocks > fs.blocks:
        raise ParseError(f"stat -f: absurd figures for {path}: {line!r:.120}")
    return fs


def parse_find_listing(text: str) -> list:
    """``find -printf FIND_FORMAT`` output as ListedFile records, in output order."""
    if not text:
        return []
    if not text.endswith("\0"):
        raise ParseError(f"find listing cut off after {text.count(chr(0))} record(s): {text[-80:]!r}")
    out = []
    for record in text[:-1].split("\0"):
        match = _FIND.match(record)
        if not match:
            raise ParseError(f"find listing: unexpected record {record!r:.120}")
        out.append(ListedFile(match.group(3), match.group(1), to_int(match.group(2), "find listing size")))
    return out


def parse_stat(text: str) -> dict:
    """``stat -c STAT_SIZE_FORMAT files...`` -> {path: bytes}; files stat could not find are absent."""
    sizes = {}
    for line in text.splitlines():
        match = _STAT_LINE.match(line)
        if not match:
            raise ParseError(f"stat: unexpected line {line!r:.120}")
        sizes[match.group(2)] = to_int(match.group(1), f"stat: size of {match.group(2)}")
    return sizes


def parse_count(text: str, what: str) -> int:
    """The one count ``wc -l`` or ``grep -c`` printed; anything else is a ParseError."""
    value = text.strip()
    number = to_int(value, what) if value else None
    if number is None:  # empty, or N/A (which to_int reads as "unknown"): neither is a count
        raise ParseError(f"{what}: expected a count, got {value!r:.80}")
    return number
