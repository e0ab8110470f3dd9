"""What a check can ask to read on a node, and what comes back.

A check declares its readings as data (``File``, ``Glob``, ``Exists``, ``Command``,
``InContainer``, ``EngineFactCommand``, ``Docker``, ``ContainerInspect``); the gatherer turns
every reading of every check of a node into one remote script, so a node costs one SSH round
trip per phase however many checks run. Judges get the results by the names they declared and never do I/O themselves.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from k3doctor.redaction import DockerFields

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
    """Run argv on the node (each word shell-quoted by the gatherer) under its own timeout.

    ``saved``: what a saved copy of the output may keep, for output that can hold secrets
    (e.g. ``redaction.EnvValues`` for ``env``); None: all of it."""

    argv: tuple
    timeout_s: float | None = None
    saved: object = None

    def __post_init__(self):
        object.__setattr__(self, "argv", tuple(str(a) for a in self.argv))


@dataclass(frozen=True)
class InContainer(Command):
    """``docker exec CONTAINER argv...`` on the node (``argv`` holds the whole command line, as it reads).

    The gatherer runs every such reading of one container in a single exec through the node's Docker API
    (k3doctor/gather/engine_reads.py: no docker CLI on the node; each exec costs the engine a runtime start, ~90 ms
    of CPU); the readings come back one by one, each with its own exit status, output (its share of one
    reading's cap) and timeout. The container's shell frames them: it needs ``sh``, ``mktemp``, ``wc``,
    ``head``, ``cat`` and a writable ``$TMPDIR``, ``/tmp`` or ``/dev/shm`` (else every reading of that
    container is an ERROR saying so), and a coreutils-style ``timeout`` for the per-reading and whole-script
    timeouts (without one, only the exec's own bound ends the reading of it, and what it started in the
    container runs on until it ends)."""

    def __post_init__(self):
        super().__post_init__()
        if len(self.argv) < 4 or self.argv[:2] != ("docker", "exec") or self.argv[2].startswith("-"):
            raise ValueError(f"not a `docker exec CONTAINER COMMAND...`: {self.argv!r}")

    @property
    def container(self) -> str:
        return self.argv[2]

    @property
    def inner(self) -> tuple:
        """The command run inside the container."""
        return self.argv[3:]


def in_container(container: str, *argv, saved=None) -> InContainer:
    """Run ``argv`` inside ``container`` (see :class:`InContainer`)."""
    return InContainer(("docker", "exec", container, *argv), saved=saved)


def sh(script: str, timeout_s: float | None = None) -> Command:
    """A check-authored shell snippet; put inventory values in it only via ``shell.quote``."""
    return Command(("sh", "-c", script), timeout_s)


# A ROCm tool where the inventory says, else by its name on PATH (reference §29: ROCm from a pip wheel has no
# /opt/rocm, its tools live in a venv's bin). Takes the configured path as $1 and shifts it off, leaving the tool
# in $t; exits 127 saying where it looked.
FIND_TOOL = ('p=$1; shift; t=$p; [ -x "$t" ] || t=$(command -v "${p##*/}") || { echo "k3doctor: ${p##*/} is neither '
             'at $p nor on PATH ($PATH)" >&2; exit 127; }; ')
IN_CONTAINER = "container:"  # inventory `tools: {amd_smi: "container:amd-smi"}`: only the engine's image has it
TOOL_EXEC = FIND_TOOL + 'exec "$t" "$@"'  # the tool found, then run in the shell's place
TOOL_NAME = "k3doctor-tool"  # the script's $0


def tool_script(path: str, script: str, *args, container: str | None = None) -> Command:
    """``script`` (starting with FIND_TOOL) for the tool configured as ``path``: on the node, or - for a path
    ``container:<name>`` - inside ``container``, found on that container's own PATH."""
    if path.startswith(IN_CONTAINER):
        if not container:
            raise ValueError(f"tool {path!r} runs in the engine's container, but no container is configured")
        return in_container(container, "sh", "-c", script, TOOL_NAME, path[len(IN_CONTAINER):], *args)
    return Command(("sh", "-c", script, TOOL_NAME, path, *args))


def beside_tool(path: str, *argv: str, container: str | None = None) -> Command:
    """``argv`` run where the tool configured as ``path`` runs: on the node, or inside ``container`` for a
    ``container:`` tool - so that what it reads (the caller's uid, its PID namespace) is what the tool saw."""
    if path.startswith(IN_CONTAINER):
        if not container:
            raise ValueError(f"tool {path!r} runs in the engine's container, but no container is configured")
        return in_container(container, *argv)
    return Command(tuple(argv))


def tool(path: str, *args, container: str | None = None) -> Command:
    """Run the ROCm tool configured as ``path`` (inventory ``tools``) with ``args``, found as FIND_TOOL says."""
    return tool_script(path, TOOL_EXEC, *args, container=container)


def tool_call(argv: tuple) -> tuple | None:
    """(path, args) of a host command made by :func:`tool`, else None: the node's reader finds such a tool itself
    as FIND_TOOL does (k3doctor/remote/node_reader.py ``find_tool``), without a shell in between."""
    if len(argv) >= 5 and argv[:4] == ("sh", "-c", TOOL_EXEC, TOOL_NAME):
        return argv[4], argv[5:]
    return None


DOCKER_ROOT_DIR = "DockerRootDir"  # the engine's data root (``info()``)
CONTAINER_PID = "State.Pid"  # a container's main process on the host, 0 when it is not running (its inspect)
# The host path of the mount that holds a container's HF hub cache ($HF_HUB_CACHE, else $HF_HOME/hub): where a
# created container's drafter is read on the node before the container runs (its inspect: Env and Mounts).
CONTAINER_HF_CACHE = "HF cache mount"
ENGINE_FACTS = (DOCKER_ROOT_DIR, CONTAINER_PID, CONTAINER_HF_CACHE)
CONTAINER_FACTS = (CONTAINER_PID, CONTAINER_HF_CACHE)


@dataclass(frozen=True, kw_only=True)
class EngineFactCommand(Command):
    """``argv`` run on the node with one fact of its Docker engine as one more, last argument.

    The fact comes from the Docker API the gatherer reads anyway (one ``info()``, one inspect per
    container and node, shared with the ``Docker`` and ``ContainerInspect`` readings), not from a
    ``docker`` CLI started on the node for it (a 42 MB Go binary, 30-60 ms of the node's CPU each on the test rack). It
    travels as an argument, never as script text. ``fact``: one of ``ENGINE_FACTS``; ``container``
    names the container whose ``State.Pid`` it is. The reading is a ``CommandReading``; a fact the
    engine cannot give (engine down, no such container) is ``Unavailable`` naming why."""

    fact: str
    container: str | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.fact not in ENGINE_FACTS:
            raise ValueError(f"unknown engine fact {self.fact!r} (known: {', '.join(ENGINE_FACTS)})")
        if (self.fact in CONTAINER_FACTS) != bool(self.container):
            raise ValueError(f"engine fact {self.fact} needs a container" if not self.container
                             else f"engine fact {self.fact} is not a container's")


def sh_with_fact(script: str, fact: str, container: str | None = None) -> EngineFactCommand:
    """A check-authored shell snippet that gets an engine fact as ``$1`` (``sh -c SCRIPT k3doctor FACT``)."""
    return EngineFactCommand(("sh", "-c", script, "k3doctor"), fact=fact, container=container)


@dataclass(frozen=True)
class Docker:
    """The node's Docker engine, read with the Docker SDK: all containers and recent events.

    ``saved``: the fields a saved copy keeps (command lines, labels, mounts of other users'
    containers are redacted)."""

    events_since_s: int = 1800
    saved: DockerFields = DockerFields()


@dataclass(frozen=True)
class ContainerInspect:
    """One container through the Docker API (``docker inspect``), plus the launch command out of a
    script inside it; only the values of the ``keep`` variables survive the reading (the rest by name)."""

    container: str
    keep: tuple = ()
    launch_script: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "keep", tuple(sorted(set(self.keep))))


class ReadingUnavailable(Exception):
    """A reading could not be taken (timeout, transport failure); the judge's result is ERROR."""


class NotEvaluated(ReadingUnavailable):
    """A reading left out because a prerequisite failed on the node; the judge's result is SKIP."""


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

    @property
    def tool_missing(self) -> bool:
        """The tool ran through FIND_TOOL was neither where configured nor on PATH (its own exit, not the tool's)."""
        return self.rc == 127 and self.stderr.startswith("k3doctor: ") and " is neither at " in self.stderr

    def output(self, label: str | None = None) -> str:
        """stdout of a successful, complete run; otherwise ReadingUnavailable with the reason (output cut
        at the cap is a partial answer: never judged as if it were all of it). ``label`` names the command
        in that reason instead of its full text (for long check-authored scripts)."""
        name = label or f"`{self.command}`"
        if self.truncated:
            raise ReadingUnavailable(f"{name} printed more than the {OUTPUT_CAP_BYTES >> 20} MiB output cap "
                                     "(cut off, not judged)")
        if self.timed_out:
            raise ReadingUnavailable(f"{name} timed out and was killed")
        if self.rc == 127:
            raise ReadingUnavailable(f"{name}: command not found ({self.stderr.strip()[:200]})")
        if self.rc != 0:
            detail = (self.stderr or self.stdout).strip().splitlines()
            raise ReadingUnavailable(
                f"{name} exited {self.rc}: {detail[-1][:200] if detail else 'no output'}")
        return self.stdout


@dataclass
class DockerReading:
    containers: list = field(default_factory=list)  # docker SDK container attrs (dicts)
    events: list = field(default_factory=list)  # docker SDK event dicts
    now: float = 0.0  # engine-side "now" the events window was taken against


@dataclass
class ContainerReading:
    record: dict | None  # k3doctor.views.container.record_from_inspect; None: no such container
    script: dict | None = None  # {"path", "launch": argv or None, "error": why it was not read or None}


@dataclass
class Unavailable:
    """Placeholder result for a reading that never arrived; reading it raises."""

    reason: str

    def __getattr__(self, name):
        raise self.exception()

    def exception(self) -> ReadingUnavailable:
        return ReadingUnavailable(self.reason)


@dataclass
class Withheld(Unavailable):
    """Placeholder for a reading whose prerequisite failed on the node; reading it raises NotEvaluated."""

    def exception(self) -> ReadingUnavailable:
        return NotEvaluated(self.reason)


class Readings:
    """The results a judge sees, by the names its check declared."""

    def __init__(self, results: dict):
        self._results = results

    def __getitem__(self, name):
        value = self._results[name]
        if isinstance(value, Unavailable):
            raise value.exception()
        return value

    def not_evaluated(self, *names) -> str | None:
        """Why one of these readings was withheld (a prerequisite failed on the node), else None."""
        return next((self._results[n].reason for n in names if isinstance(self._results.get(n), Withheld)), None)

    def get(self, name, default=None):
        try:
            return self[name]
        except (KeyError, ReadingUnavailable):
            return default

    def raw(self) -> dict:
        return dict(self._results)
