"""Per-node fixture trees for the simulated rack: the fake hardware boundary, as plain files.

A node's tree mirrors the paths that the rig bind-mounts into the node's mount namespace
(``BIND_PATHS``): sysfs classes and modules, the boot id, ``/opt`` (fake ROCm tools and their
recorded outputs), ``/root`` (ubench build dir) and ``/usr/bin/dmesg``.  Everything is generated
from a :class:`NodeState`; scenarios change a node by overlaying fields of that state
(see ``scenario.py``), so sysfs, amd-smi, rocm-smi and dmesg always tell the same story.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import shutil
import tarfile
import uuid
from pathlib import Path
from typing import Any

from . import ubench

GPUS_PER_NODE = 4
DEFAULT_TRAYS = (13, 14, 16, 17)  # CT13, CT14, CT16, CT17: the validated 4-node set (reference §4)
RACK_PPOD_ID = "3e56c1d0-7a4b-4e21-9f3c-58d2b4a1878f"
UNSET_U32 = 4294967295
KFD_GPU_IDS = (40771, 12618, 59035, 27304)  # KFD topology gpu_id per card (opaque hashes on real nodes)
IDLE_VRAM_USED = 177 * 2**20  # "idle reads 0% / ~177 MB" (reference §3)
# perf_setup's modprobe (reference §5): a healthy tuned tray reads 0 1 0 1.
TUNED_AMDGPU_PARAMS = {"gpu_recovery": 0, "halt_if_hws_hang": 1, "mtype_local": 0, "noretry": 1}

# Paths (relative to a tree, identical to the node's absolute path) bind-mounted into the node.
BIND_DIRS = ("sys/class", "sys/module", "opt", "root")
BIND_FILES = ("proc/sys/kernel/random/boot_id", "usr/bin/dmesg")
BIND_PATHS = BIND_DIRS + BIND_FILES
# Fake tools: node path -> tool name (the fake dispatches on the name it is invoked as).
# Later fakes (ubench ualoe_p2p.exe / ualoe_bw.exe under root/ubench/build) plug in here.
FAKE_TOOLS = {"opt/rocm/bin/amd-smi": "amd-smi", "opt/rocm/bin/rocm-smi": "rocm-smi", "usr/bin/dmesg": "dmesg"}
TOOL_MODES = ("ok", "hang", "garbage", "truncated", "stubborn", "huge")
RUNTIME_MODES = ("hang", "stubborn", "huge")  # decided by the fake when it runs (its @mode file)
CARD_FIELDS = ("accel_state", "accel_id", "lane_bitmap", "ppod_id", "vpod_id", "link_type")
FAKE_SCRIPT = Path(__file__).with_name("bin") / "k3rig-fake"
AMD_SMI_GROUPS_WARNING = "WARNING: User is missing the following required groups: render, video\n"
# Files `docker cp`-ed into our container (reference §2, §14) live under this root; the rig empties it on sync.
CONTAINER_FILES_ROOT = "/app"
MARKER = "use_unfused_gather_kv_b_proj"


def healthy_container_files() -> dict[str, Any]:
    """ATOM PR #2380's runtime files at the §14 byte sizes for the 20260918 image (3 markers)."""
    atom = "/app/ATOM/atom"
    return {
        f"{atom}/model_ops/mla_unfused_gather.py": {"size": 7499, "text": "# unfused torch fallback\n"},
        f"{atom}/utils/envs.py": {"size": 47967, "text": "ATOM_UNFUSED_GATHER_KV_B_PROJ = False\n"},
        f"{atom}/model_ops/attention_mla.py": {"size": 146235, "text": f"{MARKER} = 1\n" * 3},
    }


def node_name(tray: int) -> str:
    return f"ct{tray}"


def accel_base(tray: int) -> int:
    """Tray N (1-based) owns global accel ids 4(N-1) .. 4(N-1)+3 (reference §4/§6)."""
    return 4 * (tray - 1)


def default_boot_id(tray: int) -> str:
    digest = hashlib.sha256(f"k3rig boot {tray}".encode()).digest()[:16]
    return str(uuid.UUID(bytes=digest, version=4))


@dataclasses.dataclass
class NodeState:
    """Everything that differs between a healthy node and a faulty one.

    Scenario overlays may set any field except ``tray`` and ``rack_trays``.
    """

    tray: int
    rack_trays: tuple[int, ...]
    ppod_id: str = RACK_PPOD_ID
    ppod_size: int = 72
    vpod_id: int = 2
    addr_mode: str = "source-aliasing"
    layout: str = "new"  # "new": ualink/station_lane_en_bitmap + local_accels; "old": stations/, setup/
    hbm_gib: int = 432
    dev_kfd: bool = True
    boot_id: str = ""
    amd_smi_json_root: str = "gpu_data"  # "gpu_data": {"gpu_data": [...]} (newer amd-smi); "list": bare list
    amd_smi_stderr_noise: bool = False
    cards: dict[int, dict[str, Any]] = dataclasses.field(default_factory=dict)  # card index -> CARD_FIELDS
    gpu_processes: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # pid, name, card, vram_bytes
    dmesg_extra: list[str] = dataclasses.field(default_factory=list)  # appended after the boot lines
    tools: dict[str, str] = dataclasses.field(default_factory=dict)  # tool name -> TOOL_MODES
    shm: list[str] = dataclasses.field(default_factory=list)  # file names to create in /dev/shm
    containers: list[dict[str, str]] = dataclasses.field(default_factory=list)  # name, state, [image]
    files: dict[str, str] = dataclasses.field(default_factory=dict)  # tree-relative path -> content
    delete: list[str] = dataclasses.field(default_factory=list)  # tree-relative paths
    # Inside our container: absolute path -> "content" | {size: N, [text]} | {entries: N} (a directory of
    # N files) | null (absent); see container_tar().
    container_files: dict[str, Any] = dataclasses.field(default_factory=healthy_container_files)

    def __post_init__(self) -> None:
        if not self.boot_id:
            self.boot_id = default_boot_id(self.tray)

    @property
    def name(self) -> str:
        return node_name(self.tray)

    def card(self, c: int) -> dict[str, Any]:
        """Resolved UALink values of card ``c`` (node defaults + per-card overrides)."""
        values = {
            "accel_state": "active",
            "accel_id": accel_base(self.tray) + GPUS_PER_NODE - 1 - c,  # card0 = highest id: "3 2 1 0"
            "lane_bitmap": "ffffffffffffffffff",
            "ppod_id": self.ppod_id,
            "vpod_id": self.vpod_id,
            "link_type": "UALoE",
        }
        values.update(self.cards.get(c, {}))
        return values

    def local_accels(self) -> list[int]:
        return [accel_base(self.tray) + GPUS_PER_NODE - 1 - c for c in range(GPUS_PER_NODE)]

    def vpod_members(self) -> list[int]:
        return [accel_base(t) + g for t in self.rack_trays for g in range(GPUS_PER_NODE)]


def bdf(card: int, function: int = 0) -> str:
    return f"{card:04x}:01:00.{function}"


def write_file(tree: Path, rel: str, content: str | bytes, mode: int | None = None) -> None:
    """Write ``content`` to ``tree/rel`` in place (keeps the inode: bind-mounted files stay live)."""
    if not any(rel == b or rel.startswith(b + "/") for b in BIND_PATHS):
        raise ValueError(f"{rel!r} is outside every bind-mounted path {BIND_PATHS}: the node would not see it")
    path = tree / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    data = content.encode() if isinstance(content, str) else content
    with open(path, "wb") as f:
        f.write(data)
    if mode is not None:
        os.chmod(path, mode)


def clear_tree(tree: Path) -> None:
    """Empty the bind-mounted directories (not the directories themselves: their mounts must stay)."""
    for rel in BIND_DIRS:
        path = tree / rel
        if not path.is_dir():
            continue
        for child in path.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()


def write_tree(tree: Path, state: NodeState) -> None:
    """(Re)generate a node's tree from ``state``; call :func:`clear_tree` first on a live tree."""
    for rel in BIND_DIRS:
        (tree / rel).mkdir(parents=True, exist_ok=True)
    _write_sysfs(tree, state)
    write_file(tree, "proc/sys/kernel/random/boot_id", state.boot_id + "\n")
    _write_fake_tools(tree, state)
    ubench.install(tree, state.tray, write_file)  # fake ualoe_p2p.exe / ualoe_bw.exe (k3doctor/rig/ubench)
    for rel, content in state.files.items():
        write_file(tree, rel, content)
    for rel in state.delete:
        path = tree / rel
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        else:
            raise FileNotFoundError(f"scenario deletes {rel!r}, which the {state.name} tree does not have")


def _write_sysfs(tree: Path, s: NodeState) -> None:
    vram_total = s.hbm_gib * 2**30
    for c in range(GPUS_PER_NODE):
        card = s.card(c)
        dev = f"sys/class/drm/card{c}/device"
        write_file(tree, f"sys/class/drm/card{c}/dev", f"226:{c}\n")
        write_file(tree, f"{dev}/uevent", f"DRIVER=amdgpu\nPCI_CLASS=120000\nPCI_SLOT_NAME={bdf(c)}\n")
        write_file(tree, f"{dev}/vendor", "0x1002\n")
        write_file(tree, f"{dev}/mem_info_vram_total", f"{vram_total}\n")
        write_file(tree, f"{dev}/mem_info_vram_used", f"{_vram_used(s, c)}\n")
        ualink = {
            "accel_state": card["accel_state"],
            "accel_id": card["accel_id"],
            "link_type": card["link_type"],
            "ppod_id": card["ppod_id"],
            "ppod_size": s.ppod_size,
            "vpod_id": card["vpod_id"],
            "vpod_size": len(s.vpod_members()),
            "vpod_active_accels": " ".join(map(str, s.vpod_members())),
            "addr_mode": s.addr_mode,
            "bandwidth": UNSET_U32,
            "latency": UNSET_U32,
        }
        local_accels = " ".join(map(str, s.local_accels()))
        if s.layout == "new":
            ualink["station_lane_en_bitmap"] = card["lane_bitmap"]
            ualink["local_accels"] = local_accels
        elif s.layout == "old":
            ualink["stations/lane_en_bitmap"] = card["lane_bitmap"]
            ualink["setup/local_accels"] = local_accels
        else:
            raise ValueError(f"layout must be 'new' or 'old', not {s.layout!r}")
        for key, value in ualink.items():
            write_file(tree, f"{dev}/ualink/{key}", f"{value}\n")
        render = f"sys/class/drm/renderD{128 + c}"
        write_file(tree, f"{render}/dev", f"226:{128 + c}\n")
        os.symlink(f"../card{c}/device", tree / render / "device")
    (tree / "sys/class/kfd/kfd/proc").mkdir(parents=True, exist_ok=True)
    for p in s.gpu_processes:
        proc = f"sys/class/kfd/kfd/proc/{p['pid']}"
        gpu_id = KFD_GPU_IDS[p["card"]]
        write_file(tree, f"{proc}/pasid", f"{32768 + p['card']}\n")
        write_file(tree, f"{proc}/vram_{gpu_id}", f"{p['vram_bytes']}\n")
        write_file(tree, f"{proc}/sdma_{gpu_id}", "0\n")
        write_file(tree, f"{proc}/stats_{gpu_id}/cu_occupancy", "4\n")
        write_file(tree, f"{proc}/stats_{gpu_id}/evicted_ms", "0\n")
    write_file(tree, "sys/module/amdgpu/initstate", "live\n")
    for param, value in TUNED_AMDGPU_PARAMS.items():
        write_file(tree, f"sys/module/amdgpu/parameters/{param}", f"{value}\n")
    write_file(tree, "sys/module/ifoe/initstate", "live\n")


def _vram_used(s: NodeState, card: int) -> int:
    return IDLE_VRAM_USED + sum(p["vram_bytes"] for p in s.gpu_processes if p["card"] == card)


# ---------------------------------------------------------------------------------------------- fake tools


def _write_fake_tools(tree: Path, s: NodeState) -> None:
    script = FAKE_SCRIPT.read_bytes()
    write_file(tree, "opt/k3rig/bin/k3rig-fake", script, 0o755)
    for rel, tool in FAKE_TOOLS.items():
        if rel.startswith("opt/"):
            link = tree / rel
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink("/opt/k3rig/bin/k3rig-fake", link)
        else:  # a file bind-mounted over a host binary: its own copy of the script
            write_file(tree, rel, script, 0o755)
        os.symlink("/bin/sleep", tree / f"opt/k3rig/bin/k3rig-hang.{tool}")
    outputs = {
        "amd-smi": _amd_smi_outputs(s),
        "rocm-smi": _rocm_smi_outputs(s),
        "dmesg": {"@noargs": _dmesg(s)},
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
    fabric = [_fabric_entry(s, c) for c in range(GPUS_PER_NODE)]
    mb = s.hbm_gib * 1024  # amd-smi labels MiB as "MB": 432 GiB -> 442368 MB (reference §12)
    vram = {"type": "HBM", "vendor": "N/A", "size": {"value": mb, "unit": "MB"}}
    static = [{"gpu": c, "bus": {"bdf": bdf(c)}, "vram": vram} for c in range(GPUS_PER_NODE)]
    static_vram = [{"gpu": c, "vram": vram} for c in range(GPUS_PER_NODE)]
    vram_text = "".join(
        f"GPU: {c}\n    VRAM:\n        TYPE: HBM\n        VENDOR: N/A\n        SIZE: {mb} MB\n\n"
        for c in range(GPUS_PER_NODE)
    )
    return {
        "fabric --json": _amd_smi_json(s, fabric),
        "fabric": "".join(_fabric_text(entry) for entry in fabric),
        "static --json": _amd_smi_json(s, static),
        "static --vram --json": _amd_smi_json(s, static_vram),
        "static --vram": vram_text,
    }


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
        f"GPU[{c}]\t\t: VRAM Total Used Memory (B): {_vram_used(s, c)}\n"
        for c in range(GPUS_PER_NODE)
    )
    memuse = "".join(
        f"GPU[{c}]\t\t: GPU Memory Allocated (VRAM%): {round(100 * _vram_used(s, c) / vram_total)}\n"
        f"GPU[{c}]\t\t: GPU Memory Read/Write Activity (%): 0\n"
        for c in range(GPUS_PER_NODE)
    )
    return {
        "--showpids": _rocm_smi_log("KFD Processes", pids),
        "--showmeminfo vram": _rocm_smi_log("Memory Usage (Bytes)", meminfo),
        "--showmemuse": _rocm_smi_log("Current Memory Use", memuse),
    }


def _dmesg(s: NodeState) -> str:
    lines = [
        (0.0, "Linux version 6.8.0-60-generic (buildd@lcy02-amd64-098) (x86_64-linux-gnu-gcc-13 (Ubuntu "
         "13.3.0-6ubuntu2~24.04) 13.3.0, GNU ld (GNU Binutils for Ubuntu) 2.42) #63-Ubuntu SMP PREEMPT_DYNAMIC"),
        (0.0, "Command line: BOOT_IMAGE=/vmlinuz-6.8.0-60-generic root=/dev/mapper/vg0-root ro "
         "modprobe.blacklist=amdgpu iommu=pt"),
    ]
    lines.append((15.220114, "[drm] amdgpu kernel modesetting enabled."))
    mb = s.hbm_gib * 1024
    for c in range(GPUS_PER_NODE):
        t = 15.8 + 0.61 * c
        lines.append((t, f"amdgpu {bdf(c)}: amdgpu: VRAM: {mb}M 0x0000008000000000 - "
                         f"0x{0x8000000000 + s.hbm_gib * 2**30 - 1:016X} ({mb}M used)"))
        lines.append((t + 0.42, f"[drm] Initialized amdgpu 3.64.0 for {bdf(c)} on minor {c}"))
    for c in range(GPUS_PER_NODE):
        card = s.card(c)
        if card["accel_state"] == "active":
            t = 21.07 + 0.23 * c
            lines.append((t, f"amdgpu {bdf(c)}: UALINK: activating accelerator accel_id={card['accel_id']} "
                             "(accel_state=2)"))
            lines.append((t + 8.5, f"amdgpu {bdf(c)}: UALINK: accelerator accel_id={card['accel_id']} is now ACTIVE"))
    lines.sort(key=lambda line: line[0])
    t_last = lines[-1][0]
    lines += [(t_last + 60.0 * (i + 1), text) for i, text in enumerate(s.dmesg_extra)]
    return "".join(f"[{t:12.6f}] {text}\n" for t, text in lines)


def container_tar(files: dict[str, Any]) -> bytes:
    """A tar (for ``put_archive`` at ``/``) of a node's ``container_files``.

    ``{size: N, text: T}`` is T padded with ``#`` to exactly N bytes (N = 0: the empty file an
    interrupted ``docker cp`` leaves, §14); ``{entries: N}`` is a directory of N files (a store).
    """
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, spec in sorted(files.items()):
            if not path.startswith(CONTAINER_FILES_ROOT + "/"):
                raise ValueError(f"container file {path!r} must lie under {CONTAINER_FILES_ROOT}/")
            name = path.lstrip("/")
            if spec is None:
                continue
            if isinstance(spec, dict) and set(spec) == {"entries"}:
                _tar_add(tar, name, None)
                for i in range(spec["entries"]):
                    _tar_add(tar, f"{name}/entry-{i:05d}.co", b"")
                continue
            _tar_add(tar, name, _content(path, spec))
    return buf.getvalue()


def _content(path: str, spec: Any) -> bytes:
    if isinstance(spec, str):
        return spec.encode()
    if not isinstance(spec, dict) or not set(spec) <= {"size", "text"} or "size" not in spec:
        raise ValueError(f"container file {path}: expected a string, {{size, [text]}} or {{entries}}, got {spec!r}")
    text, size = spec.get("text", "").encode(), spec["size"]
    if size == 0:
        return b""
    if len(text) + 1 > size:
        raise ValueError(f"container file {path}: text does not fit in {size} bytes")
    return text + b"#" * (size - len(text) - 1) + b"\n"


def _tar_add(tar: tarfile.TarFile, name: str, data: bytes | None) -> None:
    info = tarfile.TarInfo(name)
    if data is None:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
    else:
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
