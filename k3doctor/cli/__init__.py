"""Command line: ``k3doctor check | node | merge | judge | baseline record | triage | gate | demo | list | explain``.

A thin shell: each command reads its options, hands them to the module that does the work and renders the
report (commands.py: the group; runs.py: the commands that judge a rack; oncall.py: triage, the gate, the
demo; info.py: list and explain); options.py declares once what several commands share. Exit codes: 0 ready
to launch (warnings allowed), 1 a check failed, 2 inconclusive (a check could not be evaluated: unreachable
node, timeout, unparseable output), 3 usage or inventory error.
"""
from __future__ import annotations

import logging
import signal
import sys
import threading

EXIT_USAGE = 3  # usage or inventory error (options.py, which the commands share, loads much more: not imported here)


def _quiet_logging() -> None:
    """k3doctor's own warnings as one ``k3doctor: ...`` line each; paramiko's thread tracebacks (a
    banner timeout logs 20 lines) never reach stderr: the node's ERROR already says what failed."""
    own, quiet = logging.getLogger("k3doctor"), logging.getLogger("paramiko")
    if not own.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("k3doctor: %(message)s"))
        own.addHandler(handler)
        quiet.addHandler(logging.NullHandler())
    own.propagate = quiet.propagate = False


class Terminated(KeyboardInterrupt):
    """SIGTERM (a CI job's timeout, `kill`, a scheduler ending the job) or SIGHUP (the on-call's SSH
    session dropped): handled as Ctrl-C is, so every read in flight is stopped on the nodes and nothing
    k3doctor started stays behind; then exit 128 + the signal's number."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _on_stop_signal(signum, frame):
    """Raise once: a second stop signal (a dropped session often sends two SIGHUPs) must not cut short the
    stopping of the nodes' process groups that the first one started."""
    for stop in STOP_SIGNALS:
        signal.signal(stop, signal.SIG_IGN)
    raise Terminated(signum)


def take_stop_signals() -> None:
    """SIGTERM and SIGHUP end the run as Ctrl-C does; one ignored by whoever started us stays ignored
    (`nohup k3doctor ...` outlives its terminal). Signal handlers live in the main thread only."""
    if threading.current_thread() is threading.main_thread():
        for stop in STOP_SIGNALS:
            if signal.getsignal(stop) is not signal.SIG_IGN:
                signal.signal(stop, _on_stop_signal)


def main(argv=None):
    """Entry point: click's usage errors exit 3 (not click's 2, which means inconclusive here).

    ``check`` starts connecting to its nodes first (k3doctor/cli/early.py); the commands, the checks and
    everything they need are imported while the handshakes are in flight."""
    args = list(sys.argv[1:] if argv is None else argv)
    _quiet_logging()
    take_stop_signals()

    from k3doctor.cli import early

    ahead = None
    try:
        ahead = early.start(args)
        _run(args, ahead)
    except SystemExit as done:
        code = done.code
    except KeyboardInterrupt as stop:  # before click took over (while the commands were being imported)
        code = _stopped(stop)
    finally:
        if ahead is not None:
            ahead.close()
    _exit(code)


def _stopped(stop: KeyboardInterrupt) -> int:
    """Say how the run was stopped; its exit status (Ctrl-C 130, a stop signal 128 + its number)."""
    terminated = isinstance(stop, Terminated)
    try:  # after SIGHUP the terminal may be gone: the exit status still tells
        sys.stderr.write(f"k3doctor: terminated ({signal.Signals(stop.signum).name})\n" if terminated
                         else "k3doctor: aborted\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    return 128 + stop.signum if terminated else 130


def _exit(code) -> None:
    """End the process as sys.exit would (the exit handlers run: paramiko's, logging's, temporary files'),
    without the interpreter's teardown of every module and object after them: ~0.1-0.2 s of a run's end
    on a busy machine, for nothing (the operating system frees it all at once)."""
    import atexit
    import os

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            pass
    if code is None or isinstance(code, int):
        os._exit(code or 0)
    sys.stderr.write(f"{code}\n")  # sys.exit("message"): printed, exit status 1
    sys.stderr.flush()
    os._exit(1)


def _run(args: list, ahead) -> None:
    import click

    from k3doctor.cli.commands import cli

    try:
        cli.main(args=args, prog_name="k3doctor", standalone_mode=False, obj=ahead)
    except click.UsageError as exc:
        hint = f" (try `{exc.ctx.command_path} --help`)" if exc.ctx else ""
        click.echo(f"k3doctor: {exc.format_message()}{hint}", err=True)
        sys.exit(EXIT_USAGE)
    except click.ClickException as exc:
        click.echo(f"k3doctor: {exc.format_message()}", err=True)
        sys.exit(EXIT_USAGE)
    except click.Abort as exc:  # click turns Ctrl-C (and our stop signals) into Abort once the nodes are let go
        sys.exit(_stopped(exc.__cause__ if isinstance(exc.__cause__, KeyboardInterrupt) else KeyboardInterrupt()))
    except Exception as exc:  # a bug must still end in one line and an honest "inconclusive"
        click.echo(f"k3doctor: internal error: {type(exc).__name__}: {exc}", err=True)
        sys.exit(2)
    sys.exit(0)
