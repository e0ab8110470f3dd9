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
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from . import field, mi355x, ubench
from .tools import KERNEL_CMDLINE, UNSET_U32, bdf, vram_used, write_fake_tools

GPUS_PER_NODE = 4
DEFAULT_TRAYS = (13, 14, 16, 17)  # CT13, CT14, CT16, CT17: the validated 4-node set (reference §4)
RACK_PPOD_ID = "3e56c1d0-7a4b-4e21-9f3c-58d2b4a1878f"
KFD_GPU_IDS = (40771, 12618, 59035, 27304)  # KFD topology gpu_id per card (opaque hashes on real nodes)
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
IDLE_POWER_W, POWER_CAP_W = 140, 1000  # a GPU's hwmon power at idle and its cap (MI3xx-class figures, §31.2)
CARD_FIELDS = ("accel_state", "accel_id", "lane_bitmap", "ppod_id", "vpod_id", "link_type", "sclk_max_mhz",
               "ifoe_driver", "retired_pages", "busy_pct", *field.CARD_FIELDS)
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
    write_fake_tools(tree, state, write_file)
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
        write_file(tree, f"{dev}/mem_info_vram_used", f"{vram_used(s, c)}\n")
        render = f"sys/class/drm/renderD{128 + c}"
        write_file(tree, f"{render}/dev", f"226:{128 + c}\n")
        os.symlink(f"../card{c}/device", tree / render / "device")
        # amdgpu's "%d: %uMhz %s\n" with `*` on the current level, SMU 13's deep-sleep line first
        write_file(tree, f"{dev}/pp_dpm_sclk", f"S: 19Mhz *\n0: 500Mhz \n1: 1600Mhz \n2: {card['sclk_max_mhz']}Mhz \n")
        write_file(tree, f"{dev}/pp_dpm_mclk", "0: 900Mhz \n1: 1900Mhz *\n")
        write_file(tree, f"{dev}/gpu_busy_percent", f"{card['busy_pct']}\n")
        # hwmon's power in microwatts (amdgpu_pm.c): idle draw under the cap (the watch's busy-at-idle-power rule)
        write_file(tree, f"{dev}/hwmon/hwmon{c}/power1_average", f"{IDLE_POWER_W * 10**6}\n")
        write_file(tree, f"{dev}/hwmon/hwmon{c}/power1_cap", f"{POWER_CAP_W * 10**6}\n")
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
