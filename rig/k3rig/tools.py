"""The fake ROCm tools of a rig node (amd-smi, rocm-smi, dmesg; squeue on an MI355X node) and what each prints
for a node's state: the recorded outputs the fake script (bin/k3rig-fake) replays, in the tools' own layouts,
so that they tell the same story as the sysfs tree ``fixtures.write_tree`` writes from the same state.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import field, mi355x

if TYPE_CHECKING:
    from .fixtures import NodeState

UNSET_U32 = 4294967295
IDLE_VRAM_USED = 177 * 2**20  # "idle reads 0% / ~177 MB" (reference §3)
KERNEL_CMDLINE = "BOOT_IMAGE=/vmlinuz-6.8.0-60-generic root=/dev/mapper/vg0-root ro modprobe.blacklist=amdgpu iommu=pt"
# Fake tools: node path -> tool name (the fake dispatches on the name it is invoked as).
# Later fakes (ubench ualoe_p2p.exe / ualoe_bw.exe under root/ubench/build) plug in here.
FAKE_TOOLS = {"opt/rocm/bin/amd-smi": "amd-smi", "opt/rocm/bin/rocm-smi": "rocm-smi", "usr/bin/dmesg": "dmesg"}
MI355X_FAKE_TOOLS = {mi355x.SQUEUE: "squeue"}  # AgentX nodes run Slurm (§30); a gfx1250 tray has no squeue
TOOL_MODES = ("ok", "hang", "garbage", "truncated", "stubborn", "huge")
RUNTIME_MODES = ("hang", "stubborn", "huge")  # decided by the fake when it runs (its @mode file)
FAKE_SCRIPT = Path(__file__).with_name("bin") / "k3rig-fake"
AMD_SMI_GROUPS_WARNING = "WARNING: User is missing the following required groups: render, video\n"


def bdf(card: int, function: int = 0) -> str:
    return f"{card:04x}:01:00.{function}"


def vram_used(s: NodeState, card: int) -> int:
    return IDLE_VRAM_USED + s.orphaned_vram.get(card, 0) + sum(p["vram_bytes"] for p in s.gpu_processes
                                                               if p["card"] == card)


def write_fake_tools(tree: Path, s: NodeState, write_file: Callable) -> None:
    """The fake amd-smi, rocm-smi, dmesg (and squeue) of a node and what each prints for ``s``; ``write_file``
    is the tree's writer (fixtures.write_file: only bind-mounted paths)."""
    script = FAKE_SCRIPT.read_bytes()
    write_file(tree, "opt/k3rig/bin/k3rig-fake", script, 0o755)
    fakes = {**FAKE_TOOLS, **(MI355X_FAKE_TOOLS if s.platform in mi355x.KINDS else {})}
    for rel, tool in fakes.items():
        if rel.startswith("opt/"):
            link = tree / rel
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink("/opt/k3rig/bin/k3rig-fake", link)
        else:  # a file bind-mounted over a host binary: its own copy of the script
            write_file(tree, rel, script, 0o755)
        os.symlink("/bin/sleep", tree / f"opt/k3rig/bin/k3rig-hang.{tool}")
    outputs = {
        "amd-smi": {**_amd_smi_outputs(s), **field.amd_smi_outputs(s, _amd_smi_json)},
        "rocm-smi": _rocm_smi_outputs(s),
        "dmesg": {"@noargs": _dmesg(s), DMESG_ERRORS_KEY: _dmesg(s, errors_only=True)},
        **({"squeue": {mi355x.SQUEUE_ARGS: mi355x.squeue_text(s.slurm_jobs)}} if s.platform in mi355x.KINDS else {}),
    }
    unknown = set(s.tools) - set(outputs)
    if unknown:
        raise ValueError(f"no fake tool named {sorted(unknown)}; fakes: {sorted(outputs)}")
    for tool, recorded in outputs.items():
        mode = s.tools.get(tool, "ok")
        if mode not in TOOL_MODES:
            raise ValueError(f"tool mode for {tool} must be one of {TOOL_MODES}, not {mode!r}")
        base = f"opt/k3rig/data/{tool}"
        if mode in RUNTIME_MODES:
            write_file(tree, f"{base}/@mode", f"{mode}\n")
        noise = AMD_SMI_GROUPS_WARNING if tool == "amd-smi" and s.amd_smi_stderr_noise else ""
        for key, stdout in recorded.items():
            data = stdout.encode()
            if mode == "garbage":
                data = _garbage(data)
            elif mode == "truncated":
                data = data[: len(data) // 2]
            write_file(tree, f"{base}/{key}/stdout", data)
            write_file(tree, f"{base}/{key}/rc", "0\n")
            if noise:
                write_file(tree, f"{base}/{key}/stderr", noise)


def _garbage(data: bytes) -> bytes:
    """Deterministic junk: a few plausible bytes, then binary noise and a torn UTF-8 sequence."""
    noise = hashlib.sha256(data).digest() * 8
    return data[:23] + b"\x00\x1b[0;31m\xff\xfe" + noise + b"\xe2\x82\n"


def _amd_smi_outputs(s: NodeState) -> dict[str, str]:
    mb = s.hbm_gib * 1024  # amd-smi labels MiB as "MB": 432 GiB -> 442368 MB (reference §12)
    vram = {"type": "HBM", "vendor": "N/A", "size": {"value": mb, "unit": "MB"}}
    static = [{"gpu": c, "bus": {"bdf": s.bdf(c)}, "vram": vram} for c in range(s.gpus)]
    static_vram = [{"gpu": c, "vram": vram} for c in range(s.gpus)]
    vram_text = "".join(
        f"GPU: {c}\n    VRAM:\n        TYPE: HBM\n        VENDOR: N/A\n        SIZE: {mb} MB\n\n"
        for c in range(s.gpus)
    )
    bad_pages = _amd_smi_json(s, [_bad_pages_entry(s, c) for c in range(s.gpus)])
    if s.platform in mi355x.KINDS:  # XGMI instead of a UALink fabric (§30)
        return {"xgmi": mi355x.xgmi_text(s.xgmi_links, s.xgmi_bit_rates), "bad-pages --json": bad_pages,
                "static --json": _amd_smi_json(s, static), "static --vram --json": _amd_smi_json(s, static_vram),
                "static --asic --bus --vram --json": _amd_smi_json(s, static), "static --vram": vram_text}
    fabric = [_fabric_entry(s, c) for c in range(s.gpus)]
    # amd-smi 27.1 (ROCm 10.1, reference §29): PHYSICAL_ACC_ID in the ASIC section, the card's accel_id
    asic = [{"gpu": c, "asic": {"market_name": "AMD Instinct MI455X", "oam_id": c,
                                "physical_acc_id": s.card(c)["accel_id"]}, "bus": {"bdf": bdf(c)}}
            for c in range(s.gpus)]
    return {
        "bad-pages --json": bad_pages,
        "fabric --json": _amd_smi_json(s, fabric),
        "fabric": "".join(_fabric_text(entry) for entry in fabric),
        "static --json": _amd_smi_json(s, static),
        "static --vram --json": _amd_smi_json(s, static_vram),
        "static --asic --bus --json": _amd_smi_json(s, asic),
        # k3doctor's one static call (k3doctor/views/gpu.py): amd-smi prints every section asked, per GPU
        "static --asic --bus --vram --json": _amd_smi_json(s, [{**a, "vram": vram} for a in asic]),
        "static --vram": vram_text,
    }


def _bad_pages_entry(s: NodeState, c: int) -> dict[str, Any]:
    """amd-smi bad-pages' JSON for card ``c``: the "No bad pages found." string, or the RESERVED pages (one page
    is an object, several a list, as amdsmi_commands.py prints them)."""
    none = "No bad pages found."
    pages = [{"page_address": 0x3F000000 + 0x1000 * i, "page_size": 4096, "status": "RESERVED"}
             for i in range(s.card(c)["retired_pages"])]
    retired = none if not pages else pages[0] if len(pages) == 1 else pages
    return {"gpu": c, "retired": retired, "pending": none, "un_res": none}


def _amd_smi_json(s: NodeState, entries: list[dict[str, Any]]) -> str:
    if s.amd_smi_json_root == "gpu_data":
        return json.dumps({"gpu_data": entries}, indent=4) + "\n"
    if s.amd_smi_json_root == "list":
        return json.dumps(entries, indent=4) + "\n"
    raise ValueError(f"amd_smi_json_root must be 'gpu_data' or 'list', not {s.amd_smi_json_root!r}")


def _fabric_entry(s: NodeState, c: int) -> dict[str, Any]:
    card = s.card(c)
    members = [str(a) for a in s.vpod_members()]
    slots = members + ["-"] * (32 - len(members))
    return {
        "gpu": c,
        "fabric": {
            "gpu": c,
            "bdf": bdf(c),
            "fabric_info": {
                "bdf": bdf(c, 1),
                "version": UNSET_U32,
                "accelerator_id": card["accel_id"],
                "fabric_type": str(card["link_type"]).upper(),
                "bandwidth": {"value": 0, "unit": "Mb/s"},
                "latency": {"value": 0, "unit": "ns"},
                "ppod_id": card["ppod_id"],
                "ppod_size": s.ppod_size,
                "vpod_id": card["vpod_id"],
                "vpod_size": len(members),
                "local_accelerators": ", ".join(map(str, s.local_accels())),
                "local_active_accelerators": [", ".join(slots[r * 8 : r * 8 + 8]) for r in range(4)],
                "addr_mode": s.addr_mode.upper(),
                "accel_state": str(card["accel_state"]).upper(),
            },
            "fabric_telemetry": "N/A",
        },
    }


def _fabric_text(entry: dict[str, Any]) -> str:
    """Human ``amd-smi fabric`` block (layout per reference §27 item 1)."""
    info = entry["fabric"]["fabric_info"]
    lines = [f"GPU: {entry['gpu']}", "    FABRIC_INFO:"]
    for key, value in info.items():
        if isinstance(value, dict):
            value = f"{value['value']} {value['unit']}"
        if isinstance(value, list):
            lines.append(f"        {key.upper()}:")
            lines.extend(f"            {row}" for row in value)
        else:
            lines.append(f"        {key.upper()}: {value}")
    lines.append(f"    FABRIC_TELEMETRY: {entry['fabric']['fabric_telemetry']}")
    return "\n".join(lines) + "\n\n"


def _smi_spacer(title: str = "") -> str:
    """rocm-smi printLogSpacer at the 90-column width of current releases."""
    if not title:
        return "=" * 90 + "\n"
    if len(title) % 2:
        title += "="
    side = "=" * ((90 - len(title)) // 2)
    return side + title + side + "\n"


def _rocm_smi_log(title: str, body: str) -> str:
    return (
        _smi_spacer(" ROCm System Management Interface ")
        + _smi_spacer(f" {title} ")
        + body
        + _smi_spacer()
        + _smi_spacer(" End of ROCm SMI Log ")
    )


def _rocm_smi_outputs(s: NodeState) -> dict[str, str]:
    vram_total = s.hbm_gib * 2**30
    if s.gpu_processes:
        rows = [["PID", "PROCESS NAME", "GPU(s)", "VRAM USED", "SDMA USED", "CU OCCUPANCY"]]
        rows += [[str(p["pid"]), p["name"], "1", str(p["vram_bytes"]), "0", "4"] for p in s.gpu_processes]
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        table = "".join("".join(cell.ljust(w) + "\t" for cell, w in zip(r, widths, strict=True)) + "\n" for r in rows)
        pids = "KFD process information:\n" + table
    else:
        pids = "No KFD PIDs currently running\n"
    meminfo = "".join(
        f"GPU[{c}]\t\t: VRAM Total Memory (B): {vram_total}\n"
        f"GPU[{c}]\t\t: VRAM Total Used Memory (B): {vram_used(s, c)}\n"
        for c in range(s.gpus)
    )
    memuse = "".join(
        f"GPU[{c}]\t\t: GPU Memory Allocated (VRAM%): {round(100 * vram_used(s, c) / vram_total)}\n"
        f"GPU[{c}]\t\t: GPU Memory Read/Write Activity (%): 0\n"
        for c in range(s.gpus)
    )
    return {
        "--showpids": _rocm_smi_log("KFD Processes", pids),
        "--showmeminfo vram": _rocm_smi_log("Memory Usage (Bytes)", meminfo),
        "--showmemuse": _rocm_smi_log("Current Memory Use", memuse),
    }


DMESG_ERRORS_KEY = "--level=err,crit,alert,emerg"
_PRIORITY = re.compile(r"^<([0-7])>")  # printk's own level prefix (KERN_ERR = "<3>")


def _dmesg(s: NodeState, errors_only: bool = False) -> str:
    """The node's kernel log as `dmesg` prints it; ``errors_only``: only its err/crit/alert/emerg lines."""
    lines = [
        (0.0, "Linux version 6.8.0-60-generic (buildd@lcy02-amd64-098) (x86_64-linux-gnu-gcc-13 (Ubuntu "
         "13.3.0-6ubuntu2~24.04) 13.3.0, GNU ld (GNU Binutils for Ubuntu) 2.42) #63-Ubuntu SMP PREEMPT_DYNAMIC"),
        (0.0, f"Command line: {KERNEL_CMDLINE}"),
    ]
    lines.append((15.220114, "[drm] amdgpu kernel modesetting enabled."))
    mb = s.hbm_gib * 1024
    for c in range(s.gpus):
        t = 15.8 + 0.61 * c
        lines.append((t, f"amdgpu {s.bdf(c)}: amdgpu: VRAM: {mb}M 0x0000008000000000 - "
                         f"0x{0x8000000000 + s.hbm_gib * 2**30 - 1:016X} ({mb}M used)"))
        lines.append((t + 0.42, f"[drm] Initialized amdgpu 3.64.0 for {s.bdf(c)} on minor {c}"))
    for c in range(s.gpus if s.platform == "gfx1250" else 0):
        card = s.card(c)
        if card["accel_state"] == "active":
            t = 21.07 + 0.23 * c
            lines.append((t, f"amdgpu {bdf(c)}: UALINK: activating accelerator accel_id={card['accel_id']} "
                             "(accel_state=2)"))
            lines.append((t + 8.5, f"amdgpu {bdf(c)}: UALINK: accelerator accel_id={card['accel_id']} is now ACTIVE"))
    lines.sort(key=lambda line: line[0])
    t_last = lines[-1][0]
    levels = {}  # index in lines -> printk level; boot lines are info (6)
    for i, text in enumerate(s.dmesg_extra):
        level = _PRIORITY.match(text)
        levels[len(lines)] = int(level.group(1)) if level else 6
        lines.append((t_last + 60.0 * (i + 1), _PRIORITY.sub("", text)))
    return "".join(f"[{t:12.6f}] {text}\n" for i, (t, text) in enumerate(lines)
                   if not errors_only or levels.get(i, 6) <= 3)
