"""The versions a rule depends on, read once per node (issue 21 item 1; reference §29, §0.2, §0.4).

Several rules of §29 hold only for some versions of the software they judge: RCCL turns MNNVL and
cuMem on by itself since rocm-systems PR #8444, ``RCCL_USE_AMD_SMI_LIB=1`` stopped disabling UALoE
with PR #9464, the MSCCL/NPKit variables are inert from ROCm 7.13, ATOM moved its DSpark variables to
``--dspark-config`` (``ecb8e6dae``), aiter breaks stale JIT locks since #4153.  So the doctor reads,
in the container the engine runs in (tools found through the container's own ``PATH``: ROCm in a pip
wheel has no ``/opt/rocm``, §29):

- ``rocm``: ``$ROCM_PATH/.info/version`` (default ``/opt/rocm``),
- ``rccl``: the file name of ``librccl.so.<major>.<minor>.<XYYZZ>`` in ROCm's ``lib`` - RCCL's soname
  carries the ROCm release it was built for (``librccl.so.1.0.70100`` = 7.1.0),
- ``aiter`` and ``atom``: their Python package metadata (``importlib.metadata``),
- ``amdsmi``: ``amd-smi version``'s ``AMDSMI Tool: <version>``,

and on the host ``kernel`` (``/proc/sys/kernel/osrelease``).  A version that cannot be read is
``None``: the rules that depend on it then apply their strict side and say so.

The PR or commit where a rule's edge lies is a source fact; the release that first shipped it is
not published in the sources (§27 style open question), so each edge is a parameter whose documented
default is used where the reference gives one (ROCm 7.13 for MSCCL/NPKit) and ``None`` (unknown:
strict) elsewhere.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from k3doctor.parsers import ParseError
from k3doctor.readings import File, in_container

COMPONENTS = ("rocm", "rccl", "aiter", "atom", "amdsmi", "kernel")
KERNEL_RELEASE = File("/proc/sys/kernel/osrelease")
# Prints ``name=value`` lines for what it finds and nothing for what it does not; always exits 0.
_PROBE = r"""r=${ROCM_PATH:-/opt/rocm}
[ -r "$r/.info/version" ] && echo "rocm=$(head -c 80 "$r/.info/version")"
for f in "$r"/lib/librccl.so.*.*; do [ -e "$f" ] && echo "rccl=${f##*/}"; break; done
py=$(command -v python3 || command -v python) && "$py" - 2>/dev/null <<'EOF'
import importlib.metadata as m
for key, names in (("aiter", ("amd-aiter", "aiter")), ("atom", ("atom", "amd-atom"))):
    for name in names:
        try:
            print(f"{key}={m.version(name)}")
            break
        except Exception:
            pass
EOF
s=$(command -v amd-smi) && echo "amdsmi=$("$s" version 2>/dev/null | head -n 1 | head -c 200)"
exit 0"""
_NUMBERS = re.compile(r"(\d{1,6})(?:\.(\d{1,6}))?(?:\.(\d{1,6}))?")
_RCCL_SONAME = re.compile(r"^librccl\.so\.\d{1,3}\.\d{1,3}\.(\d{3,6})$")
_AMDSMI_TOOL = re.compile(r"AMDSMI Tool:\s{0,4}(\d{1,4}\.\d{1,4}(?:\.\d{1,6})?)")


# Every libamd_smi.so.<major> on the container's library path ($LD_LIBRARY_PATH, then $ROCM_PATH/lib): amd-smi 27.0
# (ROCm 10.0) renamed its SONAME libamd_smi.so.26 -> .27, so an image and a host ROCm mixed through
# LD_LIBRARY_PATH can load one's library under the other's tools (§29). One path a line; always exits 0.
_AMDSMI_LIBS = r"""r=${ROCM_PATH:-/opt/rocm}
IFS=:
for d in $LD_LIBRARY_PATH "$r/lib"; do
  [ -n "$d" ] || continue
  for f in "$d"/libamd_smi.so.[0-9]*; do [ -e "$f" ] && printf '%s
' "$f"; done
done
exit 0"""
_AMDSMI_LIB = re.compile(r"^(.{1,4096})/libamd_smi\.so\.(\d{1,4})(?:\.\d{1,6}){0,3}$")


def amdsmi_libs(container: str):
    """The reading: the libamd_smi files on ``container``'s library path."""
    return in_container(container, "sh", "-c", _AMDSMI_LIBS)


def parse_amdsmi_libs(text: str) -> dict:
    """``{SONAME major: [directories]}`` from the listing; a line it cannot have printed is a ParseError."""
    majors: dict = {}
    for line in text.splitlines():
        match = _AMDSMI_LIB.match(line)
        if not match:
            raise ParseError(f"libamd_smi listing: unexpected line {line[:80]!r}")
        dirs = majors.setdefault(int(match.group(2)), [])
        if match.group(1) not in dirs:
            dirs.append(match.group(1))
    return majors


def probe(container: str):
    """The reading: the version probe run in ``container``."""
    return in_container(container, "sh", "-c", _PROBE)


def parse_version(text: str) -> tuple | None:
    """``"7.1.0-12345"`` -> ``(7, 1, 0)``; ``None`` when it starts with no number."""
    match = _NUMBERS.match(text.strip()) if text else None
    if match is None:
        return None
    return tuple(int(part) for part in match.groups() if part is not None)


def version_text(version: tuple | None) -> str:
    return "unknown" if version is None else ".".join(map(str, version))


@dataclass(frozen=True)
class Found:
    """One component's version and where it was read (shown in every finding that depends on it)."""

    version: tuple | None
    source: str


def parse_probe(text: str, kernel_release: str | None) -> dict:
    """component -> Found for the probe's output and the host's kernel release; a line the probe
    cannot have printed is a ParseError (garbled output is never read as "version unknown")."""
    found = {name: Found(None, "not found") for name in COMPONENTS}
    for line in text.splitlines():
        name, eq, value = line.partition("=")
        if not line.strip():
            continue
        if not eq or name not in COMPONENTS or name == "kernel":
            raise ParseError(f"version probe: unexpected line {line[:80]!r}")
        value = value.strip()
        if name == "rccl":
            soname = _RCCL_SONAME.match(value)
            xyyzz = int(soname.group(1)) if soname else None
            version = None if xyyzz is None else (xyyzz // 10000, xyyzz // 100 % 100, xyyzz % 100)
            found[name] = Found(version, value)
        elif name == "amdsmi":
            tool = _AMDSMI_TOOL.search(value)
            found[name] = Found(parse_version(tool.group(1)) if tool else None, f"amd-smi version: {value[:80]}")
        else:
            found[name] = Found(parse_version(value), f"{name} {value[:60]}")
    if kernel_release:
        found["kernel"] = Found(parse_version(kernel_release), f"kernel {kernel_release.strip()[:60]}")
    return found


@dataclass(frozen=True)
class Edge:
    """Where a rule changes: ``component`` from ``version`` on (None: not known, so the strict side holds)."""

    component: str
    version: tuple | None
    what: str  # the change, with its PR / commit and date (§29)


def side(edge: Edge, found: dict) -> tuple:
    """("before" | "since" | None, why): which side of ``edge`` the node is on; None = cannot be told."""
    have = found.get(edge.component, Found(None, "not read"))
    if have.version is None:
        return None, f"{edge.component} version unknown ({have.source}): the strict rule applies"
    if edge.version is None:
        return None, (f"{edge.component} {version_text(have.version)}: the first release with {edge.what} is not "
                      "known (set it in version_edges): the strict rule applies")
    where = "before" if have.version < edge.version else "since"
    return where, (f"{edge.component} {version_text(have.version)} ({have.source}) is {where} "
                   f"{version_text(edge.version)}, {edge.what}")
