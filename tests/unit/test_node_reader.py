"""Every reading of a node in one reader process: the same frames as the shell's one-by-one readings
(which stay for nodes without python3), through a real sh and the real python3."""
import os

import psutil
import pytest

from k3doctor.gather import build_script, parse_frames
from k3doctor.transport import LocalTransport


def frames(specs, python, **kw):
    script = build_script(specs, "n0nce", kw.get("timeout", 5), kw.get("cap", 1 << 20), python=python)
    result = LocalTransport("here").run_bytes("sh -s", timeout_s=30, stdin=script.encode())
    assert result.rc == 0, result.stderr
    return parse_frames(result.stdout, "n0nce"), script


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "card0").mkdir()
    (tmp_path / "card0" / "accel_state").write_text("active\n")
    (tmp_path / "card0" / "raw").write_bytes(b"\x00\xff@@n0nce 9 0 1 1 0 0\nno newline")
    (tmp_path / "card0" / "empty").write_bytes(b"")
    (tmp_path / "card0" / "sub").mkdir()
    (tmp_path / "card0" / "dangling").symlink_to(tmp_path / "gone")
    (tmp_path / "card1").mkdir()
    (tmp_path / "card1" / "accel_state").write_text("unconfigured\n")
    (tmp_path / "big").write_bytes(b"y" * 3000)
    return tmp_path


def specs_of(tree):
    from k3doctor.readings import Command, Exists, File, Glob

    return [File(str(tree / "card0" / "accel_state")), Command(("echo", "between")), File(str(tree / "missing")),
            File(str(tree / "card0")), Glob(str(tree / "card*" / "*")), Exists(str(tree / "big")),
            Glob(str(tree / "nothing*")), File(str(tree / "big")),
            Command(("sh", "-c", "echo out; echo why >&2; exit 3")),  # 8
            Command(("sh", "-c", "head -c 3000 /dev/zero")),  # 9: past the cap
            Command(("sh", "-c", "echo started; exec sleep 30"), timeout_s=1),  # 10: past its timeout
            Command(("sh", "-c", "kill -USR1 $$")),  # 11: killed by a signal
            Command(("no-such-tool-k3",)),  # 12: not there (the message is the runner's own)
            Command(("sh", "-c", "head -c 3000 /dev/zero >&2; echo done"))]  # 13: stderr past the cap


def test_one_reader_gives_the_frames_the_shell_gives(tree):
    fast, script = frames(specs_of(tree), "python3", cap=1000)
    slow, _ = frames(specs_of(tree), "no-such-python-k3", cap=1000)
    assert fast[12][0][0] == slow[12][0][0] == "127" and "no-such-tool-k3" in fast.pop(12)[0][3]
    slow.pop(12)
    # a file cut at the cap is never judged: the shell's reader is stopped there (SIGXFSZ), this one stops
    assert {i: [f[1:] if f[4] else f for f in got] for i, got in fast.items()} == {
        i: [f[1:] if f[4] else f for f in got] for i, got in slow.items()}
    assert fast[4][-1][0] == "END" and len(fast[4]) == 7  # 6 entries (sub a directory, dangling missing)
    assert fast[7] == [("0", str(tree / "big"), "y" * 1000, "", True)]  # cut at the cap, flagged
    assert fast[1] == [("0", "", "between\n", "", False)]
    assert fast[8] == [("3", "", "out\n", "why\n", False)]
    (rc, _, out, _, truncated), = fast[9]
    assert (rc, out, truncated) == ("153", "\0" * 1000, True)  # stopped at the cap (SIGXFSZ), flagged
    assert fast[10] == [("124", "", "started\n", "", False)]
    assert fast[11] == [("138", "", "", "", False)]  # 128 + SIGUSR1, as a shell reports it
    assert [(rc, out, err) for rc, _, out, err, _ in fast[13]] == [("153", "", "\0" * 1000)]  # stderr capped too
    assert script.count("then batch timeout") == 1  # one reader for every reading


def test_the_reader_starts_each_command_itself(tree):
    """No shell, `timeout`, `wc` or `cat` between the reader and a command: the command's parent is the reader."""
    from k3doctor.readings import Command

    got, _ = frames([Command(("sh", "-c", "tr '\\0' ' ' < /proc/$PPID/cmdline | head -c 40"))], "python3")
    assert got[0][0][2].startswith("python3 -I -S -c ")


def test_an_unreadable_file_says_why_and_the_rest_is_read(tree):
    from k3doctor.gather import _reading
    from k3doctor.readings import File

    if os.geteuid() == 0:  # root reads anything: /proc/self/mem gives EIO at offset 0 instead
        bad = File("/proc/self/mem")
    else:
        (tree / "secret").write_text("x")
        (tree / "secret").chmod(0)
        bad = File(str(tree / "secret"))
    got, _ = frames([bad, File(str(tree / "card0" / "accel_state"))], "python3")
    assert _reading(bad, got[0], "").error in ("Input/output error", "Permission denied")
    assert _reading(File(str(tree / "card0" / "accel_state")), got[1], "").text() == "active"


def test_a_read_that_blocks_ends_at_the_read_timeout_and_the_others_are_read(tree):
    from k3doctor.gather import _reading
    from k3doctor.readings import File

    fifo = tree / "wedged"
    os.mkfifo(fifo)
    got, _ = frames([File(str(fifo)), File(str(tree / "card0" / "accel_state"))], "python3", timeout=1)
    assert _reading(File(str(fifo)), got[0], "").error.startswith("read timed out")
    assert _reading(File(str(tree / "card0" / "accel_state")), got[1], "").text() == "active"
    readers = [p for p in psutil.process_iter(["cmdline"]) if str(fifo) in " ".join(p.info["cmdline"] or [])]
    assert psutil.wait_procs(readers, timeout=5)[1] == []
