"""The Ctrl-C tests hold however the suite is launched (tests/terminal_signals.py): a process the tests start
sees SIGINT at its default and unblocked, also when pytest itself started with it ignored and blocked."""
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# what a `k3doctor check` started by a test would do with a SIGINT: Python's KeyboardInterrupt, delivered
CHILD_REPORT = ("import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, "
                "signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, ()))")
# a CI launcher's background job: SIGINT ignored (as `sh -c 'cmd &'` does) and blocked, then pytest
LAUNCHER = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
            "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}); os.execv(sys.executable, sys.argv[1:])")


def test_a_process_the_tests_start_can_be_interrupted():
    got = subprocess.run([sys.executable, "-c", CHILD_REPORT], capture_output=True, text=True, timeout=60)
    assert got.stdout.split() == ["True", "False"], got.stdout + got.stderr  # caught by Python, not blocked


def test_a_suite_launched_with_sigint_ignored_and_blocked_still_interrupts_its_children():
    inner = f"{Path(__file__).relative_to(REPO)}::test_a_process_the_tests_start_can_be_interrupted"
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", inner]
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    run = subprocess.run([sys.executable, "-c", LAUNCHER, *pytest], cwd=REPO, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": path})
    assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]
