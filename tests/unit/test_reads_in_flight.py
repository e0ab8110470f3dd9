"""A node's slow readings overlapped (issue 35, reference §31.5): the reader runs up to ssh.reads_in_flight of
a node's commands at once, each with its own timeout and cap, the frames whole and in the records' order,
and nothing it started outlives it (stop, node deadline, Ctrl-C, a frozen reader); 1 is one after another.
Through a real sh and the real python3; no test here times the overlap, they make it observable."""
import os
import subprocess
import sys
import time

import psutil
import pytest

from k3doctor.gather import node_script
from k3doctor.gather.node_script import NODE_READER, build_script, gather, parse_frames
from k3doctor.inventory.load import parse_inventory
from k3doctor.inventory.types import InventoryError
from k3doctor.readings import Command, File, Unavailable
from k3doctor.transport.local import LocalTransport
from tests.unit.test_deadlines import STUBBORN, frozen, reaped, sleepers, survivors, token

MEET = 'touch "$1/$2"; while [ "$(ls "$1" | wc -l)" -lt "$3" ]; do sleep 0.02; done; echo met'


def run_script(specs, in_flight, python=sys.executable, cap=1 << 20):
    """(frames by index, the frame indexes in the order they came) of the node script with ``in_flight``."""
    script = build_script(specs, "n0nce", 30, cap, python=python, in_flight=in_flight)
    result = LocalTransport("here").run_bytes("sh -s", timeout_s=60, stdin=script.encode())
    assert result.rc == 0, result.stderr
    heads = [line.split()[1] for line in result.stdout.split(b"\n") if line.startswith(b"@@n0nce ")]
    return parse_frames(result.stdout, "n0nce"), [int(i) for i in heads]


def meeting(tmp_path, count, timeout_s):
    """``count`` commands that each end only once all of them have started (a file between each two)."""
    (tmp_path / "met").mkdir()
    specs = []
    for i in range(count):
        specs += [Command(("sh", "-c", MEET, "sh", str(tmp_path / "met"), str(i), str(count)), timeout_s=timeout_s),
                  File("/etc/hostname")]
    return specs


def test_four_commands_run_at_once_and_their_frames_keep_the_records_order(tmp_path):
    frames, order = run_script(meeting(tmp_path, 4, 20), 4)
    assert [frames[i][0][:3] for i in range(0, 8, 2)] == [("0", "", "met\n")] * 4  # all four were in flight
    assert order == list(range(8))


def test_one_in_flight_reads_one_after_another(tmp_path):
    """The same commands, one at a time: the first waits for the others alone, until its timeout."""
    frames, order = run_script(meeting(tmp_path, 3, 1), 1)
    assert frames[0][0][0] == "124" and order == list(range(6))


def test_no_more_than_the_bound_run_at_once(tmp_path):
    """Each command says how many were running when it started (itself included): never past the bound."""
    (tmp_path / "now").mkdir()
    count = 'touch "$1/$$"; ls "$1" | wc -l; sleep 0.1; rm "$1/$$"'
    specs = [Command(("sh", "-c", count, "sh", str(tmp_path / "now"), str(i))) for i in range(9)]
    specs.insert(3, File("/etc/hostname"))
    frames, _ = run_script(specs, 3)
    seen = [int(frames[i][0][2]) for i in frames if i != 3]
    assert len(seen) == 9 and max(seen) <= 3


def test_each_command_in_flight_keeps_its_own_timeout_and_cap_and_leaves_nothing(tmp_path):
    length = token(40)
    specs = [Command(("sh", "-c", f"echo started; exec sleep {length}"), timeout_s=1),  # TERM at 1 s: 124
             Command(("sh", "-c", STUBBORN.format(length)), timeout_s=1.5),  # TERM ignored: KILL 2 s later, 137
             Command(("sh", "-c", "head -c 3000 /dev/zero")),  # past the cap, stopped there (SIGXFSZ)
             Command(("sh", "-c", "echo out; echo why >&2; exit 3")),
             Command(("no-such-tool-k3",))]
    with reaped(length):
        frames, _ = run_script(specs, 4, cap=1000)
        assert frames[0] == [("124", "", "started\n", "", False)]
        assert frames[1][0][0] == "137"
        assert frames[2][0][0] == "153" and frames[2][0][4]  # cut at the cap, flagged
        assert frames[3] == [("3", "", "out\n", "why\n", False)]
        assert frames[4][0][0] == "127" and "no-such-tool-k3" in frames[4][0][3]
        assert survivors(length, within_s=5) == []


@pytest.mark.parametrize("stops", [1, 3])
@pytest.mark.parametrize("after_s", [0.0, 0.005, 0.02, 0.05, 0.13])
def test_a_stopped_reader_leaves_none_of_its_commands_in_flight_behind(after_s, stops):
    """Four commands in flight, started and killed back to back (their timeouts are 20 ms): a TERM at any
    moment ends the reader with 143 and KILLs every one of them with its group."""
    import secrets

    mark = f"{60 + secrets.randbelow(1000)}.{secrets.randbelow(10 ** 6)}"
    command = ("3", "sh", "-c", f"sleep {mark} & exec sleep {mark}")
    records = [w for i in range(1000) for w in (str(i), "C", "0.02", *command)]
    reader = subprocess.Popen([sys.executable, "-I", "-S", "-c", NODE_READER, "n0nce", "1000", "5", "2", "-j4",
                               *records], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def left():
        return [p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [""])[-1] == mark]

    deadline = time.monotonic() + 10
    while len(psutil.Process(reader.pid).children()) < 2 and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(after_s)
    for _ in range(stops):
        reader.terminate()
    assert reader.wait(10) == 143, reader.stderr.read()
    deadline = time.monotonic() + 5
    while left() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left() == []


def test_at_the_node_deadline_every_command_in_flight_dies_with_its_children(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    length = token(50)
    stubborn = [Command(("sh", "-c", STUBBORN.format(length) + f" # {i}"), timeout_s=30) for i in range(3)]
    with reaped(length):
        started = time.monotonic()
        got = gather(LocalTransport("here"), [*stubborn, File("/etc/hostname")], command_timeout_s=30,
                     deadline_s=2, in_flight=4)
        assert all(isinstance(got[s], Unavailable) and "node deadline of 2s" in got[s].reason for s in stubborn)
        assert time.monotonic() - started < 20
        assert survivors(length) == []
    assert list(tmp_path.iterdir()) == []


def in_background(transport, specs, deadline_s):
    """(thread, outcome) of a gather of ``specs``, four in flight, started on a thread."""
    import threading

    outcome = {}

    def read():
        try:
            outcome["got"] = gather(transport, specs, command_timeout_s=300, deadline_s=deadline_s, in_flight=4)
        except Exception as exc:  # noqa: BLE001 -- the test looks at it
            outcome["error"] = str(exc)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread, outcome


def in_flight(length: str, count: int) -> None:
    end = time.monotonic() + 30
    while len(sleepers(length)) < count and time.monotonic() < end:
        time.sleep(0.02)
    assert len(sleepers(length)) == count, f"the {count} sleepers were never in flight at once"


def test_a_cancel_stops_every_command_in_flight(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    length = token(60)
    transport = LocalTransport("here")
    specs = [Command(("sh", "-c", f"trap '' TERM; exec sleep {length} # {i}"), timeout_s=300) for i in range(3)]
    with reaped(length):
        thread, outcome = in_background(transport, specs, 300)
        in_flight(length, 3)
        transport.cancel()
        thread.join(30)
        assert "interrupted" in outcome.get("error", ""), outcome
        assert survivors(length) == []
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="the cgroup freezer needs root")
def test_a_reader_frozen_through_the_node_deadline_still_stops_every_command_in_flight(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    length, deadline_s = token(70), 4
    specs = [Command(("sh", "-c", STUBBORN.format(length) + f" # {i}"), timeout_s=30) for i in range(2)]
    started = time.monotonic()
    with reaped(length):
        run, outcome = in_background(LocalTransport("here"), specs, deadline_s)
        in_flight(length, 4)  # each command and its child
        reader = next(p for p in {s.parent() for s in sleepers(length)} - {None} if p.name().startswith("python"))
        with frozen(reader.pid):
            assert time.monotonic() - started < deadline_s - 1, "the reader was frozen too late to stall the deadline"
            time.sleep(max(0.0, started + deadline_s + 2 - time.monotonic()))
            assert len(sleepers(length)) == 4  # both still run: stalled through the deadline
        run.join(30)
        assert all(isinstance(outcome["got"][s], Unavailable) for s in specs)
        assert survivors(length) == []
        assert psutil.wait_procs([reader], timeout=5)[1] == []


def test_the_inventory_bounds_reads_in_flight_and_the_run_passes_it_on(monkeypatch):
    inv = parse_inventory("ssh: {reads_in_flight: 2}\nnodes:\n  - {name: a, transport: local}\n", "inv.yaml")
    assert inv.ssh.reads_in_flight == 2
    assert parse_inventory("nodes:\n  - {name: a, transport: local}\n", "i.yaml").ssh.reads_in_flight == 8
    for bad in ("0", "17", "'4'", "true", "1.5"):
        with pytest.raises(InventoryError, match="reads_in_flight.*positive integer up to 16"):
            parse_inventory(f"ssh: {{reads_in_flight: {bad}}}\nnodes:\n  - {{name: a, transport: local}}\n", "i.yaml")
    from k3doctor.judging import runner
    from k3doctor.registry import Registry, check
    from k3doctor.results import passed

    seen = []
    real = runner.gather
    monkeypatch.setattr(runner, "gather", lambda *a, **kw: seen.append(kw["in_flight"]) or real(*a, **kw))
    reg = Registry()
    check("c", title="t", reads={"f": File("/etc/hostname")}, registry=reg)(lambda r, ctx: passed("ok"))
    runner.run_checks(inv, reg.ordered(), runner.RunOptions())
    assert seen == [2]


def test_the_container_reader_gets_the_bound_too():
    from k3doctor.readings import in_container

    members = [(0, in_container("k3ep16", "true"))]
    cmd, _, _ = node_script._exec_script(members, "n0nce", 30, 1 << 20, node_script._filler("n0nce", 1 << 20, 30),
                                         in_flight=3)
    assert "-j3" in cmd and cmd.index("-j3") == cmd.index("n0nce") + 4
    assert (node_script._in_flight_word(0), node_script._in_flight_word(99)) == ("-j1", "-j16")  # clamped again
