"""Progress on a terminal, for real: the CLI run with its stderr on a pseudo-terminal (Python's pty module).

A person at a terminal sees the deep tier's stages and pairs go by; a pipe, ``--quiet`` or a CI
log gets none of it, and ``NO_COLOR`` takes the colour out of what is shown.
"""
import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
import threading

import pytest

pytestmark = pytest.mark.e2e
SGR = re.compile(r"\x1b\[([0-9;]*)m")
PAIRS = ("ct13<->ct14", "ct14<->ct16", "ct16<->ct17", "ct17<->ct13")


def run_on_tty(args, env=None, timeout=400):
    """(exit code, stdout (a pipe), what reached the terminal on stderr)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "k3doctor.cli", *map(str, args)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=slave, env={**os.environ, **(env or {})})
    os.close(slave)
    seen = bytearray()

    def drain():
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                return
            if not chunk:
                return
            seen.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        reader.join(10)
        os.close(master)
    return proc.returncode, out.decode(), seen.decode("utf-8", "replace")


def colours(text):
    """SGR parameters that set a colour (30-38, 40-48, 90-97, 100-107)."""
    params = {int(p) for seq in SGR.findall(text) for p in seq.split(";") if p.isdigit()}
    return {p for p in params if 30 <= p <= 48 or 90 <= p <= 107}


def test_deep_tier_shows_each_pair_on_a_terminal_and_nothing_on_a_pipe(rig):
    rig.apply("healthy")
    args = ("check", "--nodes", rig.inventory_path, "--only", "ualoe-fabric", "--format", "npd")
    rc, out, tty = run_on_tty(args)
    assert rc == 0 and out.startswith("READY TO LAUNCH"), (out, tty[-2000:])
    assert "reading nodes" in tty and "probe ualoe-fabric" in tty and "ualoe-fabric pairs" in tty, tty[-2000:]
    assert "4/4" in tty and all(p in tty for p in PAIRS)  # counted per pair, each named
    assert "k3doctor: ct13: " in tty  # the runner's per-node lines go above the display
    assert colours(tty)  # a terminal without NO_COLOR gets colour
    assert "\x1b" not in out and "k3doctor:" not in out  # the report on stdout carries no progress

    piped = subprocess.run([sys.executable, "-m", "k3doctor.cli", *map(str, args)], capture_output=True,
                           text=True, timeout=400)
    assert piped.returncode == 0 and piped.stdout == out.replace("\r\n", "\n")
    assert piped.stderr == ""  # not a terminal: no progress at all


def test_no_color_and_quiet_on_a_terminal(rig):
    rig.apply("healthy")
    args = ("check", "--nodes", rig.inventory_path, "--only", "rack-free", "--format", "npd")
    rc, out, tty = run_on_tty(args, env={"NO_COLOR": "1"})
    assert rc == 0 and "reading nodes" in tty, tty[-2000:]
    assert not colours(tty), sorted(colours(tty))
    rc, out, tty = run_on_tty((*args, "--quiet"))
    assert rc == 0 and out.startswith("READY TO LAUNCH") and tty == "", tty[-2000:]
