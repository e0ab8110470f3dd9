"""On-call triage: read every node's ATOM server log at once and name the rank at fault (§19–§25).

Orchestration only: where the logs come from (our container's output on every node over the node's
SSH connection, a path on a node, or files copied off the cluster) and how lines are grouped by
rank. Parsing is ``parsers.atom_log``, judgement ``triage.judge``.
"""
from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..gather import gather
from ..parsers import ParseError
from ..parsers.atom_log import parse_log
from ..readings import Command, ReadingUnavailable
from ..results import Result, Status
from . import judge as judges

_RANK_IN_NAME = re.compile(r"(?:rank|dp)[_-]?(\d{1,3})(?!\d)", re.IGNORECASE)
MAX_LOG_BYTES = 32 << 20


def group_by_rank(parsed: list) -> dict:
    ranks: dict = {}
    for ln in parsed:
        if ln.rank is not None:
            ranks.setdefault(ln.rank, []).append(ln)
    for lines in ranks.values():
        lines.sort(key=lambda ln: (ln.ts is None, ln.ts or 0.0))
    return ranks


def read_log_dir(path: str) -> tuple:
    """(parsed lines of every file, problems): one file per node or per rank (rank from the file name)."""
    parsed, problems = [], []
    files = sorted(p for p in Path(path).iterdir() if p.is_file())
    if not files:
        problems.append(f"{path}: no log files")
    for file in files:
        m = _RANK_IN_NAME.search(file.name)
        try:
            if file.stat().st_size > MAX_LOG_BYTES:
                raise ParseError(f"larger than {MAX_LOG_BYTES >> 20} MiB: pass its tail")
            text = file.read_bytes().decode("utf-8", "replace")
            parsed += parse_log(text, default_rank=int(m.group(1)) if m else None)
        except (OSError, ParseError) as exc:
            problems.append(f"{file.name}: {exc}")
    return parsed, problems


def _log_command(node, tail: int, path: str | None) -> Command:
    if path:
        return Command(("tail", "-c", str(MAX_LOG_BYTES), "--", path))
    return Command(("docker", "logs", "--timestamps", "--tail", str(tail), "--", node.settings.container))


def read_node_logs(inv, make_transport, *, tail: int, paths: dict, deadline_s: float, timeout_s: float) -> tuple:
    """(parsed lines of every node, node -> why unreadable, latest node clock) over one SSH round trip each."""
    clock = Command(("date", "+%s"))

    def visit(node):
        transport = make_transport(node)
        try:
            transport.connect()
            spec = _log_command(node, tail, paths.get(node.name))
            got = gather(transport, [spec, clock], command_timeout_s=timeout_s, deadline_s=deadline_s)
            reading = got[spec]
            text = reading.output()
            if reading.truncated:
                raise ReadingUnavailable("log output was cut at the size limit: pass a smaller --tail")
            now = float(got[clock].output().strip())
            # docker logs puts the engine's stderr on stderr: both are the server's log
            return parse_log(text + "\n" + (reading.stderr if not paths.get(node.name) else "")), now, None
        except Exception as exc:  # this node only: the others are still read
            return [], None, f"{type(exc).__name__}: {exc}" if not isinstance(exc, (ReadingUnavailable,
                                                                                     ParseError)) else str(exc)
        finally:
            transport.close()

    parsed, problems, clocks = [], {}, []
    with ThreadPoolExecutor(max_workers=max(1, min(64, len(inv.nodes)))) as pool:
        for node, (lines, now, why) in zip(inv.nodes, pool.map(visit, inv.nodes)):
            parsed += lines
            if why:
                problems[node.name] = why
            elif now is not None:
                clocks.append(now)
    return parsed, problems, (max(clocks) if clocks else None)


def triage_results(parsed: list, layout: judges.Layout, *, now: float | None, problems: dict) -> list:
    """Results for the report: unreadable sources first (ERROR), then every finding of the judges."""
    results = [Result("triage-startup", node if node in layout.nodes else None, Status.ERROR,
                      f"log not read: {why}") for node, why in problems.items()]
    ranks = group_by_rank(parsed)
    if not ranks and not problems:
        results.append(Result("triage-startup", None, Status.ERROR,
                              "no line of the logs names a DP rank (EngineCore_DP<n>, DP<n>, Engine <nnn>:): "
                              "nothing to judge"))
        return results
    if now is None:  # offline: the newest line anywhere stands for "now"
        stamps = [ln.ts for lines in ranks.values() for ln in lines if ln.ts is not None]
        now = max(stamps) if stamps else None
    serving = any(ln.has("serving") for ln in parsed)  # uvicorn's lines name no rank
    for step, verdict in judges.judge(ranks, layout, now=now, serving=serving):
        results.append(Result(step, verdict.node, verdict.status, verdict.message, gpu=verdict.gpu,
                              evidence=verdict.evidence, remediation=verdict.remediation))
    return results


def most_likely(results: list):
    """The finding to put first: the worst status, cross-rank causes before their consequences."""
    bad = [r for r in results if r.status in (Status.FAIL, Status.WARN)]
    if not bad:
        return None
    order = {step: i for i, step in enumerate(judges.STEPS)}
    return min(bad, key=lambda r: (-r.status.severity, order.get(r.check, len(order))))
