"""What a check can ask to read on a node, and what comes back.

A check declares its readings as data (``File``, ``Glob``, ``Exists``, ``Command``,
``Docker``); the gatherer turns every reading of every check of a node into one remote
script, so a node costs one SSH round trip per phase however many checks run. Judges get
the results by the names they declared and never do I/O themselves.
"""
from __future__ import annotations

from dataclasses import dataclass, field

OUTPUT_CAP_BYTES = 4 << 20  # per reading; more is cut on the node and the reading is not judged


@dataclass(frozen=True)
class File:
    """Text of one file (``None`` content when it does not exist)."""

    path: str


@dataclass(frozen=True)
class Exists:
    """Whether a path exists (for device nodes such as ``/dev/kfd`` that must not be read)."""

    path: str


@dataclass(frozen=True)
class Glob:
    """Every path matching a shell glob, with file contents (a directory reads as error "is a directory")."""

    pattern: str


@dataclass(frozen=True)
class Command:
    """Run argv on the node (each word shell-quoted by the gatherer) under its own timeout."""

    argv: tuple
    timeout_s: float | None = None

    def __post_init__(self):
        object.__setattr__(self, "argv", tuple(str(a) for a in self.argv))


def sh(script: str, timeout_s: float | None = None) -> Command:
    """A check-authored shell snippet; put inventory values in it only via ``shell.quote``."""
    return Command(("sh", "-c", script), timeout_s)


@dataclass(frozen=True)
class Docker:
    """The node's Docker engine, read with the Docker SDK: all containers and recent events."""

    events_since_s: int = 1800


class ReadingUnavailable(Exception):
    """A reading could not be taken (timeout, transport failure); the judge's result is ERROR."""


@dataclass
class FileReading:
    path: str
    content: str | None  # None: the path does not exist
    error: str | None = None  # set when it exists but could not be read (EINVAL, EACCES)
    truncated: bool = False

    @property
    def exists(self) -> bool:
        return self.content is not None or self.error is not None

    def text(self) -> str:
        """Stripped content; a missing, unreadable or cut-off file raises ReadingUnavailable."""
        if self.truncated:
            raise ReadingUnavailable(f"{self.path}: larger than the {OUTPUT_CAP_BYTES >> 20} MiB output cap "
                                     "(cut off, not judged)")
        if self.error:
            raise ReadingUnavailable(f"{self.path}: {self.error}")
        if self.content is None:
            raise ReadingUnavailable(f"{self.path}: no such file")
        return self.content.strip()


@dataclass
class CommandReading:
    command: str
    rc: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    truncated: bool = False
    duration_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out and not self.truncated

    def output(self) -> str:
        """stdout of a successful, complete run; otherwise ReadingUnavailable with the reason."""
        if self.truncated:
            raise ReadingUnavailable(f"`{self.command}` printed more than the {OUTPUT_CAP_BYTES >> 20} MiB "
                                     "output cap (cut off, not judged)")
        if self.timed_out:
            raise ReadingUnavailable(f"`{self.command}` timed out and was killed")
        if self.rc == 127:
            raise ReadingUnavailable(f"`{self.command}`: command not found ({self.stderr.strip()[:200]})")
        if self.rc != 0:
            detail = (self.stderr or self.stdout).strip().splitlines()
            raise ReadingUnavailable(
                f"`{self.command}` exited {self.rc}: {detail[-1][:200] if detail else 'no output'}")
        return self.stdout


@dataclass
class DockerReading:
    containers: list = field(default_factory=list)  # docker SDK container attrs (dicts)
    events: list = field(default_factory=list)  # docker SDK event dicts
    now: float = 0.0  # engine-side "now" the events window was taken against


@dataclass
class Unavailable:
    """Placeholder result for a reading that never arrived; reading it raises."""

    reason: str

    def __getattr__(self, name):
        raise ReadingUnavailable(self.reason)


class Readings:
    """The results a judge sees, by the names its check declared."""

    def __init__(self, results: dict):
        self._results = results

    def __getitem__(self, name):
        value = self._results[name]
        if isinstance(value, Unavailable):
            raise ReadingUnavailable(value.reason)
        return value

    def get(self, name, default=None):
        try:
            return self[name]
        except (KeyError, ReadingUnavailable):
            return default

    def raw(self) -> dict:
        return dict(self._results)
