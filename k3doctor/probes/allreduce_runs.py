"""One all_reduce probe run, pure: its plan (members, ranks, sizes) in, the node transcripts (``K3PROBE``
lines the worker prints) judged into an :class:`Outcome` out (§20). No transport, no clock: what
k3doctor/probes/allreduce.py launched is analysed here, and tested on transcripts alone."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace

from k3doctor.parsers import ParseError
from k3doctor.parsers.torch_errors import classify
from k3doctor.probes.collective_figures import ALL_REDUCE, ALL_TO_ALL, figures
from k3doctor.probes.kit import tail
from k3doctor.remote.allreduce_worker import STAGES

_MARK = "K3PROBE "
AGENT_MARGIN_S = 4.0  # the agent stops its ranks this long before the transport kills the command


@dataclass(frozen=True)
class Member:
    """One node of a run: where its ranks rendezvous and how its python is started."""

    node: str
    address: str
    ranks: int
    launcher: tuple  # argv up to the python executable, e.g. ("docker", "exec", "-i", "k3ep16", "python3")


@dataclass(frozen=True)
class Plan:
    label: str
    members: tuple
    port: int
    backend: str
    sizes_gpu: tuple
    sizes_cpu: tuple
    iters: int
    warmup_iters: int
    deadlines: dict  # stage -> seconds
    a2a_gpu: tuple = ()  # all-to-all sweep, ((bytes per rank, split unit bytes, label), ...); empty: none
    a2a_cpu: tuple = ()
    a2a_splits: str = "even"  # or "uneven": every rank sends a different share to each peer
    timer: str = "auto"  # auto/graph: a captured graph timed by GPU events, else host; events; host

    @property
    def nodes(self) -> list:
        return [m.node for m in self.members]

    @property
    def world(self) -> int:
        return sum(m.ranks for m in self.members)

    def ranks_of(self) -> dict:
        out, base = {}, 0
        for m in self.members:
            out[m.node] = list(range(base, base + m.ranks))
            base += m.ranks
        return out

    def subset(self, nodes, label: str, port: int, smoke: bool) -> Plan:
        """The same probe on fewer nodes (hierarchy); ``smoke`` keeps only the smallest size."""
        members = tuple(m for m in self.members if m.node in nodes)
        sizes = {} if not smoke else {"sizes_gpu": self.sizes_gpu[:1], "sizes_cpu": self.sizes_cpu[:1],
                                      "a2a_gpu": self.a2a_gpu[:1], "a2a_cpu": self.a2a_cpu[:1]}
        return replace(self, label=label, members=members, port=port, **sizes)

    def spec(self, member: Member, limit_s: float) -> dict:
        return {"node": member.node, "rank_base": self.ranks_of()[member.node][0], "ranks_here": member.ranks,
                "world": self.world, "master": self.members[0].address, "port": self.port,
                "backend": self.backend, "sizes_gpu": list(self.sizes_gpu), "sizes_cpu": list(self.sizes_cpu),
                "a2a_gpu": [list(s) for s in self.a2a_gpu], "a2a_cpu": [list(s) for s in self.a2a_cpu],
                "a2a_splits": self.a2a_splits, "timer": self.timer,
                "iters": self.iters, "warmup_iters": self.warmup_iters, "deadlines": dict(self.deadlines),
                "limit_s": max(limit_s - AGENT_MARGIN_S, 1.0)}

    def sweeps(self, backend: str | None) -> tuple:
        """(all_reduce sizes, all-to-all sizes) a run on ``backend`` sweeps."""
        if backend == "nccl":
            return self.sizes_gpu, self.a2a_gpu
        return self.sizes_cpu, self.a2a_cpu

    def limit_s(self) -> float:
        """How long a run may take: its stage deadlines, the agent's kill grace, start-up slack."""
        return sum(self.deadlines.values()) + AGENT_MARGIN_S + 10.0


@dataclass
class NodeRun:
    """What came back from one node: the command's reading, or why there was none."""

    node: str
    rc: int | None = None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    error: str | None = None  # transport failure
    cleanup: dict = field(default_factory=dict)  # {"killed": [...], "left": [...]} or {"error": ...}


@dataclass
class Outcome:
    """One run, judged: did it pass, and if not, which stage and which participants."""

    label: str
    run_id: str
    nodes: list
    world: int
    ok: bool
    wall_s: float
    stage: str | None = None  # first stage not every rank completed
    missing: list = field(default_factory=list)  # ranks that never completed ``stage``
    missing_nodes: list = field(default_factory=list)
    errors: dict = field(default_factory=dict)  # rank -> error text
    killed: list = field(default_factory=list)  # ranks the agent had to SIGKILL
    not_started: dict = field(default_factory=dict)  # node -> why its agent never reported
    setup_error: str | None = None  # the probe could not be run at all (no torch, no container)
    stage_s: dict = field(default_factory=dict)  # stage -> slowest rank's seconds
    sizes: list = field(default_factory=list)  # all_reduce [{bytes, time_us, algbw_gbs, busbw_gbs, host_*}]
    alltoall: list = field(default_factory=list)  # all-to-all rows, same figures plus shape and splits
    timer: str | None = None  # how time_us was taken: cuda-events, cuda-graph or host
    wrong: list = field(default_factory=list)
    backend: str | None = None
    torch_failure: dict = field(default_factory=dict)  # node -> torch.distributed failure kind
    env: dict = field(default_factory=dict)  # node -> NCCL/RCCL/GLOO environment as a rank saw it
    cleanup: dict = field(default_factory=dict)  # node -> cleanup report
    residue: dict = field(default_factory=dict)  # node -> pids cleanup could not kill, or its error
    node_by_rank: dict = field(default_factory=dict)
    launchers: dict = field(default_factory=dict)  # node -> how its python was started (container or host)

    def describe(self) -> str:
        """One sentence: what stopped the run, naming the stage and the participants."""
        where = f"{self.world} rank(s) on {len(self.nodes)} node(s)"
        if self.ok:
            return f"passed on {where}"
        if self.setup_error:
            return f"could not run on {where}: {self.setup_error}"
        if self.not_started:
            why = "; ".join(f"{n}: {w}" for n, w in self.not_started.items())
            return f"the probe did not start on {', '.join(self.not_started)} ({why})"
        if self.wrong:
            sums = sorted({(w["rank"], w["bytes"]) for w in self.wrong if "src" not in w})
            routed = sorted({(w["rank"], w["src"], w["bytes"]) for w in self.wrong if "src" in w})
            return "; ".join([f"wrong all_reduce sum on {where}: (rank, bytes) {sums}"] * bool(sums) + [
                f"wrong all-to-all data on {where}: (rank, from rank, bytes) {routed}"] * bool(routed))
        parts = [f"stopped in stage `{self.stage}` on {where} after {self.wall_s:.1f}s"]
        if self.missing:
            who = ", ".join(f"rank {r} ({self.node_by_rank.get(r, '?')})" for r in self.missing)
            verb = "never arrived" if self.stage in ("start", "rendezvous") else "never completed it"
            parts.append(f"{who} {verb}")
        first = next(iter(self.errors.items()), None)
        if first:
            parts.append(f"rank {first[0]}: {first[1][:200]}")
        return "; ".join(parts)

    def evidence(self) -> dict:
        ev = {"run": self.label, "run_id": self.run_id, "nodes": self.nodes, "world": self.world,
              "backend": self.backend, "wall_s": self.wall_s, "stage_s": self.stage_s, "launchers": self.launchers}
        if self.sizes:
            ev["sizes"] = self.sizes
        if self.alltoall:
            ev["alltoall"] = self.alltoall
        if self.timer:
            ev["timer"] = self.timer
        if not self.ok:
            ev.update({k: v for k, v in (
                ("failed_stage", self.stage), ("missing_ranks", self.missing),
                ("missing_nodes", self.missing_nodes), ("errors", {str(r): e for r, e in self.errors.items()}),
                ("killed_ranks", self.killed), ("not_started", self.not_started), ("wrong", self.wrong),
                ("torch_failure", self.torch_failure)) if v})
        if self.env:
            ev["env"] = self.env
        ev["cleanup"] = self.cleanup
        return ev


# --- judging one run ---------------------------------------------------------------------

def probe_events(text: str) -> list:
    """The ``K3PROBE`` lines of a transcript; other output (torch warnings) is ignored."""
    out = []
    for line in (text or "").splitlines():
        if line.startswith(_MARK):
            try:
                event = json.loads(line[len(_MARK):])
            except ValueError:
                continue  # a line cut by a kill mid-write carries nothing to judge
            if isinstance(event, dict):
                out.append(event)
    return out


_SETUP_ERRORS = ("No module named 'torch'", "No module named torch")
# the worker's init-stage check of its one-float all_reduce (4 bytes); a wrong sum, not a hang
_INIT_WRONG = re.compile(r"first all_reduce summed to ([^,\s]+), expected (\S+)")


def analyse(plan: Plan, run_id: str, runs: dict, wall_s: float) -> Outcome:
    """Node transcripts -> Outcome: the first stage some rank did not complete, and who."""
    ranks_of = plan.ranks_of()
    node_by_rank = {r: n for n, ranks in ranks_of.items() for r in ranks}
    out = Outcome(label=plan.label, run_id=run_id, nodes=plan.nodes, world=plan.world, ok=False,
                  launchers={m.node: " ".join(m.launcher) for m in plan.members},
                  wall_s=wall_s, node_by_rank=node_by_rank)
    ended = {r: {} for r in node_by_rank}
    done, reported_missing = set(), None
    for node in plan.nodes:
        run = runs.get(node) or NodeRun(node, error="no result")
        out.cleanup[node] = run.cleanup
        events = probe_events(run.stdout)
        started = any(e.get("ev") == "agent" for e in events)
        # python could not even be executed there (126/127, for the run and its cleanup alike): nothing can be left
        unexecutable = not started and run.rc in (126, 127) and run.cleanup.get("rc") == run.rc
        if (run.cleanup.get("left") or run.cleanup.get("error")) and not unexecutable:
            out.residue[node] = run.cleanup.get("left") or run.cleanup.get("error")
        if not started:
            out.not_started[node] = run.error or _tail(run)
            continue
        for e in events:
            kind, rank = e.get("ev"), e.get("rank")
            if kind == "end" and rank in ended:
                ended[rank][e.get("stage")] = e.get("dur")
                if e.get("stage") == "start":
                    out.backend = out.backend or e.get("backend")
                    if "env" in e:
                        out.env[node] = e["env"]
            elif kind == "fail" and rank in ended:
                out.errors.setdefault(rank, f"[{e.get('stage')}] {e.get('error')}")
                bad = _INIT_WRONG.search(str(e.get("error")))
                if bad:
                    out.wrong.append({"rank": rank, "bytes": 4, "wrong": 1, "sample": float(bad[1]),
                                      "expected": float(bad[2])})
            elif kind == "killed" and rank in ended:
                out.killed.append(rank)
                out.errors.setdefault(rank, f"[{e.get('stage')}] hung; killed by its node's agent ({e.get('why')})")
            elif kind == "missing":
                reported_missing = [r for r in e.get("ranks", []) if r in node_by_rank]
            elif kind == "size":
                try:
                    _size_row(out, e, plan.world)
                except (KeyError, TypeError, ValueError) as exc:  # a figure that is no figure: that size is unread
                    out.errors.setdefault(-1, f"unreadable size report {json.dumps(e)[:160]}: {exc}")
            elif kind == "wrong":
                keys = ("rank", "src", "bytes", "wrong", "sample", "expected") if e.get("op") == ALL_TO_ALL \
                    else ("rank", "bytes", "wrong", "sample", "expected")
                out.wrong.append({k: e.get(k) for k in keys})
            elif kind == "done" and rank in ended:
                done.add(rank)
        if run.stderr and (run.rc != 0 or run.timed_out):
            try:
                kind = classify(run.stderr).kind
            except ParseError:
                kind = None
            if kind and kind != "unclassified":
                out.torch_failure[node] = kind
    ar_sizes, a2a_sizes = plan.sweeps(out.backend)
    stages = STAGES if a2a_sizes else tuple(s for s in STAGES if s != "alltoall")
    out.stage_s = {s: max(ended[r][s] for r in ended) for s in stages if all(s in ended[r] for r in ended)}
    setup = [e for e in out.errors.values() if any(s in e for s in _SETUP_ERRORS)]
    if setup:
        out.setup_error = f"torch is not importable by the probe's python ({setup[0][:160]})"
    if out.not_started or out.setup_error:
        return out
    out.stage = next((s for s in stages if not all(s in ended[r] for r in ended)), None)
    if out.stage is None:
        short = [f"{len(got)} of {len(want)} {op} sizes reported" for op, got, want in (
            (ALL_REDUCE, out.sizes, ar_sizes), (ALL_TO_ALL, out.alltoall, a2a_sizes)) if len(got) != len(want)]
        out.ok = not out.wrong and len(done) == plan.world and not short
        if not out.ok:  # wrong data too: the hierarchy must re-run every size, not a smoke test
            out.stage = "alltoall" if any("src" in w for w in out.wrong) or (
                not out.wrong and short and len(out.sizes) == len(ar_sizes)) else "sweep"
        if not out.ok and not out.wrong:
            out.errors.setdefault(-1, "; ".join(short) or "not every rank reported done")
    if out.stage is not None:
        incomplete = [r for r in ended if out.stage not in ended[r]]
        silent = [r for r in incomplete if r not in out.errors or r in out.killed]
        out.missing = sorted(reported_missing if reported_missing and out.stage == "rendezvous"
                             else silent or incomplete)
        out.missing_nodes = sorted({node_by_rank[r] for r in out.missing}, key=plan.nodes.index)
    return out


def _size_row(out: Outcome, event: dict, world: int) -> None:
    """A ``size`` event -> a figures row (nccl-tests arithmetic) under its collective."""
    op, nbytes = event.get("op", ALL_REDUCE), int(event["bytes"])
    row = {"bytes": nbytes, **figures(op, nbytes, float(event["time_us"]), world)}
    if event.get("host_us") and event.get("timer") != "host":  # a host-timed row has one figure
        host = figures(op, nbytes, float(event["host_us"]), world)
        row.update(host_time_us=host["time_us"], host_busbw_gbs=host["busbw_gbs"])
    if op == ALL_TO_ALL:
        row.update(shape=event.get("shape") or "", splits=event.get("splits", "even"))
        out.alltoall.append(row)
    else:
        out.sizes.append(row)
    timer = str(event.get("timer") or "")
    if "launch-bound" in timer:  # the GPU may have waited on Python launches: this row reads high
        row["launch_bound"] = True
    out.timer = timer.split(" (")[0] or out.timer


def _tail(run: NodeRun) -> str:
    what = "timed out" if run.timed_out else f"exit status {run.rc}"
    last = tail(run.stderr or run.stdout, 1)
    return f"{what}: {last[:200]}" if last else what


