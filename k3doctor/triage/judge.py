"""Pure judgement of ATOM server logs: per rank, then across ranks (reference §2, §10, §17, §19–§25).

Input: every rank's parsed lines (``parsers.atom_log``) and the layout (node i holds ranks
``ranks_per_node * i`` …). Output: ``(step, Verdict)`` pairs, most specific cause first; the
orchestration (reading the logs) lives in ``k3doctor.triage``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from k3doctor.parsers.atom_log import stage_of
from k3doctor.registry import remediation
from k3doctor.results import Verdict, error, fail, passed, warn
from k3doctor.triage.signatures import (
    AIPERF_METRICS,
    AITER_LEVEL,
    DIAG_NO_P2P,
    FIELD_SIGNATURES,
    GPUCORE,
    LMCACHE_CUDA,
    LMCACHE_SERVER,
    ROCR_GPU,
    rocr_card,
)

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
    """One rank's lines as triage keeps them (``triage.group_lines``): a sample per signal kind, and in
    ``counts`` how many lines of each kind there were in all."""

    def __init__(self, lines=(), counts=None):
        super().__init__(lines)
        self.counts = dict(counts or {})


def _count(lines, kind) -> int:
    return lines.counts.get(kind, 0) if isinstance(lines, RankLines) else len(_of(lines, kind))


def _at(layout: Layout, rank: int, verdict: Verdict) -> Verdict:
    """The finding put on the rank's node and GPU (a GPU the finding named itself stays, §29 ROCr node-N)."""
    verdict.node = layout.node_of(rank)
    if layout.outside(rank) or verdict.gpu is None:
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


@dataclass
class CameUp:
    """Where the server said it came up (`Application startup complete`; its lines name no rank): the newest time
    stamp of such a line anywhere, and per log the number of its last such line - what tells whether a line of a
    rank came before it."""

    at: float | None = None
    lines: dict = field(default_factory=dict)  # log -> line number

    def saw(self, line) -> None:
        """Note a serving line, as the lines are read."""
        self.lines[line.source] = line.lineno
        if line.ts is not None and (self.at is None or line.ts > self.at):
            self.at = line.ts

    def after(self, line) -> bool:
        """Whether the server said it came up after ``line``: stamped later, or further down the same log."""
        return (self.at is not None and line.ts is not None and self.at > line.ts) or \
            self.lines.get(line.source, 0) > line.lineno


@dataclass(frozen=True)
class RankView:
    """What a log rule may read about one rank (or about the lines of one log that name no rank): its lines, the
    layout, how long its log has been quiet (seconds, None when unknown) and whether the server is up (then a quiet
    rank is idle, not stalled), and when it came up last."""

    lines: list
    layout: Layout
    age: float | None
    serving: bool
    came_up: CameUp | None = None


@dataclass(frozen=True)
class LogRule:
    """One triage log rule (a row of ``RULES``): what a rank's lines must show and the finding that gives.

    ``test`` reads the rank (``RankView``) and returns None, or the fields for ``message`` and the evidence
    (and, where the line names another GPU of the node than the rank's own, that card); by default it is
    ``first_line``: the rank printed a line of ``signal``. A rank gives each rule's finding at most once."""

    name: str
    step: str
    finding: Callable  # results.warn | results.fail | results.error
    remediation: str
    signal: str | None  # the parser signal kind the rule reads (k3doctor.parsers.atom_log); None: only time
    message: str  # str.format template over the test's fields
    test: Callable | None = None

    def judge(self, rank: RankView):
        """The rule's Verdict for this rank, or None."""
        found = (self.test or first_line)(self, rank)
        if found is None:
            return None
        fields, evidence, *card = found
        verdict = self.finding(self.message.format(**fields), evidence=evidence, remediation=self.remediation)
        verdict.gpu = card[0] if card else None  # None: the rank's own GPU (_at)
        return verdict


def _rocr_card(rule, rank):
    """ROCr's ``GPU node-N`` is a KFD topology node, CPU agents first (§29): the card it is on this node."""
    for ln in _of(rank.lines, rule.signal)[:1]:
        fields = ln.signals[rule.signal]
        card, mapped = rocr_card(fields, rank.layout.first_gpu_kfd_node, rank.layout.per_node)
        return ({"mapped": mapped, "line": ln.text[:160]}, {"line": ln.text[:300], "kfd_node": int(fields["node"])},
                card)
    return None


def _diag_without_p2p(rule, rank):
    """RCCL's diagnostics ran (``NCCL DIAG`` lines) but their ``p2p:`` verdict is not in the log (§29)."""
    diag = _of(rank.lines, rule.signal)
    if diag and not _of(rank.lines, "rccl_diag_p2p"):
        return {"count": len(diag)}, {"line": diag[-1].text[:300]}
    return None


def first_line(rule: LogRule, rank: RankView):
    """The rank printed a line of the rule's signal: the first one, quoted (shortened) in the message."""
    for ln in _of(rank.lines, rule.signal)[:1]:
        return {"line": ln.text[:160]}, {"line": ln.text[:300]}
    return None


def _budget_board_size(rule, rank):
    for ln in _of(rank.lines, "memory_budget")[-1:]:
        total, board = ln.signals["memory_budget"].get("total_gpu"), rank.layout.board_gib
        if board and total and abs(total - board) > 0.05 * board:
            return {"total": total, "board": board}, {"line": ln.text[:300]}
    return None


def _budget_kv_not_positive(rule, rank):
    for ln in _of(rank.lines, "memory_budget")[-1:]:
        kv = ln.signals["memory_budget"].get("available_for_kv")
        if kv is not None and kv <= 0:
            return {"kv": kv}, {"line": ln.text[:300]}
    return None


def _kv_failure(cause: str | None):
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


_KV_CAUSES = ("kv_collision", "kv_raise_util")  # the first one printed names the cause (§19)


def _expert_count(rule, rank):
    local = sorted({n for ln in _of(rank.lines, "experts") if not ln.signals["experts"]["global"]
                    for n in ln.signals["experts"]["counts"]})
    if local and local != [rank.layout.experts_local]:
        return ({"local": local, "need": rank.layout.experts_local, "all": rank.layout.experts_global},
                {"experts": local})
    return None


def _max_model_len_set(rule, rank):
    for ln in _of(rank.lines, "max_model_len")[:1]:
        if ln.signals["max_model_len"]["value"] != "None":
            return {"value": ln.signals["max_model_len"]["value"]}, {"line": ln.text[:300]}
    return None


def _profiler_dir_unset(rule, rank):
    prof = _of(rank.lines, "profiler_dir")[:1]
    if prof and prof[0].signals["profiler_dir"]["value"] == "None" and _of(rank.lines, "profiling_asked"):
        return {}, {"line": prof[0].text[:300]}
    return None


def _a0_not_translating(rule, rank):
    if rank.layout.stepping == "A0" and stage_of(rank.lines) in ("kv-budget", "serving") and \
            _count(rank.lines, "translated") == 0:
        return {}, {"translated": 0}
    return None


def _b0_translating(rule, rank):
    translated = _count(rank.lines, "translated")
    if rank.layout.stepping == "B0" and translated:
        return {"translated": translated}, {"translated": translated}
    return None


def _drafter_stalled(rank) -> bool:
    lines, age = rank.lines, rank.age
    return bool(lines) and lines[-1].has("drafter_loading") and not _of(lines, "drafter_ready") and \
        (age is None or age >= rank.layout.drafter_stall_s)


def _drafter_downloading(rule, rank):
    if _drafter_stalled(rank):
        return ({"minutes": f" ({rank.age / 60:.0f} min)" if rank.age else ""},
                {"last_line": _last(rank.lines), "age_s": rank.age})
    return None


def _lmcache_not_up(rule, rank):
    """§29: a wait for the LMCache server that timed out, unless a later line says it is up after all (`LMCache
    server is ready`, or the server's `Application startup complete` in this log or stamped later anywhere): a later
    readiness supersedes the earlier timeout. The newest timeout is quoted."""
    lines = rank.lines
    timeouts = [i for i, ln in enumerate(lines) if ln.has(rule.signal)]
    if not timeouts:
        return None
    timeout = lines[timeouts[-1]]
    if any(ln.has("lmcache_server_ready") or ln.has("serving") for ln in lines[timeouts[-1] + 1:]):
        return None
    if rank.came_up is not None and rank.came_up.after(timeout):
        return None
    return {"line": timeout.text[:160]}, {"line": timeout.text[:300]}


def _log_stalled(rule, rank):
    """§20: quiet past ``stall_s`` before the server came up; a drafter download and the RCCL init hang are
    named by their own rules."""
    lines, age = rank.lines, rank.age
    if age is not None and age >= rank.layout.stall_s and not rank.serving and not lines[-1].has("rccl_load") \
            and not _drafter_stalled(rank):
        return {"minutes": f"{age / 60:.0f}", "stage": stage_of(lines)}, {"last_line": _last(lines),
                                                                          "age_s": round(age)}
    return None


# Everything one rank's own lines say (§2, §10, §17, §19, §20, §23, §25, §29, §30), in the order a rank's
# findings are listed.
RULES = tuple(LogRule(*row) for row in (
    ("budget-board-size", "triage-kv", warn, KV_NEGATIVE, "memory_budget",
     "Memory budget total_gpu={total:g} GB on a declared {board} GiB board: budgets derived for the other board "
     "size do not carry over", _budget_board_size),
    ("budget-kv-not-positive", "triage-kv", fail, KV_NEGATIVE, "memory_budget",
     "available_for_kv={kv:g} GB: the KV cache has no room", _budget_kv_not_positive),
    ("kv-collision", "triage-kv", fail, KV_COLLISION, "kv_collision",
     "KV budget failure: only {free} GB physically free - another job holds the GPU", _kv_failure("kv_collision")),
    ("kv-raise-util", "triage-kv", fail, KV_UTIL, "kv_raise_util",
     "KV budget failure: needs --gpu-memory-utilization >= {util}", _kv_failure("kv_raise_util")),
    ("kv-cannot-fit", "triage-kv", fail, KV_NOFIT, "kv_error", "KV cache cannot fit even at utilization 1.0",
     _kv_failure(None)),
    ("expert-count", "triage-config", fail, EXPERTS, "experts",
     "experts={local} on this rank (EP16 needs {need} local; {all} only as the global MegaMoE count)",
     _expert_count),
    ("max-model-len-set", "triage-config", fail, MAX_LEN, "max_model_len",
     "'max_model_len': {value} - --max-model-len is set", _max_model_len_set),
    ("profiler-dir-unset", "triage-config", fail, PROFILER, "profiler_dir",
     "profiling was asked but 'torch_profiler_dir': None - the trace dir stays empty", _profiler_dir_unset),
    ("translation-failed", "triage-config", fail, TRANSLATION_FAILED, "translation_failed",
     "code-object translation failed"),
    ("a0-not-translating", "triage-config", fail, NOT_TRANSLATING, "translated",
     "A0 rank past model load with 0 `outcome=translated` lines: every token will be '!'", _a0_not_translating),
    ("b0-translating", "triage-config", warn, B0_TRANSLATING, "translated",
     "{translated} translations on B0 silicon (untested configuration)", _b0_translating),
    ("triton-code-object", "triage-fatal", fail, TRITON, "triton_code_object",
     "Triton code object invalid (HIP code 200): {line}"),
    ("runner-died", "triage-fatal", fail, RUNNER_DIED, "runner_died", "ModelRunner died: {line}"),
    ("lmcache-cuda-build", "triage-config", warn, LMCACHE_CUDA, "lmcache_cuda_backend",
     "LMCache's CUDA build on ROCm: its native ops did not load: {line}"),
    ("lmcache-server-hung", "triage-startup", fail, LMCACHE_SERVER, "lmcache_server_timeout",
     "the LMCache server never came up (its pinned pool hung it): {line}", _lmcache_not_up),
    ("aiter-log-level", "triage-config", warn, AITER_LEVEL, "aiter_log_level_invalid",
     "AITER_LOG_LEVEL is not DEBUG/INFO/WARNING/ERROR: aiter logs at INFO: {line}"),
    ("aiperf-no-atom-metrics", "triage-fatal", fail, AIPERF_METRICS, "aiperf_no_atom_metrics",
     "aiperf found no `atom:` server metrics: the run is rejected: {line}"),
    ("gpucore", "triage-fatal", fail, GPUCORE, "gpucore", "GPU core files in the run's directory: a GPU fault: {line}"),
)) + tuple(  # the field signatures of §29 (k3doctor.triage.signatures): the first line of each, quoted
    LogRule(kind.replace("_", "-"), step, finding, code, kind, what.replace("{", "{{").replace("}", "}}") + ": {line}")
    for kind, step, finding, what, code in FIELD_SIGNATURES
) + tuple(LogRule(*row) for row in (
    ("rocr-gpu-hang", "triage-fatal", fail, ROCR_GPU, "rocr_gpu_hang", "ROCr: GPU hang on {mapped}: {line}",
     _rocr_card),
    ("rocr-memory-fault", "triage-fatal", fail, ROCR_GPU, "rocr_memory_fault",
     "ROCr: GPU memory access fault on {mapped}: {line}", _rocr_card),
    ("rccl-diag-no-p2p", "triage-fatal", error, DIAG_NO_P2P, "rccl_diag",
     "RCCL diagnostics ran ({count} `NCCL DIAG` line(s)) but printed no `p2p:` line: the GPU pairs were not "
     "verified, nothing to pass (run with `stdbuf -oL`, §29)", _diag_without_p2p),
    ("double-free", "triage-fatal", warn, RUNNER_DIED, "double_free",
     "`double free or corruption` in a ModelRunner (seen with long profiler traces, §10)"),
    ("drafter-downloading", "triage-startup", fail, DRAFTER, "drafter_loading",
     "log stopped at `Loading drafter model...`: the draft is downloading silently{minutes}", _drafter_downloading),
    ("log-stalled", "triage-startup", fail, STALLED, None,
     "log has not moved for {minutes} min at stage {stage}", _log_stalled),
))


# Rules that judge a rank as a whole (how far its startup got, how long it has been quiet); every other rule reads
# single lines, and also judges the lines of a log that name no rank.
WHOLE_RANK = ("a0-not-translating", "drafter-downloading", "log-stalled")
LINE_RULES = tuple(rule for rule in RULES if rule.name not in WHOLE_RANK)


def judge_rank(rank: int, lines: list, layout: Layout, now: float | None, serving: bool = False,
               rules: tuple = RULES, came_up: CameUp | None = None) -> list:
    """(step, Verdict) for every rule of ``rules`` this rank's own lines fire. ``serving``: the server is up
    (then a quiet rank is idle, not stalled)."""
    age = (now - lines[-1].ts) if (now is not None and lines and lines[-1].ts is not None) else None
    view = RankView(lines, layout, age, serving, came_up)
    return [(rule.step, _at(layout, rank, verdict)) for rule in rules if (verdict := rule.judge(view)) is not None]


def judge_source(source: str | None, node: str | None, lines: list, layout: Layout, serving: bool = False,
                 came_up: CameUp | None = None) -> list:
    """(step, Verdict) for every line rule the lines of one log that name no rank fire (aiperf's and the launcher's
    lines, uvicorn's; all of a node's log without rank markers), put on the log's node: ``node`` (None: the log
    names no node, said in the message). The log is named in the evidence."""
    view = RankView(lines, layout, None, serving, came_up)
    out = []
    for rule in LINE_RULES:
        verdict = rule.judge(view)
        if verdict is None:
            continue
        verdict.node, verdict.gpu = node, verdict.gpu if node is not None else None
        verdict.evidence.setdefault("log", source)
        if node is None:
            verdict.message += f" (in log {source}, which names no rank and no node of the layout)"
        out.append((rule.step, verdict))
    return out


def judge(ranks: dict, layout: Layout, now: float | dict | None = None, serving: bool | None = None,
          came_up: CameUp | None = None, sources: dict | None = None) -> list:
    """All findings, the cross-rank ones first (they name the rank at fault), then per rank, then per log for
    its lines that name no rank (``sources``: {log: (its node or None, lines)}). ``now``: one clock for all, or
    each node's own clock ({node: epoch seconds}, as read live). ``serving``: the server came up (its lines need
    not name a rank); by default, whether a rank's lines say so; ``came_up``: where it said so."""
    found = judge_collectives(ranks, layout)
    stages = {r: stage_of(lines) for r, lines in ranks.items()}
    serving = "serving" in stages.values() if serving is None else serving
    for rank in sorted(ranks):  # each rank's age against its own node's clock (one clock ahead moves no other)
        found += judge_rank(rank, ranks[rank], layout, now.get(layout.node_of(rank)) if isinstance(now, dict)
                            else now, serving, came_up=came_up)
    for source, (node, lines) in sorted((sources or {}).items(), key=lambda item: str(item[0])):
        found += judge_source(source, node, lines, layout, serving, came_up)
    if not ranks:
        return found
    if not any(step == "triage-startup" for step, _ in found):
        summary = ", ".join(f"{s}: {sum(1 for v in stages.values() if v == s)}" for s in dict.fromkeys(stages.values()))
        found.append(("triage-startup", passed(f"{len(ranks)} rank(s) read; stages {summary}",
                                               evidence={"stages": {str(r): s for r, s in sorted(stages.items())}})))
    return found
