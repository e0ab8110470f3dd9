"""Classify torch.distributed (NCCL/RCCL) failure text from a rank's log.

On-call triage needs to tell a collective that never ran (platform fault, reference §20:
``last completed work: -1``) from a mid-run timeout, a peer that vanished (remote error /
connection reset) and the intermittent ``ncclCommInitRank`` hang (§20: retry).  The RCCL
build of PyTorch prints the same ProcessGroupNCCL lines as the NVIDIA build.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from k3doctor.parsers._common import require_text

# Both the PyTorch >= 2.x layout ("[rank0]:[E1206 ...] [Rank 0] Watchdog ... NumelIn=..") and the
# legacy one ("[E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog ...", no NumelIn/NumelOut).
# "[Rank 0]", "[PG 1 Rank 0]", "[PG 0 (default_pg) Rank 1]", "[PG ID 0 PG GUID 0(default_pg) Rank 1]"
_RANK_TAG = r"\[(?:PG (?:ID )?(?P<pg>\d+)[^\]]*? )?Rank (?P<rank>\d+)\]"
_WATCHDOG = re.compile(
    _RANK_TAG + r" Watchdog caught collective operation timeout: "
    r"WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)"
    r"(?:, NumelIn=(?P<numel_in>\d+), NumelOut=(?P<numel_out>\d+))?"
    r", Timeout\(ms\)=(?P<timeout>\d+)\) ran for (?P<ran>\d+) milliseconds"
)
_PROGRESS = re.compile(
    _RANK_TAG + r".*?last enqueued (?:NCCL )?work: (?P<enqueued>-?\d+), "
    r"last completed (?:NCCL )?work: (?P<completed>-?\d+)"
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
    """Scan a rank's stderr/log for torch.distributed failure lines (ParseError if empty)."""
    require_text(text, "torch.distributed log")
    result = TorchFailures()
    by_rank: dict = {}
    for line in text.splitlines():
        version = _NCCL_VERSION.search(line)
        if version:
            result.nccl_version = version.group(1)
        watchdog = _WATCHDOG.search(line)
        if watchdog:
            group = watchdog.groupdict()
            timeout = WatchdogTimeout(
                rank=int(group["rank"]), seq=int(group["seq"]), op_type=group["op"],
                timeout_ms=int(group["timeout"]), ran_for_ms=int(group["ran"]),
                numel_in=_opt_int(group["numel_in"]), numel_out=_opt_int(group["numel_out"]),
                pg=_opt_int(group["pg"]),
            )
            result.watchdog.append(timeout)
            by_rank[timeout.rank] = timeout
            continue
        progress = _PROGRESS.search(line)
        if progress and int(progress.group("rank")) in by_rank:
            timeout = by_rank[int(progress.group("rank"))]
            if progress.group("pg"):
                timeout.pg = int(progress.group("pg"))
            timeout.last_enqueued = int(progress.group("enqueued"))
            timeout.last_completed = int(progress.group("completed"))
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
    last = next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")
    if _RCCL_LOAD.search(last) and last not in result.comm_init_hints:
        result.comm_init_hints.append(last)
    return result


def _opt_int(value: str | None) -> int | None:
    return None if value is None else int(value)
