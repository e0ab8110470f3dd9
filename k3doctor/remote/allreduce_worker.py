"""The all_reduce probe's node-side program (reference §20): stdlib + torch only.

k3doctor ships this file as source over stdin (``python3 - k3probe:<run-id> <spec-json>``),
on the host or through ``docker exec -i``, so nothing needs installing on a node. The
process that starts is the node's *agent*: it never imports torch, forks one rank per GPU
and relays each rank's progress lines (``K3PROBE {json}``) to stdout, where the launcher
reads them even from a command it had to kill. Deadlines are enforced in layers, because
a hang in ncclCommInitRank can hold a rank's interpreter: each rank's watchdog thread
exits at its stage deadline, the agent SIGKILLs a rank a few seconds past it and everything
at the run's limit, and a rank dies with its agent (PR_SET_PDEATHSIG). The launcher then
runs ``python3 - --cleanup <run-id>`` on every node, which kills whatever still carries the
run's token as its exact argv[2] - never a pattern that could match a user's shell.
"""
import json
import os
import select
import signal
import socket
import sys
import threading
import time
from functools import partial

STAGES = ("start", "rendezvous", "init", "warmup", "sweep", "alltoall")
TOKEN_PREFIX = "k3probe:"
AGENT_KILL_GRACE_S = 3.0  # agent SIGKILLs a rank this long after the rank's own watchdog should have fired
ENV_PREFIXES = ("NCCL_", "RCCL_", "GLOO_", "TORCH_NCCL_", "HSA_", "HIP_VISIBLE", "CUDA_VISIBLE", "ROCR_")


def emit(fd, **event):
    """One progress line in one write(2): lines of different ranks never interleave."""
    os.write(fd, ("K3PROBE " + json.dumps(event, separators=(",", ":"), default=str) + "\n").encode())


def _pdeathsig():
    """Ask the kernel to SIGKILL this rank when its agent dies (Linux; best effort elsewhere)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# --- a rank ------------------------------------------------------------------------------
class Stages:
    """Stage bookkeeping plus the rank's own watchdog (first line of defence against a hang)."""

    def __init__(self, rank, deadlines, t0):
        self.rank, self.deadlines, self.t0 = rank, deadlines, t0
        self.stage, self.since = "start", t0
        threading.Thread(target=self._watch, daemon=True).start()

    def now(self):
        return round(time.monotonic() - self.t0, 3)

    def begin(self, stage):
        self.stage, self.since = stage, time.monotonic()
        emit(1, ev="begin", rank=self.rank, stage=stage, t=self.now())

    def end(self, **info):
        emit(1, ev="end", rank=self.rank, stage=self.stage, t=self.now(),
             dur=round(time.monotonic() - self.since, 3), **info)

    def fail(self, error, code=3, **info):
        emit(1, ev="fail", rank=self.rank, stage=self.stage, t=self.now(), error=str(error)[:800], **info)
        os._exit(code)

    def _watch(self):
        while True:
            time.sleep(0.2)
            limit = self.deadlines[self.stage]
            if time.monotonic() - self.since > limit:
                self.fail(f"stage deadline of {limit:g}s exceeded (rank watchdog)", code=4, by="watchdog")


def rank_main(spec, local, t0):
    st = Stages(spec["rank_base"] + local, spec["deadlines"], t0)
    try:
        return _rank(st, spec, local)
    except Exception as exc:  # torch's own errors (timeouts, NCCL failures) name the stage
        st.fail(f"{type(exc).__name__}: {exc}")


def _rank(st, spec, local):
    rank, world = st.rank, spec["world"]
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    backend = spec["backend"]
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    info = {"backend": backend, "host": socket.gethostname(), "pid": os.getpid(), "torch": torch.__version__}
    if backend == "nccl":
        visible = torch.cuda.device_count()
        if visible <= local:
            st.fail(f"{visible} GPU(s) visible to torch, rank needs GPU {local} "
                    f"({spec['ranks_here']} ranks on this node)")
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        torch.ones(1, device=device)  # create the context now, so `start` includes it
        info["device"] = torch.cuda.get_device_name(local)
        try:
            info["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception as exc:  # the version is evidence, not a requirement
            info["nccl"] = f"unknown ({type(exc).__name__})"
    else:
        device = torch.device("cpu")
        info["device"] = "cpu"
    if local == 0:
        info["env"] = {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}
    st.end(**info)

    st.begin("rendezvous")
    wait_s = max(spec["deadlines"]["rendezvous"] - 1.0, 0.5)
    try:
        store = dist.TCPStore(spec["master"], spec["port"], is_master=rank == 0,
                              timeout=timedelta(seconds=wait_s), wait_for_workers=False)
    except Exception as exc:  # the master (rank 0) never opened the store
        st.fail(f"cannot reach the rendezvous store at {spec['master']}:{spec['port']}: {exc}")
    store.set(f"arrived/{rank}", json.dumps({"node": spec["node"], "backend": backend}))
    keys = [f"arrived/{r}" for r in range(world)]
    try:
        store.wait(keys, timedelta(seconds=wait_s))
    except Exception as exc:
        try:
            missing = [r for r, key in enumerate(keys) if not store.check([key])]
        except Exception:  # the store went away with its master
            missing = None
        if rank == 0 and missing:
            emit(1, ev="missing", rank=rank, stage="rendezvous", ranks=missing, t=st.now())
        st.fail(f"not every rank arrived within {wait_s:g}s (missing: {missing or 'unknown'}): {exc}")
    peers = [json.loads(store.get(key)) for key in keys]
    mixed = sorted({(p["node"], p["backend"]) for p in peers if p["backend"] != backend})
    if mixed:
        st.fail(f"backend mismatch: this rank uses {backend}, but {mixed} (a node without a usable GPU?)")
    st.end()

    st.begin("init")
    kwargs = {"backend": backend, "store": dist.PrefixStore("k3probe", store), "rank": rank,
              "world_size": world, "timeout": timedelta(seconds=spec["deadlines"]["init"])}
    if backend == "nccl":
        kwargs["device_id"] = device  # eager communicator init: ncclCommInitRank happens here
    dist.init_process_group(**kwargs)
    expected = world * (world + 1) / 2
    probe = torch.full((1,), float(rank + 1), device=device)
    dist.all_reduce(probe)
    _sync(torch, device)
    if probe.item() != expected:
        st.fail(f"first all_reduce summed to {probe.item()}, expected {expected}")
    st.end()

    st.begin("warmup")
    sizes = spec["sizes_gpu"] if backend == "nccl" else spec["sizes_cpu"]
    buf = torch.zeros(max(sizes) // 4, dtype=torch.float32, device=device)
    for _ in range(spec["warmup_iters"]):
        dist.all_reduce(buf)
    _sync(torch, device)
    st.end(bytes=max(sizes))

    st.begin("sweep")
    clock = Clock(torch, device, spec.get("timer", "auto"), lambda flag: _any_rank(dist, torch, device, flag))
    for size in sizes:
        view = buf[: size // 4]
        view.fill_(float(rank + 1))
        dist.all_reduce(view)
        _sync(torch, device)
        wrong = int((view != expected).sum().item())
        if wrong:
            emit(1, ev="wrong", rank=rank, bytes=size, wrong=wrong, sample=view[0].item(), expected=expected)
        view.zero_()  # the timed sums stay 0: no overflow however many iterations
        _report(st, dist, torch, device, clock.time(partial(dist.all_reduce, view), spec["iters"]),
                op="all_reduce", bytes=size)
    st.end(timer=clock.name)
    del buf, view
    a2a = spec.get("a2a_gpu" if backend == "nccl" else "a2a_cpu") or []
    if a2a:
        st.begin("alltoall")
        _alltoall(st, spec, dist, torch, device, clock, a2a)
        st.end(timer=clock.name)
    dist.destroy_process_group()
    emit(1, ev="done", rank=rank, t=st.now())
    return 0


def split_units(total, world, src, uneven):
    """How many units (tokens, or bytes) rank ``src`` sends to each rank, summing to ``total``.

    Even: equal shares, the remainder spread from ``src`` on. Uneven: rank d gets a share
    growing with (src + d) mod world - every rank sends and receives a different amount, the
    way routed tokens land unevenly on experts. Every rank computes every row, so each
    knows what to receive without an exchange.
    """
    weights = [1 + (src + d) % world for d in range(world)] if uneven else [1] * world
    shares = [total * w // sum(weights) for w in weights]
    for i in range(total - sum(shares)):
        shares[(src + i) % world] += 1
    return shares


def a2a_code(src, dst, world):
    """The byte every element ``src`` sends to ``dst`` carries (never 0, so a missing chunk shows)."""
    return (src * world + dst) % 255 + 1


def _alltoall(st, spec, dist, torch, device, clock, sizes):
    """all_to_all_single at every size: verify what each rank received, then time it."""
    rank, world, uneven = st.rank, spec["world"], spec.get("a2a_splits") == "uneven"
    most = max(nbytes for nbytes, _, _ in sizes)
    send = torch.empty(most, dtype=torch.uint8, device=device)
    recv = torch.empty(2 * most, dtype=torch.uint8, device=device)  # uneven: a rank receives < 2x what it sends
    for nbytes, unit, label in sizes:
        units = nbytes // unit
        rows = [split_units(units, world, src, uneven) for src in range(world)]
        out_splits = [rows[src][rank] * unit for src in range(world)]
        in_splits = [n * unit for n in rows[rank]]
        inp, out = send[:nbytes], recv[: sum(out_splits)]
        offset = 0
        for dst, n in enumerate(in_splits):
            inp[offset:offset + n].fill_(a2a_code(rank, dst, world))
            offset += n
        out.zero_()
        dist.all_to_all_single(out, inp, out_splits, in_splits)
        _sync(torch, device)
        offset = 0
        for src, n in enumerate(out_splits):
            want = a2a_code(src, rank, world)
            wrong = int((out[offset:offset + n] != want).sum().item())
            if wrong:
                emit(1, ev="wrong", op="all_to_all", rank=rank, src=src, bytes=nbytes, wrong=wrong,
                     sample=int(out[offset].item()), expected=want)
            offset += n
        _report(st, dist, torch, device,
                clock.time(partial(dist.all_to_all_single, out, inp, out_splits, in_splits), spec["iters"]),
                op="all_to_all", bytes=nbytes, shape=label, splits="uneven" if uneven else "even")


def _any_rank(dist, torch, device, flag):
    """True on every rank when ``flag`` is true on any: ranks must agree before re-running a collective."""
    vote = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(vote, op=dist.ReduceOp.MAX)
    return vote.item() > 0


def _report(st, dist, torch, device, seconds, **row):
    """The slowest rank's device and host times (conservative; nccl-tests averages over ranks)."""
    times = torch.tensor([seconds[0] or 0.0, seconds[1]], dtype=torch.float64, device=device)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    if st.rank == 0:
        device_s, host_s = times.tolist()
        emit(1, ev="size", rank=st.rank, time_us=round((device_s or host_s) * 1e6, 3),
             host_us=round(host_s * 1e6, 3), timer=seconds[2], **row)


class Clock:
    """Times N back-to-back calls of a collective: on the host, and on the GPU where there is one.

    The host figure (perf_counter around N calls and a synchronize) includes the Python
    launch of every call: at 1 MiB that is the launcher, not the fabric. On a GPU the N
    calls are captured in a CUDA/HIP graph and one replay is timed with GPU events
    (nccl-tests -G; ``auto`` and ``graph``): no launch between the collectives. Where a rank
    cannot capture, every rank falls back to ``events``: GPU events around N eager calls,
    queued behind a GPU stall so the stream starts only once every call is launched - that
    still carries torch's per-call stream hand-offs (measured on one H200: 25-40 us a call
    in some runs, against 1 us in a graph).
    """

    STALL_TRIES = 5

    def __init__(self, torch, device, timer, any_rank):
        self.torch, self.device, self.any_rank = torch, device, any_rank
        self.gpu = device.type == "cuda" and timer != "host"
        self.graph = self.gpu and timer in ("auto", "graph")
        self.name = "host" if not self.gpu else "cuda-graph" if self.graph else "cuda-events"
        self.cycles_per_s = self._calibrate() if self.gpu else None

    def _events(self):
        return [self.torch.cuda.Event(enable_timing=True) for _ in range(2)]

    def _calibrate(self):
        """GPU clock cycles per second, from timing the stall kernel itself (None: no stall kernel)."""
        if not hasattr(self.torch.cuda, "_sleep"):
            return None
        start, end = self._events()
        start.record()
        self.torch.cuda._sleep(1_000_000)
        end.record()
        end.synchronize()
        return 1_000_000 / max(start.elapsed_time(end) / 1e3, 1e-6)

    def time(self, run, iters):
        """(device seconds per call or None, host seconds per call, timer used)."""
        torch = self.torch
        run()  # per-size warm-up (nccl-tests does the same)
        _sync(torch, self.device)
        started = time.perf_counter()
        for _ in range(iters):
            run()
        _sync(torch, self.device)
        host = (time.perf_counter() - started) / iters
        if not self.gpu:
            return None, host, "host"
        if self.graph:
            try:
                seconds = self._graph(run, iters)
            except Exception:  # noqa: BLE001 - a backend that cannot capture is timed with events
                seconds = None
            if not self.any_rank(seconds is None):
                return seconds, host, "cuda-graph"
            self.graph, self.name = False, "cuda-events"  # on every rank: the ranks' collectives must match
        # stall long enough to launch every call (at most 1 ms each) before the first one runs; the GPU clock
        # moves with load, so a stall that ran out before the last launch on any rank is made 4x longer and
        # the size re-timed on every rank
        stall_s = 1e-4 + 1.5 * iters * min(host, 1e-3)
        for _ in range(self.STALL_TRIES):
            start, end = self._events()
            if self.cycles_per_s:
                torch.cuda._sleep(int(stall_s * self.cycles_per_s))
            start.record()
            for _ in range(iters):
                run()
            late = bool(self.cycles_per_s) and start.query()
            end.record()
            end.synchronize()
            if not self.any_rank(late):
                return start.elapsed_time(end) / 1e3 / iters, host, "cuda-events"
            stall_s *= 4
        return start.elapsed_time(end) / 1e3 / iters, host, "cuda-events (launch-bound)"

    def _graph(self, run, iters):
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            run()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(iters):
                run()
        graph.replay()
        start, end = self._events()
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / iters


def _sync(torch, device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --- the node's agent ----------------------------------------------------------------------
class Child:
    def __init__(self, rank, fd, t0):
        self.rank, self.fd, self.buf = rank, fd, b""
        self.stage, self.since, self.rc = "start", t0, None


def agent(spec):
    t0 = time.monotonic()
    ranks = list(range(spec["rank_base"], spec["rank_base"] + spec["ranks_here"]))
    emit(1, ev="agent", node=spec["node"], pid=os.getpid(), ranks=ranks, host=socket.gethostname(),
         python=sys.version.split()[0])
    children = {}
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        for local, rank in enumerate(ranks):
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    os.close(read_end)
                    os.dup2(write_end, 1)
                    os.close(write_end)
                    _pdeathsig()
                    code = rank_main(spec, local, t0)
                except BaseException as exc:  # a crash is reported, never a silent exit
                    emit(1, ev="fail", rank=rank, stage=None, error=f"{type(exc).__name__}: {exc}"[:800],
                         t=round(time.monotonic() - t0, 3))
                finally:
                    os._exit(code)
            os.close(write_end)
            children[pid] = Child(rank, read_end, t0)
        return _supervise(spec, children, t0)
    finally:
        for pid, child in children.items():
            if child.rc is None:
                _kill(pid)


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _supervise(spec, children, t0):
    """Relay progress, enforce stage deadlines and the run's limit, reap ranks."""
    limit_at = t0 + spec["limit_s"]
    deadlines = spec["deadlines"]
    open_fds = {c.fd: c for c in children.values()}
    while open_fds or any(c.rc is None for c in children.values()):
        ready = select.select(list(open_fds), [], [], 0.2)[0] if open_fds else (time.sleep(0.2) or [])
        for fd in ready:
            child = open_fds[fd]
            data = os.read(fd, 65536)
            if not data:
                del open_fds[fd]
                os.close(fd)
                continue
            child.buf += data
            *lines, child.buf = child.buf.split(b"\n")
            for line in lines:
                _relay(child, line)
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            child = children[pid]
            child.rc = os.waitstatus_to_exitcode(status)
            emit(1, ev="exit", rank=child.rank, rc=child.rc, stage=child.stage,
                 t=round(time.monotonic() - t0, 3))
        now = time.monotonic()
        for pid, child in children.items():
            if child.rc is not None or child.stage is None:
                continue
            overdue = now - child.since > deadlines[child.stage] + AGENT_KILL_GRACE_S
            if overdue or now > limit_at:
                _kill(pid)
                emit(1, ev="killed", rank=child.rank, stage=child.stage, by="agent",
                     why="run limit" if not overdue else "stage deadline", t=round(now - t0, 3))
                child.stage = None  # killed once; the exit event follows when reaped
    return 0 if all(c.rc == 0 for c in children.values()) else 1


def _relay(child, line):
    os.write(1, line + b"\n")
    if not line.startswith(b"K3PROBE "):
        return
    try:
        event = json.loads(line[8:])
    except ValueError:
        return
    if event.get("ev") == "begin" and child.stage is not None:
        child.stage, child.since = event["stage"], time.monotonic()


# --- cleanup -------------------------------------------------------------------------------
def ours(run_id):
    """PIDs whose argv is ``<python> - k3probe:<run_id> ...`` - exact elements, nothing broader."""
    token = (TOKEN_PREFIX + run_id).encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if argv[1:3] == [b"-", token]:
            found.append(int(entry))
    return found


def cleanup(run_id):
    killed = ours(run_id)
    for pid in killed:
        _kill(pid)
    end = time.monotonic() + 5.0
    left = ours(run_id)
    while left and time.monotonic() < end:
        time.sleep(0.1)
        left = ours(run_id)
    emit(1, ev="cleanup", killed=killed, left=left)
    return 1 if left else 0


def main(argv):
    if len(argv) == 3 and argv[1] == "--cleanup":
        return cleanup(argv[2])
    if len(argv) == 3 and argv[1].startswith(TOKEN_PREFIX):
        return agent(json.loads(argv[2]))
    sys.stderr.write("usage: python3 - k3probe:RUN_ID SPEC_JSON | python3 - --cleanup RUN_ID\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
