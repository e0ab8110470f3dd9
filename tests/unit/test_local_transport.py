"""LocalTransport keeps its deadline even when a command leaves a process behind that holds its output."""
import os
import signal
import time

from k3doctor.transport.local import LocalTransport


def test_a_process_that_left_the_group_does_not_hold_the_run_past_its_deadline(tmp_path):
    pidfile = tmp_path / "escaped.pid"
    command = f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 300' & sleep 300"  # the child keeps stdout open
    started = time.monotonic()
    try:
        result = LocalTransport("here").run(command, timeout_s=1.0)
        took = time.monotonic() - started
        assert result.timed_out
        assert took < 60, took  # the deadline and its graces (~10 s), not the escaped child's 300 s
    finally:
        if pidfile.exists():
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
