"""The suite presses Ctrl-C as a user at a terminal does, however the test run itself was launched.

A background job of a non-interactive shell (``bash .ci/run &``, a CI runner's ``sh -c '... &'``) starts
with SIGINT ignored, and a launcher may start it with SIGINT blocked; both are inherited through fork and
exec by every process pytest starts. The Ctrl-C tests (test_fault_matrix, test_ualoe_probe) send SIGINT to
a ``k3doctor check`` they started: with SIGINT ignored there, Python installs no KeyboardInterrupt handler,
the SIGINT is dropped, and the run goes on to its 300 s deadlines (the test's 60 s wait then fails, and its
fallback SIGKILL leaves the nodes' reads running into the next test). A user's Ctrl-C reaches a foreground
job whose SIGINT is at its default and unblocked; this plugin gives every process the tests start that state.
"""
from __future__ import annotations

import signal


def as_at_a_terminal() -> None:
    """SIGINT caught by Python's own handler (so every child starts with it at its default: a caught
    signal is reset on exec, an ignored one is not) and unblocked in this thread, the one that runs the
    tests and starts their subprocesses (a child inherits the mask of the thread that started it)."""
    if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL, None):
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def pytest_configure(config):
    as_at_a_terminal()
