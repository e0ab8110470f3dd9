"""ATOM server logs: lines attributed to their DP rank, and the signals on-call triage reads (§19–§25).

A node's container log interleaves its ranks; each line says whose it is by a marker
(``EngineCore_DP<n>``, ``DP<n>``, ``Engine <nnn>:``, ``[rank<n>]``). tqdm writes ``\\r`` (§20): it is
turned into line breaks so progress counts as progress. ``docker logs --timestamps`` prefixes an
RFC 3339 time, kept per line so "how long ago did this rank last move" can be answered.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from k3doctor.deadline import plausible_clock
from k3doctor.parsers import ParseError

_LINE = re.compile(r"([^\r\n]*)(?:\r\n|\r|\n|$)")  # \r (tqdm), \r\n and \n each end a line
MAX_LINE = 4096  # longer lines are cut before matching: every regex below stays linear
_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d) ")
_RANK_MARKERS = (re.compile(r"EngineCore_DP(\d{1,3})\b"), re.compile(r"\bEngine (\d{3}):"),
                 re.compile(r"\bDP(\d{1,3})(?:TP\d{1,3})?\b"), re.compile(r"\[rank(\d{1,3})\]"))
_CONTINUATION = re.compile(r"^(?:\s|Traceback |\w*(?:Error|Exception)\b)")
_FIELD = re.compile(r"(\w{1,40})=(-?\d{1,12}(?:\.\d{1,9})?)(GB)?\b")
_LOCAL_EXPERTS = re.compile(r"(?<![\w])experts=(\d{1,6})\b")


@dataclass(frozen=True)
class Signal:
    """A line shape that means something for triage (reference section in ``section``)."""

    kind: str
    pattern: re.Pattern
    section: str


# Rules are data: one row per line shape; a line may carry several (an engine-args line has both
# max_model_len and torch_profiler_dir).
SIGNALS = tuple(Signal(kind, re.compile(pattern), section) for kind, pattern, section in (
    ("kv_error", r"RuntimeError: Per-request cache tensor \((?P<need>[\d.]{1,12})GB for (?P<slots>\d{1,6}) "
                 r"slots\) exceeds available KV budget \((?P<have>-?[\d.]{1,12})GB\)", "§19"),
    ("kv_collision", r"Only (?P<free>[\d.]{1,12})GB is physically free on the GPU", "§19, §3"),
    ("kv_raise_util", r"Set --gpu-memory-utilization >= (?P<util>[\d.]{1,6})", "§19"),
    ("kv_cannot_fit", r"Even --gpu-memory-utilization 1\.0 is insufficient", "§19"),
    ("kv_assert", r"Not enough memory for KV cache with block size", "§19"),
    ("memory_budget", r"Memory budget", "§19"),
    ("megamoe", r"\[MORI-V2\] Created MegaMoE:", "§19"),
    ("ep_ready", r"\[MORI-V2\] cco Communicator ready", "§19"),
    ("rccl_load", r"load RCCL version", "§20"),
    ("sync_dp_timeout", r"_sync_dp_state failed: Timed out waiting (?P<ms>\d{1,12})ms", "§20"),
    ("watchdog_timeout", r"Watchdog caught collective operation timeout", "§20"),
    ("dp_shutdown", r"All DP ranks agreed to shutdown", "§20"),
    ("kv_usage", r"KV usage: (?P<pct>\d{1,3}(?:\.\d{1,3})?)%", "§20"),
    ("max_model_len", r"'max_model_len': (?P<value>None|\d{1,9})", "§17"),
    ("profiler_dir", r"'torch_profiler_dir': (?P<value>None|'[^']{0,512}')", "§23"),
    ("profiling_asked", r"/start_profile|Profiling started|Starting profiler", "§23"),
    ("translated", r"outcome=translated\b", "§2"),
    ("translation_failed", r"translation_status=[1-9]|outcome=(?:translation_failed|output_copy_failed)", "§2"),
    ("triton_code_object", r"Triton Error \[HIP\]: Code: 200.{0,80}device kernel image is invalid", "§10"),
    ("double_free", r"double free or corruption", "§10"),
    ("runner_died", r"exitcode=(?P<code>-\d{1,3})\b", "§10"),
    ("drafter_loading", r"Loading drafter model\.\.\.", "§25"),
    ("drafter_ready", r"Checkpoint prefetch finished", "§25"),
    ("serving", r"Application startup complete|Uvicorn running on", "§20"),
    # AgentX (MI355X TP8, LMCache + state offload, aiperf): §25, §29, §30
    # the c_ops import fails on whichever CUDA library the CUDA build loads first: libcudart.so.13, or torch's
    # libc10_cuda.so (named bare or by its path)
    ("lmcache_cuda_backend", r"Failed to import backend lmcache\.c_ops: .{0,200}?\blib(?:cudart|c10_cuda)\.so", "§29"),
    # every wording of the wait: "... on port 5555", "... healthcheck", "... server."
    ("lmcache_server_timeout", r"Timed out waiting for LMCache server(?: on port (?P<port>\d{1,5}))?", "§29"),
    ("lmcache_server_ready", r"LMCache server is ready", "§29"),
    ("aiter_log_level_invalid", r"Invalid AITER_LOG_LEVEL '(?P<value>[^']{0,40})', using 'INFO'", "§29"),
    ("aiperf_no_atom_metrics", r"contains no metric with required prefix 'atom:'|required AIPerf server metrics "
                               r"artifacts are missing or empty|ProfileMetricCoverageError", "§30"),
    ("gpucore", r"gpucore files exist\. not good", "§30"),
    # Field signatures (RCCL, MORI cco, Gloo, c10d, aiter): §29
    ("mori_fabric_partial", r"ccoCommCreate: UALink fabric ready on only (?P<ready>\d{1,5})/(?P<ranks>\d{1,5}) ranks",
     "§29"),
    ("mori_lsa_refused", r"LSA team spans hosts|non-contiguous lsa membership|heterogeneous lsa sizes detected", "§29"),
    ("mori_vpod_partial", r"MORI_VPOD_ID set on \d{1,5}/\d{1,5} ranks", "§29"),
    ("mori_heap", r"Out of heap memory!", "§29"),
    ("rccl_fabric_version", r"unexpected fabric info version 4294967295", "§29, §20"),
    ("rccl_no_symmetric", r"Symmetric memory is not supported", "§29"),
    ("gloo_interface", r"Unable to find address for: \^|Using the loopback address as fallback|Gloo connectFullMesh "
                       r"failed", "§29"),
    ("rendezvous_timeout", r"\[c10d\] The client socket has timed out after \d{1,12}ms while trying to connect to|"
                           r"DistStoreError: Timed out after \d{1,12} seconds waiting for workers", "§29"),
    ("no_code_objects", r"No compatible code objects found for: (?P<arch>gfx\w{1,40})", "§29"),
    ("rccl_diag_p2p_failed", r"NCCL DIAG \[INFO\] p2p: \S{1,40} srcRank=(?P<src>\d{1,5}) dstRank=(?P<dst>\d{1,5})",
     "§29"),
    ("rccl_diag_multi_gpu", r"peer-memory import failed.{0,200}handle=DIRECT", "§29"),
    ("rccl_diag", r"NCCL DIAG \[", "§29"),  # any line of NCCL_RUN_DIAGNOSTICS=1
    ("rccl_diag_p2p", r"NCCL DIAG \[\w{1,10}\] p2p:", "§29"),  # its P2P verdict, OK or not
    # ROCr names the GPU by its KFD topology node, CPU agents first (§29)
    ("rocr_gpu_hang", r"HW Exception by GPU node-(?P<node>\d{1,4})\b.{0,80}reason :\s?GPU Hang", "§29, §10"),
    ("rocr_memory_fault", r"Memory access fault by GPU node-(?P<node>\d{1,4})\b", "§29, §10"),
    # MI300X / MI325X / MI355X field failures (§31.3)
    ("hip_ipc_handle", r"hipIpcGetMemHandle failed", "§31.3, §29"),
    ("gfx950_only_kernel", r"mla_gluon requires gfx950(?: \(CDNA4\))?, got (?P<arch>gfx\w{1,20})", "§31.3"),
    ("hsa_exception_1016", r"HSA_STATUS_ERROR_EXCEPTION.{0,200}code: 0x1016\b", "§31.3"),
    ("aperture_violation", r"HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION.{0,200}code: 0x29\b", "§31.3"),
    ("numa_balancing", r"NUMA auto balancing enabled", "§31.3"),
))
# Startup stages in order; a rank's stage is the furthest one its lines reached.
STAGES = (("start", None), ("rccl-init", "rccl_load"), ("ep-transport", "ep_ready"),
          ("kv-budget", "memory_budget"), ("serving", "serving"))


@dataclass
class LogLine:
    lineno: int
    text: str
    rank: int | None
    ts: float | None = None
    signals: dict = field(default_factory=dict)  # signal kind -> the fields it captured
    source: str | None = None  # the log (file or node) the line came from, where the reader named it

    def has(self, kind: str) -> bool:
        return kind in self.signals


def _timestamp(line: str):
    """(epoch seconds or None, rest of the line) for a ``docker logs --timestamps`` line."""
    m = _TS.match(line)
    if not m:
        return None, line
    base, frac, zone = m.groups()
    try:
        stamp = datetime.fromisoformat(base + ("+00:00" if zone == "Z" else zone))
    except ValueError:
        return None, line
    seconds = stamp.timestamp() + (int(frac) / 10 ** len(frac) if frac else 0.0)
    if not plausible_clock(seconds):
        raise ParseError(f"time stamp {base}{zone} is more than a day ahead of this machine's clock: "
                         "the log's times cannot be trusted")
    return seconds, line[m.end():]


def rank_marker(text: str) -> int | None:
    """The DP rank a line names, or None."""
    for pattern in _RANK_MARKERS:
        m = pattern.search(text)
        if m:
            return int(m.group(1))
    return None


# Any signal at all, in one search: most lines carry none, and a log of millions of lines then costs one
# search per line instead of one per rule (the per-rule searches run only on the lines this finds).
_ANY_SIGNAL = re.compile("|".join(f"(?:{re.sub(r'[(][?]P<[a-z_]+>', '(?:', p.pattern)})"
                                  for p in (*(signal.pattern for signal in SIGNALS), _LOCAL_EXPERTS)))


def classify(text: str) -> dict:
    """Every signal one line carries, kind -> captured fields (empty for a line no rule knows)."""
    found = {}
    if not _ANY_SIGNAL.search(text):
        return found
    for signal in SIGNALS:
        m = signal.pattern.search(text)
        if m:
            found[signal.kind] = {k: v for k, v in m.groupdict().items() if v is not None}
    if "memory_budget" in found:
        found["memory_budget"] = {k: float(v) for k, v, _ in _FIELD.findall(text)}
    experts = [int(n) for n in _LOCAL_EXPERTS.findall(text)]
    if experts:
        found["experts"] = {"counts": experts, "global": "megamoe" in found}
    return found


def iter_log(text, *, default_rank: int | None = None, source: str | None = None):
    """The lines of a server log as LogLine, one at a time (a log of millions of lines is never held
    parsed at once), each naming ``source``; ParseError, at once, for non-text."""
    if not isinstance(text, str):
        raise ParseError(f"server log: expected text, got {type(text).__name__}")
    if "\x00" in text[:4096]:
        raise ParseError("server log: binary data, not a log")
    return _lines(text, default_rank, source)


def _lines(text: str, default_rank: int | None, source: str | None):
    carried = default_rank
    for lineno, match in enumerate(_LINE.finditer(text), 1):  # lazily: no list of millions of lines
        try:
            ts, line = _timestamp(match.group(1)[:MAX_LINE])
        except ParseError as exc:
            raise ParseError(f"server log line {lineno}: {exc}") from None
        if not line.strip():
            continue
        rank = rank_marker(line)
        if rank is None:
            rank = carried if _CONTINUATION.match(line) else default_rank
        else:
            carried = rank
        yield LogLine(lineno, line.rstrip(), rank, ts, classify(line), source)


def parse_log(text, *, default_rank: int | None = None) -> list:
    """Every line of a server log as LogLine, with rank, time and signal; ParseError for non-text."""
    return list(iter_log(text, default_rank=default_rank))


def stage_of(lines: list) -> str:
    """The furthest startup stage these lines reached (``STAGES`` order)."""
    kinds = {kind for ln in lines for kind in ln.signals}
    reached = "start"
    for name, kind in STAGES[1:]:
        if kind in kinds:
            reached = name
    return reached
