"""Platforms as data: one YAML file per platform (reference §29, §30, §31.4) - its gfx target as KFD topology
reports it, the HSA_OVERRIDE_GFX_VERSION that matches it, the PCI device ids that tell it from a sibling of the
same target (MI300X from MI300A), GPUs per node, HBM per GPU, the fabric between its GPUs, the amdgpu load and
tuning parameters it needs, the partition layout TP8 needs, and the checks and environment rows that do not
apply there. Every number a check needs of a platform is read from its file, never written in a check, so a
new platform is one file (docs/adding-a-platform.md).

Each file is validated against :data:`KEYS` when it is read: an unknown key, a value of the wrong type and
(once the checks are registered, :func:`problems`) a check or remediation code that does not exist are each
one ``file:line: key: message``, and the command line exits 3 on them (cli/options.py ``load_plugins``) -
a mistyped key must never be silently ignored.
"""
from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from k3doctor.inventory.safeyaml import SchemaReader, YAMLInputError, compose, pairs

DIR = Path(__file__).parent
DEFAULT = "gfx1250"
FABRICS = ("xgmi", "ualink")  # what joins a node's GPUs: XGMI full mesh (MI3xx, §30, §31.4) or UALink (§6)


class PlatformError(YAMLInputError):
    """Every problem of the platform files, one ``file:line: key: message`` per line."""


@dataclass(frozen=True)
class Platform:
    name: str
    gfx: str
    gfx_target_version: int
    hsa_override_gfx_version: str
    gpus_per_node: int
    hbm_gib_per_gpu: int | None
    fabric: str  # one of FABRICS: xgmi-links judges an XGMI node, the UALink checks a UALink one
    device_ids: frozenset  # PCI device ids of its GPUs (KFD `device_id`); empty: not judged
    not_for_platform: frozenset
    amdgpu_load_params: tuple  # (name, value) amdgpu must be loaded with here (gfx1250 bring-up, §5)
    amdgpu_tuned_params: tuple  # (name, value) of a tray tuned for this boot (perf_setup, §5); () none
    ifoe: bool  # UALink over Ethernet: the ifoe module must be loaded before amdgpu (§5)
    env_rules_off: frozenset  # env-versions rule families (remediation codes) that do not apply here
    tp_partition: tuple | None = None  # (compute, memory) partition every GPU must be in; None: uniform only
    # launch-config: the wide-EP Docker launch (run options, DP ranks, ports, data-plane NIC, §13-§18) is judged
    # beside the recipe; else the launch is the recipe's alone, read from the server wherever it runs (§30)
    wide_ep_launch: bool = False
    # key -> its line in the file: for the problems found once the checks are known (problems())
    line: dict = field(default_factory=dict, compare=False)

    def applies(self, check_name: str) -> bool:
        return check_name not in self.not_for_platform

    @property
    def path(self) -> str:
        return str(DIR / f"{self.name}.yaml")


def _int(low, high=None):
    def rule(v):
        ok = isinstance(v, int) and not isinstance(v, bool) and v >= low and (high is None or v <= high)
        return ok, f"an integer >= {low}" + (f" and <= {high:#x}" if high else "")
    return rule


def _text(pattern: str, what: str):
    return lambda v: (isinstance(v, str) and re.fullmatch(pattern, v) is not None, what)


def _names(v):
    return isinstance(v, list) and all(isinstance(x, str) and x for x in v), "a list of names"


def _params(v):
    return (isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, (int, str)) and not isinstance(x, bool)
                                        for k, x in v.items()), "a mapping of parameter: value (integers or strings)")


def _device_ids(v):
    return (isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) and 0 < x <= 0xFFFF
                                        for x in v), "a list of PCI device ids (0x74a1, ...)")


def _partition(v):
    return (v is None or isinstance(v, list) and len(v) == 2 and all(isinstance(x, str) for x in v),
            "[COMPUTE, MEMORY] partition names (SPX, NPS1) or null")


KEYS = {
    "platform": _text(r"[a-z0-9][a-z0-9_-]*", "the file's own name (lower case)"),
    "gfx": _text(r"gfx[0-9a-f]+", "an LLVM gfx target (gfx942)"),
    "gfx_target_version": _int(1),
    "hsa_override_gfx_version": _text(r"[0-9]+\.[0-9]+\.[0-9]+", "a version string in quotes (\"9.4.2\")"),
    "device_ids": _device_ids,
    "gpus_per_node": _int(1, 64),
    "hbm_gib_per_gpu": lambda v: (v is None or _int(1)(v)[0], "a positive integer (GiB) or null"),
    "fabric": lambda v: (v in FABRICS, f"one of {', '.join(FABRICS)}"),
    "not_for_platform": _names,
    "amdgpu_load_params": _params,
    "amdgpu_tuned_params": _params,
    "ifoe": lambda v: (isinstance(v, bool), "true or false"),
    "env_rules_not_for_platform": _names,
    "tp_partition": _partition,
    "wide_ep_launch": lambda v: (isinstance(v, bool), "true or false"),
}
REQUIRED = ("platform", "gfx", "gfx_target_version", "hsa_override_gfx_version", "gpus_per_node", "fabric")


def names() -> tuple:
    return tuple(sorted(f.stem for f in DIR.glob("*.yaml")))


@functools.cache
def get(name: str) -> Platform:
    """A shipped platform, validated (PlatformError with every problem of its file, as file:line)."""
    path = DIR / f"{name}.yaml"
    return parse(path.read_text(), str(path))


def parse(text: str, path: str) -> Platform:
    """The platform in ``text`` (its file's stem must be its ``platform:``), or PlatformError."""
    try:
        root = compose(text, path)
    except YAMLInputError as exc:
        raise PlatformError(exc.problems) from None
    reader = SchemaReader(path)
    data = reader.mapping(root, "", KEYS) if root is not None else {}
    missing = [key for key in REQUIRED if key not in data and not any(f": {key}:" in p for p in reader.problems)]
    reader.problems += [f"{path}:1: {key}: missing (every platform file states it)" for key in missing]
    if "platform" in data and data["platform"] != Path(path).stem:
        reader.problems.append(f"{path}:{_line(root, 'platform')}: platform: {data['platform']!r}, but the file is "
                               f"{Path(path).name}: name the file after its platform")
    if reader.problems:
        raise PlatformError(reader.problems)
    return Platform(
        name=data["platform"], gfx=data["gfx"], gfx_target_version=data["gfx_target_version"],
        hsa_override_gfx_version=data["hsa_override_gfx_version"], gpus_per_node=data["gpus_per_node"],
        hbm_gib_per_gpu=data.get("hbm_gib_per_gpu"), fabric=data["fabric"],
        device_ids=frozenset(data.get("device_ids", ())),
        not_for_platform=frozenset(data.get("not_for_platform", ())),
        amdgpu_load_params=tuple((k, str(v)) for k, v in (data.get("amdgpu_load_params") or {}).items()),
        amdgpu_tuned_params=tuple((k, str(v)) for k, v in (data.get("amdgpu_tuned_params") or {}).items()),
        ifoe=data.get("ifoe", False), env_rules_off=frozenset(data.get("env_rules_not_for_platform", ())),
        tp_partition=tuple(data["tp_partition"]) if data.get("tp_partition") else None,
        wide_ep_launch=data.get("wide_ep_launch", False),
        line={k.value: k.start_mark.line + 1 for k, _ in pairs(root)})


def _line(root, key: str) -> int:
    return next((k.start_mark.line + 1 for k, _ in pairs(root) if k.value == key), 1) \
        if isinstance(root, yaml.MappingNode) else 1


def problems(registry) -> list:
    """Every problem of the shipped platform files, the check names and remediation codes they name checked
    against ``registry`` (plugins loaded): ``file:line: key: message`` each, [] when all are sound."""
    out = []
    for name in names():
        try:
            p = get(name)
        except PlatformError as exc:
            out += exc.problems
            continue
        for key, named, known in (("not_for_platform", p.not_for_platform, registry.checks),
                                  ("env_rules_not_for_platform", p.env_rules_off, registry.remediations)):
            for unknown in sorted(set(named) - set(known)):
                close = difflib.get_close_matches(unknown, list(known), n=1)
                out.append(f"{p.path}:{p.line.get(key, 1)}: {key}: {unknown!r}: no such "
                           f"{'check' if key == 'not_for_platform' else 'remediation code'}"
                           + (f" (did you mean '{close[0]}'?)" if close else ""))
    return out


def by_gfx_target(version: int) -> list:
    """The platforms whose GPUs report this KFD gfx_target_version (MI300X and MI325X share 90402)."""
    return [p for p in map(get, names()) if p.gfx_target_version == version]


def by_device_id(device_id: int) -> list:
    """The platforms whose GPUs carry this PCI device id."""
    return [p for p in map(get, names()) if device_id in p.device_ids]


def applicable(checks: list, platform: str) -> list:
    """The checks that apply on ``platform``: the others are not run (and not reported as SKIP noise)."""
    p = get(platform or DEFAULT)
    return [c for c in checks if p.applies(c.name)]


def not_for(check_name: str) -> list:
    """The platforms a check does not apply to (for `k3doctor list -v`)."""
    return [n for n in names() if not get(n).applies(check_name)]
