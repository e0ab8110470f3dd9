"""Classify torch.distributed (NCCL/RCCL) failure text from a rank's log.

On-call triage needs to tell a collective that never ran (platform fault, reference §20:
``last completed work: -1``) from a mid-run timeout, a peer that vanished (remote error /
connection reset) and the intermittent ``ncclCommInitRank`` hang (§20: retry).  The RCCL
build of PyTorch prints the same ProcessGroupNCCL lines as the NVIDIA build.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from k3doctor.parsers.common import require_text, to_int

# Both the PyTorch >= 2.x layout ("[rank0]:[E1206 ...] [Rank 0] Watchdog ... NumelIn=..") and the
# legacy one ("[E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog ...", no NumelIn/NumelOut).
# "[Rank 0]", "[PG 1 Rank 0]", "[PG 0 (default_pg) Rank 1]", "[PG ID 0 PG GUID 0(default_pg) Rank 1]";
# the PG description is bounded so a line of unclosed "[PG 1 " costs linear, not quadratic, time
_RANK_TAG = r"\[(?:PG (?:ID )?(?P<pg>\d+)[^\][]{0,120}? )?Rank (?P<rank>\d+)\]"
_WATCHDOG = re.compile(
    _RANK_TAG + r" Watchdog caught collective operation timeout: "
    r"WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)"
    r"(?:, NumelIn=(?P<numel_in>\d+), NumelOut=(?P<numel_out>\d+))?"
    r", Timeout\(ms\)=(?P<timeout>\d+)\) ran for (?P<ran>\d+) milliseconds"
)
# the follow-up line: its rank tag and its counters are found separately (one `tag.*?counters`
# pattern re-scans the line from every tag: quadratic on a long line)
_RANK_TAG_ONLY = re.compile(_RANK_TAG)
_PROGRESS = re.compile(
    r"last enqueued (?:NCCL )?work: (?P<enqueued>-?\d+), last completed (?:NCCL )?work: (?P<completed>-?\d+)"
)
_NCCL_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)")
# (kind, pattern) for NCCL/RCCL error lines; first match per line wins.
_NCCL_ERRORS = tuple((kind, re.compile(pattern)) for kind, pattern in (
    ("connection_reset",
     r"Call to recv from (?P<peer>\S+) failed\s*:\s*Connection reset by peer|Connection reset by peer"),
    ("remote_error", r"ncclRemoteError"),
    ("system_error", r"ncclSystemError"),
    ("internal_error", r"ncclInternalError"),
    ("unhandled_cuda_error", r"unhandled cuda error"),  # RCCL's wording for HIP failures too (§8)
    ("hip_failure", r"NCCL WARN HIP failure '(?P<reason>[^']*)'"),
))
_COMM_INIT = re.compile(r"ncclCommInitRank")
_RCCL_LOAD = re.compile(r"load RCCL version")  # a hang shows as the log stopping on this line (§20)


@dataclass
class WatchdogTimeout:
    """One rank's watchdog timeout; ``last_*`` come from the follow-up line when printed."""

    rank: int
    seq: int
    op_type: str
    timeout_ms: int
    ran_for_ms: int
    numel_in: int | None = None
    numel_out: int | None = None
    pg: int | None = None
    last_enqueued: int | None = None
    last_completed: int | None = None

    @property
    def never_ran(self) -> bool:
        """``last completed work: -1``: no collective ever completed -> platform fault (§20)."""
        return self.last_completed == -1


@dataclass(frozen=True)
class NcclError:
    kind: str
    line: str
    details: dict = field(default_factory=dict)


@dataclass
class TorchFailures:
    """Everything recognised in the text; :attr:`kind` is the headline for a report."""

    watchdog: list = field(default_factory=list)
    nccl_errors: list = field(default_factory=list)
    comm_init_hints: list = field(default_factory=list)  # ncclCommInitRank lines / log ending at RCCL load
    nccl_version: str | None = None

    @property
    def kind(self) -> str:
        """``watchdog_timeout``, ``nccl_<error kind>``, ``comm_init_hang`` or ``unclassified``.

        ``unclassified`` means none of these patterns matched — not that the run was healthy.
        """
        if self.watchdog:
            return "watchdog_timeout"
        if self.nccl_errors:
            return "nccl_" + self.nccl_errors[0].kind
        if self.comm_init_hints:
            return "comm_init_hang"
        return "unclassified"

    @property
    def ranks(self) -> list:
        """Ranks that reported a watchdog timeout, in log order."""
        return [timeout.rank for timeout in self.watchdog]


def classify(text: str) -> TorchFailures:
    """Scan a rank's stderr/log for torch.distributed failure lines (ParseError if empty).

    A last line without its newline was cut mid-write (a kill, a size cap): its counters may
    be shortened (``last completed work: 775`` of ``7752``), so it is not read for numbers.
    Numbers past any real counter's length raise ParseError.
    """
    require_text(text, "torch.distributed log")
    result = TorchFailures()
    by_rank: dict = {}
    lines = text.splitlines()
    complete = lines if text.endswith(("\n", "\r")) else lines[:-1]
    for line in complete:
        version = _NCCL_VERSION.search(line)
        if version:
            result.nccl_version = version.group(1)
        watchdog = _WATCHDOG.search(line)
        if watchdog:
            group = watchdog.groupdict()
            timeout = WatchdogTimeout(
                rank=_int(group["rank"]), seq=_int(group["seq"]), op_type=group["op"],
                timeout_ms=_int(group["timeout"]), ran_for_ms=_int(group["ran"]),
                numel_in=_int(group["numel_in"]), numel_out=_int(group["numel_out"]),
                pg=_int(group["pg"]),
            )
            result.watchdog.append(timeout)
            by_rank[timeout.rank] = timeout
            continue
        progress = _PROGRESS.search(line)
        tag = _RANK_TAG_ONLY.search(line[:progress.start()]) if progress else None
        if tag and _int(tag.group("rank")) in by_rank:
            timeout = by_rank[_int(tag.group("rank"))]
            if tag.group("pg"):
                timeout.pg = _int(tag.group("pg"))
            timeout.last_enqueued = _int(progress.group("enqueued"), minimum=-1)
            timeout.last_completed = _int(progress.group("completed"), minimum=-1)
            continue
        for kind, pattern in _NCCL_ERRORS:
            match = pattern.search(line)
            if match:
                details = {k: v for k, v in match.groupdict().items() if v is not None}
                result.nccl_errors.append(NcclError(kind, line.strip(), details))
                break
        else:
            if _COMM_INIT.search(line):
                result.comm_init_hints.append(line.strip())
    last = next((line.strip() for line in reversed(lines) if line.strip()), "")
    if _RCCL_LOAD.search(last) and last not in result.comm_init_hints:
        result.comm_init_hints.append(last)
    return result


def _int(value: str | None, minimum: int = 0) -> int | None:
    return to_int(value, "torch.distributed log: number", minimum=minimum)
