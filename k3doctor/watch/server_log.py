"""The engine's server log as it grows (reference §31.2 item 1, "the server log if the inventory names it"): its
new lines judged by the rows ``triage`` judges a failed run's logs with (k3doctor/rules/triage.py, the rules
that read single lines), put on the DP rank a line names (``rank N``) or on the log (``server log``).

The read is a tail from the last position (a small Python reader on the node, like the metrics fetch): the
first read gives only the log's size - the lines before the watch are history, never news - and each later read
gives the whole lines written since, at most ``MAX_BYTES`` (a burst is read over the next intervals, nothing
skipped). A log that shrank was rotated or truncated: it is read from its start. A line's finding is a fact of
the run: sticky until the node reboots, like a kernel-log line. A log that cannot be read is UNKNOWN.
The position lives in the node's source, not in ``--once``'s state file: ``--once`` does not read the log.
"""
from __future__ import annotations

from k3doctor.deadline import Deadline
from k3doctor.parsers import ParseError
from k3doctor.parsers.atom_log import parse_log
from k3doctor.readings import Command, CommandReading
from k3doctor.redaction import RedactionTimeout, redact_text
from k3doctor.rules.triage import SHAPES
from k3doctor.triage.rank_logs import LINE_RULES, Layout, RankView
from k3doctor.watch.events import Condition

MAX_BYTES = 1 << 20
REDACT_S = 10.0  # redacting one interval's new lines (at most MAX_BYTES) on this machine: linear, so a backstop
# argv: path, offset (-1: only the size), cap. Prints the next offset on its first line, then whole lines.
TAIL = """import os,sys
p,off,cap=sys.argv[1],int(sys.argv[2]),int(sys.argv[3])
try:
    f=open(p,'rb')
except OSError as e:
    sys.stderr.write(str(e)); sys.exit(2)
with f:
    size=os.fstat(f.fileno()).st_size
    if off<0:
        sys.stdout.write('%d\\n'%size); sys.exit(0)
    if off>size:
        off=0
    f.seek(off); data=f.read(cap)
    cut=data.rfind(b'\\n')+1 or (len(data) if len(data)==cap else 0)
    sys.stdout.write('%d\\n'%(off+cut)); sys.stdout.write(data[:cut].decode('utf-8','replace'))
"""
SEVERITY = {"fail": "fail", "warn": "warn", "error": "unknown"}  # a triage ERROR is "not judged"


def tail(path: str, offset: int, timeout_s: float) -> Command:
    return Command(("python3", "-I", "-S", "-c", TAIL, path, str(offset), str(MAX_BYTES)), timeout_s)


def next_offset(reading, offset: int) -> int:
    """Where the next read starts: the offset the reader printed; ``offset`` unchanged if it did not answer."""
    if isinstance(reading, CommandReading) and reading.ok:
        first = reading.stdout.split("\n", 1)[0]
        if first.isdigit():
            return int(first)
    return offset


def judge_server_log(node: str, reading) -> tuple:
    """(sticky conditions of the new lines, unknown condition or None); ``reading`` None: no log named."""
    if reading is None:
        return [], None
    if not isinstance(reading, CommandReading) or not reading.ok:
        why = getattr(reading, "reason", None) if not isinstance(reading, CommandReading) else (
            "no answer in time" if reading.timed_out else reading.stderr.strip()[-160:] or f"exit {reading.rc}")
        return [], Condition("SERVER-LOG-UNREAD", node, "server log", "unknown", f"server log not read: {why}",
                             "§31.2")
    head, _, text = reading.stdout.partition("\n")
    try:
        if not head.isdigit():
            raise ParseError(f"no position line: {head[:40]!r}")
        # redacted before it is judged: a rule's message quotes its line, and events go to stdout and webhooks
        lines = parse_log(redact_text(text, Deadline(REDACT_S)), SHAPES)
    except (ParseError, RedactionTimeout) as exc:
        return [], Condition("SERVER-LOG-UNREAD", node, "server log", "unknown", f"server log unreadable: {exc}",
                             "§31.2")
    by_rank: dict = {}
    for line in lines:
        by_rank.setdefault(line.rank, []).append(line)
    layout, found = Layout((node,)), []
    for rank, group in by_rank.items():
        where = "server log" if rank is None else f"rank {rank}"
        view = RankView(group, layout, None, True)
        for rule in LINE_RULES:
            verdict = rule.judge(view)
            if verdict is not None:
                found.append(Condition(rule.remediation, node, where, SEVERITY[rule.severity],
                                       f"{where}: {verdict.message}"[:400], rule.section))
    return found, None
