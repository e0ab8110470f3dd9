"""The one-round-trip gatherer, run for real through the local transport (a real sh)."""
import os
import secrets

import psutil
import pytest

from k3doctor.gather.node_script import build_script, gather, parse_frames
from k3doctor.readings import Command, Exists, File, FileReading, Glob, ReadingUnavailable, Unavailable
from k3doctor.transport.local import LocalTransport


def run(specs, **kw):
    transport = LocalTransport("here")
    got = gather(transport, specs, command_timeout_s=kw.get("command_timeout_s", 10),
                 deadline_s=kw.get("deadline_s", 20))
    return got, transport


def test_all_kinds_in_one_round_trip(tmp_path):
    (tmp_path / "a").write_text("active\n")
    (tmp_path / "b").write_bytes(b"\x00\xff@@ not a frame\n")
    (tmp_path / "d").mkdir()
    specs = [File(str(tmp_path / "a")), File(str(tmp_path / "missing")), Exists(str(tmp_path / "a")),
             Exists(str(tmp_path / "nope")), Glob(str(tmp_path / "*")), Command(("echo", "hi")),
             File(str(tmp_path / "d"))]
    got, transport = run(specs)
    assert transport.round_trips == 1
    assert got[specs[0]].text() == "active"
    assert got[specs[1]].content is None and not got[specs[1]].exists
    assert got[specs[2]] is True and got[specs[3]] is False
    listing = got[specs[4]]
    assert sorted(os.path.basename(p) for p in listing) == ["a", "b", "d"]
    assert listing[str(tmp_path / "b")].content.startswith("\x00")
    assert listing[str(tmp_path / "d")].error == "is a directory"
    assert got[specs[5]].output() == "hi\n"
    assert got[specs[6]].error == "is a directory"


def test_duplicate_specs_are_read_once():
    spec = Command(("echo", "once"))
    got, _ = run([spec, Command(("echo", "once"))])
    assert list(got) == [spec]


def test_inventory_values_cannot_escape_their_shell_word(tmp_path):
    marker = tmp_path / "pwned"
    evil = f"x'; touch {marker}; echo '"
    got, _ = run([File(evil), Command(("echo", f"$(touch {marker})")), Glob(f"{tmp_path}/*; touch {marker}")])
    assert not marker.exists()
    assert got[Command(("echo", f"$(touch {marker})"))].stdout == f"$(touch {marker})\n"


def test_command_timeout_kills_the_command_and_its_children():
    bg, fg = (f"{300 + secrets.randbelow(10**6) / 10**7:.7f}" for _ in range(2))  # sleeps no other run shares
    spec = Command(("sh", "-c", f"sleep {bg} & sleep {fg}; echo never"), timeout_s=1)
    got, _ = run([spec, Command(("echo", "after"))])
    assert got[spec].timed_out
    assert "never" not in got[spec].stdout
    assert got[Command(("echo", "after"))].output() == "after\n"  # later readings still happen
    leftovers = [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] in (["sleep", bg],
                                                                                        ["sleep", fg])]
    _, alive = psutil.wait_procs(leftovers, timeout=5)  # signalled; give a loaded box a moment to reap
    assert alive == []


def test_node_deadline_turns_unread_specs_into_unavailable_and_kills_what_ran(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the script's scratch dir (mktemp -d) lands here
    token = f"{37 + secrets.randbelow(10**6) / 10**7:.7f}"  # a sleep no other test run shares
    slow = Command(("sleep", token), timeout_s=30)
    late = File("/etc/hostname")
    got, _ = run([slow, late], deadline_s=1)
    for spec in (slow, late):
        assert isinstance(got[spec], Unavailable)
        assert "node deadline of 1s" in got[spec].reason
    sleepers = [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", token]]
    assert psutil.wait_procs(sleepers, timeout=5)[1] == []  # the in-flight reading died with the script
    assert list(tmp_path.iterdir()) == []  # and its scratch directory is gone


def test_failed_commands_explain_themselves():
    got, _ = run([Command(("sh", "-c", "echo boom >&2; exit 3")), Command(("no-such-tool-k3",))])
    failed, missing = got.values()
    try:
        failed.output()
    except ReadingUnavailable as exc:
        assert "exited 3: boom" in str(exc)
    else:
        raise AssertionError("non-zero exit must not read as output")
    assert missing.rc == 127


def test_frames_survive_a_cut_off_stream():
    nonce = "abc"
    data = b"noise\n@@abc 0 0 5 5 0 0\nhello@@abc 1 0 90 90 0 0\nonly-half"
    frames = parse_frames(data, nonce)
    assert frames == {0: [("0", "", "hello", "", False)]}


def test_truncated_output_is_flagged(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"x" * 5000)
    transport = LocalTransport("here")
    script = build_script([File(str(big))], "n0nce", 5, cap_bytes=1000)
    result = transport.run_bytes("sh -s", timeout_s=10, stdin=script.encode())
    ((rc, path, out, err, truncated),) = parse_frames(result.stdout, "n0nce")[0]
    assert (len(out), truncated) == (1000, True)
    assert out == "x" * 1000  # the start of the file, kept for evidence
    with pytest.raises(ReadingUnavailable, match="output cap"):  # a cut-off reading is never judged
        FileReading(path, out, truncated=truncated).text()


def test_a_file_read_that_blocks_is_killed_at_the_command_timeout(tmp_path):
    fifo = tmp_path / "wedged"
    os.mkfifo(fifo)  # reading a FIFO with no writer blocks, like a sysfs file of a wedged GPU
    got, _ = run([File(str(fifo)), File("/etc/hostname")], command_timeout_s=1)
    assert got[File(str(fifo))].error.startswith("read timed out")
    assert got[File("/etc/hostname")].text()
    readers = [p for p in psutil.process_iter(["cmdline"]) if str(fifo) in (p.info["cmdline"] or [])]
    assert psutil.wait_procs(readers, timeout=5)[1] == []


def test_engine_clock_parses_docker_nanosecond_stamps():
    from k3doctor.gather.engine_reads import _engine_now

    assert _engine_now("2026-11-29T19:00:27.123456789Z") == pytest.approx(1795978827.123456)
    assert _engine_now("2026-11-29T20:00:27.5+01:00") == pytest.approx(1795978827.5)
    assert _engine_now("2026-11-29T19:00:27Z") == 1795978827.0


def test_rack_free_docker_reading_asks_the_engine_only_for_containers_and_events():
    from k3doctor.gather.engine_reads import gather_docker
    from k3doctor.inventory.types import Settings
    from k3doctor.registry import REGISTRY, load_checks

    calls = []

    class Api:
        def __getattr__(self, name):
            def call(*args, **kw):
                calls.append(name)
                return {"info": {"SystemTime": "2026-11-29T19:00:27Z"}, "containers": [], "events": iter(())}[name]
            return call

    class Client:
        api = Api()

        def close(self):
            calls.append("close")

    transport = type("T", (), {"node": "ct13", "docker": lambda self, deadline: Client()})()
    load_checks()
    rack_free = REGISTRY.checks["rack-free"]
    reading = gather_docker(transport, rack_free.readings_for(Settings(container="k3ep16"))["docker"])
    assert calls == ["info", "containers", "events", "close"]
    assert (reading.containers, reading.events, reading.now) == ([], [], 1795978827.0)


def test_nothing_a_reading_started_outlives_it():
    token = f"{40 + secrets.randbelow(10**6) / 10**7:.7f}"
    stubborn = Command(("sh", "-c", f"trap '' TERM; (trap '' TERM; exec sleep {token}) & sleep {token}"),
                       timeout_s=1)  # ignores the polite TERM
    daemonish = Command(("sh", "-c", f"(exec sleep {token}) & echo started"))  # exits, leaves a child
    got, _ = run([stubborn, daemonish])
    assert got[stubborn].timed_out and got[daemonish].output() == "started\n"
    left = [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", token]]
    assert psutil.wait_procs(left, timeout=5)[1] == []
