"""Scenario files: YAML overlays on the healthy rack.

Schema (every key optional)::

    description: one line saying what is wrong
    platform: mi355x            # only for that node kind (absent: any; the gfx1250 faults say nothing there)
    nodes:
      2:                        # 1-based node index
        <NodeState field>: value  # e.g. vpod_id: 3, hbm_gib: 288, dev_kfd: false, tools: {amd-smi: hang}
        cards:                  # per-card UALink and clock overrides (card index -> CARD_FIELDS)
          1: {accel_state: unconfigured}

Dict fields (``cards``, ``tools``, ``files``, ``container_files``, ``meminfo``, ``checkpoint``,
``container_env``, ``container_run``, ``launch_args``) are merged into the healthy values, everything else
replaces them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from .fixtures import CARD_FIELDS, GPUS_PER_NODE, NodeState

SCENARIO_DIR = Path(__file__).with_name("scenarios")
FIXED_FIELDS = ("tray", "rack_trays", "platform")
MERGED_FIELDS = ("cards", "tools", "files", "container_files", "meminfo", "checkpoint", "container_env",
                 "container_run", "launch_args", "xgmi_links", "xgmi_bit_rates")
CONTAINER_STATES = ("running", "created")


def scenario_names(platform: str | None = None) -> list[str]:
    """Every scenario, or those a rig of ``platform``'s node kind can apply."""
    names = sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))
    return names if platform is None else [name for name in names if load(name)["platform"] in (None, platform)]


def load(scenario: str | Path) -> dict[str, Any]:
    """A scenario by name (``rig/k3rig/scenarios/<name>.yaml``) or by path."""
    path = Path(scenario)
    if path.suffix not in (".yaml", ".yml"):
        path = SCENARIO_DIR / f"{scenario}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"no scenario {scenario!r} (known: {', '.join(scenario_names())})")
    data = yaml.safe_load(path.read_text()) or {}
    unknown = set(data) - {"description", "platform", "nodes"}
    if unknown:
        raise ValueError(f"{path}: unknown top-level keys {sorted(unknown)}")
    data.setdefault("nodes", {})
    data.setdefault("platform", None)
    data["path"] = path
    return data


def node_states(scenario: dict[str, Any], trays: tuple[int, ...], platform: str = "gfx1250") -> list[NodeState]:
    """The healthy state of every node (of the rig's node kind) with the scenario's overlays applied."""
    if scenario["platform"] not in (None, platform):  # its overlays would mean nothing on another node kind
        raise ValueError(f"{scenario['path']}: written for {scenario['platform']} nodes, this rig has {platform}")
    states = [NodeState(tray=t, rack_trays=trays, platform=platform) for t in trays]
    fields = {f.name for f in dataclasses.fields(NodeState)} - set(FIXED_FIELDS)
    for index, overlay in (scenario["nodes"] or {}).items():
        where = f"{scenario['path']}: node {index}"
        if not isinstance(index, int) or not 1 <= index <= len(states):
            raise ValueError(f"{where}: nodes are numbered 1..{len(states)}")
        unknown = set(overlay) - fields
        if unknown:
            raise ValueError(f"{where}: unknown keys {sorted(unknown)}; allowed: {sorted(fields)}")
        state = states[index - 1]
        for key, value in overlay.items():
            if key in MERGED_FIELDS:
                getattr(state, key).update(value)
            else:
                setattr(state, key, value)
        _validate(state, where)
    return states


def _validate(state: NodeState, where: str) -> None:
    for card, values in state.cards.items():
        if not isinstance(card, int) or not 0 <= card < GPUS_PER_NODE:
            raise ValueError(f"{where}: cards are numbered 0..{GPUS_PER_NODE - 1}, not {card!r}")
        unknown = set(values) - set(CARD_FIELDS)
        if unknown:
            raise ValueError(f"{where}: card {card}: unknown keys {sorted(unknown)}; allowed: {CARD_FIELDS}")
    if any(not isinstance(card, int) or not 0 <= card < GPUS_PER_NODE for card in state.orphaned_vram):
        raise ValueError(f"{where}: orphaned_vram cards are numbered 0..{GPUS_PER_NODE - 1}: {state.orphaned_vram}")
    for p in state.gpu_processes:
        if set(p) != {"pid", "name", "card", "vram_bytes"}:
            raise ValueError(f"{where}: gpu_processes entries need exactly pid, name, card, vram_bytes: {p}")
    if state.logs_tmpfs is not None and (set(state.logs_tmpfs) != {"size_mib", "used_mib"}
                                         or not 0 <= state.logs_tmpfs["used_mib"] < state.logs_tmpfs["size_mib"]):
        raise ValueError(f"{where}: logs_tmpfs is {{size_mib: N, used_mib: M}} with 0 <= M < N: {state.logs_tmpfs}")
    for c in state.containers:
        if c.get("state") not in CONTAINER_STATES or not c.get("name") or set(c) - {"name", "state", "image"}:
            raise ValueError(f"{where}: containers entries are {{name, state: running|created, [image]}}: {c}")
