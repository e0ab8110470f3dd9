"""Pure judgement of ATOM server logs: per rank, then across ranks (reference §2, §10, §17, §19–§25).

Input: every rank's parsed lines (``parsers.atom_log``) and the layout (node i holds ranks
``ranks_per_node * i`` …). Output: ``(step, Verdict)`` pairs, most specific cause first; the
orchestration (reading the logs) lives in ``k3doctor.triage``.
"""
from __future__ import annotations

from dataclasses import dataclass

from k3doctor.parsers.atom_log import stage_of
from k3doctor.registry import remediation
from k3doctor.results import Verdict, fail, passed, warn
from k3doctor.triage.signatures import DIAG_NO_P2P_FINDING, FIELD_SIGNATURES, ROCR_SIGNATURES, rocr_card

STEPS = ("triage-collective", "triage-stacks", "triage-startup", "triage-kv", "triage-config", "triage-fatal")

MISSING = remediation("TRIAGE-MISSING-PARTICIPANT", "one rank did not join a collective the others timed out in", """
N-1 ranks timed out waiting (`_sync_dp_state failed: Timed out waiting …ms`, watchdog timeouts) and one
rank never logged it: that rank is the one that stopped (reference §20; seen as the rank at 98.6 % KV
usage under prefix caching). Take py-spy stacks of its ModelRunner (`ATOM::DP<n>TP0`) before killing
anything, then check its node (`k3doctor check` on it, kernel log) and relaunch; at utilization 0.94 it
was not seen again.""")
RCCL_HANG = remediation("TRIAGE-RCCL-INIT-HANG", "startup stopped at `load RCCL version` (ncclCommInitRank)", """
The log stops at `load RCCL version` with the CPU spinning ~110 %: `ncclCommInitRank` hangs, intermittently
and with no known fix (reference §20). It looks identical to a bad fabric: rule the fabric out once
(`k3doctor check --nodes inv.yaml --tier deep --only ualoe-fabric,allreduce-probe`), then retry the
launch. If it hangs every time, the fault is below ATOM (minimal all_reduce probe, §20).""")
STALLED = remediation("TRIAGE-STALLED", "a rank's log stopped moving before the server came up", """
The rank reached the stage shown and has printed nothing since (tqdm progress counts as progress,
reference §20). Cold starts take up to ~25 min; past that, take py-spy stacks of the rank's ModelRunner
(`k3doctor triage` with the live option, §20) and read the node's kernel log.""")
KV_NEGATIVE = remediation("TRIAGE-KV-NEGATIVE", "available_for_kv is not positive", """
`Memory budget … available_for_kv` must be > 0 on every rank (reference §19): budget = total × utilization
minus peak torch, non-torch, cudagraph estimate and 2 % safety. Lower --max-num-batched-tokens (moves
peak_torch and cudagraph_est), raise --gpu-memory-utilization (0.94 validated), and check the board size
(288 vs 432 GiB); re-derive for your board, do not copy numbers.""")
KV_COLLISION = remediation("TRIAGE-KV-COLLISION", "KV budget failure because another job holds GPU memory", """
`Only <z>GB is physically free on the GPU (other processes may be holding memory)`: someone else's job is
on the rack (reference §19 -> §3). Raising --gpu-memory-utilization will not help. Run
`k3doctor check --only rack-free` and clear the foreign containers/processes first.""")
KV_UTIL = remediation("TRIAGE-KV-RAISE-UTIL", "KV budget too small at this --gpu-memory-utilization", """
The engine says which utilization would fit (`Set --gpu-memory-utilization >= <v>`, reference §19):
relaunch with that value (0.94 is validated) or fewer slots / a smaller per-request cache.""")
KV_NOFIT = remediation("TRIAGE-KV-CANNOT-FIT", "the KV cache cannot fit even at utilization 1.0", """
`Even --gpu-memory-utilization 1.0 is insufficient` / `Not enough memory for KV cache` (reference §19):
the configuration does not fit this board. Fewer --max-num-seqs or batched tokens, a shorter context, or
the 432 GiB boards.""")
EXPERTS = remediation("TRIAGE-EXPERTS", "wrong local expert count", """
EP16 must show 56 local experts (`experts=56`); 896 appears only as the global count on the MegaMoE line
(reference §19). Another count means the EP size or the checkpoint is not the one intended: check
--data-parallel-size/--enable-expert-parallel on every node (`k3doctor check --only launch-config`).""")
MAX_LEN = remediation("TRIAGE-MAX-MODEL-LEN", "--max-model-len is set", """
The engine config must show `'max_model_len': None` (reference §17): a set --max-model-len caps the
thinking budget and chat answers come back with empty content (§21). Drop the flag and relaunch.""")
PROFILER = remediation("TRIAGE-PROFILER-DIR", "profiling was asked but torch_profiler_dir is None", """
Only the CLI flag `--torch-profiler-dir <dir>` works; `ATOM_TORCH_PROFILER_DIR` is overridden to None
(reference §23). `POST /start_profile` still answers 200 and the directory stays empty. Relaunch with the
flag pointing at a bind-mounted path.""")
NOT_TRANSLATING = remediation("TRIAGE-NOT-TRANSLATING", "A0 ranks are not translating code objects", """
On A0 silicon every rank must log translations (`outcome=translated`, several hundred per launch;
reference §2): 0 means the B0 objects run untranslated and every token is `!` with HTTP 200 (§1). Fix the
rocjitsu prefix / HSA_TOOLS_LIB (`k3doctor check --only rocjitsu-store,launch-config`) and relaunch.""")
TRANSLATION_FAILED = remediation("TRIAGE-TRANSLATION-FAILED", "code-object translation failed", """
`translation_status` non-zero or `outcome=translation_failed|output_copy_failed` (reference §2): some
kernels run untranslated. Check the prefix's translator and store (§2 sizes, `k3doctor check --only
rocjitsu-store`).""")
B0_TRANSLATING = remediation("TRIAGE-B0-TRANSLATING", "translation active on B0 silicon", """
B0 needs no translation; with the exports still set the hook must perform 0 translations (reference §1).
Translations on B0 are an untested configuration: drop the translation trio or the populated prefix.""")
TRITON = remediation("TRIAGE-TRITON-CODE-OBJECT", "Triton `device kernel image is invalid` (HIP code 200)", """
`triton_merge_attn_states.py … Code: 200 … device kernel image is invalid` under long cached-prefix
prefill: the compile storm ATOM #2378 fixed (reference §10). Use an image whose
triton_merge_attn_states.py carries the fix (`do_not_specialize`).""")
RUNNER_DIED = remediation("TRIAGE-RUNNER-DIED", "a ModelRunner died", """
A ModelRunner exited with a signal (`exitcode=-6`); HTTP may stay up (reference §10, §16). Read the lines
before it on that rank and the node's kernel log (no-retry page fault, §10) before relaunching.""")
DRAFTER = remediation("TRIAGE-DRAFTER-DOWNLOAD", "the drafter is downloading silently", """
The log stopped after `Loading drafter model...` without `Checkpoint prefetch finished`: DRAFT_MODEL_PATH
is a repo id and every rank downloads the 7 GB draft at ~0.7 MB/s (~3 h, reference §25). Point it at a
local directory; HF_HUB_OFFLINE=1 turns the hang into an error.""")


LMCACHE_CUDA = remediation("TRIAGE-LMCACHE-CUDA-BUILD", "LMCache's CUDA build runs on ROCm", """
`Failed to import backend lmcache.c_ops: libcudart.so...` is only a warning, but the offload tier then has no
native ops (PyPI lmcache on ROCm, reference §29). Install the ROCm build (v0.5.3rc2-rocm with cupy-rocm-7-0)
and check `python -c 'import lmcache.c_ops'` in the container before an offload run.""")
LMCACHE_SERVER = remediation("TRIAGE-LMCACHE-SERVER-HUNG", "the LMCache server did not come up", """
`Timed out waiting for LMCache server`: its L1 pool is pinned whole and non-swappable; 2399 GiB hung it in D
state (§29). Keep L1 under ~60% of free /dev/shm and the per-rank sizes x ranks under ~80% of MemTotal
(`k3doctor recipe diff` shows the arithmetic); fixed MP ports 6555/8090 collide between cells.""")
AITER_LEVEL = remediation("TRIAGE-AITER-LOG-LEVEL", "AITER_LOG_LEVEL is not a level aiter knows", """
aiter accepts DEBUG, INFO, WARNING or ERROR (upper-cased; §29); anything else falls back to INFO and its kernel
logs flood the server log for the whole replay. Set AITER_LOG_LEVEL=WARNING.""")
AIPERF_METRICS = remediation("TRIAGE-AIPERF-NO-ATOM-METRICS", "aiperf found no `atom:` server metrics", """
aiperf fails the run when the server's /metrics shows no metric starting `atom:` (AIPERF_REQUIRED_SERVER_METRIC_
PREFIX=atom:, §30): check `curl :$PORT/metrics | grep ^atom:` before the benchmark, and that
AIPERF_SERVER_METRICS_URLS names this server's port.""")
GPUCORE = remediation("TRIAGE-GPUCORE", "GPU core dumps in the run's directory", """
`gpucore files exist. not good`: a GPU fault left core files, which the launcher then deletes (§30). Collect
them first, then match the kernel log (`k3doctor triage` reads dmesg) for the fault that wrote them.""")
# AgentX log signatures (§25, §29, §30): (signal kind, step, finding, what it means, remediation); the first
# matching line is shown.
AGENTX_SIGNATURES = (
    ("lmcache_cuda_backend", "triage-config", warn, "LMCache's CUDA build on ROCm: its native ops did not load",
     LMCACHE_CUDA),
    ("lmcache_server_timeout", "triage-startup", fail, "the LMCache server never came up (its pinned pool hung it)",
     LMCACHE_SERVER),
    ("aiter_log_level_invalid", "triage-config", warn, "AITER_LOG_LEVEL is not DEBUG/INFO/WARNING/ERROR: aiter logs "
     "at INFO", AITER_LEVEL),
    ("aiperf_no_atom_metrics", "triage-fatal", fail, "aiperf found no `atom:` server metrics: the run is rejected",
     AIPERF_METRICS),
    ("gpucore", "triage-fatal", fail, "GPU core files in the run's directory: a GPU fault", GPUCORE),
)


@dataclass(frozen=True)
class Layout:
    """Where ranks live: node i of ``nodes`` holds ranks ``per_node * i`` … ``per_node * (i + 1) - 1``."""

    nodes: tuple
    per_node: int = 4
    stepping: str | None = None  # A0 / B0, site information (§1)
    board_gib: int | None = None  # declared HBM per GPU (288 / 432, §12)
    experts_local: int = 56  # §19, EP16
    experts_global: int = 896
    stall_s: float = 1800.0  # §20: cold starts up to ~25 min
    drafter_stall_s: float = 120.0  # §25: a healthy prefetch finishes in < 1 s
    first_gpu_kfd_node: int = 2  # §29: KFD topology lists the CPU agents first (GPU nodes 2-5 on a gfx1250 tray)

    def outside(self, rank: int) -> bool:
        """True for a rank no node of a known layout holds (``EngineCore_DP999`` on 4 nodes of 4 GPUs)."""
        return bool(self.nodes) and rank // self.per_node >= len(self.nodes)

    def node_of(self, rank: int) -> str | None:
        """The node holding ``rank``: its name, ``node<i>`` by position when no layout names the nodes, None
        for a rank outside a known layout (never an invented node)."""
        index = rank // self.per_node
        if index < len(self.nodes):
            return self.nodes[index]
        return None if self.nodes else f"node{index}"

    def where(self, rank: int) -> str:
        """The node holding ``rank`` for a message, or that it is outside the layout."""
        if self.outside(rank):
            return (f"outside the layout: {len(self.nodes)} node(s) x {self.per_node} GPUs hold ranks "
                    f"0-{len(self.nodes) * self.per_node - 1}")
        return self.node_of(rank)


class RankLines(list):
    """One rank's lines as triage keeps them (``triage.group_by_rank``): a sample per signal kind, and in
    ``counts`` how many lines of each kind there were in all."""

    def __init__(self, lines=(), counts=None):
        super().__init__(lines)
        self.counts = dict(counts or {})


def _count(lines, kind) -> int:
    return lines.counts.get(kind, 0) if isinstance(lines, RankLines) else len(_of(lines, kind))


def _at(layout: Layout, rank: int, verdict: Verdict) -> Verdict:
    verdict.node = layout.node_of(rank)
    verdict.gpu = None if layout.outside(rank) else rank % layout.per_node
    verdict.evidence.setdefault("rank", rank)
    if layout.outside(rank) and layout.where(rank) not in verdict.message:
        verdict.message += f" (rank {rank} is {layout.where(rank)})"
    return verdict


def _last(lines):
    return lines[-1].text[:200] if lines else None


def _of(lines, kind):
    return [ln for ln in lines if ln.has(kind)]


def judge_collectives(ranks: dict, layout: Layout) -> list:
    """§20: the missing participant of a timed-out collective, and the `load RCCL version` stall."""
    out = []
    timed_out = {r for r, lines in ranks.items() if _of(lines, "sync_dp_timeout") or _of(lines, "watchdog_timeout")}
    if timed_out and len(ranks) > 1:
        missing = sorted(set(ranks) - timed_out)
        if missing and len(missing) < len(ranks):
            for r in missing:
                usage = _of(ranks[r], "kv_usage")
                ev = {"timed_out_ranks": sorted(timed_out), "last_line": _last(ranks[r])}
                if usage:
                    ev["kv_usage_pct"] = float(usage[-1].signals["kv_usage"]["pct"])
                out.append(("triage-collective", _at(layout, r, fail(
                    f"rank {r} ({layout.where(r)}) is the missing participant: {len(timed_out)} of {len(ranks)} "
                    f"ranks timed out in a collective it never joined; its last line: {ev['last_line']!r}",
                    evidence=ev, remediation=MISSING))))
    stages = {r: stage_of(lines) for r, lines in ranks.items()}
    stuck = sorted(r for r, lines in ranks.items() if lines and lines[-1].has("rccl_load")
                   and stages[r] == "rccl-init")
    if stuck and not timed_out:
        moved_on = sorted(r for r, s in stages.items() if s not in ("start", "rccl-init"))
        scope = (f"while ranks {moved_on} moved on" if moved_on else "on every rank")
        for r in stuck:
            out.append(("triage-collective", _at(layout, r, fail(
                f"rank {r} ({layout.where(r)}) stopped at `load RCCL version` {scope}: ncclCommInitRank hang; "
                "rule out the fabric once (deep tier), then retry", evidence={"last_line": _last(ranks[r])},
                remediation=RCCL_HANG))))
    return out


def judge_rank(rank: int, lines: list, layout: Layout, now: float | None, serving: bool = False) -> list:
    """Everything one rank's own lines say (§2, §10, §17, §19, §20, §23, §25). ``serving``: the server is up
    (then a quiet rank is idle, not stalled)."""
    out = []

    def add(step, verdict):
        out.append((step, _at(layout, rank, verdict)))

    for ln in _of(lines, "memory_budget")[-1:]:
        total = ln.signals["memory_budget"].get("total_gpu")
        if layout.board_gib and total and abs(total - layout.board_gib) > 0.05 * layout.board_gib:
            add("triage-kv", warn(f"Memory budget total_gpu={total:g} GB on a declared {layout.board_gib} GiB board: "
                                  "budgets derived for the other board size do not carry over",
                                  evidence={"line": ln.text[:300]}, remediation=KV_NEGATIVE))
        kv = ln.signals["memory_budget"].get("available_for_kv")
        if kv is not None and kv <= 0:
            add("triage-kv", fail(f"available_for_kv={kv:g} GB: the KV cache has no room", evidence={
                "line": ln.text[:300]}, remediation=KV_NEGATIVE))
    errors = _of(lines, "kv_error")
    if errors or _of(lines, "kv_assert"):
        line = (errors or _of(lines, "kv_assert"))[-1].text[:300]
        if _of(lines, "kv_collision"):
            free = _of(lines, "kv_collision")[-1].signals["kv_collision"]["free"]
            add("triage-kv", fail(f"KV budget failure: only {free} GB physically free - another job holds the GPU",
                                  evidence={"line": line}, remediation=KV_COLLISION))
        elif _of(lines, "kv_raise_util"):
            util = _of(lines, "kv_raise_util")[-1].signals["kv_raise_util"]["util"]
            add("triage-kv", fail(f"KV budget failure: needs --gpu-memory-utilization >= {util}",
                                  evidence={"line": line}, remediation=KV_UTIL))
        else:
            add("triage-kv", fail("KV cache cannot fit even at utilization 1.0", evidence={"line": line},
                                  remediation=KV_NOFIT))
    local = sorted({n for ln in _of(lines, "experts") if not ln.signals["experts"]["global"]
                    for n in ln.signals["experts"]["counts"]})
    if local and local != [layout.experts_local]:
        add("triage-config", fail(f"experts={local} on this rank (EP16 needs {layout.experts_local} local; "
                                  f"{layout.experts_global} only as the global MegaMoE count)",
                                  evidence={"experts": local}, remediation=EXPERTS))
    for ln in _of(lines, "max_model_len")[:1]:
        value = ln.signals["max_model_len"]["value"]
        if value != "None":
            add("triage-config", fail(f"'max_model_len': {value} - --max-model-len is set",
                                      evidence={"line": ln.text[:300]}, remediation=MAX_LEN))
    prof = _of(lines, "profiler_dir")[:1]
    if prof and prof[0].signals["profiler_dir"]["value"] == "None" and _of(lines, "profiling_asked"):
        add("triage-config", fail("profiling was asked but 'torch_profiler_dir': None - the trace dir stays empty",
                                  evidence={"line": prof[0].text[:300]}, remediation=PROFILER))
    if _of(lines, "translation_failed"):
        add("triage-config", fail("code-object translation failed", evidence={
            "line": _of(lines, "translation_failed")[0].text[:300]}, remediation=TRANSLATION_FAILED))
    translated = _count(lines, "translated")
    if layout.stepping == "A0" and stage_of(lines) in ("kv-budget", "serving") and translated == 0:
        add("triage-config", fail("A0 rank past model load with 0 `outcome=translated` lines: every token will be '!'",
                                  evidence={"translated": 0}, remediation=NOT_TRANSLATING))
    if layout.stepping == "B0" and translated:
        add("triage-config", warn(f"{translated} translations on B0 silicon (untested configuration)",
                                  evidence={"translated": translated}, remediation=B0_TRANSLATING))
    for kind, code, what in (("triton_code_object", TRITON, "Triton code object invalid (HIP code 200)"),
                             ("runner_died", RUNNER_DIED, "ModelRunner died")):
        for ln in _of(lines, kind)[:1]:
            add("triage-fatal", fail(f"{what}: {ln.text[:160]}", evidence={"line": ln.text[:300]}, remediation=code))
    for kind, step, finding, what, code in AGENTX_SIGNATURES + FIELD_SIGNATURES:
        for ln in _of(lines, kind)[:1]:
            add(step, finding(f"{what}: {ln.text[:160]}", evidence={"line": ln.text[:300]}, remediation=code))
    for kind, step, finding, what, code in ROCR_SIGNATURES:
        for ln in _of(lines, kind)[:1]:
            card, mapped = rocr_card(ln.signals[kind], layout.first_gpu_kfd_node, layout.per_node)
            verdict = _at(layout, rank, finding(f"{what} on {mapped}: {ln.text[:160]}", remediation=code, evidence={
                "line": ln.text[:300], "kfd_node": int(ln.signals[kind]["node"])}))
            verdict.gpu = card if card is not None and not layout.outside(rank) else verdict.gpu
            out.append((step, verdict))
    diag = _count(lines, "rccl_diag")
    if diag and not _count(lines, "rccl_diag_p2p"):
        finding, text, code = DIAG_NO_P2P_FINDING
        add("triage-fatal", finding(text.format(count=diag), remediation=code,
                                    evidence={"line": _of(lines, "rccl_diag")[-1].text[:300]}))
    if _of(lines, "double_free"):
        add("triage-fatal", warn("`double free or corruption` in a ModelRunner (seen with long profiler traces, §10)",
                                 evidence={"line": _of(lines, "double_free")[0].text[:300]}, remediation=RUNNER_DIED))
    age = (now - lines[-1].ts) if (now is not None and lines and lines[-1].ts is not None) else None
    if lines and lines[-1].has("drafter_loading") and not _of(lines, "drafter_ready") and \
            (age is None or age >= layout.drafter_stall_s):
        add("triage-startup", fail("log stopped at `Loading drafter model...`: the draft is downloading silently"
                                   + (f" ({age / 60:.0f} min)" if age else ""),
                                   evidence={"last_line": _last(lines), "age_s": age}, remediation=DRAFTER))
    elif age is not None and age >= layout.stall_s and not serving and not lines[-1].has("rccl_load"):
        add("triage-startup", fail(f"log has not moved for {age / 60:.0f} min at stage {stage_of(lines)}",
                                   evidence={"last_line": _last(lines), "age_s": round(age)}, remediation=STALLED))
    return out


def judge(ranks: dict, layout: Layout, now: float | dict | None = None, serving: bool | None = None) -> list:
    """All findings, the cross-rank ones first (they name the rank at fault), then per rank. ``now``: one
    clock for all, or each node's own clock ({node: epoch seconds}, as read live). ``serving``:
    the server came up (its lines need not name a rank); by default, whether a rank's lines say so."""
    found = judge_collectives(ranks, layout)
    stages = {r: stage_of(lines) for r, lines in ranks.items()}
    serving = "serving" in stages.values() if serving is None else serving
    for rank in sorted(ranks):  # each rank's age against its own node's clock (one clock ahead moves no other)
        found += judge_rank(rank, ranks[rank], layout, now.get(layout.node_of(rank)) if isinstance(now, dict)
                            else now, serving)
    if not ranks:
        return found
    if not any(step == "triage-startup" for step, _ in found):
        summary = ", ".join(f"{s}: {sum(1 for v in stages.values() if v == s)}" for s in dict.fromkeys(stages.values()))
        found.append(("triage-startup", passed(f"{len(ranks)} rank(s) read; stages {summary}",
                                               evidence={"stages": {str(r): s for r, s in sorted(stages.items())}})))
    return found
