"""The line shapes triage's compound rules read, and the predicates over a rank's lines that those rules are
(reference §2, §10, §17, §19, §20, §23, §25, §29). A rule that is one line shape carries its own pattern in its
row (``k3doctor.rules.triage``); the shapes here are the inputs of rules that need more than one line, a count, a
time or the layout: a KV failure and the line that says why, the startup stages, the engine's config.

Each shape is a row (kind, pattern, section, sample): the sample is a line that carries it (the rows' test fires
every sample). A predicate reads a rank (``triage.rank_logs.RankView``: its lines, the layout, its age, whether the
server is up) and returns None, or the fields for the rule's message and the evidence (and, where the line names
another GPU of the node than the rank's own, that card).
"""
from __future__ import annotations

from dataclasses import dataclass

from k3doctor.parsers.atom_log import Shape


@dataclass(frozen=True)
class Signal(Shape):
    """A line shape a compound rule reads: its reference section and a line that carries it."""

    section: str = ""
    sample: str = ""


# One row per line shape; a line may carry several (an engine-args line has max_model_len and torch_profiler_dir).
SIGNALS = tuple(Signal(kind, pattern, fields, section, sample) for kind, pattern, fields, section, sample in (
    ("kv_error", r"RuntimeError: Per-request cache tensor \((?P<need>[\d.]{1,12})GB for (?P<slots>\d{1,6}) "
                 r"slots\) exceeds available KV budget \((?P<have>-?[\d.]{1,12})GB\)", "groups", "§19",
     "RuntimeError: Per-request cache tensor (3.35GB for 8 slots) exceeds available KV budget (-33.20GB)"),
    ("kv_collision", r"Only (?P<free>[\d.]{1,12})GB is physically free on the GPU", "groups", "§19, §3",
     "Only 12.40GB is physically free on the GPU (other processes may be holding memory)"),
    ("kv_raise_util", r"Set --gpu-memory-utilization >= (?P<util>[\d.]{1,6})", "groups", "§19",
     "Set --gpu-memory-utilization >= 0.96"),
    ("kv_cannot_fit", r"Even --gpu-memory-utilization 1\.0 is insufficient", "groups", "§19",
     "Even --gpu-memory-utilization 1.0 is insufficient"),
    ("kv_assert", r"Not enough memory for KV cache with block size", "groups", "§19",
     "AssertionError: Not enough memory for KV cache with block size 16"),
    ("memory_budget", r"Memory budget", "numbers", "§19",
     "Memory budget: total_gpu=432.00GB, budget=388.80GB, available_for_kv=159.37GB"),
    ("megamoe", r"\[MORI-V2\] Created MegaMoE:", "groups", "§19",
     "[MORI-V2] Created MegaMoE: ep_rank=0 experts=896"),
    ("experts", r"(?<![\w])experts=(\d{1,6})\b", "counts", "§19", "FusedMoE layer: experts=56 topk=16"),
    ("ep_ready", r"\[MORI-V2\] cco Communicator ready", "groups", "§19",
     "[MORI-V2] cco Communicator ready: ep_rank=0"),
    ("rccl_load", r"load RCCL version", "groups", "§20", "pynccl.py:70] DP0 load RCCL version 2.27.3"),
    ("sync_dp_timeout", r"_sync_dp_state failed: Timed out waiting (?P<ms>\d{1,12})ms", "groups", "§20",
     "ERROR Engine Core: _sync_dp_state failed: Timed out waiting 1800000ms"),
    ("watchdog_timeout", r"Watchdog caught collective operation timeout", "groups", "§20",
     "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7752, OpType=ALLREDUCE)"),
    ("dp_shutdown", r"All DP ranks agreed to shutdown", "groups", "§20", "All DP ranks agreed to shutdown"),
    ("kv_usage", r"KV usage: (?P<pct>\d{1,3}(?:\.\d{1,3})?)%", "groups", "§20",
     "Engine 003: prompt throughput: 0.0 tok/s, Running: 1, KV usage: 98.6%"),
    ("max_model_len", r"'max_model_len': (?P<value>None|\d{1,9})", "groups", "§17", "'max_model_len': None"),
    ("profiler_dir", r"'torch_profiler_dir': (?P<value>None|'[^']{0,512}')", "groups", "§23",
     "'torch_profiler_dir': None"),
    ("profiling_asked", r"/start_profile|Profiling started|Starting profiler", "groups", "§23",
     "POST /start_profile HTTP/1.1 200"),
    ("translated", r"outcome=translated\b", "groups", "§2", "eager translation outcome=translated changed=12"),
    ("drafter_loading", r"Loading drafter model\.\.\.", "groups", "§25", "Loading drafter model..."),
    ("drafter_ready", r"Checkpoint prefetch finished", "groups", "§25", "Checkpoint prefetch finished in 0.4s"),
    ("serving", r"Application startup complete|Uvicorn running on", "groups", "§20",
     "INFO:     Application startup complete."),
    ("lmcache_server_ready", r"LMCache server is ready", "groups", "§29", "LMCache server is ready"),
    ("rccl_diag_p2p", r"NCCL DIAG \[\w{1,10}\] p2p:", "groups", "§29",  # RCCL diagnostics' P2P verdict, OK or not
     "NCCL DIAG [OK] p2p: all 12 directed GPU P2P edges verified"),
))
# Startup stages in order; a rank's stage is the furthest one its lines reached.
STAGES = (("start", None), ("rccl-init", "rccl_load"), ("ep-transport", "ep_ready"),
          ("kv-budget", "memory_budget"), ("serving", "serving"))


def stage_of(lines: list) -> str:
    """The furthest startup stage these lines reached (``STAGES`` order)."""
    kinds = {kind for ln in lines for kind in ln.signals}
    reached = "start"
    for name, kind in STAGES[1:]:
        if kind in kinds:
            reached = name
    return reached


def _of(lines, kind):
    return [ln for ln in lines if ln.has(kind)]


def _count(lines, kind) -> int:
    """How many lines of ``kind`` the rank printed: triage keeps a sample of each kind and the count of all
    (``triage.rank_logs.RankLines.counts``); a plain list of lines is counted."""
    counts = getattr(lines, "counts", None)
    return counts.get(kind, 0) if counts is not None else len(_of(lines, kind))


def last_text(lines):
    return lines[-1].text[:200] if lines else None


def first_line(rule, rank):
    """The rank printed a line of the rule's kind: the first one, quoted (shortened) in the message."""
    for ln in _of(rank.lines, rule.kind)[:1]:
        return {"line": ln.text[:160]}, {"line": ln.text[:300]}
    return None


def rocr_card(fields: dict, first_gpu_node: int, per_node: int) -> tuple:
    """(card index on the node or None, how it was mapped) for ROCr's ``GPU node-N`` (§29: KFD topology node,
    CPU agents first; ``first_gpu_node`` is the first GPU's KFD node, 2 on a two-socket gfx1250 tray)."""
    node = int(fields["node"])
    card = node - first_gpu_node
    if not 0 <= card < per_node:
        return None, (f"KFD topology node {node} is not one of this layout's GPU nodes {first_gpu_node}-"
                      f"{first_gpu_node + per_node - 1}: read /sys/class/kfd/kfd/topology/nodes/{node}/properties")
    return card, (f"KFD topology node {node} = card {card} of the node (GPU nodes start at {first_gpu_node}, after "
                  f"the CPU agents; not GPU index {node}; confirm in "
                  f"/sys/class/kfd/kfd/topology/nodes/{node}/properties)")


def rocr_gpu(rule, rank):
    """ROCr's ``GPU node-N`` is a KFD topology node, CPU agents first (§29): the card it is on this node."""
    for ln in _of(rank.lines, rule.kind)[:1]:
        fields = ln.signals[rule.kind]
        card, mapped = rocr_card(fields, rank.layout.first_gpu_kfd_node, rank.layout.per_node)
        return ({"mapped": mapped, "line": ln.text[:160]}, {"line": ln.text[:300], "kfd_node": int(fields["node"])},
                card)
    return None


def diag_without_p2p(rule, rank):
    """RCCL's diagnostics ran (``NCCL DIAG`` lines) but their ``p2p:`` verdict is not in the log (§29)."""
    diag = _of(rank.lines, rule.kind)
    if diag and not _of(rank.lines, "rccl_diag_p2p"):
        return {"count": len(diag)}, {"line": diag[-1].text[:300]}
    return None


def budget_board_size(rule, rank):
    for ln in _of(rank.lines, "memory_budget")[-1:]:
        total, board = ln.signals["memory_budget"].get("total_gpu"), rank.layout.board_gib
        if board and total and abs(total - board) > 0.05 * board:
            return {"total": total, "board": board}, {"line": ln.text[:300]}
    return None


def budget_kv_not_positive(rule, rank):
    for ln in _of(rank.lines, "memory_budget")[-1:]:
        kv = ln.signals["memory_budget"].get("available_for_kv")
        if kv is not None and kv <= 0:
            return {"kv": kv}, {"line": ln.text[:300]}
    return None


_KV_CAUSES = ("kv_collision", "kv_raise_util")  # the first one printed names the cause (§19)


def kv_failure(cause: str | None):
    """A KV budget failure (``kv_error``/``kv_assert``) whose cause line is ``cause`` (the first cause line
    kind of ``_KV_CAUSES`` the rank printed); None: no cause line at all."""
    def test(rule, rank):
        failures = _of(rank.lines, "kv_error") or _of(rank.lines, "kv_assert")
        printed = next((kind for kind in _KV_CAUSES if _of(rank.lines, kind)), None)
        if not failures or printed != cause:
            return None
        fields = dict(_of(rank.lines, cause)[-1].signals[cause]) if cause else {}
        return fields, {"line": failures[-1].text[:300]}
    return test


def expert_count(rule, rank):
    """EP16's local expert count; 896 appears only as the global count, on the MegaMoE line (§19)."""
    local = sorted({n for ln in _of(rank.lines, "experts") if not ln.has("megamoe")
                    for n in ln.signals["experts"]["counts"]})
    if local and local != [rank.layout.experts_local]:
        return ({"local": local, "need": rank.layout.experts_local, "all": rank.layout.experts_global},
                {"experts": local})
    return None


def max_model_len_set(rule, rank):
    for ln in _of(rank.lines, "max_model_len")[:1]:
        if ln.signals["max_model_len"]["value"] != "None":
            return {"value": ln.signals["max_model_len"]["value"]}, {"line": ln.text[:300]}
    return None


def profiler_dir_unset(rule, rank):
    prof = _of(rank.lines, "profiler_dir")[:1]
    if prof and prof[0].signals["profiler_dir"]["value"] == "None" and _of(rank.lines, "profiling_asked"):
        return {}, {"line": prof[0].text[:300]}
    return None


def a0_not_translating(rule, rank):
    if rank.layout.stepping == "A0" and stage_of(rank.lines) in ("kv-budget", "serving") and \
            _count(rank.lines, "translated") == 0:
        return {}, {"translated": 0}
    return None


def b0_translating(rule, rank):
    translated = _count(rank.lines, "translated")
    if rank.layout.stepping == "B0" and translated:
        return {"translated": translated}, {"translated": translated}
    return None


def _drafter_stalled(rank) -> bool:
    lines, age = rank.lines, rank.age
    return bool(lines) and lines[-1].has("drafter_loading") and not _of(lines, "drafter_ready") and \
        (age is None or age >= rank.layout.drafter_stall_s)


def drafter_downloading(rule, rank):
    if _drafter_stalled(rank):
        return ({"minutes": f" ({rank.age / 60:.0f} min)" if rank.age else ""},
                {"last_line": last_text(rank.lines), "age_s": rank.age})
    return None


def lmcache_not_up(rule, rank):
    """§29: a wait for the LMCache server that timed out, unless a later line says it is up after all (`LMCache
    server is ready`, or the server's `Application startup complete` in this log or stamped later anywhere): a later
    readiness supersedes the earlier timeout. The newest timeout is quoted."""
    lines = rank.lines
    timeouts = [i for i, ln in enumerate(lines) if ln.has(rule.kind)]
    if not timeouts:
        return None
    timeout = lines[timeouts[-1]]
    if any(ln.has("lmcache_server_ready") or ln.has("serving") for ln in lines[timeouts[-1] + 1:]):
        return None
    if rank.came_up is not None and rank.came_up.after(timeout):
        return None
    return {"line": timeout.text[:160]}, {"line": timeout.text[:300]}


def log_stalled(rule, rank):
    """§20: quiet past ``stall_s`` before the server came up; a drafter download and the RCCL init hang are
    named by their own rules."""
    lines, age = rank.lines, rank.age
    if age is not None and age >= rank.layout.stall_s and not rank.serving and not lines[-1].has("rccl_load") \
            and not _drafter_stalled(rank):
        return {"minutes": f"{age / 60:.0f}", "stage": stage_of(lines)}, {"last_line": last_text(lines),
                                                                          "age_s": round(age)}
    return None
