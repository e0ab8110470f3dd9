"""What the rig puts into a node's ATOM container (reference §2, §13, §14, §16, §17): the files `docker cp`-ed
under /app, the environment, the launch script and the rank and listener processes started in it.
"""

from __future__ import annotations

import io
import tarfile
from typing import TYPE_CHECKING, Any

from . import mi355x
from .fixtures import CONTAINER_FILES_ROOT, GPUS_PER_NODE

if TYPE_CHECKING:
    from .fixtures import NodeState


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
