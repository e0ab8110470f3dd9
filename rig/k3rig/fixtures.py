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
import re
import shutil
import tarfile
import uuid
from pathlib import Path
from typing import Any

from . import field, mi355x, ubench

GPUS_PER_NODE = 4
DEFAULT_TRAYS = (13, 14, 16, 17)  # CT13, CT14, CT16, CT17: the validated 4-node set (reference §4)
RACK_PPOD_ID = "3e56c1d0-7a4b-4e21-9f3c-58d2b4a1878f"
UNSET_U32 = 4294967295
KFD_GPU_IDS = (40771, 12618, 59035, 27304)  # KFD topology gpu_id per card (opaque hashes on real nodes)
IDLE_VRAM_USED = 177 * 2**20  # "idle reads 0% / ~177 MB" (reference §3)
# perf_setup's modprobe (reference §5): a healthy tuned tray reads 0 1 0 1.
TUNED_AMDGPU_PARAMS = {"gpu_recovery": 0, "halt_if_hws_hang": 1, "mtype_local": 0, "noretry": 1}

# Paths (relative to a tree, identical to the node's absolute path) bind-mounted into the node. The kernel
# files among them are regular files here, read as any file is (reference §31.1: /proc/sys refuses a read of
# 4 MiB, sysfs gives a page): a boot id per node (its reboot scenarios), the host RAM of the node kind
# (meminfo) and an MI355X's cmdline. Every other /proc file is the host kernel's own, and
# tests/unit/test_kernel_reads.py reads these from the test machine's kernel, as a real node's are read.
BIND_DIRS = ("sys/class", "sys/module", "opt", "root", "mnt")
BIND_FILES = ("proc/sys/kernel/random/boot_id", "usr/bin/dmesg", "proc/meminfo", *field.STAND_INS)
BIND_PATHS = BIND_DIRS + BIND_FILES
MI355X_BIND_FILES = ("proc/cmdline",)  # iommu-pt reads it there (§29); a gfx1250 node keeps the host's view
PLATFORMS = ("gfx1250", *mi355x.KINDS)
KERNEL_CMDLINE = "BOOT_IMAGE=/vmlinuz-6.8.0-60-generic root=/dev/mapper/vg0-root ro modprobe.blacklist=amdgpu iommu=pt"
# Fake tools: node path -> tool name (the fake dispatches on the name it is invoked as).
# Later fakes (ubench ualoe_p2p.exe / ualoe_bw.exe under root/ubench/build) plug in here.
FAKE_TOOLS = {"opt/rocm/bin/amd-smi": "amd-smi", "opt/rocm/bin/rocm-smi": "rocm-smi", "usr/bin/dmesg": "dmesg"}
MI355X_FAKE_TOOLS = {mi355x.SQUEUE: "squeue"}  # AgentX nodes run Slurm (§30); a gfx1250 tray has no squeue
TOOL_MODES = ("ok", "hang", "garbage", "truncated", "stubborn", "huge")
RUNTIME_MODES = ("hang", "stubborn", "huge")  # decided by the fake when it runs (its @mode file)
CARD_FIELDS = ("accel_state", "accel_id", "lane_bitmap", "ppod_id", "vpod_id", "link_type", "sclk_max_mhz",
               "ifoe_driver", "retired_pages", "busy_pct", *field.CARD_FIELDS)
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
    platform: str = "gfx1250"  # the node kind: "gfx1250" (4 GPUs, UALink) or "mi355x" (8 GPUs, XGMI; mi355x.py)
    ppod_id: str = RACK_PPOD_ID
    ppod_size: int = 72
    vpod_id: int = 2
    addr_mode: str = "source-aliasing"
    layout: str = "new"  # "new": ualink/station_lane_en_bitmap + local_accels; "old": stations/, setup/
    hbm_gib: int = 432
    dev_kfd: bool = True
    amdgpu_loaded: bool = True  # False: amdgpu blacklisted and not loaded (reference §5), see _unload_amdgpu()
    boot_id: str = ""
    amd_smi_json_root: str = "gpu_data"  # "gpu_data": {"gpu_data": [...]} (newer amd-smi); "list": bare list
    amd_smi_stderr_noise: bool = False
    cards: dict[int, dict[str, Any]] = dataclasses.field(default_factory=dict)  # card index -> CARD_FIELDS overrides
    gpu_processes: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # pid, name, card, vram_bytes
    # card -> bytes of VRAM held with no process: an orphaned KFD context (reference §29, sglang PR #30431)
    orphaned_vram: dict[int, int] = dataclasses.field(default_factory=dict)
    # appended after the boot lines; "<3>text" is logged at that printk level (3 = err), plain text at info
    dmesg_extra: list[str] = dataclasses.field(default_factory=list)
    tools: dict[str, str] = dataclasses.field(default_factory=dict)  # tool name -> TOOL_MODES
    shm: list[str] = dataclasses.field(default_factory=list)  # file names to create in /dev/shm
    containers: list[dict[str, str]] = dataclasses.field(default_factory=list)  # name, state, [image]
    files: dict[str, str] = dataclasses.field(default_factory=dict)  # tree-relative path -> content
    delete: list[str] = dataclasses.field(default_factory=list)  # tree-relative paths
    # Inside our container: absolute path -> "content" | {size: N, [text]} | {entries: N} (a directory of
    # N files) | null (absent); see container_tar().
    container_files: dict[str, Any] = dataclasses.field(default_factory=healthy_container_files)
    # Host resources (reference §12): /proc/meminfo fields in kB (merged over HEALTHY_MEMINFO_KB); the
    # checkpoint's shards, name -> bytes or null (absent), merged over healthy_checkpoint(); the log
    # directory as a tmpfs of its own {size_mib, used_mib} (null: a plain directory on the node's disk).
    meminfo: dict[str, int] = dataclasses.field(default_factory=dict)
    checkpoint: dict[str, int | None] = dataclasses.field(default_factory=dict)
    logs_tmpfs: dict[str, int] | None = None
    # Our container's launch configuration (reference §13, §16, §17): overrides of the healthy values.
    container_env: dict[str, str | None] = dataclasses.field(default_factory=dict)  # null: not set
    container_run: dict[str, Any] = dataclasses.field(default_factory=dict)  # docker run keyword overrides
    launch_args: dict[str, Any] = dataclasses.field(default_factory=dict)  # flag -> value | true (bare) | null
    launch_prelude: list[str] = dataclasses.field(default_factory=list)  # script lines before the server command
    atom_ranks: dict[str, Any] | None = None  # {env: overrides}: run this node's 4 ATOM::DP<n>TP0 rank processes
    listeners: list[int] = dataclasses.field(default_factory=list)  # TCP ports held on the node's address
    container_log: str = ""  # what our container printed on stderr (its `docker logs`, e.g. a server's boot log)
    # MI355X only (§30): the AgentX point our container's server runs at, and `amd-smi xgmi`'s cells:
    # xgmi_links "A-B" -> what GPU A prints for GPU B ("D", "U/D", "N/A"); xgmi_bit_rates GPU -> Gb/s.
    concurrency: int = 8
    xgmi_links: dict[str, str] = dataclasses.field(default_factory=dict)
    xgmi_bit_rates: dict[int, int] = dataclasses.field(default_factory=dict)
    # The Slurm jobs allocated on the node, as squeue lists them: {id, user, state, [gres], [name]} (none: free)
    slurm_jobs: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.boot_id:
            self.boot_id = default_boot_id(self.tray)
        if self.platform not in PLATFORMS:
            raise ValueError(f"platform must be one of {PLATFORMS}, not {self.platform!r}")
        if self.slurm_jobs and self.platform not in mi355x.KINDS:
            raise ValueError("slurm_jobs: only the rig's MI355X nodes run Slurm (a gfx1250 tray has no squeue)")
        if self.platform in mi355x.KINDS:
            self.hbm_gib = mi355x.KINDS[self.platform].hbm_gib
            self.meminfo = {**mi355x.KINDS[self.platform].meminfo_kb, **self.meminfo}
            self.container_files = mi355x.container_files()

    @property
    def gpus(self) -> int:
        return mi355x.GPUS if self.platform in mi355x.KINDS else GPUS_PER_NODE

    @property
    def bind_paths(self) -> tuple[str, ...]:
        return BIND_PATHS + (MI355X_BIND_FILES if self.platform in mi355x.KINDS else ())

    def bdf(self, card: int) -> str:
        return mi355x.bdf(card) if self.platform in mi355x.KINDS else bdf(card)

    @property
    def name(self) -> str:
        return node_name(self.tray)

    def card(self, c: int) -> dict[str, Any]:
        """Resolved UALink values and top gfx clock of card ``c`` (node defaults + per-card overrides)."""
        values = {
            "accel_state": "active",
            "accel_id": accel_base(self.tray) + GPUS_PER_NODE - 1 - c,  # card0 = highest id: "3 2 1 0"
            "lane_bitmap": "ffffffffffffffffff",
            "ppod_id": self.ppod_id,
            "vpod_id": self.vpod_id,
            "link_type": "UALoE",
            "sclk_max_mhz": 2400,  # the top pp_dpm_sclk level (reference §12: max gfx clock 2.4 GHz)
            "ifoe_driver": "ifoe",  # the driver of the GPU's .1 function: a name, "-" (none) or "absent" (§29)
            "retired_pages": 0,  # HBM pages amd-smi bad-pages lists as RETIRED (§29, §30)
            "busy_pct": 0,  # gpu_busy_percent: 0 at idle; 100 with no process is a stalled queue (§29)
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
    if not any(rel == b or rel.startswith(b + "/") for b in BIND_PATHS + MI355X_BIND_FILES):
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
    ubench.install(tree, state.tray, write_file)  # fake ualoe_p2p.exe / ualoe_bw.exe (rig/k3rig/ubench)
    field.install(tree, state, write_file)  # §31.3: PCIe link, RAS counters, bad pages, kernel.numa_balancing
    _write_host(tree, state)
    if state.platform in mi355x.KINDS:
        write_file(tree, "proc/cmdline", KERNEL_CMDLINE + "\n")
    if not state.amdgpu_loaded:
        _unload_amdgpu(tree)
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


# What amd-smi and rocm-smi print without the driver (ROCm/amdsmi issues #75, #172; rocm-smi exits 0 there).
AMD_SMI_NO_DRIVER = ("ERROR:root:Unable to get devices, driver not initialized (amdgpu not found in modules)\n"
                     "ERROR:root:Unable to detect any GPU devices, check amdgpu version and module status "
                     "(sudo modprobe amdgpu)\n")
ROCM_SMI_NO_DRIVER = "ERROR:root:Driver not initialized (amdgpu not found in modules)\n"


def _unload_amdgpu(tree: Path) -> None:
    """A node booted with amdgpu blacklisted and nothing loaded it yet (reference §5): no amdgpu module,
    no DRM/KFD devices, no amdgpu lines in dmesg, and the SMI tools say the driver is not initialised."""
    drm = [f"sys/class/drm/{name}" for name in os.listdir(tree / "sys/class/drm")]
    for path in (tree / rel for rel in ("sys/module/amdgpu", "sys/class/kfd", *drm)):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    for tool, message in (("amd-smi", AMD_SMI_NO_DRIVER), ("rocm-smi", ROCM_SMI_NO_DRIVER)):
        for key in (tree / "opt/k3rig/data" / tool).iterdir():
            if key.is_dir():
                write_file(tree, f"{key.relative_to(tree)}/stdout", "")
                write_file(tree, f"{key.relative_to(tree)}/stderr", message)
                write_file(tree, f"{key.relative_to(tree)}/rc", "0\n")
    dmesg = tree / "opt/k3rig/data/dmesg/@noargs/stdout"
    dmesg.write_text("".join(line for line in dmesg.read_text().splitlines(keepends=True)
                             if "amdgpu" not in line.split("]", 1)[1] and "UALINK" not in line))


def _write_sysfs(tree: Path, s: NodeState) -> None:
    vram_total = s.hbm_gib * 2**30
    for c in range(s.gpus):
        card = s.card(c)
        dev = f"sys/class/drm/card{c}/device"
        write_file(tree, f"sys/class/drm/card{c}/dev", f"226:{c}\n")
        write_file(tree, f"{dev}/uevent", f"DRIVER=amdgpu\nPCI_CLASS=120000\nPCI_SLOT_NAME={s.bdf(c)}\n")
        write_file(tree, f"{dev}/vendor", "0x1002\n")
        write_file(tree, f"{dev}/mem_info_vram_total", f"{vram_total}\n")
        write_file(tree, f"{dev}/mem_info_vram_used", f"{_vram_used(s, c)}\n")
        render = f"sys/class/drm/renderD{128 + c}"
        write_file(tree, f"{render}/dev", f"226:{128 + c}\n")
        os.symlink(f"../card{c}/device", tree / render / "device")
        # amdgpu's "%d: %uMhz %s\n" with `*` on the current level, SMU 13's deep-sleep line first
        write_file(tree, f"{dev}/pp_dpm_sclk", f"S: 19Mhz *\n0: 500Mhz \n1: 1600Mhz \n2: {card['sclk_max_mhz']}Mhz \n")
        write_file(tree, f"{dev}/pp_dpm_mclk", "0: 900Mhz \n1: 1900Mhz *\n")
        write_file(tree, f"{dev}/gpu_busy_percent", f"{card['busy_pct']}\n")
        if s.platform in mi355x.KINDS:  # XGMI: no UALink sysfs, no IFoE function (§30)
            continue
        # The GPU's .1 (IFoE) function beside it, as device/.. shows it on a real node (§29, §28)
        function = f"sys/class/drm/card{c}/{bdf(c, 1)}"
        if card["ifoe_driver"] != "absent":
            (tree / function).mkdir(parents=True, exist_ok=True)
            write_file(tree, f"{function}/uevent", f"PCI_SLOT_NAME={bdf(c, 1)}\n")
        if card["ifoe_driver"] not in ("absent", "-"):
            os.symlink(f"../../../../bus/pci/drivers/{card['ifoe_driver']}", tree / function / "driver")
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
            "bandwidth": UNSET_U32, "latency": UNSET_U32,
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
    (tree / "sys/class/kfd/kfd/proc").mkdir(parents=True, exist_ok=True)
    topology = "sys/class/kfd/kfd/topology/nodes"  # CPU agent first, then one node per GPU (§29: gfx1250 = 120500)
    write_file(tree, f"{topology}/0/properties", "cpu_cores_count 96\nsimd_count 0\ngfx_target_version 0\n")
    for c in range(s.gpus):
        write_file(tree, f"{topology}/{c + 1}/properties", mi355x.kfd_gpu_properties(c, s.platform) if s.platform
                   in mi355x.KINDS else "cpu_cores_count 0\nsimd_count 1024\nnum_xcc 8\ngfx_target_version 120500\n")
        write_file(tree, f"{topology}/{c + 1}/gpu_id", f"{kfd_gpu_ids(s)[c]}\n")
    for p in s.gpu_processes:
        proc = f"sys/class/kfd/kfd/proc/{p['pid']}"
        gpu_id = kfd_gpu_ids(s)[p["card"]]
        write_file(tree, f"{proc}/pasid", f"{32768 + p['card']}\n")
        write_file(tree, f"{proc}/vram_{gpu_id}", f"{p['vram_bytes']}\n")
        write_file(tree, f"{proc}/sdma_{gpu_id}", "0\n")
        write_file(tree, f"{proc}/stats_{gpu_id}/cu_occupancy", "4\n")
        write_file(tree, f"{proc}/stats_{gpu_id}/evicted_ms", "0\n")
    write_file(tree, "sys/module/amdgpu/initstate", "live\n")
    params = mi355x.AMDGPU_DEFAULT_PARAMS if s.platform in mi355x.KINDS else TUNED_AMDGPU_PARAMS
    for param, value in params.items():
        write_file(tree, f"sys/module/amdgpu/parameters/{param}", f"{value}\n")
    if s.platform not in mi355x.KINDS:  # ifoe is the gfx1250 UALink-over-Ethernet stack (§5)
        write_file(tree, "sys/module/ifoe/initstate", "live\n")


def kfd_gpu_ids(s: NodeState) -> tuple[int, ...]:
    return mi355x.KFD_GPU_IDS if s.platform in mi355x.KINDS else KFD_GPU_IDS


def _vram_used(s: NodeState, card: int) -> int:
    return IDLE_VRAM_USED + s.orphaned_vram.get(card, 0) + sum(p["vram_bytes"] for p in s.gpu_processes
                                                               if p["card"] == card)


# ----------------------------------------------------------------------------------------- host resources

# /proc/meminfo of a ~250 GB box (reference §12) with 128 GiB of swap, in the kernel's own layout and
# field order (the HugePages_* counts are printed without "kB").
HEALTHY_MEMINFO_KB: dict[str, int] = {
    "MemTotal": 263724468, "MemFree": 250112096, "MemAvailable": 257981232, "Buffers": 1105920,
    "Cached": 7214596, "SwapCached": 0, "Active": 3361664, "Inactive": 5529432, "Active(anon)": 1676,
    "Inactive(anon)": 257056, "Active(file)": 3359988, "Inactive(file)": 5529432, "Unevictable": 16716,
    "Mlocked": 15024, "SwapTotal": 134217724, "SwapFree": 134217724, "Zswap": 0, "Zswapped": 0, "Dirty": 2976,
    "Writeback": 0, "AnonPages": 566036, "Mapped": 229744, "Shmem": 9356, "KReclaimable": 1783440,
    "Slab": 2139960, "SReclaimable": 1783440, "SUnreclaim": 356520, "KernelStack": 40160, "PageTables": 71880,
    "SecPageTables": 0, "NFS_Unstable": 0, "Bounce": 0, "WritebackTmp": 0, "CommitLimit": 266079956,
    "Committed_AS": 19434160, "VmallocTotal": 34359738367, "VmallocUsed": 824400, "VmallocChunk": 0,
    "Percpu": 93600, "AnonHugePages": 0, "ShmemHugePages": 0, "ShmemPmdMapped": 0, "FileHugePages": 0,
    "FilePmdMapped": 0, "HugePages_Total": 0, "HugePages_Free": 0, "HugePages_Rsvd": 0,
    "HugePages_Surp": 0, "Hugepagesize": 2048, "Hugetlb": 0, "DirectMap4k": 2048000,
    "DirectMap2M": 207618048, "DirectMap1G": 58720256,
}
CHECKPOINT_DIR = "mnt/k3/Kimi-K3"  # the validated host path, bind-mounted read-only as /models (§12)
CHECKPOINT_SHARDS = 96
CHECKPOINT_BYTES = 1_561_306_814_873  # 1.42 TiB (§12)
LOG_DIR = "root/k3ep16-logs"  # mounted at /logs in the container (§12, §13)


def healthy_checkpoint() -> dict[str, int]:
    """Kimi-K3's 96 shards (§12): name -> bytes, uneven like a real export, 1.42 TiB in all."""
    sizes = {f"model-{i:05d}-of-{CHECKPOINT_SHARDS:05d}.safetensors": 16_350_000_000 + (i * 7_919_113) % 160_000_000
             for i in range(1, CHECKPOINT_SHARDS)}
    sizes[f"model-{CHECKPOINT_SHARDS:05d}-of-{CHECKPOINT_SHARDS:05d}.safetensors"] = (
        CHECKPOINT_BYTES - sum(sizes.values()))
    return sizes


def meminfo_text(overrides: dict[str, int]) -> str:
    unknown = set(overrides) - set(HEALTHY_MEMINFO_KB)
    if unknown:
        raise ValueError(f"no /proc/meminfo field {sorted(unknown)}")
    lines = []
    for name, kb in {**HEALTHY_MEMINFO_KB, **overrides}.items():
        label = f"{name}:"
        lines.append(f"{label:<16}{kb:>8}" + ("" if name.startswith("HugePages_") else " kB"))
    return "\n".join(lines) + "\n"


def _write_host(tree: Path, s: NodeState) -> None:
    """/proc/meminfo, the checkpoint as sparse files (real sizes, no disk used) and the log directory."""
    write_file(tree, "proc/meminfo", meminfo_text(s.meminfo))
    shards = {**healthy_checkpoint(), **s.checkpoint}
    directory = tree / CHECKPOINT_DIR
    directory.mkdir(parents=True, exist_ok=True)
    for name, size in shards.items():
        if size is not None:
            with open(directory / name, "wb") as f:
                f.truncate(size)
    write_file(tree, f"{CHECKPOINT_DIR}/config.json", '{"model_type": "kimi_k3", "num_hidden_layers": 93}\n')
    (tree / LOG_DIR).mkdir(parents=True, exist_ok=True)


# ---------------------------------------------------------------------------------------------- fake tools


def _write_fake_tools(tree: Path, s: NodeState) -> None:
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
                "static --vram": vram_text}
    fabric = [_fabric_entry(s, c) for c in range(GPUS_PER_NODE)]
    # amd-smi 27.1 (ROCm 10.1, reference §29): PHYSICAL_ACC_ID in the ASIC section, the card's accel_id
    asic = [{"gpu": c, "asic": {"market_name": "AMD Instinct MI455X", "oam_id": c,
                                "physical_acc_id": s.card(c)["accel_id"]}, "bus": {"bdf": bdf(c)}}
            for c in range(GPUS_PER_NODE)]
    return {
        "bad-pages --json": bad_pages,
        "fabric --json": _amd_smi_json(s, fabric),
        "fabric": "".join(_fabric_text(entry) for entry in fabric),
        "static --json": _amd_smi_json(s, static),
        "static --vram --json": _amd_smi_json(s, static_vram),
        "static --asic --bus --json": _amd_smi_json(s, asic),
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
        f"GPU[{c}]\t\t: VRAM Total Used Memory (B): {_vram_used(s, c)}\n"
        for c in range(s.gpus)
    )
    memuse = "".join(
        f"GPU[{c}]\t\t: GPU Memory Allocated (VRAM%): {round(100 * _vram_used(s, c) / vram_total)}\n"
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
    for c in range(GPUS_PER_NODE if s.platform == "gfx1250" else 0):
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


def container_tar(files: dict[str, Any]) -> bytes:
    """A tar (for ``put_archive`` at ``/``) of a node's ``container_files``.

    ``{size: N, text: T}`` is T padded with ``#`` to exactly N bytes (N = 0: the empty file an
    interrupted ``docker cp`` leaves, §14); ``{entries: N}`` is a directory of N files (a store). A file
    starting with ``#!`` is executable (a tool the image ships).
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
        info.size, info.mode = len(data), 0o755 if data.startswith(b"#!") else 0o644  # a script runs
        tar.addfile(info, io.BytesIO(data))


# ----------------------------------------------------------------------------- launch configuration (§13, §16, §17)

LAUNCH_SCRIPT = "/app/launch_server.sh"  # named in the rig's inventory (launch-config.launch_script)
DATA_IFNAME = "lo"  # the rig's data plane: every node address is 127.0.N.1x, carried by lo


def healthy_container_env() -> dict[str, str]:
    """The environment a correctly set up site gives our container: the §16 validated set for the
    20260918 image on B0 (no translation trio), data-plane interface names, AITER_LOG_LEVEL."""
    gfx = {k: "gfx1250" for k in ("PYTORCH_ROCM_ARCH", "AITER_RUNTIME_GPU_ARCH", "GPU_ARCHS", "GPU_ARCH_LIST",
                                  "MORI_GPU_ARCHS")}
    return {
        **gfx, "HSA_OVERRIDE_GFX_VERSION": "12.5.0", "ENABLE_CK": "0",
        "ATOM_USE_TRITON_MLA": "1", "ATOM_USE_TRITON_MLA_SHUFFLE_KV": "0", "ATOM_UNFUSED_GATHER_KV_B_PROJ": "1",
        "ATOM_USE_AITER_TRITON_ATTN": "1", "ATOM_USE_UNIFIED_ATTN": "1", "ATOM_MOE_GU_ITLV": "1",
        "ATOM_USE_TRITON_MOE_DECODE": "0", "MEGA_DISPATCH": "mori", "MEGA_DISPATCH_WIRE": "fp4", "ATOM_MORI_V2": "1",
        "ATOM_MORI_V2_FUSED": "1", "AITER_USE_GROUPED_GEMM": "1", "AITER_USE_OPUS_MOE_SORTING": "1",
        "ATOM_USE_TRITON_GEMM": "1", "ATOM_WO_A_USE_FLYDSL": "1", "ATOM_FP8_BLOCKSCALE_USE_E8M0_SCALE": "1",
        "AITER_ROPE_TRITON_BACKEND": "1", "AITER_USE_SYSTEM_TRITON": "1",
        "NCCL_MNNVL_ENABLE": "1", "NCCL_IB_DISABLE": "1", "NCCL_P2P_DISABLE": "0", "NCCL_P2P_LEVEL": "SYS",
        "NCCL_CUMEM_ENABLE": "1", "ATOM_DP_LM_HEAD_MODE": "allgather", "ATOM_USE_CUSTOM_ALL_GATHER": "1",
        "AITER_CUSTOM_AR_USE_SYMM_MEM": "1", "MORI_SOCKET_IFNAME": DATA_IFNAME, "NCCL_SOCKET_IFNAME": DATA_IFNAME,
        "GLOO_SOCKET_IFNAME": DATA_IFNAME, "HSA_XNACK": "1", "HSA_USE_SVM": "1", "HSA_ENABLE_SDMA": "1",
        "ATOM_LOADER_USE_THREADPOOL": "1", "ATOM_LOADER_NUM_THREADS": "4", "AITER_LOG_LEVEL": "WARNING",
    }


def container_env(state: NodeState) -> dict[str, str]:
    healthy = mi355x.server_env(state.concurrency) if state.platform in mi355x.KINDS else healthy_container_env()
    env = {**healthy, **state.container_env}
    return {k: str(v) for k, v in env.items() if v is not None}


def launch_args(state: NodeState, rank: int, master_ip: str) -> dict[str, Any]:
    """The §17 server arguments of node ``rank // 4`` (Config A), with the state's overrides."""
    args: dict[str, Any] = {
        "--model": "/models/Kimi-K3", "--served-model-name": "moonshotai/Kimi-K3", "-tp": 1,
        "--data-parallel-size": 16, "--data-parallel-size-local": GPUS_PER_NODE, "--data-parallel-rank": rank,
        "--data-parallel-master-ip": master_ip, "--data-parallel-master-port": 29500,
        "--data-parallel-base-port": 29700, "--enable-expert-parallel": True, "--enable-dp-attention": True,
        "--kv_cache_dtype": "fp8", "--index-cache-dtype": "fp8", "--cudagraph-mode": "FULL", "--max-num-seqs": 8,
        "--max-num-batched-tokens": 2048, "--gpu-memory-utilization": 0.90, "--no-enable_prefix_caching": True,
        "--trust-remote-code": True, "--disable_uvicorn_access_log": True,
    }
    args.update(state.launch_args)
    return {k: v for k, v in args.items() if v is not None and v is not False}


def launch_script(state: NodeState, rank: int, master_ip: str) -> str:
    """The node's launch script (a site's launch_server.sh): environment lines, then the server."""
    words = []
    for flag, value in launch_args(state, rank, master_ip).items():
        words.append(flag if value is True else f"{flag} {value}")
    body = " \\\n    ".join(["exec python3 -m atom.entrypoints.openai_server", *words])
    prelude = "".join(f"{line}\n" for line in state.launch_prelude)
    return "#!/bin/sh\n# Kimi-K3 wide-EP, reference §17\n" + prelude + body + "\n"


RANK_PROCESS = ("import ctypes, sys, time; ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0); "
                "time.sleep(10**9)")  # PR_SET_NAME: ATOM's setproctitle shows as the process name
LISTENER = ("import socket, sys, time; s = socket.socket(); s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(); "
            "time.sleep(10**9)")


def rank_commands(state: NodeState, first_rank: int) -> list[list[str]]:
    """``docker exec`` argv of this node's ATOM rank processes, each with its full environment."""
    if state.atom_ranks is None:
        return []
    env = {**container_env(state), **(state.atom_ranks.get("env") or {})}
    pairs = [f"{k}={v}" for k, v in env.items() if v is not None]
    return [["env", "-i", *pairs, "/usr/bin/python3", "-c", RANK_PROCESS, f"ATOM::DP{first_rank + i}TP0"]
            for i in range(GPUS_PER_NODE)]


def listener_commands(state: NodeState, address: str) -> list[list[str]]:
    return [["/usr/bin/python3", "-c", LISTENER, address, str(port)] for port in state.listeners]
