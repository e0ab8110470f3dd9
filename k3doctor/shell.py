"""The one place where values become shell words.

Everything sent to a node's shell goes through :func:`quote` / :func:`join`, so an
inventory value (a container name, a path) can never break out of its word.
"""
from __future__ import annotations

import shlex

from k3doctor.deadline import seconds


def quote(value) -> str:
    return shlex.quote(str(value))


def join(argv) -> str:
    return " ".join(quote(a) for a in argv)


def with_timeout(command: str, timeout_s: float, kill_after_s: float = 2.0) -> str:
    """Wrap a shell command so the node itself kills it (and its process group) at the deadline.

    GNU ``timeout`` signals its whole process group, so children die too; ``-k`` follows
    up with SIGKILL for commands that ignore SIGTERM. Both times are clamped (finite, at most a day).
    """
    return f"timeout -k {seconds(kill_after_s, 2.0):g} {seconds(timeout_s, 30.0):g} sh -c {quote(command)}"
