"""ATOM server-log lines for the simulated rack, written from the reference's literal strings (§2, §10,
§17, §19, §20, §23, §25): a healthy start per rank, and the fault patterns triage must recognise."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

T0 = datetime(2026, 12, 1, 10, 0, 0, tzinfo=timezone.utc)
BUDGET = ("Memory budget: total_gpu=432.00GB, free=425.10GB, utilization=0.90, budget=388.80GB, "
          "peak_torch=194.67GB, non_torch=2.51GB, cudagraph_est=1.18GB, safety=8.64GB, available_for_kv={kv}GB, "
          "block_bytes=1179648, num_kvcache_blocks=145064")


def _prefix(rank: int) -> str:
    """What ATOM's process wrapper puts before every line an engine core prints."""
    return f"(EngineCore_DP{rank} pid={4000 + rank})"


def rank_lines(rank: int, *, stepping: str = "B0", stop_at: str | None = None, kv: str = "159.37",
               experts: int = 56, max_model_len: str = "None", profiler_dir: str = "None") -> list:
    """One rank's startup, healthy unless told otherwise; ``stop_at`` cuts it after that line kind."""
    p = _prefix(rank)
    steps = [
        ("config", f"{p} INFO engine args: {{'model': '/models/Kimi-K3', 'max_model_len': {max_model_len}, "
                   f"'torch_profiler_dir': {profiler_dir}, 'data_parallel_size': 16}}"),
        ("rccl", f"{p} INFO pynccl.py:70] DP{rank} load RCCL version 2.27.3"),
        ("ep", f"{p} INFO [MORI-V2] cco Communicator ready: ep_rank={rank} ep_size=16 per_rank_vmm=3.25GiB"),
        ("moe", f"{p} INFO [MORI-V2] Created MegaMoE: ep_rank={rank} ep_size=16 hidden=7168 inter=2048 "
                "experts=896 topk=16 M=256 act=silu gate=sigmoid quant=fp4 pad=(0, 0) swiglu_limit=7.0 "
                "dispatch=mori wire=fp4 force_a8w4=0"),
        ("experts", f"{p} INFO moe.py:212] DP{rank} FusedMoE layer: experts={experts} topk=16"),
    ]
    if stepping == "A0":
        steps += [("translate", f"{p} [hsa-hotswap-rj] eager translation source_id=fnv1a64:00c0ffee{rank:08x} "
                                "input_revision=b0 output_revision=a0 outcome=translated changed=12")] * 3
    steps += [("load", f"{p} Loading safetensors checkpoint shards: 100% 96/96 [04:01<00:00, 2.51s/it]"),
              ("budget", f"{p} INFO {BUDGET.format(kv=kv)}")]
    if rank == 0:
        steps.append(("serving", "INFO:     Application startup complete."))
    out = []
    for kind, line in steps:
        out.append(line)
        if kind == stop_at:
            break
    return out


def stamped(lines: list, start: datetime = T0, step_s: float = 1.0) -> str:
    """``docker logs --timestamps`` shape: RFC 3339 nanosecond time, a space, the line."""
    return "".join(f"{(start + timedelta(seconds=i * step_s)).strftime('%Y-%m-%dT%H:%M:%S.%f')}000Z {line}\n"
                   for i, line in enumerate(lines))


def node_logs(n_nodes: int = 4, per_node: int = 4, **faults) -> dict:
    """node index -> that node's container log (its ranks interleaved), healthy, with ``faults``:
    ``{rank: {rank_lines kwargs}}`` under ``ranks=`` and extra lines per rank under ``extra=``."""
    ranks, extra = faults.get("ranks", {}), faults.get("extra", {})
    out = {}
    for node in range(n_nodes):
        lines = []
        for rank in range(node * per_node, (node + 1) * per_node):
            lines += rank_lines(rank, **{"stepping": faults.get("stepping", "B0"), **ranks.get(rank, {})})
            lines += [f"{_prefix(rank)} {line}" for line in extra.get(rank, [])]
        out[node] = lines
    return out


def missing_participant(stalled: int, n_ranks: int = 16) -> dict:
    """§20: 15 of 16 ranks time out in `_sync_dp_state`; the stalled rank logged 98.6 % KV usage last."""
    extra = {r: ["ERROR Engine Core: _sync_dp_state failed: Timed out waiting 1800000ms",
                 "INFO All DP ranks agreed to shutdown, exiting busy_loop"] for r in range(n_ranks) if r != stalled}
    extra[stalled] = [f"Engine {stalled:03d}: prompt throughput: 0.0 tok/s, Running: 1, KV usage: 98.6%"]
    return extra


KV_COLLISION = [
    "RuntimeError: Per-request cache tensor (3.35GB for 8 slots) exceeds available KV budget (-33.20GB) at "
    "--gpu-memory-utilization 0.9.",
    "Only 12.40GB is physically free on the GPU (other processes may be holding memory); raising "
    "--gpu-memory-utilization will NOT help.",
]
TRITON = ["triton_merge_attn_states.py:54 RuntimeError: Triton Error [HIP]: Code: 200, Messsage: device kernel "
          "image is invalid"]
DRAFTER = ["Loading drafter model..."]
