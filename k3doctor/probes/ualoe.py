"""ubench 07_ualoe across node pairs: p2p correctness, then bandwidth (reference §8) - the orchestration.

``run`` drives the tools over the transports: the exporter/listener starts first and is
confirmed listening (its own PID holds a LISTEN socket on the port) before the
importer/connector starts; every remote process records its PID in a file and is killed by
that PID in a ``finally`` (timeout, failure or Ctrl-C alike), on top of the node-side
``timeout`` every transport command runs under (:mod:`k3doctor.remote.ualoe_remote`).  What
the tools print is parsed by :mod:`k3doctor.parsers.ubench` and judged by
:mod:`k3doctor.probes.ualoe_verdicts`; the check (checks/ualoe.py) builds the :class:`Config`
from its parameters and each node's settings.
"""
from __future__ import annotations

import posixpath
import threading
import time
from dataclasses import dataclass, field

from k3doctor import progress
from k3doctor.views.gpu import parse_accel_ids
from k3doctor.parsers import ParseError
from k3doctor.parsers.ubench import listening, parse_bw, parse_p2p
from k3doctor.probes.kit import rounds, tail
from k3doctor.probes.ualoe_verdicts import (
    PairOutcome,
    PlanError,
    attribute,
    fabric_findings,
    judge_figures,
    name_fabric_faults,
    plan_pairs,
    stale_tools,
)
from k3doctor.remote.ualoe_remote import (
    ACCEL_SCRIPT,
    LISTEN_SCRIPT,
    PROCS_SCRIPT,
    SHORT_S,
    Background,
    Launches,
    kill_pids,
    pidfile_word,
)
from k3doctor.results import Status, error, fail, skip, warn
from k3doctor.shell import quote
from k3doctor.transport.base import TransportError

NOT_RUNNABLE = {126: "is not executable", 127: "was not found"}  # the shell's rc when exec fails


@dataclass
class Config:
    """Everything one run needs, from the check's parameters and each node's own settings."""

    plan: str  # quick, all or a,b;c,d
    ubench_dir: dict  # node -> its tools.ubench_dir (a node's own `tools:` wins over the cluster's)
    gpu: int
    p2p_port: int
    bw_port: int
    listen_timeout_s: float
    p2p_timeout_s: float
    bw_timeout_s: float
    gpus_per_node: int  # the §6 AccId formula, used only for an id that no inventory node reports
    codes: dict = field(default_factory=dict)  # kind (p2p, stale, tcp, floor, reference) -> remediation code


class PairRun:
    """One exporter/importer pair: p2p correctness, then bandwidth (only if p2p passed)."""

    def __init__(self, ctx, cfg: Config, launches: Launches, accel_ids, exporter: str, importer: str):
        self.ctx, self.cfg, self.launches, self.accel_ids = ctx, cfg, launches, accel_ids
        self.exporter, self.importer = exporter, importer
        self.t = ctx.transports

    def tool(self, node: str, name: str, *args) -> str:
        return " ".join([quote(posixpath.join(self.cfg.ubench_dir[node], name)), *(quote(a) for a in args)])

    def recorded(self, node: str, role: str, command: str) -> tuple:
        """(pidfile, command that writes its PID there and then becomes the tool)."""
        pidfile = self.launches.pidfile(node, f"{role}.{node}")
        return pidfile, f"echo $$ > {pidfile_word(pidfile)} && exec {command}"

    def serve(self, tool_cmd: str, port: int, timeout_s: float):
        """Start the exporter/listener and wait until its own PID listens on the port."""
        pidfile, cmd = self.recorded(self.exporter, "serve", tool_cmd)
        bg = Background(self.t[self.exporter], cmd, timeout_s)
        end = time.monotonic() + self.cfg.listen_timeout_s
        while time.monotonic() < end:
            got = self.t[self.exporter].run(LISTEN_SCRIPT.format(pidfile=pidfile_word(pidfile)), timeout_s=SHORT_S)
            state = listening(got.stdout, port)
            if state:
                return bg, pidfile, None
            if state is None and bg.wait(0):
                return bg, pidfile, f"exited before listening (rc {getattr(bg.reading, 'rc', '?')}): " \
                                    f"{tail(bg.output(), 3) or 'no output'}"
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

    def run(self) -> PairOutcome:
        cfg, gpu = self.cfg, ([f"-gpu={self.cfg.gpu}"] if self.cfg.gpu >= 0 else [])
        markers = {n: self.kernel_marker(n) for n in (self.exporter, self.importer)}
        dirs = {cfg.ubench_dir[n] for n in (self.exporter, self.importer)}
        base = {"ubench_dir": " / ".join(sorted(dirs)), "peer_ip": self.ctx.nodes[self.exporter].address}
        try:
            serve = self.tool(self.exporter, "ualoe_p2p.exe", "export", f"-port={cfg.p2p_port}", *gpu)
            bg, pidfile, why = self.serve(serve, cfg.p2p_port, cfg.listen_timeout_s + cfg.p2p_timeout_s + 10)
            if why:
                return self.unrunnable(self.exporter, "ualoe_p2p.exe", bg.reading, base) or \
                    self.outcome(Status.FAIL, f"p2p exporter on {self.exporter} {why}", base, cfg.codes["p2p"])
            _, cmd = self.recorded(self.importer, "client", self.tool(
                self.importer, "ualoe_p2p.exe", "import", f"-peer_ip={base['peer_ip']}", f"-port={cfg.p2p_port}", *gpu))
            imp = self.t[self.importer].run(cmd, timeout_s=cfg.p2p_timeout_s)
            self.finish(bg, pidfile)
            imp_out = (imp.stdout + imp.stderr).strip()
            ev = {**base, "importer_output": tail(imp_out), "exporter_output": tail(bg.output())}
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

    def p2p_failure(self, imp, results, ev, markers) -> PairOutcome:
        said = {side: (r.line if r else "no RESULT line") for side, r in results.items()}
        what = "timed out with no RESULT line" if imp.timed_out and not results["importer"] else \
            f"importer: {said['importer']}; exporter: {said['exporter']}"
        fatal = [ln for ln in ev["importer_output"].splitlines() if "[FATAL]" in ln]
        msg = f"p2p correctness failed ({what})" + (f"; {fatal[-1].strip()}" if fatal else "")
        out = self.outcome(Status.FAIL, msg, ev, self.cfg.codes["p2p"])
        self.read_kernel_logs(out, markers)
        return out

    def read_kernel_logs(self, out: PairOutcome, markers: dict) -> None:
        """§8: fabric faults land in the importer's dmesg; an empty exporter log means no packets crossed."""
        found = {}
        for node in (self.importer, self.exporter):
            got = self.t[node].run("dmesg", timeout_s=SHORT_S)
            try:
                if not got.ok:
                    raise ParseError(tail(got.stderr or got.stdout, 1) or f"rc {got.rc}")
                found[node] = fabric_findings(got.stdout, markers.get(node))
            except ParseError as exc:
                out.evidence[f"{node}_kernel_log"] = f"unreadable: {exc}"
        name_fabric_faults(out, found, self.accel_ids, self.cfg.gpus_per_node)

    def bandwidth(self, ev: dict) -> PairOutcome:
        cfg = self.cfg
        serve = self.tool(self.exporter, "ualoe_bw.exe", "listen", f"-port={cfg.bw_port}")
        bg, pidfile, why = self.serve(serve, cfg.bw_port, cfg.listen_timeout_s + cfg.bw_timeout_s + 10)
        if why:
            return self.unrunnable(self.exporter, "ualoe_bw.exe", bg.reading, ev) or \
                self.outcome(Status.FAIL, f"bandwidth listener on {self.exporter} {why}", ev, cfg.codes["p2p"])
        _, cmd = self.recorded(self.importer, "client", self.tool(
            self.importer, "ualoe_bw.exe", "connect", f"-peer_ip={ev['peer_ip']}", f"-port={cfg.bw_port}"))
        con = self.t[self.importer].run(cmd, timeout_s=cfg.bw_timeout_s)
        self.finish(bg, pidfile)
        out = (con.stdout + con.stderr).strip()
        ev = {**ev, "connect_output": tail(out, 12)}
        missing = self.unrunnable(self.importer, "ualoe_bw.exe", con, ev)
        if missing:
            return missing
        bw = parse_bw(out)
        if bw is None:
            how = f"timed out after {cfg.bw_timeout_s:g}s" if con.timed_out else f"exited rc {con.rc}"
            return self.outcome(Status.FAIL, f"p2p passed but the bandwidth run printed no table ({how})",
                                ev, cfg.codes["p2p"])
        o = self.outcome(Status.PASS, "", {**ev, "gbps": bw.as_dict()}, None)
        o.bw = bw
        return o

    def unrunnable(self, node: str, name: str, reading, evidence) -> PairOutcome | None:
        """ERROR when the shell could not start the tool (rc 126/127): a missing build says nothing about the fabric."""
        rc = getattr(reading, "rc", None)
        if rc not in NOT_RUNNABLE:
            return None
        said = tail(reading.stdout + reading.stderr, 1) or "no output"
        return self.outcome(Status.ERROR, f"ubench not runnable on {node}: "
                            f"{posixpath.join(self.cfg.ubench_dir[node], name)} {NOT_RUNNABLE[rc]} (rc {rc}: {said}); "
                            "set tools.ubench_dir to the ubench build directory", evidence, None)

    def outcome(self, status, message, evidence, remediation) -> PairOutcome:
        return PairOutcome(self.exporter, self.importer, status, message, dict(evidence), remediation,
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


def _process_table(t) -> list:
    """Leftover ubench processes on one node; a listing cut short by its deadline cannot vouch for 'none'."""
    got = t.run(PROCS_SCRIPT, timeout_s=SHORT_S)
    if got.timed_out:
        raise ParseError(f"process listing timed out after {SHORT_S:g}s")
    return stale_tools(got.stdout)


def check_stale(ctx, nodes: list, code: str) -> tuple:
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
                "not run - rerun with --fix to kill them by PID", node=node, evidence=ev, remediation=code))
            continue
        pids = " ".join(str(p.pid) for p in stale)
        try:
            t.run(kill_pids(p.pid for p in stale), timeout_s=SHORT_S)
            left = {p.pid for p in _process_table(t)} & {p.pid for p in stale}
        except (ParseError, TransportError) as exc:
            dirty[node] = "its process table could not be read"
            verdicts.append(error(f"killing leftover ubench PID(s) {pids} (--fix) could not be confirmed, so its "
                                  f"pairs were not run: {exc}", node=node, evidence=ev, remediation=code))
            continue
        if left:
            dirty[node] = "stale ubench process survived SIGKILL"
            verdicts.append(fail(f"stale ubench PID(s) {sorted(left)} survived SIGKILL (D state? reset the tray, "
                                 "§11)", node=node, evidence=ev, remediation=code))
        else:
            verdicts.append(warn(f"killed leftover ubench process(es) by PID (--fix): {pids}", node=node,
                                 evidence=ev, remediation=code))
    return verdicts, dirty


def run(ctx, cfg: Config, judging) -> list:
    """The ualoe-fabric probe: plan, stale-process sweep, pair rounds, figures judged, attribution."""
    names = list(ctx.nodes)
    eligible = [n for n in names if n not in ctx.blocked and n in ctx.transports]
    skipped = {n: f"not tested: {ctx.blocked[n]}" for n in names if n in ctx.blocked}
    quick = cfg.plan == "quick"
    try:
        pairs = plan_pairs(cfg.plan, eligible if quick else names)
    except PlanError as exc:
        return [error(str(exc))]
    pairs = pairs if quick else [p for p in pairs if not set(p) & set(skipped)]
    if not pairs:
        return [skip(f"fewer than two nodes can take part (plan {cfg.plan!r})")] + \
            [skip(why, node=n) for n, why in skipped.items()]
    launches = Launches(ctx.transports)
    involved = sorted({n for p in pairs for n in p}, key=names.index)
    stale_verdicts, dirty = check_stale(ctx, involved, cfg.codes["stale"])
    outcomes, errors = [], []
    accel = _accel_reader(ctx)
    shown = progress.Counter("ualoe-fabric pairs", total=len(pairs))
    try:
        for rnd in rounds(pairs):
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
    judge_figures(outcomes, judging, cfg.codes)
    return stale_verdicts + errors + attribute(outcomes, skipped)


def _capture(pair_run: PairRun, results: dict, pair) -> None:
    try:
        results[pair] = pair_run.run()
    except Exception as exc:  # noqa: BLE001 - one pair's transport failure must not hide the others
        results[pair] = PairOutcome(pair[0], pair[1], Status.ERROR, f"could not run: {type(exc).__name__}: {exc}")
