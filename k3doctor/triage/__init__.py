"""On-call triage: read every node's ATOM server log at once and name the rank at fault (§19–§25).

Orchestration only: where the logs come from (our container's output on every node over the node's
SSH connection, a path on a node, or files copied off the cluster) and how lines are grouped by
rank. Parsing is ``parsers.atom_log`` (for the line shapes of ``rules.triage``), judgement ``triage.rank_logs``.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import re
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from k3doctor import localfiles
from k3doctor.deadline import Deadline, plausible_clock
from k3doctor.gather.node_script import gather
from k3doctor.inventory.schema import node_name_problem
from k3doctor.judging.causes import explained
from k3doctor.judging.runner import cancel_all
from k3doctor.outputs.text import one_line
from k3doctor.parsers import ParseError
from k3doctor.parsers.atom_log import iter_log
from k3doctor.parsers.pyspy import parse_dump
from k3doctor.readings import OUTPUT_CAP_BYTES, Command, ReadingUnavailable, sh
from k3doctor.redaction import RedactionTimeout, redact_text
from k3doctor.results import Result, Status
from k3doctor.rules.triage import SHAPES
from k3doctor.shell import join, quote
from k3doctor.triage import rank_logs
from k3doctor.triage import stacks

_RANK_IN_NAME = re.compile(r"(?:rank|dp)[_-]?(\d{1,3})(?!\d)", re.IGNORECASE)
# What one triage reads off files or a bundle, at most: a log per node or per rank, each cut to its tail by
# whoever copied it (MAX_LOG_BYTES), all together MAX_TOTAL_LOG_BYTES (a rack of 1000 nodes' tails), in at
# most MAX_SOURCES files; past that the input is refused, not judged in part.
MAX_LOG_BYTES = 32 << 20
MAX_TOTAL_LOG_BYTES = 256 << 20
MAX_SOURCES = 2048
LOCAL_WORK_S = 60.0  # redacting, then judging what was read, on this machine: both linear, so a backstop


KEPT_PER_KIND = 64  # lines of one signal kind kept per rank (the first half and the newest half): the rules read
# the first or the last line of a kind, and a kind's total count is kept apart (rank_logs.RankLines.counts)


def group_lines(parsed) -> tuple:
    """(rank -> RankLines, source -> RankLines) in time order, holding only what the rank-log rules read: per signal kind
    its first and newest lines (at most KEPT_PER_KIND, with the count of all) and the last line. Triage reads every
    line of every log: a line that names no rank (uvicorn, aiperf, the launcher; a node's log) is its source's
    (the log it came from: a node, or a file). ``parsed`` is consumed once, as it comes: a log of millions of lines
    costs memory per rank and source, not per line."""
    kinds, counts, last = {}, {}, {}  # unit -> {kind: (first lines, newest lines)}, unit -> {kind: n}, unit -> line
    for seq, ln in enumerate(parsed):
        unit = ln.rank if ln.rank is not None else (ln.source,)  # a source is a 1-tuple: never mistaken for a rank
        key = (ln.ts is None, ln.ts or 0.0, seq)  # lines without a time sort after the stamped ones, in order
        if unit not in last or key >= last[unit][0]:
            last[unit] = (key, ln)
        for kind in ln.signals:
            tally = counts.setdefault(unit, {})
            tally[kind] = tally.get(kind, 0) + 1
            first, newest = kinds.setdefault(unit, {}).setdefault(kind, ([], []))
            (first if len(first) < KEPT_PER_KIND // 2 else newest).append((key, ln))
            if len(newest) > KEPT_PER_KIND:  # amortised: trimmed to the newest half now and then
                newest.sort(key=lambda pair: pair[0])
                del newest[:-(KEPT_PER_KIND // 2)]
    ranks, sources = {}, {}
    for unit, final in last.items():
        kept = {id(ln): (key, ln) for first, newest in kinds.get(unit, {}).values()
                for key, ln in first + sorted(newest, key=lambda pair: pair[0])[-(KEPT_PER_KIND // 2):]}
        kept[id(final[1])] = final
        lines = rank_logs.RankLines((ln for _, ln in sorted(kept.values(), key=lambda pair: pair[0])),
                                 counts=counts.get(unit, {}))
        if isinstance(unit, tuple):
            sources[unit[0]] = lines
        else:
            ranks[unit] = lines
    return ranks, sources


def node_of_source(source: str | None, layout: rank_logs.Layout) -> str | None:
    """The node a log is: a node's own log is named by it (live, a bundle), a copied one by its file name
    (``ct13.log``, ``node1.log``); None where it names no node of the layout (or no node at all)."""
    if source is None or source in layout.nodes:
        return source
    stem = source.split(".")[0]
    if layout.nodes:
        return stem if stem in layout.nodes else None
    return None if _RANK_IN_NAME.search(source) or node_name_problem(stem) else stem


def read_log_dir(path: str) -> tuple:
    """({file name: text}, problems): log files copied off the cluster, one per node or per rank.

    Only regular files in ``path`` are read; a symlink is followed only to a file inside ``path`` (a
    ``rank3.log -> ~/.ssh/id_ed25519`` would put the key into the report and the bundle)."""
    texts, problems = {}, []
    root = os.path.realpath(path)
    files = []
    for entry in sorted(Path(path).iterdir()):
        target = os.path.realpath(entry)
        if entry.is_symlink() and not target.startswith(root + os.sep):
            problems.append(f"{entry.name}: a symbolic link out of {path} (not read)")
        elif entry.is_file():
            files.append((entry.name, target))
    if not files:
        problems.append(f"{path}: no log files")
    if len(files) > MAX_SOURCES:
        return {}, [f"{path}: {len(files)} files, more than the {MAX_SOURCES} one triage reads (one per node or rank)"]
    total = 0
    for name, target in files:
        try:
            size = os.stat(target).st_size
            if size > MAX_LOG_BYTES:
                raise ParseError(f"larger than {MAX_LOG_BYTES >> 20} MiB: pass its tail")
            if total + size > MAX_TOTAL_LOG_BYTES:
                raise ParseError(f"past {MAX_TOTAL_LOG_BYTES >> 20} MiB of logs in all: pass each node's tail")
            data = localfiles.read_bytes(target)[:MAX_LOG_BYTES]  # it may have grown since
            total += len(data)
            texts[name] = data.decode("utf-8", "replace")
        except (OSError, ParseError) as exc:
            problems.append(f"{name}: {exc.strerror if isinstance(exc, OSError) else exc}")
    texts, dropped = redacted(texts)
    return texts, problems + [f"{name}: {why}" for name, why in dropped.items()]


def parse_sources(texts: dict, problems: dict) -> Iterator:
    """Every parsed line, as an iterator read once; a source found unparseable (now, or on the way: a line
    stamped in the far future) goes into ``problems`` and is read no further. A rank in a source's name is
    its lines' default."""
    def guarded(name, lines):
        try:
            yield from lines
        except ParseError as exc:
            problems[name] = str(exc)

    parsed = []
    for name, text in texts.items():
        m = _RANK_IN_NAME.search(name)
        try:
            parsed.append(guarded(name, iter_log(text, SHAPES, default_rank=int(m.group(1)) if m else None, source=name)))
        except ParseError as exc:
            problems[name] = str(exc)
    return itertools.chain.from_iterable(parsed)


def ranks_by_source(texts: dict) -> dict:
    """{source: the ranks its lines name}, read as a stream (what names a node offline, nothing else kept)."""
    out = {}
    for name, text in texts.items():
        m = _RANK_IN_NAME.search(name)
        try:
            out[name] = {ln.rank for ln in iter_log(text, SHAPES, default_rank=int(m.group(1)) if m else None)
                         if ln.rank is not None}
        except ParseError:
            continue  # judge_all says why, once
    return out


def nodes_named_by_files(ranks: dict, per_node: int) -> tuple:
    """Offline without an inventory, a node's log file names it: ``ct13.log`` holding ranks 0-3 makes node 0
    ct13 (files are per node, or per rank: ``rank3.log`` names no node). A position no such file names
    keeps ``node<i>``; a file whose ranks are spread evenly over several nodes names none of them."""
    names = {}
    for source, held_ranks in ranks.items():
        stem = source.split(".")[0]
        held = Counter(rank // per_node for rank in held_ranks)
        if _RANK_IN_NAME.search(source) or not held or node_name_problem(stem):
            continue
        (index, count), *rest = held.most_common(2)
        if not rest or rest[0][1] < count:  # the node most of its ranks are on (a stray line names none)
            names.setdefault(index, stem)
    if not names or len(set(names.values())) != len(names):
        return ()
    return tuple(names.get(i, f"node{i}") for i in range(max(names) + 1))


LIVE_LOG_BYTES = OUTPUT_CAP_BYTES - (64 << 10)  # the newest part of a live log, under the per-reading cap
LOG_RC = "K3DOCTOR-LOG-RC="


def log_command(node, tail: int, path: str | None) -> Command:
    """The newest LIVE_LOG_BYTES of the server log (the container's stdout and stderr, or a file), then how
    reading it ended: a busy server's log is larger than one reading may be, and its end is what matters."""
    read = join(("tail", "-c", str(LIVE_LOG_BYTES), "--", path)) if path else join(
        ("docker", "logs", "--timestamps", "--tail", str(tail), "--", node.settings.container))
    return sh(f"{{ {read} 2>&1; rc=$?; echo; echo {LOG_RC}$rc; }} | tail -c {LIVE_LOG_BYTES}")


def log_text(reading) -> str:
    """The log of a ``log_command`` reading; ReadingUnavailable when docker/tail failed (with what it said)."""
    text = reading.output()
    body, _, rc = text.rstrip("\n").rpartition("\n" + LOG_RC)
    if not rc.isdigit():
        raise ReadingUnavailable("the log reading ended without its exit status (cut off?)")
    if rc != "0":
        said = [ln for ln in body.splitlines() if ln.strip()][-1:] or ["no message"]
        raise ReadingUnavailable(f"reading the log failed (exit {rc}): {said[0][:200]}")
    return body


NO_PYSPY = "K3DOCTOR-NO-PYSPY"


def _stacks_command(node, py_spy: str, timeout_s: float) -> Command:
    """py-spy dumps of our container's ModelRunners, by host PID (§20: --pid host); nothing is installed."""
    tool, per_dump = quote(py_spy), max(5, int(timeout_s / 4))
    return sh(f"command -v {tool} >/dev/null 2>&1 || {{ echo {NO_PYSPY}; exit 0; }}; "
              f"docker top {quote(node.settings.container)} -eo pid,args | while read -r pid args; do "
              f'case "$args" in *ATOM::DP*TP0*) timeout {per_dump} {tool} dump --pid "$pid" </dev/null || '
              f'echo "K3DOCTOR-PYSPY-FAILED $pid";; esac; done')


def read_node_logs(inv, make_transport, *, tail: int, paths: dict, deadline_s: float, timeout_s: float,
                   py_spy: str | None = None) -> tuple:
    """({node: log text}, {node: why unreadable}, {node: its clock}, {node: stack dump text}) over one SSH
    round trip each; stacks only when ``py_spy`` names the tool. Each rank's log age is measured against its
    own node's clock: one node's clock ahead of the others makes no other rank look stalled."""
    clock = Command(("date", "+%s"))
    transports = {}

    def visit(node):
        transport = transports[node.name] = make_transport(node)
        try:
            transport.connect()
            spec = log_command(node, tail, paths.get(node.name))
            dumps = _stacks_command(node, py_spy, timeout_s) if py_spy else None
            wanted = [spec, clock] + ([dumps] if dumps else [])
            got = gather(transport, wanted, command_timeout_s=timeout_s, deadline_s=deadline_s)
            stack_text = got[dumps].output() if dumps else None
            text = log_text(got[spec])
            now = float(got[clock].output().strip())
            if not plausible_clock(now):
                raise ParseError(f"the node's clock reads {now!r}: not a time to measure its log's age against")
            return text, now, None, stack_text
        except Exception as exc:  # this node only: the others are still read
            why = str(exc) if isinstance(exc, (ReadingUnavailable, ParseError)) else f"{type(exc).__name__}: {exc}"
            return None, None, why, None
        finally:
            transport.close()

    texts, problems, clocks, dumps = {}, {}, {}, {}
    pool = ThreadPoolExecutor(max_workers=max(1, min(64, len(inv.nodes))))
    try:
        answers = list(pool.map(visit, inv.nodes))
    except BaseException:  # Ctrl-C: stop the reads in flight on every node now, not at their deadlines
        cancel_all(transports)
        raise
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    for node, (text, now, why, stack_text) in zip(inv.nodes, answers, strict=True):
        if text is not None:
            texts[node.name] = text
        if why:
            problems[node.name] = why
        elif now is not None:
            clocks[node.name] = now
        if stack_text is not None:
            dumps[node.name] = stack_text
    texts, dropped = redacted(texts)
    dumps, dropped_dumps = redacted(dumps)
    problems.update(dropped)
    problems.update({node: f"stacks: {why}" for node, why in dropped_dumps.items() if node not in problems})
    return texts, problems, clocks, dumps


def stack_results(dumps: dict, layout: rank_logs.Layout) -> list:
    """Results of the py-spy step: per node a SKIP when the tool is missing, an ERROR when a dump is
    unreadable, then the classification over every rank that was read."""
    results, procs = [], []
    for node, text in dumps.items():
        if text.strip() == NO_PYSPY:
            results.append(Result("triage-stacks", node, Status.SKIP, "py-spy is not installed on this node",
                                  remediation=stacks.NO_PYSPY))
            continue
        failed = [ln.split()[-1] for ln in text.splitlines() if ln.startswith("K3DOCTOR-PYSPY-FAILED")]
        if failed:
            results.append(Result("triage-stacks", node, Status.ERROR,
                                  f"py-spy could not read PID(s) {', '.join(failed)}"))
        body = "\n".join(ln for ln in text.splitlines() if not ln.startswith("K3DOCTOR-PYSPY-FAILED"))
        if not body.strip():
            if not failed:
                results.append(Result("triage-stacks", node, Status.SKIP, "no ATOM::DP*TP0 process in the container"))
            continue
        try:
            procs += parse_dump(body)
        except ParseError as exc:
            results.append(Result("triage-stacks", node, Status.ERROR, f"unparseable py-spy output: {exc}"))
    for step, verdict in stacks.judge_stacks(procs, layout):
        results.append(Result(step, verdict.node, verdict.status, verdict.message, gpu=verdict.gpu,
                              evidence=verdict.evidence, remediation=verdict.remediation))
    return results


def triage_results(parsed, layout: rank_logs.Layout, *, now: float | dict | None, problems: dict,
                   deadline: Deadline | None = None) -> list:
    """Results for the report: unreadable sources first (ERROR), then every finding of the rank-log rules. Lines
    not read by ``deadline`` (LOCAL_WORK_S from now) make the whole judgement an ERROR, never a partial PASS."""
    deadline = deadline or Deadline(LOCAL_WORK_S)
    came_up = rank_logs.CameUp()

    def watched(lines):  # uvicorn's lines name no rank: noticed on the one pass over the lines
        for count, ln in enumerate(lines, 1):
            if ln.has("serving"):
                came_up.saw(ln)
            if count % 65536 == 0 and deadline.expired:
                raise TimeoutError(f"{count} lines read in {deadline.budget_s:g}s, the rest was not")
            yield ln

    try:
        (ranks, sources), late = group_lines(watched(parsed)), None
    except TimeoutError as exc:
        ranks, sources = {}, {}
        late = Result("triage-startup", None, Status.ERROR, f"logs not judged within the deadline: {exc}")
    # after the pass: a source may turn out unreadable on the way (a line stamped in the far future)
    results = [Result("triage-startup", node if node in layout.nodes else None, Status.ERROR,
                      f"log not read: {why}") for node, why in problems.items()]
    if late:
        return results + [late]
    if now is None:  # offline: the newest line anywhere stands for "now"
        stamps = [ln.ts for lines in (*ranks.values(), *sources.values()) for ln in lines if ln.ts is not None]
        now = max(stamps) if stamps else None
    found = rank_logs.judge(ranks, layout, now=now, serving=bool(came_up.lines), came_up=came_up,
                         sources={source: (node_of_source(source, layout), lines) for source, lines in sources.items()})
    if not ranks and not found and not problems:
        results.append(Result("triage-startup", None, Status.ERROR,
                              "no line of the logs names a DP rank (EngineCore_DP<n>, DP<n>, Engine <nnn>:) and no "
                              "line says anything triage knows: nothing to judge"))
    for step, verdict in found:
        results.append(Result(step, verdict.node, verdict.status, verdict.message, gpu=verdict.gpu,
                              evidence=verdict.evidence, remediation=verdict.remediation))
    return results


def most_likely(results: list):
    """The finding to put first: the worst status, cross-rank causes before their consequences."""
    bad = [r for r in results if r.status in (Status.FAIL, Status.WARN)]
    if not bad:
        return None
    order = {step: i for i, step in enumerate(rank_logs.STEPS)}
    return min(bad, key=lambda r: (-r.status.severity, order.get(r.check, len(order))))


def first_screen(results: list) -> str:
    """The lines above triage's table: the most likely cause, where, what to do - each field one line with
    nothing that drives a terminal (it quotes log text: an OSC title or ``ESC[2J`` must not reach the screen)."""
    first = most_likely(results)
    if first is None:
        return ""
    rank = first.evidence.get("rank")
    where = (f"{first.node} gpu{first.gpu} (rank {rank})" if first.node else
             f"rank {rank}, outside the layout" if rank is not None else "cluster")
    return (f"Most likely cause: {one_line(first.message)}\n  where: {one_line(where)}\n"
            f"  do: k3doctor explain {one_line(first.remediation)}\n\n")


def redacted(texts: dict, deadline: Deadline | None = None) -> tuple:
    """({name: text with credential values replaced}, {name: why it was dropped}), before anything is judged,
    shown or bundled; a text not redacted by ``deadline`` is dropped whole (it would not be safe to show)."""
    deadline = deadline or Deadline(LOCAL_WORK_S)
    done, dropped = {}, {}
    for name, text in texts.items():
        try:
            done[name] = redact_text(text, deadline)
        except RedactionTimeout as exc:
            dropped[name] = str(exc)
    return done, dropped


def judge_all(texts: dict, dumps: dict, layout: rank_logs.Layout, *, now: float | dict | None, problems: dict) -> list:
    """Every triage result from what was read (live, from files, or from a bundle): one code path."""
    problems = dict(problems)
    if not layout.nodes:
        layout = dataclasses.replace(layout, nodes=nodes_named_by_files(ranks_by_source(texts), layout.per_node))
    parsed = parse_sources(texts, problems)
    return explained(stack_results(dumps, layout) + triage_results(parsed, layout, now=now, problems=problems))
