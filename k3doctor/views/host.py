"""The host around the GPUs (reference §12): memory, free space where a run writes, the checkpoint copy.

Each view comes with the reading that produces it, so a gather script and the code that reads its
output stay side by side. Every reading is one command in the node's single gather script: sizes of
all shards from one ``find``, free space of all directories from one ``stat -f`` loop; the Docker
root's ``stat -f`` gets the root from the engine's API (no ``docker`` CLI started on the node).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from k3doctor.parsers import ParseError
from k3doctor.parsers.fsinfo import FIND_FORMAT, STATFS_FORMAT, StatFs, parse_find_listing, parse_statfs_line
from k3doctor.parsers.meminfo import parse_meminfo
from k3doctor.readings import DOCKER_ROOT_DIR, Command, EngineFactCommand, File, sh, sh_with_fact
from k3doctor.shell import quote

MEMINFO = File("/proc/meminfo")
SHARD_GLOB = "*.safetensors"
_PRESENT, _ABSENT = "present", "absent"
_ABSENT_LINE = re.compile(r"^absent (/.*)$")
_NUMBERED = re.compile(r"^(.*)-(\d+)-of-(\d+)\.safetensors$")  # Hugging Face shard naming


@dataclass(frozen=True)
class Memory:
    """/proc/meminfo figures in bytes (§12: MemTotal and SwapTotal on every node)."""

    mem_total: int
    swap_total: int
    mem_available: int | None = None
    swap_free: int | None = None


def memory(reading) -> Memory:
    """The Memory of a /proc/meminfo FileReading; ParseError when cut off or not meminfo."""
    if reading.truncated:
        raise ParseError("/proc/meminfo was cut off")
    values = parse_meminfo(reading.text())
    return Memory(values["MemTotal"], values["SwapTotal"], values.get("MemAvailable"), values.get("SwapFree"))


# ------------------------------------------------------------------------------------------ free space

@dataclass(frozen=True)
class Space:
    """A directory and the file system it lives on (``fs`` None: the directory does not exist)."""

    path: str
    fs: StatFs | None


def _statfs_each(words: str) -> str:
    return (f"for p in {words}; do if [ -e \"$p\" ]; then stat -f -c '{STATFS_FORMAT}' -- \"$p\" || exit; "
            "else printf 'absent %s\\n' \"$p\"; fi; done")


def free_space(paths) -> Command:
    """statvfs of every path (``absent PATH`` for one that does not exist), one line each."""
    return sh(_statfs_each(" ".join(quote(p) for p in paths)))


def docker_root_free_space() -> EngineFactCommand:
    """statvfs of the Docker root the engine reports (``DockerRootDir`` of the Docker API, the script's $1)."""
    return sh_with_fact(_statfs_each('"$1"'), DOCKER_ROOT_DIR)


def spaces(reading, expected: int, label: str = "stat -f") -> list:
    """The Space of each path of a free_space / docker_root_free_space reading, in order."""
    if reading.truncated:
        raise ParseError(f"{label} output was cut off")
    lines = reading.output(label).splitlines()
    if len(lines) != expected:
        raise ParseError(f"stat -f: expected {expected} line(s), got {len(lines)}: {reading.stdout[-120:]!r}")
    out = []
    for line in lines:
        absent = _ABSENT_LINE.match(line)
        fs = None if absent else parse_statfs_line(line)
        out.append(Space(absent.group(1), None) if absent else Space(fs.path, fs))
    return out


# ------------------------------------------------------------------------------------------ checkpoint

@dataclass(frozen=True)
class Checkpoint:
    """A node's copy of the checkpoint directory: its ``*.safetensors`` entries by name."""

    path: str
    present: bool  # the directory exists
    files: dict = field(default_factory=dict)  # name -> bytes, regular files (symlinks followed)
    other: dict = field(default_factory=dict)  # name -> find type letter: broken symlink (l), directory (d) ...

    @property
    def total_bytes(self) -> int:
        return sum(self.files.values())


def checkpoint_listing(path: str) -> Command:
    """Names, types and sizes of the directory's shards in one ``find`` (symlinks followed, so a
    Hugging Face snapshot of links into blobs/ reads at the blobs' sizes)."""
    d = quote(path)
    return sh(f"d={d}; if [ -d \"$d\" ]; then printf '{_PRESENT}\\0'; find -L \"$d\" -mindepth 1 -maxdepth 1 "
              f"-name '{SHARD_GLOB}' -printf '{FIND_FORMAT}'; else printf '{_ABSENT}\\0'; fi")


def checkpoint(reading, path: str) -> Checkpoint:
    """The Checkpoint of a checkpoint_listing reading; ParseError when cut off or garbled."""
    if reading.truncated:
        raise ParseError(f"listing of {path} was cut off")
    text = reading.output(f"find {path}")
    head, sep, rest = text.partition("\0")
    if not sep or head not in (_PRESENT, _ABSENT) or (head == _ABSENT and rest):
        raise ParseError(f"listing of {path}: unexpected output {text[:120]!r}")
    files, other = {}, {}
    for entry in parse_find_listing(rest):
        if entry.name in files or entry.name in other:
            raise ParseError(f"listing of {path}: {entry.name} listed twice")
        if entry.type == "f":
            files[entry.name] = entry.size
        else:
            other[entry.name] = entry.type
    return Checkpoint(path, head == _PRESENT, files, other)


def shard_number(name: str):
    """(stem, index, of) of a Hugging Face shard name ``<stem>-00042-of-00096.safetensors``, else None."""
    match = _NUMBERED.match(name)
    if not match:
        return None
    index, of = int(match.group(2)), int(match.group(3))
    return (match.group(1), index, of) if 1 <= index <= of else None
