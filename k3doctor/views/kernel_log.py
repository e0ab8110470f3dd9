"""The kernel-log view checks share: one node's current-boot kernel log, when amdgpu last loaded, ages.

There is one ``dmesg`` reading per node (``DMESG``, declared by every check that needs it and
gathered once) plus ``/proc/uptime`` and the boot id.  sysfs has no module load time, so "when
did amdgpu load" is amdgpu_init()'s line (``LOAD_LINE``, printed once per module load) in the
log; its monotonic stamp against /proc/uptime gives seconds since the load (§5, §6).  Only the
current boot is judged: a journalctl capture spanning boots is cut at its last boot marker, and
one whose last marker names another boot than ``/proc/sys/kernel/random/boot_id`` is refused (§10).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from k3doctor.parsers import ParseError
from k3doctor.parsers.dmesg import boot_marker, parse_log
from k3doctor.readings import Command, File, ReadingUnavailable

LOAD_LINE = "amdgpu kernel modesetting enabled"
DMESG = Command(("dmesg",))
# The same ring buffer, only the lines logged at err, crit, alert or emerg: a plain `dmesg` prints no level,
# and "an error line no rule knows" (issue 21) needs the level the driver gave it (dev_err, pr_err, DRM_ERROR).
ERROR_LEVELS = ("err", "crit", "alert", "emerg")
DMESG_ERRORS = Command(("dmesg", f"--level={','.join(ERROR_LEVELS)}"))
# Who printed a line, for that rule: amdgpu (and KFD, which prints through it: `amdgpu: `, `kfd kfd: amdgpu: `),
# DRM on amdgpu's behalf (`[drm:<func> [amdgpu]]`), the IFoE fabric driver and UALink.
GPU_SOURCE = re.compile(r"^(?:amdgpu\b|kfd\b|amdkfd\b|ifoe\b|ualink\b|\[drm:[\w.]{1,80} \[(?:amdgpu|ifoe)\]\])",
                        re.IGNORECASE)
_SHAPE_PARTS = (  # what varies between two lines of one message: addresses, ids, numbers
    (re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"), "<bdf>"),
    (re.compile(r"\{\d{1,20}\}"), "{<event>}"),
    (re.compile(r"0x[0-9a-fA-F]{1,16}"), "<hex>"),
    (re.compile(r"\d{1,20}"), "<n>"),
)
UPTIME = File("/proc/uptime")
BOOT_ID = File("/proc/sys/kernel/random/boot_id")
CLOCK_SLACK_S = 5.0  # dmesg and /proc/uptime are read moments apart: a stamp this far past uptime is fine
BOOT_ID_SHAPE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")  # as the kernel prints it


def is_amdgpu_load(line) -> bool:
    """amdgpu_init()'s line: the one mark of a module load (sysfs keeps no load time)."""
    return LOAD_LINE in line.text


def read_uptime(reading):
    """Seconds since boot from a /proc/uptime reading; ``(None, why)`` when unreadable or absurd."""
    if reading is None or reading.content is None:
        return None, "/proc/uptime not readable"
    try:
        value = float(reading.content.split()[0])
    except (ValueError, IndexError):
        return None, f"/proc/uptime read {reading.content[:60]!r}"
    if not 0 <= value < 1e9:
        return None, f"/proc/uptime read {reading.content[:60]!r}"
    return value, f"up {value:.0f}s"


def read_boot_id(reading) -> str:
    """The current boot's id from its reading. One that did not read (missing, cut off, or an error such as the
    ENOMEM a reader asking /proc/sys for 4 MiB gets, reference §31.1) raises ReadingUnavailable, one that is
    not a boot id ParseError: a log judged without it could be another boot's (§10)."""
    text = reading.text()
    if not BOOT_ID_SHAPE.fullmatch(text):
        raise ParseError(f"{BOOT_ID.path} read {text[:60]!r}, not a boot id")
    return text


@dataclass
class KernelLog:
    """A node's kernel log lines of the current boot, with what is known about the clock."""

    lines: list  # parsers.dmesg.LogLine, current boot only
    uptime_s: float | None = None
    boot_id: str | None = None
    earlier_boots: int = 0  # lines of previous boots left out (journalctl captures)

    @classmethod
    def read(cls, dmesg, uptime=None, boot_id: str | None = None) -> KernelLog:
        """From the readings and the current boot's id (``read_boot_id``; None: a capture that names another
        boot is not looked for); an unreadable dmesg raises ReadingUnavailable, a non-log ParseError."""
        lines = parse_log(dmesg.output())
        current = boot_id
        cut, last_boot = 0, None
        for index, line in enumerate(lines):
            marker = boot_marker(line)
            if marker is not None:
                cut, last_boot = index + 1, marker[1]
        if last_boot and current and last_boot != current.replace("-", "").lower():
            raise ParseError(f"kernel log: its last boot ({last_boot}) is not the current boot ({current})")
        if cut and cut == len(lines):
            raise ParseError("kernel log: no line of the current boot after its last boot marker")
        return cls(lines[cut:], read_uptime(uptime)[0], current, cut)

    def amdgpu_loads(self) -> list:
        """Indices of amdgpu_init()'s lines, in log order (one per module load)."""
        return [i for i, line in enumerate(self.lines) if is_amdgpu_load(line)]

    def first(self, predicate):
        """(seconds since boot, line) of the first line with a monotonic stamp matching ``predicate``."""
        for line in self.lines:
            if line.seconds is not None and predicate(line):
                return line.seconds, line
        return None

    def age_s(self, seconds):
        """How long ago a line with monotonic stamp ``seconds`` was logged; None when it cannot be told."""
        if seconds is None or self.uptime_s is None or seconds > self.uptime_s + CLOCK_SLACK_S:
            return None
        return max(0.0, self.uptime_s - seconds)


def seconds_since_amdgpu_load(uptime_reading, dmesg_reading) -> tuple:
    """(seconds since amdgpu was last loaded, how that was found); None when it cannot be told.

    A wrapped ring buffer, a restricted dmesg or a wall-clock-only log leaves it unknown.
    """
    if uptime_reading is None or uptime_reading.content is None or dmesg_reading is None or not dmesg_reading.ok:
        return None, "amdgpu load time unknown (/proc/uptime and dmesg not readable)"
    uptime, why = read_uptime(uptime_reading)
    if uptime is None:
        return None, f"amdgpu load time unknown ({why})"
    try:
        log = KernelLog.read(dmesg_reading, uptime_reading)
    except (ReadingUnavailable, ParseError) as exc:
        return None, f"amdgpu load time unknown ({exc})"
    loads = log.amdgpu_loads()
    stamp = log.lines[loads[-1]].seconds if loads else None
    if stamp is None:
        return None, f"amdgpu load time unknown (no timestamped '{LOAD_LINE}' line in dmesg)"
    since = max(0.0, uptime - stamp)
    return since, f"amdgpu loaded {since:.0f}s ago"


def message_shape(text: str) -> str:
    """A line's message with what varies between its instances (PCI address, event id, numbers) blanked out."""
    for pattern, blank in _SHAPE_PARTS:
        text = pattern.sub(blank, text)
    return " ".join(text.split())[:200]


def error_lines(log: KernelLog, errors_reading) -> list:
    """Indices into ``log.lines`` of the lines logged at err/crit/alert/emerg.

    A ``dmesg --decode`` capture carries each line's level; a plain one does not, and the node's
    ``dmesg --level=err,crit,alert,emerg`` reading says which lines those are (matched by their
    text, so every prefix flavour works).  Raises ReadingUnavailable when neither can tell.
    """
    if any(line.level is not None for line in log.lines):
        return [i for i, line in enumerate(log.lines) if line.level in ERROR_LEVELS]
    if errors_reading is None:
        raise ReadingUnavailable(f"`{' '.join(DMESG_ERRORS.argv)}` was not read")
    text = errors_reading.output()
    if not text.strip():
        return []  # no line at those levels: dmesg prints nothing and exits 0
    wanted = {line.raw for line in parse_log(text)}
    return [i for i, line in enumerate(log.lines) if line.raw in wanted]
