"""The XGMI node kinds (reference §30, §31.4): 8 GPUs joined by XGMI, TP8 - MI355X (8 × gfx950 of 288 GB, ~3 TB
of host RAM, the Kimi-K3 ATOM AgentX server at one concurrency point of InferenceX #2697), MI300X and MI325X
(8 × gfx942 of 192 / 256 GB; the same node layout, the same server process, no recipe: the Kimi-K3 recipe targets
MI355 only, §31.4). One node kind, its numbers per platform in :data:`KINDS`.

Everything here is the rig's own statement of §30 (not k3doctor's recipe file), so the rig can tell k3doctor
that its recipe is wrong. Fake tool outputs follow the real layouts: ``amd-smi xgmi`` as amdsmi_cli's ``xgmi``
command prints it (column widths from its source; real captures in tests/unit/samples/xgmi/), KFD topology
properties as the driver prints them (gfx_target_version 90500).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GPUS = 8
# PCI bus of each OAM, as amd-smi's 8-GPU MI3xx examples show them (rocm-systems PR #2053's changelog).
BUSES = (0x05, 0x15, 0x65, 0x75, 0x85, 0x95, 0xE5, 0xF5)
KFD_GPU_IDS = (51562, 30323, 9106, 64919, 16407, 45116, 2201, 37454)
XGMI_BIT_RATE_GBPS = 32  # as the real 8 × MI300X capture prints it; no MI355X capture holds the number
XGMI_MAX_BANDWIDTH_GBPS = 512
XGMI_PORTS = 8  # 7 peers and one unused port, which reads X on a healthy node (§30)

# amdgpu's own defaults: §30 names no load parameter for MI355X (the §5 ones are the gfx1250 bring-up's).
AMDGPU_DEFAULT_PARAMS = {"gpu_recovery": -1, "halt_if_hws_hang": 0, "mtype_local": 0, "noretry": -1}

# /proc/meminfo of a cluster:mi355x-amds runner: ~3 TB DDR5, `available-cpu-dram-mib: 3_095_781` (§30).
MEMINFO_KB = {"MemTotal": 3_221_225_472, "MemFree": 3_168_954_880, "MemAvailable": 3_170_079_744}


@dataclass(frozen=True)
class Kind:
    """What differs between the XGMI nodes: the rig's own statement of §30 / §31.4 (not k3doctor's platform
    files), so that the rig can tell k3doctor that a platform file is wrong."""

    hbm_gib: int
    gfx_target_version: int
    device_id: int | None  # KFD topology's device_id (None: the line is left out, as §30 names none)
    meminfo_kb: dict
    recipe: str | None  # what the rig's inventory names as cluster.recipe


def _meminfo(total_kb: int) -> dict:
    return {"MemTotal": total_kb, "MemFree": total_kb * 98 // 100, "MemAvailable": total_kb * 98 // 100}


RECIPE = "kimi-k3-mi355x-agentx"  # what the MI355X rig's inventory names (cluster.recipe), with its concurrency
KINDS = {
    "mi355x": Kind(288, 90500, None, MEMINFO_KB, RECIPE),
    # §31.4: gfx942 = 90402, device id 0x74a1 (MI300X) / 0x74a5 (MI325X, hwdata pci.ids); host DRAM in the
    # InferenceX fleet ~2.32 TB (MI300X), ~3.09 TB (MI325X).
    "mi300x": Kind(192, 90402, 0x74A1, _meminfo(2_265_625_000), None),
    "mi325x": Kind(256, 90402, 0x74A5, _meminfo(3_017_578_125), None),
}


# Slurm's job list on the node (§30: the AgentX job runs under Slurm + pyxis/enroot): where the fake sits (the
# inventory's `tools.squeue`), the one command line rack-free runs, and what squeue prints for it.
SQUEUE = "opt/slurm/bin/squeue"
SQUEUE_ARGS = "--noheader --all --nodelist=localhost --states=all --format=%A|%i|%u|%T|%b|%j"


def squeue_text(jobs: list) -> str:
    """squeue's lines for ``jobs`` in SQUEUE_ARGS' format (no header; %i is an array element's ``1234_7``, else
    the id; %b prints N/A for a job without gres)."""
    return "".join(f"{j['id']}|{j.get('shown', j['id'])}|{j['user']}|{j['state']}|{j.get('gres', 'N/A')}|"
                   f"{j.get('name', 'bash')}\n" for j in jobs)


def inventory_settings(platform: str, concurrency: int) -> dict:
    """The rig inventory's cluster settings for a node of this kind: its platform, GPUs and HBM, and the recipe
    point the server runs (MI355X only)."""
    kind = KINDS[platform]
    recipe = {"recipe": kind.recipe, "concurrency": concurrency} if kind.recipe else {}
    return {"platform": platform, **recipe, "hbm_gib_per_gpu": kind.hbm_gib, "gpus_per_node": GPUS}


def bdf(gpu: int) -> str:
    return f"0000:{BUSES[gpu]:02x}:00.0"


def kfd_gpu_properties(gpu: int, platform: str) -> str:
    """One GPU node's KFD topology properties (the fields the checks read, in the driver's order)."""
    kind = KINDS[platform]
    device = f"vendor_id 4098\ndevice_id {kind.device_id}\n" if kind.device_id else ""
    return (f"cpu_cores_count 0\nsimd_count 1024\nnum_xcc 8\ngfx_target_version {kind.gfx_target_version}\n"
            f"{device}location_id {BUSES[gpu] << 8}\ndomain 0\nlocal_mem_size {kind.hbm_gib * 2**30}\n")


# ------------------------------------------------------------------------------------------- amd-smi xgmi


def xgmi_text(links: dict | None = None, bit_rates: dict | None = None, link_types: dict | None = None) -> str:
    """``amd-smi xgmi`` of the node. ``links``: "A-B" -> the cell GPU A prints for GPU B (e.g. "D", "U/D",
    "N/A"; healthy "U"); ``bit_rates``: GPU -> Gb/s; ``link_types``: GPU -> link_type ("PCIE", "N/A")."""
    links, bit_rates, link_types = links or {}, bit_rates or {}, link_types or {}
    gpus = range(GPUS)
    header = "       " + "bdf".ljust(14) + "bit_rate".ljust(10) + "max_bandwidth".ljust(15) + "link_type".ljust(11)
    out = ["", "LINK METRIC TABLE:", header + "".join(f"GPU{g}".ljust(13) for g in gpus).rstrip()]
    for g in gpus:
        rate = bit_rates.get(g, XGMI_BIT_RATE_GBPS)
        bandwidth = rate * XGMI_MAX_BANDWIDTH_GBPS // XGMI_BIT_RATE_GBPS
        out.append(f"GPU{g}".ljust(7) + bdf(g).ljust(14) + f"{rate} Gb/s".ljust(10) + f"{bandwidth} Gb/s".ljust(15)
                   + link_types.get(g, "XGMI"))
        for what, scale in (("Read", 1259), ("Write", 1074)):
            cells = ["N/A" if peer == g else f"{scale + 97 * g + peer} KB" for peer in gpus]
            out.append(f" {what}".ljust(57) + "".join(c.ljust(13) for c in cells).rstrip())
    out += ["", "GPU LINK PORT STATUS:", "       " + "bdf".ljust(14) + "port_num".ljust(20)]
    for g in gpus:
        # amd-smi prints this table and the pair table from one status array: a port per link of the pair row
        # ("U/D" is two links to one peer, N/A none), the ports left over unused (X).
        ports = [x for peer in gpus if peer != g and _cell(links, g, peer) != "N/A"
                 for x in _cell(links, g, peer).split("/")]
        ports += ["X"] * (XGMI_PORTS - len(ports))
        out.append(f"GPU{g}".ljust(7) + bdf(g).ljust(14) + "  ".join(ports))
    out += ["", "XGMI LINK STATUS:", "       " + "bdf".ljust(14) + "".join(f"GPU{g}".ljust(14) for g in gpus)]
    for g in gpus:
        cells = ["SELF" if peer == g else _cell(links, g, peer) for peer in gpus]
        out.append(f"GPU{g}".ljust(7) + bdf(g).ljust(14) + "".join(c.ljust(14) for c in cells).rstrip())
    out += ["", "", "Legend:", "  SELF = Current GPU", "  N/A = Not supported", "  U / D / X = Link is Up / Down / "
            "Disabled", "  Read / Write = GPU Metric Accumulated Read / Write"]
    return "\n".join(out) + "\n"


def _cell(links: dict, a: int, b: int) -> str:
    return str(links.get(f"{a}-{b}", "U"))


# ---------------------------------------------------------------------------------------- AgentX server (§30)

MODEL = "moonshotai/Kimi-K3"
DRAFT_MODEL = "Inferact/Kimi-K3-DSpark"
# §30 mounts the HF cache at /var/lib/hf-hub-cache; the rig's container files live under /app, so it is here.
HF_CACHE = "/app/hf-hub-cache"
SERVER_WORKDIR = "/app"  # `python3 -m atom.entrypoints.openai_server` finds the stand-in module here
SERVER_MODULE = "atom.entrypoints.openai_server"
SERVER_PORT = 8891  # 8888 + the last character of runner mi355x-amds_03 (§30)
ONLINE_QUANT = ('{"quant_type":"ptpc_fp8","exclude":["lm_head","model.embed_tokens","*self_attn.[qkv]_conv1d*",'
                '"*block_sparse_moe.experts*","*block_sparse_moe.routed_expert_*","*vision_tower*","*mm_projector*"]}')
# §30 per-concurrency table: max-num-seqs, max-num-batched-tokens, gpu-memory-utilization, ATOM_ENABLE_REPLAYSSM,
# state-checkpoint-slots, LMCache + state offload, draft tokens, acceptance length.
POINTS = {
    1: (32, 8192, "0.88", "0", None, False, 6, "3.75"),
    4: (32, 8192, "0.88", "0", None, False, 2, "2.51"),
    8: (16, 8192, "0.88", "1", 16, True, 2, "2.51"),
    10: (16, 4096, "0.90", "0", 16, True, 2, "2.51"),
}
DRAM_GB_PER_RANK = 32  # floor(min(3,095,781, 2,861,022) MiB x 1,048,576 x 0.086 x 8 / 8 / 1e9) = 257; 257 / 8 (§30)


def server_env(concurrency: int) -> dict[str, str]:
    """The server's environment at one point (§30 "Env, every point" and "conc 8/10 only")."""
    seqs, tokens, util, replay, slots, offload, k, al = POINTS[concurrency]
    env = {"PYTHONNOUSERSITE": "1", "AITER_LOG_LEVEL": "WARNING", "AITER_SITUV2_A4W4": "1",
           "AITER_QUICK_REDUCE_QUANTIZATION": "INT4", "AITER_FLYDSL_STAGE2_FP8": "1",
           "ATOM_MLA_MAX_SPLIT_PER_BATCH": "256", "ATOM_STATE_CHECKPOINT_DEMAND": "0",
           "ATOM_ENABLE_REPLAYSSM": replay, "HF_HUB_CACHE": HF_CACHE, "HIP_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}
    if offload:
        env.update({"PYTHONHASHSEED": "0", "LMCACHE_LOCAL_CPU": "True", "LMCACHE_MAX_LOCAL_CPU_SIZE":
                    str(DRAM_GB_PER_RANK), "LMCACHE_CHUNK_SIZE": "256", "OFFLOAD_STATE": "1",
                    "OFFLOAD_STATE_STAGING_GROUPS": "8", "OFFLOAD_STATE_MIN_LOAD_TOKENS": "0",
                    "OFFLOAD_GPU_STAGING_CHUNKS": "16"})
    return env


def server_args(concurrency: int) -> dict[str, Any]:
    """The server's flags at one point, in the script's order (flag -> value, True for a bare flag)."""
    seqs, tokens, util, replay, slots, offload, k, al = POINTS[concurrency]
    args: dict[str, Any] = {
        "--model": MODEL, "--host": "0.0.0.0", "--server-port": SERVER_PORT, "--trust-remote-code": True,
        "--tensor-parallel-size": 8, "--kv_cache_dtype": "fp8", "--block-size": 128, "--max-num-seqs": seqs,
        "--max-num-batched-tokens": tokens, "--gpu-memory-utilization": util, "--enable_prefix_caching": True,
        "--state-checkpoint-interval-tokens": -1, "--state-checkpoint-slots": slots,
        "--online_quant_config": ONLINE_QUANT, "--method": "dspark", "--draft-model": DRAFT_MODEL,
        "--num-speculative-tokens": k, "--spec-decode-acceptance-length": al,
    }
    if offload:
        args["--kv-transfer-config"] = '{"kv_connector":"lmcache_offload","kv_role":"offload"}'
    return {flag: value for flag, value in args.items() if value is not None}


def server_argv(concurrency: int, overrides: dict[str, Any]) -> list[str]:
    """``python -m atom.entrypoints.openai_server ...`` with the state's flag overrides (None: dropped)."""
    argv = ["python3", "-m", SERVER_MODULE]
    for flag, value in {**server_args(concurrency), **overrides}.items():
        if value is None or value is False:
            continue
        argv += [flag] if value is True else [flag, str(value)]
    return argv


def container_files() -> dict[str, str]:
    """Our container's files: the stand-in server module, LMCache's ROCm build, and the model and drafter
    snapshots complete in the HF cache (a snapshot directory with a file, no `.incomplete` blob), as
    `hf download` leaves them (§30)."""
    snapshot = "3f1c2a9d7b6e5a4c3b2a19f8e7d6c5b4a3f2e1d0"
    files = {f"{SERVER_WORKDIR}/{SERVER_MODULE.replace('.', '/')}.py": "import time\ntime.sleep(10**9)\n",
             # LMCache's ROCm build (v0.5.3rc2-rocm, §29): its native ops import (the image's WORKDIR is on sys.path)
             f"{SERVER_WORKDIR}/lmcache/__init__.py": "", f"{SERVER_WORKDIR}/lmcache/c_ops.py": ""}
    for repo in (MODEL, DRAFT_MODEL):
        cache = f"{HF_CACHE}/models--{repo.replace('/', '--')}"
        files[f"{cache}/snapshots/{snapshot}/config.json"] = '{"model_type": "kimi_k3"}\n'
        files[f"{cache}/blobs/{snapshot}"] = '{"model_type": "kimi_k3"}\n'
    return files
