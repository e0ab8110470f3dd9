"""On-call triage's log rules as rows (reference §2, §10, §17, §19-§25, §29, §30, §31.3): one row per rule.

A row says what fires it (``pattern``: the line shape the rule is, its kind is the row's name; or ``test``: a
predicate over the rank, ``k3doctor.rules.triage_signals``, reading the shapes there), what it means
(``message``), how bad (``severity``), which step of the triage report it is, the remediation code (its text is
registered below, for `k3doctor explain`) and ``sample``: a line that fires it (tests/unit/test_triage_rules.py
fires every row from its own sample; a predicate row's sample is the line the predicate quotes, after what the
test's context puts before it).

The log parser (layer 1) cannot import this table (layer 5): ``SHAPES`` is what triage hands it, the rows' own
patterns and the compound rules' input shapes, compiled once. Adding a rule that is one line: a row here (and a
remediation text, unless an existing one fits).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from k3doctor.parsers.atom_log import LineShapes, Shape
from k3doctor.registry import remediation
from k3doctor.results import Verdict, verdict
from k3doctor.rules import triage_signals as s


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

MORI_PARTIAL = remediation("TRIAGE-MORI-FABRIC-PARTIAL", "MORI left the UALink fabric for host LSA + RDMA", """
`ccoCommCreate: UALink fabric ready on only N/M ranks - using host LSA + RDMA` is logged at INFO, but the whole job
now runs off the fabric (MORI cco groups the scale-up team by ppod/vpod only over active/ready GPUs, §29). Run
`k3doctor check` before relaunching: ualink-state (all 16 cards active) and fabric-domain (one PPOD/VPOD).""")
MORI_LSA = remediation("TRIAGE-MORI-LSA-LAYOUT", "MORI cco refused the LSA team", """
`LSA team spans hosts ... fabric handle support is unavailable`: libhsakmt exports fabric handles only from
accel_state `ready` (rocm-systems #8051, §0.4) - check the driver/ROCm pairing. `non-contiguous lsa membership`
or `heterogeneous lsa sizes`: ranks must be LSA-major contiguous with the same local size on every node - check
--data-parallel-rank and --data-parallel-size-local on every node (§17).""")
MORI_VPOD = remediation("TRIAGE-MORI-VPOD-PARTIAL", "MORI_VPOD_ID is set on some ranks only", """
Manual vPOD grouping is all-or-none across the job (§29): unset MORI_VPOD_ID everywhere (the fabric's own vPOD
is right for wide EP) or set the same value on every rank, then relaunch. `k3doctor check` (env-versions)
finds it before launch.""")
MORI_HEAP = remediation("TRIAGE-MORI-HEAP", "MORI's symmetric heap is exhausted", """
`Out of heap memory! ... Increase via MORI_SHMEM_HEAP_SIZE`: EP32 exhausted the old 4 GiB default (ROCm/MAD
PR #168 raised it to 16 GiB, §29). Set MORI_SHMEM_HEAP_SIZE=16G (or more) on every rank.""")
AMD_SMI_LIB = remediation("TRIAGE-RCCL-AMD-SMI-LIB", "RCCL read no fabric version through amd-smi", """
`unexpected fabric info version 4294967295`: with RCCL_USE_AMD_SMI_LIB=1, RCCL before rocm-systems PR #9464
asks amd-smi, which never fills fabric_info.version, so every device fails the test and UALoE is off (§29, §20).
Unset RCCL_USE_AMD_SMI_LIB (ignore RCCL's own WARN that advises setting it) or use an RCCL with #9464.""")
SYMMETRIC = remediation("TRIAGE-RCCL-NO-SYMMETRIC-MEMORY", "RCCL ran without symmetric memory (VMM off)", """
`Symmetric memory is not supported` names the missing prerequisite (cuMemEnable, globalGinSupport): cuMem/VMM was
off, so MNNVL is too (§29). Leave NCCL_CUMEM_ENABLE unset on gfx1250 (auto enables it) or set 1, never 0.""")
GLOO = remediation("TRIAGE-GLOO-INTERFACE", "Gloo could not use the data-plane interface", """
GLOO_SOCKET_IFNAME takes one literal interface name (§29): NCCL's `^lo` syntax fails with `Unable to find
address for: ^lo`; unset, a hostname that resolves to 127.x makes Gloo fall back to loopback and
`connectFullMesh` fails towards 127.0.0.1. Set GLOO_SOCKET_IFNAME to the data-plane NIC on every rank and make
`getent hosts $(hostname)` return the data-plane address.""")
RENDEZVOUS = remediation("TRIAGE-RENDEZVOUS-UNREACHABLE", "a rank could not reach the rendezvous", """
`[c10d] The client socket has timed out ... trying to connect to (<ip>, <port>)` on a worker, or the master's
`DistStoreError: Timed out after N seconds waiting for workers` (§29): compare the address tried with node 0's
data-plane IP (--data-parallel-master-ip, §17/§18), then the port from that node (`k3doctor check` judges both;
MORI's bootstrap also uses random ports 10000-60000).""")
CODE_OBJECTS = remediation("TRIAGE-NO-CODE-OBJECTS", "a GPU library has no code objects for this GPU", """
`No compatible code objects found for: <gfx>`: the aiter (or other) wheel in the image was built without this
architecture (ROCm/ATOM #69, §29). Use an image built for the rack's gfx (gfx1250 wide EP, gfx950 MI355X) - a
wrong HSA_OVERRIDE_GFX_VERSION gives the same line.""")
DIAG_P2P = remediation("TRIAGE-RCCL-DIAG-P2P", "RCCL's diagnostics found a GPU pair whose P2P path fails", """
`NCCL_RUN_DIAGNOSTICS=1` checks every directed GPU pair of a node (N*(N-1) edges: 12 for 4 GPUs) and prints
`NCCL DIAG [INFO] p2p: <kind> srcRank=<a> dstRank=<b> path=...` for a failing one (§29): the intra-node path
between those GPUs is broken - check both GPUs' state (kernel-health, ualink-state) before any collective. The
line goes to stdout only (run with `stdbuf -oL`); one process per GPU.""")
DIAG_MULTI = remediation("TRIAGE-RCCL-DIAG-ONE-PROCESS", "RCCL diagnostics run with several GPUs in one process",
                         """
`peer-memory import failed ... handle=DIRECT` on gfx1250 is what one process driving several GPUs gets from
RCCL's P2P diagnostics (§29): run them one process per GPU before reading anything into the result.""")

DIAG_NO_P2P = remediation("TRIAGE-RCCL-DIAG-NO-P2P", "RCCL diagnostics ran but their P2P verdict was not read", """
With NCCL_RUN_DIAGNOSTICS=1 RCCL ends its checks with one `p2p:` line per process: `NCCL DIAG [OK] p2p: all
<n> directed GPU P2P edges verified` or `NCCL DIAG [INFO] p2p: <kind> srcRank=... dstRank=...` (§29). It goes to
stdout only: a log with `NCCL DIAG` lines but no `p2p:` line lost it (buffered stdout, a cut log, a process that
died first), so nothing about the GPU pairs is known - no PASS. Rerun with `stdbuf -oL` and one process per GPU,
and keep stdout in the log.""")
ROCR_GPU = remediation("TRIAGE-ROCR-GPU-FAULT", "ROCr reported a GPU hang or memory fault on a KFD node", """
`HW Exception by GPU node-N ... reason :GPU Hang` and `Memory access fault by GPU node-N ...` name the KFD
topology node, not the GPU index: CPU agents come first, so a 4-GPU gfx1250 tray has GPU nodes 2-5 and `node-3`
is its second card (§29). Confirm the card in `/sys/class/kfd/kfd/topology/nodes/N/properties` (or `rocminfo`:
`Node:` and `BDFID`), then read that GPU's kernel log (`k3doctor check --only kernel-health`): a hang leaves a
wedged GPU (reset the tray, §11). `Memory access fault ... on address (nil). Reason: unknown` with
HSA_OVERRIDE_GFX_VERSION set is the stale override (§29): unset it or make it match the GPU.""")

IPC_HANDLE = remediation("TRIAGE-IOMMU-NOT-PT", "hipIpcGetMemHandle failed: the IOMMU is not in pass-through", """
`NCCL WARN hipIpcGetMemHandle failed : invalid argument` is RCCL failing to share GPU memory between processes
with the IOMMU translating (§31.3, beside §29's `iommu=pt` rule). Add `iommu=pt` to the kernel command line
(GRUB_CMDLINE_LINUX, update-grub, reboot) on every node; `k3doctor check` (iommu-pt) reads /proc/cmdline.""")
GFX950_ONLY = remediation("TRIAGE-GFX950-ONLY-KERNEL", "a gfx950-only kernel was chosen on another GPU", """
`AssertionError: mla_gluon requires gfx950 (CDNA4), got gfx942`: the recipe picks kernels built for MI355X
(gfx950) on an MI300X/MI325X (gfx942) node (vLLM #51964, §31.3). Use a recipe and image for the node's GPU:
ATOM's Kimi-K3 recipe targets MI355 only; on MI325X only vLLM's emulation or int4 path runs it (§31.4).""")
HSA_1016 = remediation("TRIAGE-HSA-EXCEPTION-1016", "HSA exception 0x1016 killed a worker (long context)", """
`HSA_STATUS_ERROR_EXCEPTION ... code: 0x1016`, then `Worker proc VllmWorker-N died unexpectedly`, is Kimi-K3 at
TP8 on MI355X at ~337K tokens of context (vLLM #50347, §31.3). Lower --max-model-len below that length (or keep
requests under it) until the image carries the fix, then relaunch.""")
APERTURE = remediation("TRIAGE-AITER-VSKIP", "memory aperture violation (0x29): aiter's VSKIP on MI300X", """
`HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION ... code: 0x29` on MI300X is aiter's VSKIP path, on by default when
AITER_ENABLE_VSKIP is unset (aiter #1143, §31.3). Set AITER_ENABLE_VSKIP=0 in the engine's environment on gfx942
nodes and relaunch.""")
NUMA = remediation("TRIAGE-NUMA-BALANCING", "automatic NUMA balancing is on", """
`NCCL WARN NUMA auto balancing enabled which can lead to variability in the RCCL performance!`: the kernel moves
pages between NUMA nodes under the job (kernel.numa_balancing=1, §31.3). `sysctl -w kernel.numa_balancing=0` on
every node (and in /etc/sysctl.d to keep it); `k3doctor check` (numa-balancing) reads it before launch.""")
# AgentX (MI355X TP8, LMCache + state offload, aiperf): §25, §29, §30
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


@dataclass(frozen=True)
class Rule:
    """One triage log rule. The rule fires on a rank whose lines match ``pattern`` (the first such line is quoted
    as ``{line}`` in ``message``) or, with ``test``, where the predicate returns fields for ``message``; a rank
    gives each rule's finding at most once. ``whole_rank``: the rule judges a rank as a whole (how far its startup
    got, how long it has been quiet), so it does not judge the lines of a log that name no rank."""

    name: str
    step: str
    severity: str  # fail | warn | error
    remediation: str
    message: str  # str.format template over the fields the test returns
    section: str
    sample: str  # a line that fires the row
    pattern: str | None = None  # the line shape the rule is (its kind is the row's name)
    reads: str | None = None  # without a pattern: the shape of triage_signals the test reads
    test: Callable | None = None  # None: the rank printed a line of the rule's kind (triage_signals.first_line)
    whole_rank: bool = False

    @property
    def kind(self) -> str | None:
        """The line kind the rule reads (``LogLine.signals``): its own pattern's, or the shape it reads."""
        return self.name if self.pattern is not None else self.reads

    def judge(self, rank) -> Verdict | None:
        """The rule's Verdict for this rank (``triage.rank_logs.RankView``), or None."""
        found = (self.test or s.first_line)(self, rank)
        if found is None:
            return None
        fields, evidence, *card = found
        found_verdict = verdict(self.severity, self.message.format(**fields), evidence=evidence,
                                remediation=self.remediation)
        found_verdict.gpu = card[0] if card else None  # None: the rank's own GPU
        return found_verdict


def _line(name, step, severity, code, what, section, pattern, sample, test=None):
    """A rule that is one line shape: ``what``, then the first such line quoted."""
    return Rule(name, step, severity, code, what + ": {line}", section, sample, pattern, test=test)


def _reads(name, step, severity, code, message, section, reads, test, sample, whole_rank=False):
    """A rule whose predicate reads the shapes of triage_signals."""
    return Rule(name, step, severity, code, message, section, sample, reads=reads, test=test, whole_rank=whole_rank)


# In the order a rank's findings are listed.
RULES = (
    _reads("budget-board-size", "triage-kv", "warn", KV_NEGATIVE,
           "Memory budget total_gpu={total:g} GB on a declared {board} GiB board: budgets derived for the other "
           "board size do not carry over", "§19, §12", "memory_budget", s.budget_board_size,
           "Memory budget: total_gpu=432.00GB, budget=388.80GB, available_for_kv=159.37GB"),
    _reads("budget-kv-not-positive", "triage-kv", "fail", KV_NEGATIVE,
           "available_for_kv={kv:g} GB: the KV cache has no room", "§19", "memory_budget", s.budget_kv_not_positive,
           "Memory budget: total_gpu=432.00GB, budget=388.80GB, available_for_kv=-4.67GB"),
    _reads("kv-collision", "triage-kv", "fail", KV_COLLISION,
           "KV budget failure: only {free} GB physically free - another job holds the GPU", "§19, §3",
           "kv_collision", s.kv_failure("kv_collision"),
           "Only 12.40GB is physically free on the GPU (other processes may be holding memory); raising "
           "--gpu-memory-utilization will NOT help."),
    _reads("kv-raise-util", "triage-kv", "fail", KV_UTIL, "KV budget failure: needs --gpu-memory-utilization >= "
           "{util}", "§19", "kv_raise_util", s.kv_failure("kv_raise_util"), "Set --gpu-memory-utilization >= 0.96"),
    _reads("kv-cannot-fit", "triage-kv", "fail", KV_NOFIT, "KV cache cannot fit even at utilization 1.0", "§19",
           "kv_error", s.kv_failure(None), "RuntimeError: Per-request cache tensor (3.35GB for 8 slots) exceeds "
           "available KV budget (-33.20GB) at --gpu-memory-utilization 0.9."),
    _reads("expert-count", "triage-config", "fail", EXPERTS,
           "experts={local} on this rank (EP16 needs {need} local; {all} only as the global MegaMoE count)", "§19",
           "experts", s.expert_count, "(EngineCore_DP0 pid=4000) INFO moe.py:212] DP0 FusedMoE layer: experts=28"),
    _reads("max-model-len-set", "triage-config", "fail", MAX_LEN, "'max_model_len': {value} - --max-model-len is "
           "set", "§17, §21", "max_model_len", s.max_model_len_set,
           "INFO engine args: {'model': '/models/Kimi-K3', 'max_model_len': 32768, 'torch_profiler_dir': None}"),
    _reads("profiler-dir-unset", "triage-config", "fail", PROFILER,
           "profiling was asked but 'torch_profiler_dir': None - the trace dir stays empty", "§23", "profiler_dir",
           s.profiler_dir_unset, "POST /start_profile HTTP/1.1 200"),
    _line("translation-failed", "triage-config", "fail", TRANSLATION_FAILED, "code-object translation failed", "§2",
          r"translation_status=[1-9]|outcome=(?:translation_failed|output_copy_failed)",
          "[hsa-hotswap-rj] eager translation outcome=translation_failed changed=0"),
    _reads("a0-not-translating", "triage-config", "fail", NOT_TRANSLATING,
           "A0 rank past model load with 0 `outcome=translated` lines: every token will be '!'", "§1, §2",
           "translated", s.a0_not_translating, "INFO:     Application startup complete.", whole_rank=True),
    _reads("b0-translating", "triage-config", "warn", B0_TRANSLATING,
           "{translated} translations on B0 silicon (untested configuration)", "§1", "translated", s.b0_translating,
           "[hsa-hotswap-rj] eager translation input_revision=b0 output_revision=a0 outcome=translated changed=12"),
    _line("triton-code-object", "triage-fatal", "fail", TRITON, "Triton code object invalid (HIP code 200)", "§10",
          r"Triton Error \[HIP\]: Code: 200.{0,80}device kernel image is invalid",
          "triton_merge_attn_states.py:54 RuntimeError: Triton Error [HIP]: Code: 200, Messsage: device kernel "
          "image is invalid"),
    _line("runner-died", "triage-fatal", "fail", RUNNER_DIED, "ModelRunner died", "§10, §16",
          r"exitcode=(?P<code>-\d{1,3})\b", "ModelRunner exited with exitcode=-6"),
    # AgentX (MI355X TP8, LMCache + state offload, aiperf): §25, §29, §30
    # the c_ops import fails on whichever CUDA library the CUDA build loads first: libcudart.so.13, or torch's
    # libc10_cuda.so (named bare or by its path)
    _line("lmcache-cuda-build", "triage-config", "warn", LMCACHE_CUDA,
          "LMCache's CUDA build on ROCm: its native ops did not load", "§29",
          r"Failed to import backend lmcache\.c_ops: .{0,200}?\blib(?:cudart|c10_cuda)\.so",
          "LMCache WARNING: Failed to import backend lmcache.c_ops: libcudart.so.13"),
    # every wording of the wait: "... on port 5555", "... healthcheck", "... server."
    _line("lmcache-server-hung", "triage-startup", "fail", LMCACHE_SERVER,
          "the LMCache server never came up (its pinned pool hung it)", "§29",
          r"Timed out waiting for LMCache server(?: on port (?P<port>\d{1,5}))?",
          "RuntimeError: Timed out waiting for LMCache server on port 5555", s.lmcache_not_up),
    _line("aiter-log-level", "triage-config", "warn", AITER_LEVEL,
          "AITER_LOG_LEVEL is not DEBUG/INFO/WARNING/ERROR: aiter logs at INFO", "§29",
          r"Invalid AITER_LOG_LEVEL '(?P<value>[^']{0,40})', using 'INFO'",
          "[aiter] Warning: Invalid AITER_LOG_LEVEL 'WARN', using 'INFO'."),
    _line("aiperf-no-atom-metrics", "triage-fatal", "fail", AIPERF_METRICS,
          "aiperf found no `atom:` server metrics: the run is rejected", "§30",
          r"contains no metric with required prefix 'atom:'|required AIPerf server metrics artifacts are missing or "
          r"empty|ProfileMetricCoverageError", "ERROR: x.json contains no metric with required prefix 'atom:'"),
    _line("gpucore", "triage-fatal", "fail", GPUCORE, "GPU core files in the run's directory: a GPU fault", "§30",
          r"gpucore files exist\. not good", "gpucore files exist. not good"),
    # Field signatures (RCCL, MORI cco, Gloo, c10d, aiter): §29
    _line("mori-fabric-partial", "triage-config", "fail", MORI_PARTIAL,
          "MORI left the UALink fabric: the whole job runs on host LSA + RDMA", "§29",
          r"ccoCommCreate: UALink fabric ready on only (?P<ready>\d{1,5})/(?P<ranks>\d{1,5}) ranks",
          "ccoCommCreate: UALink fabric ready on only 12/16 ranks \u2014 using host LSA + RDMA"),
    _line("mori-lsa-refused", "triage-fatal", "fail", MORI_LSA, "MORI cco refused the LSA team", "§29",
          r"LSA team spans hosts|non-contiguous lsa membership|heterogeneous lsa sizes detected",
          "ccoCommCreate: non-contiguous lsa membership; CCO requires LSA-major contiguous rank layout"),
    _line("mori-vpod-partial", "triage-config", "fail", MORI_VPOD, "MORI_VPOD_ID set on some ranks only", "§29",
          r"MORI_VPOD_ID set on \d{1,5}/\d{1,5} ranks", "ccoCommCreate: MORI_VPOD_ID set on 4/16 ranks \u2014 "
          "manual vPOD grouping must be all-or-none across the job."),
    _line("mori-heap", "triage-fatal", "fail", MORI_HEAP, "MORI's symmetric heap is exhausted", "§29",
          r"Out of heap memory!",
          "Out of heap memory! Requested 268435456 bytes. Hint: Increase via MORI_SHMEM_HEAP_SIZE"),
    _line("rccl-fabric-version", "triage-config", "fail", AMD_SMI_LIB,
          "RCCL_USE_AMD_SMI_LIB switched UALoE off (RCCL before #9464)", "§29, §20",
          r"unexpected fabric info version 4294967295",
          "ct14:1234:1234 [1] NCCL INFO unexpected fabric info version 4294967295"),
    _line("rccl-no-symmetric", "triage-config", "warn", SYMMETRIC,
          "RCCL symmetric memory unsupported: VMM/cuMem was off", "§29", r"Symmetric memory is not supported",
          "NCCL WARN Symmetric memory is not supported (cuMemEnable 0, globalGinSupport 0)"),
    _line("gloo-interface", "triage-config", "fail", GLOO, "Gloo could not use the data-plane interface", "§29",
          r"Unable to find address for: \^|Using the loopback address as fallback|Gloo connectFullMesh failed",
          "RuntimeError: [enforce fail at device.cc:83] ifa != nullptr. Unable to find address for: ^lo"),
    _line("rendezvous-timeout", "triage-startup", "fail", RENDEZVOUS, "rendezvous unreachable", "§29",
          r"\[c10d\] The client socket has timed out after \d{1,12}ms while trying to connect to|"
          r"DistStoreError: Timed out after \d{1,12} seconds waiting for workers",
          "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for workers. 1/2 workers joined."),
    _line("no-code-objects", "triage-fatal", "fail", CODE_OBJECTS, "no code objects for this GPU", "§29",
          r"No compatible code objects found for: (?P<arch>gfx\w{1,40})",
          "No compatible code objects found for: gfx942:sramecc+:xnack-"),
    _line("rccl-diag-p2p-failed", "triage-fatal", "fail", DIAG_P2P, "RCCL diagnostics: a GPU pair's P2P path fails",
          "§29", r"NCCL DIAG \[INFO\] p2p: \S{1,40} srcRank=(?P<src>\d{1,5}) dstRank=(?P<dst>\d{1,5})",
          "ct14:4321 NCCL DIAG [INFO] p2p: read srcRank=1 dstRank=3 path=XGMI status=mismatch"),
    _line("rccl-diag-multi-gpu", "triage-config", "warn", DIAG_MULTI,
          "RCCL diagnostics ran several GPUs in one process", "§29", r"peer-memory import failed.{0,200}handle=DIRECT",
          "NCCL WARN peer-memory import failed for rank 2 (handle=DIRECT)"),
    # MI300X / MI325X / MI355X field failures (§31.3)
    _line("hip-ipc-handle", "triage-config", "fail", IPC_HANDLE,
          "hipIpcGetMemHandle failed: the IOMMU is not in pass-through", "§31.3, §29", r"hipIpcGetMemHandle failed",
          "ct14:1234:1300 [2] NCCL WARN hipIpcGetMemHandle failed : invalid argument"),
    _line("gfx950-only-kernel", "triage-config", "fail", GFX950_ONLY, "a gfx950-only kernel (mla_gluon) on another GPU",
          "§31.3", r"mla_gluon requires gfx950(?: \(CDNA4\))?, got (?P<arch>gfx\w{1,20})",
          "AssertionError: mla_gluon requires gfx950 (CDNA4), got gfx942"),
    _line("hsa-exception-1016", "triage-fatal", "fail", HSA_1016, "HSA exception 0x1016 (long context on MI355X TP8)",
          "§31.3", r"HSA_STATUS_ERROR_EXCEPTION.{0,200}code: 0x1016\b",
          "HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception. code: 0x1016"),
    _line("aperture-violation", "triage-fatal", "fail", APERTURE,
          "memory aperture violation 0x29 (aiter VSKIP on MI300X)", "§31.3",
          r"HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION.{0,200}code: 0x29\b",
          "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory beyond the largest legal "
          "address. code: 0x29"),
    _line("numa-balancing", "triage-config", "warn", NUMA, "automatic NUMA balancing is on", "§31.3",
          r"NUMA auto balancing enabled", "ct14:1234:1234 [0] NCCL WARN NUMA auto balancing enabled which can lead to "
          "variability in the RCCL performance! Disable by \"sudo sysctl -w kernel.numa_balancing=0\""),
    # ROCr names the GPU by its KFD topology node, CPU agents first (§29)
    Rule("rocr-gpu-hang", "triage-fatal", "fail", ROCR_GPU, "ROCr: GPU hang on {mapped}: {line}", "§29, §10",
         "HW Exception by GPU node-4 (Agent handle: 0x5581f5c0e2a0) reason :GPU Hang",
         r"HW Exception by GPU node-(?P<node>\d{1,4})\b.{0,80}reason :\s?GPU Hang", test=s.rocr_gpu),
    Rule("rocr-memory-fault", "triage-fatal", "fail", ROCR_GPU, "ROCr: GPU memory access fault on {mapped}: {line}",
         "§29, §10", "Memory access fault by GPU node-2 (Agent handle: 0x55d0c2a1b7e0) on address (nil). Reason: "
         "unknown.", r"Memory access fault by GPU node-(?P<node>\d{1,4})\b", test=s.rocr_gpu),
    Rule("rccl-diag-no-p2p", "triage-fatal", "error", DIAG_NO_P2P,
         "RCCL diagnostics ran ({count} `NCCL DIAG` line(s)) but printed no `p2p:` line: the GPU pairs were not "
         "verified, nothing to pass (run with `stdbuf -oL`, §29)", "§29",
         "ct14:4321 NCCL DIAG [INFO] intra-node diagnostics: 4 GPUs, 1 process per GPU", r"NCCL DIAG \[",
         test=s.diag_without_p2p),  # any line of NCCL_RUN_DIAGNOSTICS=1
    Rule("double-free", "triage-fatal", "warn", RUNNER_DIED,
         "`double free or corruption` in a ModelRunner (seen with long profiler traces, §10)", "§10",
         "double free or corruption (out)", r"double free or corruption"),
    _reads("drafter-downloading", "triage-startup", "fail", DRAFTER,
           "log stopped at `Loading drafter model...`: the draft is downloading silently{minutes}", "§25",
           "drafter_loading", s.drafter_downloading, "Loading drafter model...", whole_rank=True),
    _reads("log-stalled", "triage-startup", "fail", STALLED, "log has not moved for {minutes} min at stage {stage}",
           "§20", None, s.log_stalled, "(EngineCore_DP0 pid=4000) Loading safetensors checkpoint shards: 100% 96/96",
           whole_rank=True),
)
# What triage hands the log parser: the compound rules' input shapes, then every row's own pattern.
SHAPES = LineShapes((*s.SIGNALS, *(Shape(rule.name, rule.pattern) for rule in RULES if rule.pattern is not None)))
