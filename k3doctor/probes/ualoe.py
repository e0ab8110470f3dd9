"""ubench 07_ualoe across node pairs: p2p correctness, then bandwidth (reference §8).

Two layers.  The pure layer (pair plans, ubench output parsing, process and socket tables,
bandwidth judgement, fault attribution) has no I/O and is unit-tested.  The orchestration
layer (``run``) drives the tools over the transports: the exporter/listener starts first and
is confirmed listening (its own PID holds a LISTEN socket on the port) before the
importer/connector starts; every remote process records its PID in a file and is killed by
that PID in a ``finally`` (timeout, failure or Ctrl-C alike), on top of the node-side
``timeout`` every transport command runs under.
"""
from __future__ import annotations

import posixpath
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from itertools import combinations

from k3doctor import progress
from k3doctor.model.gpu import locate_accid, parse_accel_ids
from k3doctor.parsers import ParseError
from k3doctor.parsers.dmesg import find_signatures, parse_log
from k3doctor.results import Status, Verdict, error, fail, passed, skip, warn
from k3doctor.shell import quote
from k3doctor.transport import TransportError

TOOLS = ("ualoe_p2p.exe", "ualoe_bw.exe")
METRICS = ("read", "write", "bidir")
FABRIC_SIGNATURES = ("npa_rsp_timeout", "lsdma_pio_error", "lsdma_pio_copy_failed", "hello_send_failed",
                     "import_setup_failed", "xa_import_failed")


class PlanError(ValueError):
    """A pair plan that names unknown nodes or is not quick / all / a,b;c,d."""


# --------------------------------------------------------------------------------------- pair plans

def plan_pairs(plan: str, nodes: list) -> list:
    """(exporter, importer) pairs for ``quick`` / ``all`` / ``a,b;c,d`` over ``nodes`` (in order).

    ``quick`` is a ring: with three or more nodes every node is in exactly two pairs, so a bad
    node fails both of its pairs and a bad peer only one (§8 coverage strategy).
    """
    plan = (plan or "").strip()
    if plan == "quick":
        if len(nodes) < 2:
            return []
        if len(nodes) == 2:
            return [(nodes[0], nodes[1])]
        return [(nodes[i], nodes[(i + 1) % len(nodes)]) for i in range(len(nodes))]
    if plan == "all":
        return list(combinations(nodes, 2))
    pairs = []
    for item in (p.strip() for p in plan.split(";")):
        names = [n.strip() for n in item.split(",")]
        if len(names) != 2 or not all(names) or names[0] == names[1]:
            raise PlanError(f"pair plan {plan!r}: {item!r} is not two different node names 'a,b' "
                            "(plans: quick, all, or a,b;c,d)")
        unknown = [n for n in names if n not in nodes]
        if unknown:
            raise PlanError(f"pair plan {plan!r}: unknown node(s) {', '.join(unknown)} "
                            f"(inventory: {', '.join(nodes)})")
        pairs.append(tuple(names))
    return pairs


def plan_problem(plan, nodes) -> str | None:
    """What is wrong with a pair plan, checked before the run (``nodes`` None: its shape only)."""
    if not isinstance(plan, str):
        return "a pair plan: quick, all, or a,b;c,d"
    named = [n.strip() for item in plan.split(";") for n in item.split(",")]
    try:
        plan_pairs(plan, named if nodes is None else list(nodes))
    except PlanError as exc:
        return "a pair plan: " + str(exc).split(": ", 1)[-1]
    return None


def schedule(pairs: list) -> list:
    """Rounds of node-disjoint pairs, in plan order: pairs sharing a node never run at once."""
    rounds, left = [], list(pairs)
    while left:
        busy, this, rest = set(), [], []
        for pair in left:
            (rest if busy & set(pair) else this).append(pair)
            if this and this[-1] is pair:
                busy |= set(pair)
        rounds.append(this)
        left = rest
    return rounds


# ----------------------------------------------------------------------------------- ubench output

_RESULT = re.compile(r"RESULT\s*(?P<word>[A-Za-z]+)?\s*:?\s*(?P<n>\d+)\s*/\s*(?P<m>\d+)\s*pairs?"
                     r"(?:\s+(?P<verdict>[A-Za-z]+))?", re.IGNORECASE)


@dataclass(frozen=True)
class P2PResult:
    ok: bool
    passed: int
    total: int
    line: str


def parse_p2p(text: str) -> P2PResult | None:
    """The last ``RESULT <word>: n/m pairs <verdict>`` line, or None when there is none.

    Aggregate mode (no ``-gpu``) prints an n/m over all GPU pairs whose exact wording is not
    documented (§27 item 4), so any word/verdict spelling is accepted; OK means n == m > 0 and
    neither word says FAIL.
    """
    found = None
    for line in text.splitlines():
        m = _RESULT.search(line)
        if m:
            words = {(m.group("word") or "").upper(), (m.group("verdict") or "").upper()}
            n, total = int(m.group("n")), int(m.group("m"))
            bad = any(w.startswith(("FAIL", "ERR")) for w in words)
            found = P2PResult(ok=n == total > 0 and not bad, passed=n, total=total, line=line.strip())
    return found


_NUMBER = r"\d[\d,]*(?:\.\d+)?"
_TOTAL_ROW = re.compile(r"^\s*(total|sum|aggregate|all)\b", re.IGNORECASE)
_HEADER_WORDS = {"read": re.compile(r"\bread\b", re.I), "write": re.compile(r"\bwrite\b", re.I),
                 "bidir": re.compile(r"\bbi-?dir(?:ectional)?\b", re.I)}
_KV = re.compile(rf"^\s*(?P<metric>read|write|bi-?dir(?:ectional)?)\b\D*?(?P<value>{_NUMBER})\s*"
                 r"(?P<unit>[GTM]B/s)?", re.IGNORECASE)
_UNIT = {"GB/S": 1.0, "TB/S": 1000.0, "MB/S": 0.001}


def _num(text: str) -> float:
    return float(text.replace(",", ""))


@dataclass(frozen=True)
class Bandwidth:
    read: float
    write: float
    bidir: float
    rows: int  # GPU pairs seen (1 for a key: value summary)

    def as_dict(self) -> dict:
        return {m: round(getattr(self, m), 1) for m in METRICS}


def parse_bw(text: str) -> Bandwidth | None:
    """read / write / bidir GB/s from the connect side of ``ualoe_bw.exe``, or None if no table.

    The labels are inferred (§27 item 4), so two layouts are accepted: a header naming the
    read, write and bidir columns followed by one row per GPU pair (a ``total``/``sum`` row
    is the aggregate, else the rows are summed), or ``read: <n> GB/s`` lines.  A header with
    no numeric rows is a torn table: ParseError.
    """
    lines = text.splitlines()
    for i, line in enumerate(lines):
        cols = {m: rx.search(line) for m, rx in _HEADER_WORDS.items()}
        if not all(cols.values()):
            continue
        order = sorted(METRICS, key=lambda m: cols[m].start())
        rows, total = [], None
        for row in lines[i + 1:]:
            numbers = re.findall(_NUMBER, row)
            if len(numbers) < 3:
                if rows or total:
                    break
                continue
            values = dict(zip(order, (_num(n) for n in numbers[-3:]), strict=True))
            if _TOTAL_ROW.match(row):
                total = values
            else:
                rows.append(values)
        if total is None and not rows:
            raise ParseError(f"ualoe_bw table header {line.strip()!r} has no numeric rows")
        agg = total or {m: sum(r[m] for r in rows) for m in METRICS}
        return Bandwidth(rows=len(rows) or 1, **agg)
    found = {}
    for line in lines:
        m = _KV.match(line)
        if m:
            metric = "bidir" if m.group("metric").lower().startswith("bi") else m.group("metric").lower()
            if metric in found:
                raise ParseError(f"ualoe_bw output: {metric} reported twice and no table header to tell "
                                 "per-pair rows from the total")
            found[metric] = _num(m.group("value")) * _UNIT[(m.group("unit") or "GB/s").upper()]
    if not found:
        return None
    if set(found) != set(METRICS):
        raise ParseError(f"ualoe_bw output has {', '.join(sorted(found))} but not "
                         f"{', '.join(m for m in METRICS if m not in found)}")
    return Bandwidth(rows=1, **found)


# ------------------------------------------------------------------------- process / socket tables

@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    argv: tuple
    mnt: str

    @property
    def tool(self) -> str:
        return posixpath.basename(self.argv[0]) if self.argv else ""


# Candidates are pre-selected with a cheap substring grep (a superset); the decision below is
# the exact basename of argv[0], never a substring of the whole command line (§8 pitfall 2).
PROCS_SCRIPT = r"""
echo "self $$ $(readlink /proc/$$/ns/mnt)"
p=$$
while [ "$p" -gt 1 ] 2>/dev/null; do
  s=$(cat /proc/$p/stat 2>/dev/null) || break
  echo "anc $p"; s=${s##*) }; set -- $s; p=$2
done
for f in $(grep -l -a -e ualoe_bw.exe -e ualoe_p2p.exe /proc/[0-9]*/cmdline 2>/dev/null); do
  d=${f%/cmdline}; s=$(cat $d/stat 2>/dev/null) || continue
  s=${s##*) }; set -- $s
  printf 'proc %s %s %s ' "${d#/proc/}" "$2" "$(readlink $d/ns/mnt 2>/dev/null)"
  tr '\0\n' '\037 ' < $f 2>/dev/null; echo
done
"""


def parse_procs(text: str) -> tuple:
    """(self mount namespace, {ancestor pids incl. self}, [Proc]) from PROCS_SCRIPT output."""
    self_mnt, ancestors, procs = None, set(), []
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "self":
            pid, _, self_mnt = rest.partition(" ")
            ancestors.add(int(pid))
        elif kind == "anc":
            ancestors.add(int(rest))
        elif kind == "proc":
            parts = rest.split(" ", 3)
            if len(parts) < 4 or not parts[0].isdigit() or not parts[1].isdigit():
                raise ParseError(f"process table line not understood: {line!r:.120}")
            argv = tuple(a for a in parts[3].split("\x1f") if a)
            procs.append(Proc(int(parts[0]), int(parts[1]), argv, parts[2]))
    if self_mnt is None:
        raise ParseError("process table: no 'self' line (the listing script did not run)")
    return self_mnt, ancestors, procs


def stale_tools(text: str) -> list:
    """Leftover ubench 07 processes: argv[0] basename is exactly one of TOOLS.

    Our own shell and its ancestors are skipped.  Only this login's mount namespace counts:
    ubench runs on the host (§8), and nodes that share a PID namespace (the simulated rack)
    are told apart by mount namespace.
    """
    self_mnt, ancestors, procs = parse_procs(text)
    return [p for p in procs if p.tool in TOOLS and p.pid not in ancestors and p.mnt == self_mnt]


def listening(text: str, port: int) -> bool | None:
    """From ``LISTEN_SCRIPT`` output: True when the recorded PID owns a LISTEN socket on ``port``.

    None: the process is gone (or never wrote its PID).  Matching the socket inode to the PID
    means a stale listener of another round holding the port does not count as ours.
    """
    inodes, listen, alive = set(), set(), False
    for line in text.splitlines():
        if line.startswith("alive "):
            alive = True
        for m in re.finditer(r"socket:\[(\d+)\]", line):
            inodes.add(m.group(1))
        fields = line.split()
        if len(fields) > 9 and fields[3] == "0A" and ":" in fields[1]:
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                listen.add(fields[9])
    if not alive:
        return None
    return bool(inodes & listen)


def fabric_findings(log: str, marker: str | None) -> list:
    """§8 fabric signatures in the kernel log lines after ``marker`` (the pre-run last line)."""
    lines = log.splitlines()
    if marker and marker in lines:
        lines = lines[len(lines) - lines[::-1].index(marker):]
    text = "\n".join(lines)
    if not text.strip():
        return []
    parse_log(log)  # a capture that is not a kernel log raises ParseError
    return [f for f in find_signatures(text) if f.signature in FABRIC_SIGNATURES]


# ------------------------------------------------------------------------------------ judgement

@dataclass
class Outcome:
    """What one pair did, before attribution to a node."""

    exporter: str
    importer: str
    status: Status
    message: str
    evidence: dict = field(default_factory=dict)
    remediation: str | None = None
    gpu: int | None = None
    blame: dict = field(default_factory=dict)  # node -> card that the kernel log names
    bw: Bandwidth | None = None

    @property
    def pair(self) -> str:
        return f"{self.exporter}<->{self.importer}"


def judge_bandwidth(bw: Bandwidth, floors: dict, reference: dict | None, ref_from: str,
                    warn_pct: float, tcp_max: float) -> tuple:
    """(status, kind, text) for one pair's figures: kind is tcp, floor, reference or ok."""
    figures = bw.as_dict()
    shown = " / ".join(f"{m} {figures[m]:,.1f}" for m in METRICS) + " GB/s"
    if max(figures.values()) <= tcp_max:
        return Status.FAIL, "tcp", (f"{shown}: about TCP speed (~4.5 GB/s), two orders of magnitude below "
                                    "UALoE - traffic silently fell back to TCP (MNNVL not in effect); "
                                    "check NCCL_MNNVL_ENABLE=1")
    low = [f"{m} {figures[m]:,.1f} < {floors[m]:,.0f}" for m in METRICS if figures[m] < floors[m]]
    if low:
        return Status.FAIL, "floor", f"{shown}: below the floor ({'; '.join(low)} GB/s)"
    if reference:
        behind = [f"{m} {100 * (1 - figures[m] / reference[m]):.1f}% below {reference[m]:,.1f}"
                  for m in METRICS if reference.get(m) and figures[m] < reference[m] * (1 - warn_pct / 100)]
        if behind:
            return Status.WARN, "reference", (f"{shown}: more than {warn_pct:g}% below the known-good pair "
                                              f"({ref_from}): {'; '.join(behind)}")
    return Status.PASS, "ok", shown


def same_day_reference(measured: dict) -> tuple:
    """(figures, label) of the best pair of this run, the §8 'known-good pair measured the same day'."""
    if len(measured) < 2:
        return None, None
    pair, bw = max(measured.items(), key=lambda kv: kv[1].bidir)
    return bw.as_dict(), f"same-day best pair {pair}"


_RANK = {Status.PASS: 0, Status.WARN: 1}  # FAIL and ERROR: 2 (no data moved, or no answer)


def attribute(outcomes: list, skipped: dict) -> list:
    """Verdicts placed on nodes: a node that failed every pair it was in (two or more) carries the fault.

    Only FAIL/ERROR pairs make a node faulty; a node slow (WARN) with every peer carries the
    slowness, not a fault.  A failed or slow pair whose nodes each did better with another peer
    points at the path between them; both nodes carry it.  Passing pairs give a PASS on both nodes.
    """
    by_node: dict = {}
    for o in outcomes:
        for n in (o.exporter, o.importer):
            by_node.setdefault(n, []).append(o)

    def every(statuses) -> set:
        return {n for n, os_ in by_node.items() if len(os_) >= 2 and all(o.status in statuses for o in os_)}

    failed, slow = every({Status.FAIL, Status.ERROR}), every({Status.WARN})
    verdicts = [skip(why, node=node) for node, why in skipped.items()]
    for o in outcomes:
        ev = {"pair": o.pair, "exporter": o.exporter, "importer": o.importer, **o.evidence}
        kw = dict(evidence=ev, remediation=o.remediation)
        if o.status == Status.PASS:
            verdicts += [passed(f"{o.pair}: {o.message}", node=n, gpu=o.gpu, evidence=ev)
                         for n in (o.exporter, o.importer)]
            continue
        rank = _RANK.get(o.status, 2)
        guilty = [n for n in (o.exporter, o.importer) if n in (slow if o.status == Status.WARN else failed)]
        if len(guilty) == 1:
            (node,) = guilty
            peers = ", ".join(sorted({x for q in by_node[node] for x in (q.exporter, q.importer)} - {node}))
            note = (f" - {node} was slower than the reference with every peer it was paired with ({peers}): "
                    f"the slowness is on {node}" if o.status == Status.WARN else
                    f" - {node} failed with every peer it was paired with ({peers}): the fault is on {node}")
            where = [node]
        elif not guilty and all(any(_RANK.get(q.status, 2) < rank for q in by_node[n] if q is not o)
                                for n in (o.exporter, o.importer)):
            note = (f" - {o.exporter} and {o.importer} each passed with another peer: the fault is on the path "
                    "between them (cabling, switch port), not on either node")
            where = [o.exporter, o.importer]
        else:
            single = any(len(by_node[n]) < 2 for n in (o.exporter, o.importer))
            note = " - only this pair was tested, so the fault cannot be pinned to one node" \
                if single and not guilty else ""
            where = [o.exporter, o.importer]
        for node in where:
            gpu = o.blame.get(node, o.gpu)
            verdicts.append(Verdict(o.status, f"{o.pair}: {o.message}{note}", gpu=gpu, node=node, **kw))
    return verdicts


# --------------------------------------------------------------------------------- orchestration

LISTEN_SCRIPT = ('pid=$(cat {pidfile} 2>/dev/null) && [ -d /proc/"$pid" ] && echo "alive $pid" '
                 '&& ls -l /proc/"$pid"/fd 2>/dev/null; cat /proc/net/tcp /proc/net/tcp6 2>/dev/null')
# Kill by PID, and only while that PID still runs one of the ubench tools (no PID-reuse accidents).
KILL_FN = r"""
k() {
  a0=$(tr '\0' '\n' < /proc/"$1"/cmdline 2>/dev/null | head -n 1)
  case "${a0##*/}" in ualoe_p2p.exe|ualoe_bw.exe) ;; *) return;; esac
  kill -TERM "$1" 2>/dev/null; i=0
  while [ -d /proc/"$1" ] && [ $i -lt 10 ]; do sleep 0.1; i=$((i+1)); done
  kill -KILL "$1" 2>/dev/null; echo "killed $1"
}
"""


def kill_recorded(pidfiles) -> str:
    words = " ".join(quote(f) for f in pidfiles)
    return KILL_FN + (f'for f in {words}; do pid=$(cat "$f" 2>/dev/null); rm -f "$f"; '
                      '[ -n "$pid" ] && k "$pid"; done; true')


def kill_pids(pids) -> str:
    return KILL_FN + f'for p in {" ".join(str(int(p)) for p in pids)}; do k "$p"; done; true'


ACCEL_SCRIPT = ('for f in /sys/class/drm/card*/device/ualink/accel_id; do '
                '[ -e "$f" ] && printf "%s %s\\n" "$f" "$(cat "$f" 2>/dev/null)"; done; true')
SHORT_S = 15.0  # bookkeeping commands (process tables, kills, kernel log)
NOT_RUNNABLE = {126: "is not executable", 127: "was not found"}  # the shell's rc when exec fails


class Launches:
    """Every remote process this probe started, as (node, pidfile), for the final kill."""

    def __init__(self, transports: dict):
        self.transports = transports
        self.token = uuid.uuid4().hex[:12]
        self.pidfiles: dict = {}
        self.lock = threading.Lock()
        self.closed = False

    def pidfile(self, node: str, role: str) -> str:
        path = f"/tmp/k3doctor-ualoe.{self.token}.{role}.pid"
        with self.lock:
            if self.closed:  # the probe is being torn down (Ctrl-C): start nothing more
                raise RuntimeError("probe stopped")
            self.pidfiles.setdefault(node, set()).add(path)
        return path

    def kill(self, node: str, only=None) -> None:
        with self.lock:
            files = sorted(only if only is not None else self.pidfiles.get(node, ()))
            self.pidfiles[node] = self.pidfiles.get(node, set()) - set(files)
        if files:
            try:
                self.transports[node].run(kill_recorded(files), timeout_s=SHORT_S)
            except Exception:  # noqa: BLE001 - cleanup must reach every node; the node-side timeout still applies
                pass

    def kill_all(self) -> None:
        with self.lock:
            self.closed = True
        for node in list(self.pidfiles):
            self.kill(node)


class Background:
    """A blocking transport command run in a daemon thread (the exporter/listener side)."""

    def __init__(self, transport, command: str, timeout_s: float):
        self.reading, self.exc = None, None
        self.thread = threading.Thread(target=self._run, args=(transport, command, timeout_s), daemon=True)
        self.thread.start()

    def _run(self, transport, command, timeout_s):
        try:
            self.reading = transport.run(command, timeout_s=timeout_s)
        except Exception as exc:  # noqa: BLE001 - surfaced to the pair's verdict
            self.exc = exc

    def wait(self, seconds: float):
        self.thread.join(seconds)
        return not self.thread.is_alive()

    def output(self) -> str:
        if self.exc is not None:
            return f"(transport failed: {self.exc})"
        if self.reading is None:
            return "(still running)"
        return (self.reading.stdout + self.reading.stderr).strip()


def _tail(text: str, n: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


@dataclass
class Config:
    ubench_dir: str
    gpu: int
    p2p_port: int
    bw_port: int
    listen_timeout_s: float
    p2p_timeout_s: float
    bw_timeout_s: float
    gpus_per_node: int


class PairRun:
    """One exporter/importer pair: p2p correctness, then bandwidth (only if p2p passed)."""

    def __init__(self, ctx, cfg: Config, launches: Launches, accel_ids, exporter: str, importer: str):
        self.ctx, self.cfg, self.launches, self.accel_ids = ctx, cfg, launches, accel_ids
        self.exporter, self.importer = exporter, importer
        self.t = ctx.transports

    def tool(self, name: str, *args) -> str:
        return " ".join([quote(posixpath.join(self.cfg.ubench_dir, name)), *(quote(a) for a in args)])

    def recorded(self, node: str, role: str, command: str) -> tuple:
        """(pidfile, command that writes its PID there and then becomes the tool)."""
        pidfile = self.launches.pidfile(node, f"{role}.{node}")
        return pidfile, f"echo $$ > {quote(pidfile)} && exec {command}"

    def serve(self, tool_cmd: str, port: int, timeout_s: float):
        """Start the exporter/listener and wait until its own PID listens on the port."""
        pidfile, cmd = self.recorded(self.exporter, "serve", tool_cmd)
        bg = Background(self.t[self.exporter], cmd, timeout_s)
        end = time.monotonic() + self.cfg.listen_timeout_s
        while time.monotonic() < end:
            got = self.t[self.exporter].run(LISTEN_SCRIPT.format(pidfile=quote(pidfile)), timeout_s=SHORT_S)
            state = listening(got.stdout, port)
            if state:
                return bg, pidfile, None
            if state is None and bg.wait(0):
                return bg, pidfile, f"exited before listening (rc {getattr(bg.reading, 'rc', '?')}): " \
                                    f"{_tail(bg.output(), 3) or 'no output'}"
            time.sleep(0.2)
        return bg, pidfile, f"not listening on port {port} after {self.cfg.listen_timeout_s:g}s"

    def finish(self, bg: Background, pidfile: str) -> None:
        """Give the serving side a moment to exit on its own, then kill it by its recorded PID."""
        if not bg.wait(3):
            self.launches.kill(self.exporter, {pidfile})
            bg.wait(SHORT_S)

    def kernel_marker(self, node: str) -> str | None:
        got = self.t[node].run("dmesg 2>/dev/null | tail -n 1", timeout_s=SHORT_S)
        return got.stdout.strip() or None

    def run(self) -> Outcome:
        cfg, gpu = self.cfg, ([f"-gpu={self.cfg.gpu}"] if self.cfg.gpu >= 0 else [])
        markers = {n: self.kernel_marker(n) for n in (self.exporter, self.importer)}
        base = {"ubench_dir": cfg.ubench_dir, "peer_ip": self.ctx.nodes[self.exporter].address}
        try:
            bg, pidfile, why = self.serve(self.tool("ualoe_p2p.exe", "export", f"-port={cfg.p2p_port}", *gpu),
                                          cfg.p2p_port, cfg.listen_timeout_s + cfg.p2p_timeout_s + 10)
            if why:
                return self.unrunnable(self.exporter, "ualoe_p2p.exe", bg.reading, base) or \
                    self.outcome(Status.FAIL, f"p2p exporter on {self.exporter} {why}", base, "UALOE-P2P")
            _, cmd = self.recorded(self.importer, "client", self.tool(
                "ualoe_p2p.exe", "import", f"-peer_ip={base['peer_ip']}", f"-port={cfg.p2p_port}", *gpu))
            imp = self.t[self.importer].run(cmd, timeout_s=cfg.p2p_timeout_s)
            self.finish(bg, pidfile)
            imp_out = (imp.stdout + imp.stderr).strip()
            ev = {**base, "importer_output": _tail(imp_out), "exporter_output": _tail(bg.output())}
            results = {"importer": parse_p2p(imp_out), "exporter": parse_p2p(bg.output())}
            missing = self.unrunnable(self.importer, "ualoe_p2p.exe", imp, ev)
            if missing:
                return missing
            if not all(r and r.ok for r in results.values()):
                return self.p2p_failure(imp, results, ev, markers)
            ev["p2p"] = results["importer"].line
            return self.bandwidth(ev)
        finally:
            self.launches.kill(self.exporter)
            self.launches.kill(self.importer)

    def p2p_failure(self, imp, results, ev, markers) -> Outcome:
        said = {side: (r.line if r else "no RESULT line") for side, r in results.items()}
        what = "timed out with no RESULT line" if imp.timed_out and not results["importer"] else \
            f"importer: {said['importer']}; exporter: {said['exporter']}"
        fatal = [ln for ln in ev["importer_output"].splitlines() if "[FATAL]" in ln]
        msg = f"p2p correctness failed ({what})" + (f"; {fatal[-1].strip()}" if fatal else "")
        out = self.outcome(Status.FAIL, msg, ev, "UALOE-P2P")
        self.read_kernel_logs(out, markers)
        return out

    def read_kernel_logs(self, out: Outcome, markers: dict) -> None:
        """§8: fabric faults land in the importer's dmesg; an empty exporter log means no packets crossed."""
        found = {}
        for node in (self.importer, self.exporter):
            got = self.t[node].run("dmesg", timeout_s=SHORT_S)
            try:
                if not got.ok:
                    raise ParseError(_tail(got.stderr or got.stdout, 1) or f"rc {got.rc}")
                found[node] = fabric_findings(got.stdout, markers.get(node))
            except ParseError as exc:
                out.evidence[f"{node}_kernel_log"] = f"unreadable: {exc}"
        imp = found.get(self.importer)
        if not imp:
            if imp is not None:
                out.message += f"; no fabric signature in {self.importer}'s kernel log"
            return
        accel = self.accel_ids()
        named = []
        for f in imp:
            where = ""
            if f.accid is not None:
                node, card, how = locate_accid(f.accid, accel, self.cfg.gpus_per_node)
                if node is not None:
                    out.blame.setdefault(node, card)
                    where = f" = {node} GPU card{card} ({how})"
                else:
                    where = f" ({how})"
            named.append(f"{f.signature} AccId:{f.accid}{where}" if f.accid is not None else f.signature)
        out.evidence[f"{self.importer}_kernel_log"] = [f.line for f in imp]
        out.message += f"; {self.importer} kernel log: {', '.join(dict.fromkeys(named))}"
        if found.get(self.exporter) == []:
            out.message += (f"; {self.exporter} (exporter) kernel log has no fabric line - HELLO never arrived, "
                            "packets are not crossing the wire")

    def bandwidth(self, ev: dict) -> Outcome:
        cfg = self.cfg
        bg, pidfile, why = self.serve(self.tool("ualoe_bw.exe", "listen", f"-port={cfg.bw_port}"), cfg.bw_port,
                                      cfg.listen_timeout_s + cfg.bw_timeout_s + 10)
        if why:
            return self.unrunnable(self.exporter, "ualoe_bw.exe", bg.reading, ev) or \
                self.outcome(Status.FAIL, f"bandwidth listener on {self.exporter} {why}", ev, "UALOE-P2P")
        _, cmd = self.recorded(self.importer, "client", self.tool(
            "ualoe_bw.exe", "connect", f"-peer_ip={ev['peer_ip']}", f"-port={cfg.bw_port}"))
        con = self.t[self.importer].run(cmd, timeout_s=cfg.bw_timeout_s)
        self.finish(bg, pidfile)
        out = (con.stdout + con.stderr).strip()
        ev = {**ev, "connect_output": _tail(out, 12)}
        missing = self.unrunnable(self.importer, "ualoe_bw.exe", con, ev)
        if missing:
            return missing
        bw = parse_bw(out)
        if bw is None:
            how = f"timed out after {cfg.bw_timeout_s:g}s" if con.timed_out else f"exited rc {con.rc}"
            return self.outcome(Status.FAIL, f"p2p passed but the bandwidth run printed no table ({how})",
                                ev, "UALOE-P2P")
        o = self.outcome(Status.PASS, "", {**ev, "gbps": bw.as_dict()}, None)
        o.bw = bw
        return o

    def unrunnable(self, node: str, name: str, reading, evidence) -> Outcome | None:
        """ERROR when the shell could not start the tool (rc 126/127): a missing build says nothing about the fabric."""
        rc = getattr(reading, "rc", None)
        if rc not in NOT_RUNNABLE:
            return None
        said = _tail(reading.stdout + reading.stderr, 1) or "no output"
        return self.outcome(Status.ERROR, f"ubench not runnable on {node}: "
                            f"{posixpath.join(self.cfg.ubench_dir, name)} {NOT_RUNNABLE[rc]} (rc {rc}: {said}); "
                            "set tools.ubench_dir to the ubench build directory", evidence, None)

    def outcome(self, status, message, evidence, remediation) -> Outcome:
        return Outcome(self.exporter, self.importer, status, message, dict(evidence), remediation,
                       gpu=self.cfg.gpu if self.cfg.gpu >= 0 else None)


def _accel_reader(ctx):
    """Lazily read every reachable node's accel_id files once (for AccId -> node, card)."""
    cache, lock = {}, threading.Lock()

    def read() -> dict:
        with lock:
            if not cache:
                for node, t in ctx.transports.items():
                    if node in ctx.blocked:
                        continue
                    try:
                        cache[node] = parse_accel_ids(t.run(ACCEL_SCRIPT, timeout_s=SHORT_S).stdout)
                    except Exception:  # noqa: BLE001 - an unreadable node just maps by formula
                        cache[node] = {}
            return cache
    return read


def known_good(verdicts) -> dict:
    """Baseline entries (``baseline record --tier deep``): each node's best passing pair and its figures."""
    best = {}
    for v in verdicts:
        gbps = v.evidence.get("gbps") if v.status == Status.PASS and v.node else None
        if gbps and gbps.get("bidir", 0) > best.get(v.node, {}).get("gbps", {}).get("bidir", -1):
            best[v.node] = {"pair": v.evidence.get("pair"), "gbps": gbps}
    return best


def _recorded_reference(ctx) -> tuple:
    """The best known-good pair in the baseline, if one was recorded."""
    entries = [e for e in (ctx.baseline or {}).values() if isinstance(e, dict) and e.get("gbps")]
    if not entries:
        return None, None
    top = max(entries, key=lambda e: e["gbps"].get("bidir", 0))
    return {k: float(v) for k, v in top["gbps"].items() if k in METRICS}, f"baseline pair {top.get('pair')}"


def _reference(ctx) -> tuple:
    ref = ctx.param("reference_gbps") or {}
    if not isinstance(ref, dict) or not ref:
        return _recorded_reference(ctx)
    bad = [k for k, v in ref.items() if k not in METRICS or isinstance(v, bool) or not isinstance(v, (int, float))]
    if bad:
        raise PlanError(f"reference_gbps: keys must be {', '.join(METRICS)} with GB/s numbers; got {ref!r}")
    return {k: float(v) for k, v in ref.items()}, "reference_gbps from the inventory"


def _process_table(t) -> list:
    """Leftover ubench processes on one node; a listing cut short by its deadline cannot vouch for 'none'."""
    got = t.run(PROCS_SCRIPT, timeout_s=SHORT_S)
    if got.timed_out:
        raise ParseError(f"process listing timed out after {SHORT_S:g}s")
    return stale_tools(got.stdout)


def check_stale(ctx, nodes: list) -> tuple:
    """Verdicts for leftover ubench processes; with --fix they are killed by PID.

    -> (verdicts, {dirty node: why its pairs are not run}).  A node whose process table cannot
    be read is an ERROR on that node alone: the other nodes' pairs still run.
    """
    verdicts, dirty = [], {}
    for node in nodes:
        t = ctx.transports[node]
        try:
            stale = _process_table(t)
        except (ParseError, TransportError) as exc:
            dirty[node] = "its process table could not be read"
            verdicts.append(error(f"could not list ubench processes, so its pairs were not run: {exc}", node=node))
            continue
        if not stale:
            continue
        listed = [f"PID {p.pid}: {' '.join(p.argv)}" for p in stale]
        ev = {"processes": listed}
        if not ctx.fix:
            dirty[node] = "leftover ubench process"
            verdicts.append(fail(
                f"{len(stale)} leftover ubench process(es) ({', '.join(f'{p.tool} PID {p.pid}' for p in stale)}): "
                "a listener whose peer died never exits and makes the next round fail silently; its pairs were "
                "not run - rerun with --fix to kill them by PID", node=node, evidence=ev, remediation="UALOE-STALE"))
            continue
        pids = " ".join(str(p.pid) for p in stale)
        try:
            t.run(kill_pids(p.pid for p in stale), timeout_s=SHORT_S)
            left = {p.pid for p in _process_table(t)} & {p.pid for p in stale}
        except (ParseError, TransportError) as exc:
            dirty[node] = "its process table could not be read"
            verdicts.append(error(f"killing leftover ubench PID(s) {pids} (--fix) could not be confirmed, so its "
                                  f"pairs were not run: {exc}", node=node, evidence=ev, remediation="UALOE-STALE"))
            continue
        if left:
            dirty[node] = "stale ubench process survived SIGKILL"
            verdicts.append(fail(f"stale ubench PID(s) {sorted(left)} survived SIGKILL (D state? reset the tray, "
                                 "§11)", node=node, evidence=ev, remediation="UALOE-STALE"))
        else:
            verdicts.append(warn(f"killed leftover ubench process(es) by PID (--fix): {pids}", node=node,
                                 evidence=ev, remediation="UALOE-STALE"))
    return verdicts, dirty


def run(ctx) -> list:
    """The ualoe-fabric probe: plan, stale-process sweep, pair rounds, attribution."""
    names = list(ctx.nodes)
    eligible = [n for n in names if n not in ctx.blocked and n in ctx.transports]
    skipped = {n: f"not tested: {ctx.blocked[n]}" for n in names if n in ctx.blocked}
    try:
        pairs = plan_pairs(ctx.param("pairs"), eligible if ctx.param("pairs") == "quick" else names)
        reference, ref_from = _reference(ctx)
    except PlanError as exc:
        return [error(str(exc))]
    pairs = [p for p in pairs if not set(p) & set(skipped)] if ctx.param("pairs") != "quick" else pairs
    if not pairs:
        return [skip(f"fewer than two nodes can take part (plan {ctx.param('pairs')!r})")] + \
            [skip(why, node=n) for n, why in skipped.items()]
    settings = ctx.settings
    cfg = Config(ubench_dir=settings.tools["ubench_dir"], gpu=int(ctx.param("gpu")),
                 p2p_port=int(ctx.param("p2p_port")), bw_port=int(ctx.param("bw_port")),
                 listen_timeout_s=float(ctx.param("listen_timeout_s")),
                 p2p_timeout_s=float(ctx.param("p2p_timeout_s")), bw_timeout_s=float(ctx.param("bw_timeout_s")),
                 gpus_per_node=settings.gpus_per_node)
    launches = Launches(ctx.transports)
    involved = sorted({n for p in pairs for n in p}, key=names.index)
    stale_verdicts, dirty = check_stale(ctx, involved)
    outcomes, errors = [], []
    accel = _accel_reader(ctx)
    shown = progress.Counter("ualoe-fabric pairs", total=len(pairs))
    try:
        for rnd in schedule(pairs):
            runs = [(p, PairRun(ctx, cfg, launches, accel, *p)) for p in rnd if not set(p) & dirty.keys()]
            for p in rnd:
                for bad in sorted(set(p) & dirty.keys()):
                    why = f"{p[0]}<->{p[1]}: not run, {dirty[bad]} on {bad}"
                    errors += [skip(why, node=n) for n in p if n not in dirty]
            results = {}
            threads = [threading.Thread(target=_capture, args=(r, results, p), daemon=True) for p, r in runs]
            for th in threads:
                th.start()
            for th, (p, _) in zip(threads, runs, strict=True):
                while th.is_alive():
                    th.join(0.2)
                shown.step(f"{p[0]}<->{p[1]}")
            outcomes += [results[p] for p, _ in runs]
    finally:
        shown.close()
        launches.kill_all()
    measured = {o.pair: o.bw for o in outcomes if o.bw is not None}
    if reference is None:
        reference, ref_from = same_day_reference(measured)
    floors = {m: float(ctx.param(f"min_{m}_gbps")) for m in METRICS}
    for o in outcomes:
        if o.bw is not None:
            status, kind, text = judge_bandwidth(o.bw, floors, reference, ref_from, float(ctx.param("warn_pct")),
                                                 float(ctx.param("tcp_fallback_max_gbps")))
            o.status, o.message = status, f"p2p {o.evidence.get('p2p', 'OK')}; {text}"
            o.remediation = {"tcp": "UALOE-TCP-FALLBACK", "floor": "UALOE-SLOW", "reference": "UALOE-SLOW"}.get(kind)
            if ref_from:
                o.evidence["reference"] = {"from": ref_from, "gbps": reference}
    return stale_verdicts + errors + attribute(outcomes, skipped)


def _capture(pair_run: PairRun, results: dict, pair) -> None:
    try:
        results[pair] = pair_run.run()
    except Exception as exc:  # noqa: BLE001 - one pair's transport failure must not hide the others
        results[pair] = Outcome(pair[0], pair[1], Status.ERROR, f"could not run: {type(exc).__name__}: {exc}")
