"""Platforms as data: one YAML file per platform (reference §29, §30) - its gfx target as KFD topology
reports it, the HSA_OVERRIDE_GFX_VERSION that matches it, GPUs per node, HBM per GPU, and the checks that
do not apply there (not run, not reported). A third platform (MI300X, MI325X) is a file, not a code branch.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import yaml

DIR = Path(__file__).parent
DEFAULT = "gfx1250"


@dataclass(frozen=True)
class Platform:
    name: str
    gfx: str
    gfx_target_version: int
    hsa_override_gfx_version: str
    gpus_per_node: int
    hbm_gib_per_gpu: int | None
    not_for_platform: frozenset
    amdgpu_load_params: tuple  # (name, value) amdgpu must be loaded with here (gfx1250 bring-up, §5)
    ifoe: bool  # UALink over Ethernet: the ifoe module must be loaded before amdgpu (§5)
    env_rules_off: frozenset  # env-versions rule families (remediation codes) that do not apply here
    tp_partition: tuple | None = None  # (compute, memory) partition every GPU must be in; None: uniform only
    # launch-config: the wide-EP Docker launch (run options, DP ranks, ports, data-plane NIC, §13-§18) is judged
    # beside the recipe; else the launch is the recipe's alone, read from the server wherever it runs (§30)
    wide_ep_launch: bool = False

    def applies(self, check_name: str) -> bool:
        return check_name not in self.not_for_platform


def names() -> tuple:
    return tuple(sorted(f.stem for f in DIR.glob("*.yaml")))


@functools.cache
def get(name: str) -> Platform:
    """A shipped platform (the files are part of k3doctor and tested: no user input reaches here)."""
    data = yaml.safe_load((DIR / f"{name}.yaml").read_text())
    return Platform(name=data["platform"], gfx=data["gfx"], gfx_target_version=int(data["gfx_target_version"]),
                    hsa_override_gfx_version=str(data["hsa_override_gfx_version"]),
                    gpus_per_node=int(data["gpus_per_node"]), hbm_gib_per_gpu=data.get("hbm_gib_per_gpu"),
                    not_for_platform=frozenset(data.get("not_for_platform", ())),
                    amdgpu_load_params=tuple((k, str(v)) for k, v in (data.get("amdgpu_load_params") or {}).items()),
                    ifoe=bool(data.get("ifoe", False)),
                    env_rules_off=frozenset(data.get("env_rules_not_for_platform", ())),
                    tp_partition=tuple(data["tp_partition"]) if data.get("tp_partition") else None,
                    wide_ep_launch=bool(data.get("wide_ep_launch", False)))


def by_gfx_target(version: int) -> Platform | None:
    """The platform whose GPUs report this KFD gfx_target_version, if k3doctor knows one."""
    return next((p for p in map(get, names()) if p.gfx_target_version == version), None)


def applicable(checks: list, platform: str) -> list:
    """The checks that apply on ``platform``: the others are not run (and not reported as SKIP noise)."""
    p = get(platform or DEFAULT)
    return [c for c in checks if p.applies(c.name)]


def not_for(check_name: str) -> list:
    """The platforms a check does not apply to (for `k3doctor list -v`)."""
    return [n for n in names() if not get(n).applies(check_name)]
