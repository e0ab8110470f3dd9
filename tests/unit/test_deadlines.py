"""Every run ends by its deadline and leaves nothing behind (issue 9 §1), on a real sh via the local
transport: clamped time values, the in-flight reading's whole process group stopped at the node
deadline, output capped on the node, and cancel (Ctrl-C) stopping what runs now."""
import contextlib
import math
import os
import secrets
import threading
import time
from pathlib import Path

import psutil
import pytest

from k3doctor.deadline import MAX_SECONDS, Deadline, seconds
from k3doctor.gather import node_script
from k3doctor.gather.node_script import build_script, gather
from k3doctor.readings import OUTPUT_CAP_BYTES, Command, File, Glob, ReadingUnavailable, Unavailable
from k3doctor.shell import with_timeout
from k3doctor.transport.base import KILL_GRACE_S, TransportError
from k3doctor.transport.local import LocalTransport


def token(base: int) -> str:
    """A sleep length no other test run shares, so leftovers are ours."""
    return f"{base + secrets.randbelow(10**6) / 10**7:.7f}"


def sleepers(length: str) -> list:
    return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", length]]


@pytest.mark.parametrize("value, expected", [
    (math.inf, MAX_SECONDS), (-math.inf, 0.1), (math.nan, 7.0), (1e300, MAX_SECONDS), (0, 0.1), (-5, 0.1),
    ("12", 12.0), ("soon", 7.0), (None, 7.0), (2.5, 2.5),
])
def test_seconds_are_finite_and_bounded(value, expected):
    assert seconds(value, 7.0) == expected


def test_no_remote_timeout_is_ever_infinite_or_nan():
    for bad in (math.inf, math.nan, 1e308):
        wrapped = with_timeout("true", bad, bad)
        assert "inf" not in wrapped and "nan" not in wrapped and "e+" not in wrapped, wrapped
        script = build_script([File("/etc/hostname"), Command(("true",), timeout_s=bad)], "n", bad, 1 << 20)
        assert "inf" not in script and "nan" not in script and "e+" not in script


def test_an_infinite_timeout_still_runs_under_a_finite_one(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    spec = Command(("echo", "ok"), timeout_s=math.inf)
    got = gather(LocalTransport("here"), [spec], command_timeout_s=math.nan, deadline_s=math.inf)
    assert got[spec].output() == "ok\n"
    assert Deadline(math.inf).budget_s == MAX_SECONDS


def test_at_the_node_deadline_descendants_that_ignore_term_die_too(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    length = token(50)
    # the reading and its child both ignore TERM; the reading's own timeout (30 s) is far away
    stubborn = Command(("sh", "-c", f"trap '' TERM; (trap '' TERM; exec sleep {length}) & exec sleep {length}"),
                       timeout_s=30)
    started = time.monotonic()
    got = gather(LocalTransport("here"), [stubborn], command_timeout_s=30, deadline_s=2)
    assert isinstance(got[stubborn], Unavailable) and "node deadline of 2s" in got[stubborn].reason
    assert time.monotonic() - started < 20
    assert psutil.wait_procs(sleepers(length), timeout=5)[1] == []  # none survives with PPID 1
    assert list(tmp_path.iterdir()) == []


@contextlib.contextmanager
def frozen(pid: int):
    """``pid`` stopped by the kernel's cgroup freezer, as a node that stalls stops it: unlike SIGSTOP, no
    SIGCONT (which `timeout` sends after its TERM) wakes it; its TERM waits until it is thawed (a KILL ends
    it at once on cgroup v2, at the thaw on v1, before any handler runs)."""
    v1, v2 = Path("/sys/fs/cgroup/freezer"), Path("/sys/fs/cgroup")
    if (v1 / "cgroup.procs").exists():
        root, state, frozen_value, thawed_value = v1, "freezer.state", "FROZEN", "THAWED"
    elif (v2 / "cgroup.controllers").exists():
        root, state, frozen_value, thawed_value = v2, "cgroup.freeze", "1", "0"
    else:
        pytest.skip("no cgroup freezer on this machine")
    group = root / f"k3doctor-test-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        group.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a freezer cgroup: {exc}")
    try:
        (group / "cgroup.procs").write_text(str(pid))
        (group / state).write_text(frozen_value)
        yield
    finally:
        (group / state).write_text(thawed_value)
        for left in (group / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):  # gone meanwhile
                (root / "cgroup.procs").write_text(left)
        for _ in range(50):
            with contextlib.suppress(OSError):
                group.rmdir()
                break
            time.sleep(0.1)


@contextlib.contextmanager
def reaped(length: str):
    """Whatever sleeper of ``length`` a failing test leaves is killed after it."""
    try:
        yield
    finally:
        for left in sleepers(length):
            with contextlib.suppress(psutil.Error):
                left.kill()


def gather_in_background(transport, hung: Command, deadline_s: float = 300) -> tuple:
    """(thread, outcome) of a gather of ``hung`` started on a thread (by default far from its deadlines);
    ``outcome`` gets its readings as "got", or the TransportError's message as "error"."""
    outcome = {}

    def read():
        try:
            outcome["got"] = gather(transport, [hung], command_timeout_s=300, deadline_s=deadline_s)
        except TransportError as exc:
            outcome["error"] = str(exc)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread, outcome


def survivors(length: str, within_s: float = 10) -> list:
    """What still runs of the sleepers of ``length`` after ``within_s``, described for the failure message."""
    end = time.monotonic() + within_s
    while sleepers(length) and time.monotonic() < end:
        time.sleep(0.05)
    found = []
    for left in sleepers(length):
        with contextlib.suppress(psutil.Error):
            found.append(f"pid {left.pid} {left.status()} ppid {left.ppid()} pgid {os.getpgid(left.pid)} "
                         f"sid {os.getsid(left.pid)}")
    return found


def reader_of(length: str) -> psutil.Process:
    """The k3doctor reader running the reading whose sleepers sleep ``length`` (their python3 parent)."""
    end = time.monotonic() + 30
    while time.monotonic() < end:
        with contextlib.suppress(psutil.Error):
            for parent in {s.parent() for s in sleepers(length)} - {None}:
                if parent.name().startswith("python"):
                    return parent
        time.sleep(0.02)
    raise AssertionError(f"no reader with a running `sleep {length}` within 30 s")


STUBBORN = "trap '' TERM; (trap '' TERM; exec sleep {0}) & exec sleep {0}"  # both ignore TERM


@pytest.mark.skipif(os.geteuid() != 0, reason="the cgroup freezer needs root")
def test_a_reader_stalled_past_the_node_deadline_still_stops_its_command(tmp_path, monkeypatch):
    """The reader runs each command in a process group of its own and stops it itself on TERM. A node that
    stalls the reader through the deadline (load, a paused VM) must not get it KILLed before it has run: that
    left the command and its children running for good (seen once in CI, with the TERM -> KILL grace at 0.5 s)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    length, deadline_s = token(50), 4
    stubborn = Command(("sh", "-c", STUBBORN.format(length)), timeout_s=30)
    started = time.monotonic()
    with reaped(length):
        run, outcome = gather_in_background(LocalTransport("here"), stubborn, deadline_s=deadline_s)
        reader = reader_of(length)
        with frozen(reader.pid):
            assert time.monotonic() - started < deadline_s - 1, "the reader was frozen too late to stall the deadline"
            time.sleep(max(0.0, started + deadline_s + 2 - time.monotonic()))  # the old grace passed, the KILL too
            assert len(sleepers(length)) == 2  # the reading still runs: stalled through the deadline
        run.join(30)
        got = outcome["got"]
        assert isinstance(got[stubborn], Unavailable) and f"node deadline of {deadline_s}s" in got[stubborn].reason
        assert survivors(length) == []
        assert psutil.wait_procs([reader], timeout=5)[1] == []


@pytest.mark.skipif(os.geteuid() != 0, reason="the cgroup freezer needs root")
def test_a_cancel_while_the_reader_is_stalled_still_stops_its_command(tmp_path, monkeypatch):
    """Ctrl-C gives the reader STOP_GRACE_S to stop its command, then KILLs every process group of the
    session: the command's group is in that session too, so a stalled reader cannot leave it behind."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    length = token(70)
    transport = LocalTransport("here")
    with reaped(length):
        run, outcome = gather_in_background(transport, Command(("sh", "-c", STUBBORN.format(length)), timeout_s=300))
        reader = reader_of(length)
        with frozen(reader.pid):
            transport.cancel()
            left = survivors(length)
            assert left == [], f"{left}; reader {reader.pid} pgid {os.getpgid(reader.pid)} sid {os.getsid(reader.pid)}"
        run.join(30)
    assert not run.is_alive() and "interrupted" in outcome.get("error", ""), outcome
    assert list(tmp_path.iterdir()) == []


def test_without_python3_the_deadline_stops_a_stubborn_reading_after_a_glob_within_the_grace(tmp_path, monkeypatch):
    """The shell path (a node without python3) at the deadline: TERM, GROUP_KILL_GRACE_S and KILL for the
    reading's group, then the scratch directory is removed. A glob step before it must not be taken for the
    reader's flag (its loop variable once had the flag's name): the trap then waited for the reading's own
    KILL instead, made here to come KILL_GRACE_S + 3 s after its TERM."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(node_script, "KILL_AFTER_S", KILL_GRACE_S + 3)
    length = token(80)
    specs = [Glob("/etc/hostnam?"), Command(("sh", "-c", STUBBORN.format(length)), timeout_s=30)]
    script = build_script(specs, "n0nce", 30, 1 << 20, python="k3doctor-no-such-python3", deadline_s=2)
    with reaped(length):
        started = time.monotonic()
        result = LocalTransport("here").run_bytes("sh -s", timeout_s=2, stdin=script.encode())
        took = time.monotonic() - started
        assert result.timed_out and b"@@n0nce 0 0 " in result.stdout  # the glob was read, then the deadline hit
        assert took < 2 + KILL_GRACE_S + 1, f"the trap waited {took:.1f}s: for the reading's own KILL?"
        assert psutil.wait_procs(sleepers(length), timeout=5)[1] == []
    assert list(tmp_path.iterdir()) == []


def test_output_is_capped_on_the_node_not_after_it_was_written(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    # prints 20 MB, then says how much of it reached its stdout file in the node's $TMPDIR
    loud = Command(("sh", "-c", "head -c 20000000 /dev/zero; n=$(stat -L -c %s /proc/$$/fd/1); echo $n >&2"))
    got = gather(LocalTransport("here"), [loud, Command(("echo", "after"))], command_timeout_s=30, deadline_s=60)
    reading = got[loud]
    assert reading.truncated and len(reading.stdout) == OUTPUT_CAP_BYTES
    written = int(reading.stderr.split()[-1])
    assert OUTPUT_CAP_BYTES < written <= 2 * OUTPUT_CAP_BYTES + 1024  # cut at the cap (+1 block), not 20 MB
    with pytest.raises(ReadingUnavailable, match="4 MiB output cap"):  # never judged, so never a PASS
        reading.output()
    assert not reading.ok
    assert got[Command(("echo", "after"))].output() == "after\n"


def test_cancel_stops_a_gather_in_flight_and_cleans_up(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    length = token(60)
    transport = LocalTransport("here")
    run, outcome = gather_in_background(transport, Command(("sh", "-c", f"trap '' TERM; exec sleep {length}"),
                                                           timeout_s=300))
    end = time.monotonic() + 30
    while not sleepers(length) and time.monotonic() < end:
        time.sleep(0.05)
    assert sleepers(length), "the reading never started"
    started = time.monotonic()
    transport.cancel()
    run.join(30)
    assert not run.is_alive() and time.monotonic() - started < 15
    assert "interrupted" in outcome.get("error", ""), outcome
    assert psutil.wait_procs(sleepers(length), timeout=5)[1] == []
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(TransportError, match="interrupted"):  # nothing new starts after a cancel
        transport.run("true", timeout_s=5)


@pytest.mark.parametrize("mode", ["silent", "trickle"])
def test_a_docker_engine_that_never_answers_or_trickles_ends_at_the_deadline(tmp_path, monkeypatch, mode):
    from k3doctor.gather.engine_reads import gather_docker
    from k3doctor.readings import Docker
    from tests.e2e.faults import FakeEngine

    engine = FakeEngine(tmp_path / "engine.sock", mode, every_s=0.5)  # trickle: well inside any socket timeout
    monkeypatch.setenv("DOCKER_HOST", f"unix://{engine.path}")
    outcome = {}
    reader = threading.Thread(target=lambda: outcome.update(
        got=gather_docker(LocalTransport("here"), Docker(), Deadline(3))), daemon=True)
    try:
        started = time.monotonic()
        reader.start()
        reader.join(30)
        assert not reader.is_alive(), "the Docker read outlived its deadline"
        assert time.monotonic() - started < 15
        assert isinstance(outcome["got"], Unavailable)
        assert "did not answer within the node deadline of 3s" in outcome["got"].reason
    finally:
        engine.close()
