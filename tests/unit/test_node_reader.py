"""Every reading of a node in one reader process: the same frames as the shell's one-by-one readings
(which stay for nodes without python3), through a real sh and the real python3."""
import glob
import os
import shlex
import shutil
import sys

import psutil
import pytest

from k3doctor.gather.node_script import NODE_READER, build_script, parse_frames
from k3doctor.transport.local import LocalTransport


def frames(specs, python, **kw):
    script = build_script(specs, "n0nce", kw.get("timeout", 5), kw.get("cap", 1 << 20), python=python)
    result = LocalTransport("here").run_bytes("sh -s", timeout_s=30, stdin=script.encode())
    assert result.rc == 0, result.stderr
    return parse_frames(result.stdout, "n0nce"), script


@pytest.fixture(params=["posix_spawn", "fork"])
def python(request, tmp_path_factory):
    """The node's python3 as the reader finds it: 3.8 on (posix_spawn), or older (fork and exec). This
    interpreter, not the first python3 on PATH (which may be a version manager's shell shim)."""
    if request.param == "posix_spawn":
        return sys.executable
    wrapper = tmp_path_factory.mktemp("old-python") / "python3-before-3.8"
    wrapper.write_text(f'#!/bin/sh\nshift 3  # -I -S -c\nexec {shlex.quote(sys.executable)} -I -S -c '
                       '"import os, sys; del os.posix_spawnp; exec(sys.argv.pop(1))" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


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


def test_one_reader_gives_the_frames_the_shell_gives(tree, python):
    fast, script = frames(specs_of(tree), python, cap=1000)
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


def test_the_readers_source_is_ascii():
    """The script exports LC_ALL=C and passes the reader's source in ``-c``: python 3.6 (RHEL 8's python3)
    decodes a C-locale command line as ASCII and refuses one non-ASCII byte ("Unable to decode the command from
    the command line"), and every reading of the node would be lost. 3.7 on reads it as UTF-8 (PEP 540)."""
    assert NODE_READER.isascii(), [line for line in NODE_READER.splitlines() if not line.isascii()][:3]


OLDEST = sorted(glob.glob("/root/.pyenv/versions/3.6*/bin/python3.6")) or [shutil.which("python3.6")]


@pytest.mark.skipif(not OLDEST[0], reason="no python 3.6 on this machine")
def test_the_oldest_python3_a_node_may_have_gives_the_same_frames(tree):
    """Under python 3.6 and the script's C locale the reader frames every reading as the current python does."""
    oldest, _ = frames(specs_of(tree), OLDEST[0], cap=1000)
    current, _ = frames(specs_of(tree), sys.executable, cap=1000)
    assert oldest.pop(12)[0][0] == current.pop(12)[0][0] == "127"  # the runner's own message differs
    assert oldest == current and len(oldest) == 13


def test_a_command_stopped_by_a_signal_ends_at_its_timeout_as_under_timeout(python):
    """A command that is stopped (SIGSTOP, a debugger) when its time comes gets TERM and CONT, as GNU
    `timeout` sends them on the shell's path: it ends by the TERM (124), not by the KILL after it (137)."""
    from k3doctor.readings import Command

    stopped = [Command(("sh", "-c", "kill -STOP $$; echo resumed"), timeout_s=1)]
    fast, _ = frames(stopped, python)
    slow, _ = frames(stopped, "no-such-python-k3")
    assert fast[0] == slow[0] == [("124", "", "", "", False)]


def test_the_reader_starts_each_command_itself(tree):
    """No shell, `timeout`, `wc` or `cat` between the reader and a command: the command's parent is the reader."""
    from k3doctor.readings import Command

    got, _ = frames([Command(("sh", "-c", "tr '\\0' ' ' < /proc/$PPID/cmdline | head -c 40"))], "python3")
    assert got[0][0][2].startswith("python3 -I -S -c ")


def test_an_unreadable_file_says_why_and_the_rest_is_read(tree):
    from k3doctor.gather.node_script import _reading
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
    from k3doctor.gather.node_script import _reading
    from k3doctor.readings import File

    fifo = tree / "wedged"
    os.mkfifo(fifo)
    got, _ = frames([File(str(fifo)), File(str(tree / "card0" / "accel_state"))], "python3", timeout=1)
    assert _reading(File(str(fifo)), got[0], "").error.startswith("read timed out")
    assert _reading(File(str(tree / "card0" / "accel_state")), got[1], "").text() == "active"
    readers = [p for p in psutil.process_iter(["cmdline"]) if str(fifo) in " ".join(p.info["cmdline"] or [])]
    assert psutil.wait_procs(readers, timeout=5)[1] == []


def test_the_reader_imports_only_what_a_node_starts_cheaply(tmp_path):
    """The reader starts on every node at every run: subprocess, glob (re) and signal (enum) cost a node more
    CPU than all its sysfs reads, so none of them is imported for files, ``*`` globs and commands."""
    import subprocess
    import sys

    from k3doctor.gather.node_script import NODE_READER

    (tmp_path / "card0").mkdir()
    (tmp_path / "card0" / "vendor").write_text("0x1002\n")
    records = ["0", "F", str(tmp_path / "card0" / "vendor"), "1", "G", str(tmp_path / "card*" / "vendor"),
               "2", "C", "5", "1", "true"]
    run = subprocess.run([sys.executable, "-I", "-S", "-X", "importtime", "-c", NODE_READER, "n0nce", "1000", "5",
                          "2", *records], capture_output=True, timeout=30)
    assert run.returncode == 0 and run.stdout.count(b"@@n0nce ") == 4, run.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in run.stderr.decode().splitlines() if "|" in line}
    assert "resource" in imported  # the import log was read
    assert imported & {"subprocess", "glob", "fnmatch", "re", "signal", "enum", "threading", "selectors"} == set()


def test_a_command_starts_with_no_signal_ignored_or_blocked(python):
    """python3 ignores SIGPIPE and SIGXFSZ and the reader holds its stop signals while it starts a command: the
    command gets neither (a command past the cap must die of SIGXFSZ, as under the shell's `ulimit -f`); nor
    the reader's handlers."""
    from k3doctor.readings import Command

    got, _ = frames([Command(("grep", "-E", "^Sig(Ign|Blk):", "/proc/self/status"))], python)
    from k3doctor.remote.node_reader import DEFAULTED

    words = got[0][0][2].split()
    assert words[0::2] == ["SigBlk:", "SigIgn:"]
    blocked, ignored = (int(mask, 16) for mask in words[1::2])
    assert blocked & 0x7FFFFFFF == 0  # signals 1..31 (glibc keeps its own 32, 33 to itself)
    assert ignored & sum(1 << (sig - 1) for sig in DEFAULTED) == 0  # what the tests' own shell ignores may stay


@pytest.mark.parametrize("stops", [1, 3])
@pytest.mark.parametrize("after_s", [0.0, 0.003, 0.01, 0.02, 0.05, 0.13])
def test_a_stopped_reader_leaves_no_command_behind_whenever_the_stop_comes(after_s, stops, python):
    """Commands start and are killed back to back (about 20 ms each); a TERM at some moment of that (one
    starting, one running, one being killed), or three back to back as `timeout` and the script's stop send
    them, ends the reader with 143 and KILLs the command in flight with its group."""
    import secrets
    import subprocess
    import time

    from k3doctor.gather.node_script import NODE_READER

    token = f"{60 + secrets.randbelow(1000)}.{secrets.randbelow(10 ** 6)}"
    command = ("3", "sh", "-c", f"sleep {token} & exec sleep {token}")
    records = [w for i in range(1000) for w in (str(i), "C", "0.02", *command)]
    reader = subprocess.Popen([python, "-I", "-S", "-c", NODE_READER, "n0nce", "1000", "5", "2", *records],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def left():
        return [p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [""])[-1] == token]

    deadline = time.monotonic() + 10
    while not psutil.Process(reader.pid).children() and time.monotonic() < deadline:
        time.sleep(0.001)  # once it has started a command its handlers are set
    time.sleep(after_s)
    for _ in range(stops):
        reader.terminate()
    assert reader.wait(10) == 143, reader.stderr.read()
    deadline = time.monotonic() + 5
    while left() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left() == []


def test_the_readers_globs_name_what_the_glob_module_names(tmp_path):
    """``expand`` stands in for sorted(glob.glob()) on ``*``/``?`` patterns; any other pattern is left to it."""
    import glob
    import subprocess

    from k3doctor.remote import node_reader

    for card in ("card0", "card1", "card10", ".card2", "renderD128"):
        (tmp_path / card / "device" / "ualink").mkdir(parents=True)
        (tmp_path / card / "device" / "vendor").write_text("0x1002\n")
        (tmp_path / card / "device" / "ualink" / "accel_id").write_text("1\n")
        (tmp_path / card / "device" / "ualink" / ".hidden").write_text("x\n")
    (tmp_path / "card3").write_text("a file, not a directory\n")
    (tmp_path / "odd*name").write_text("a literal * in a name\n")
    (tmp_path / "card4").symlink_to(tmp_path / "card1")
    (tmp_path / "card0" / "device" / "ualink" / "dangling").symlink_to(tmp_path / "gone")
    patterns = ["card*/device/vendor", "card*/device/ualink/*", "card?/device/ualink/*", "*/*/ualink/.*",
                ".card*/device/vendor", "card*", "card*/", "c*d*0/*", "*a*r*d*1*", "card1/device/vendor",
                "nothing*/x", "card0/device/ualink/dangling", "card[01]/device/vendor", "*/device/*/accel_?d",
                "card0//device/vendor", "c**d0/*", "odd*", "*d*n*", "odd?name"]
    for pattern in patterns:
        full = os.fsencode(str(tmp_path / pattern))
        assert node_reader.expand(full) == sorted(glob.glob(full)), pattern
    assert node_reader.expand(os.fsencode(str(tmp_path / "card*/device/vendor")))  # the test names something
    doubled = os.fsencode(f"{tmp_path}//card*//device/vendor")  # kept as the shell keeps it (glob folds it)
    shell = subprocess.run(["sh", "-c", 'for f in $1; do [ -e "$f" ] && echo "$f"; done', "sh", doubled],
                           capture_output=True, check=True).stdout.split()
    assert node_reader.expand(doubled) == sorted(shell) and len(shell) == 4


def test_a_reader_started_with_sigchld_ignored_still_sees_each_commands_exit():
    """An ignored signal stays ignored through exec; with SIGCHLD ignored a wait never sees the exit, and
    every command would read as timed out."""
    import signal
    import subprocess

    from k3doctor.gather.node_script import NODE_READER

    run = subprocess.run([sys.executable, "-I", "-S", "-c", NODE_READER, "n0nce", "1000", "5", "2",
                          "0", "C", "5", "3", "sh", "-c", "exit 7"], capture_output=True, timeout=30,
                         preexec_fn=lambda: signal.signal(signal.SIGCHLD, signal.SIG_IGN))
    assert run.returncode == 0 and run.stdout.startswith(b"@@n0nce 0 7 "), (run.stdout, run.stderr)


# How the stop reaches the call `_bounded` bounds: while the call runs, or while its alarm is being armed
STOP_COMES = {"in the call": ("", "os.kill(os.getpid(), _signal.SIGTERM) or time.sleep(5)"),
              "as the alarm is armed": ("""
arm = _signal.setitimer
def arming(which, seconds):
    if seconds:
        os.kill(os.getpid(), _signal.SIGTERM)
    return arm(which, seconds)
_signal.setitimer = arming
""", "time.sleep(5)")}


@pytest.mark.parametrize("when", sorted(STOP_COMES))
def test_a_stop_whose_handler_the_alarm_cut_short_still_ends_the_reader(when):
    """A signal's Python handler runs between two bytecodes of whatever runs, another handler included: here
    the stop's handler lets an alarm in before it ends anything, as a timeout that fires just then does, and
    the alarm's handler raises inside it. The reader must still end (143): not go on with its commands, and
    not end with a traceback."""
    import subprocess

    from k3doctor.gather.node_script import NODE_READER

    setup, call = STOP_COMES[when]
    driver = NODE_READER.replace('if __name__ == "__main__":', 'if False:') + setup + f"""
import time
def stop(signum, frame):
    os.kill(os.getpid(), _signal.SIGALRM)  # the alarm's handler runs next, raising while this one is in flight
    os.write(1, b"stopped\\n")
    os._exit(143)
_listen(stop)
_bounded(lambda: {call}, 5)
os.write(1, b"went on\\n")
"""
    run = subprocess.run([sys.executable, "-I", "-S", "-c", driver], capture_output=True, timeout=30)
    assert (run.returncode, run.stdout) == (143, b"stopped\n"), run.stderr


def test_without_a_writable_tmpdir_the_reader_writes_its_scratch_files_in_dev_shm(monkeypatch):
    """A container with a read-only root file system: its readings are still taken (as the shell's own
    scratch directory falls back to /dev/shm)."""
    from k3doctor.readings import Command

    monkeypatch.setenv("TMPDIR", "/nonexistent-k3doctor-tmp")
    got, _ = frames([Command(("echo", "read"))], sys.executable)
    assert got[0][0][:3] == ("0", "", "read\n")
