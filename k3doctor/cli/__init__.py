"""Command line: ``k3doctor check | node | merge | judge | baseline record | triage | gate | demo | list | explain``.

A thin shell: each command reads its options, hands them to the module that does the work and renders the
report (runs.py: the commands that judge a rack; oncall.py: triage, the gate, the demo; info.py: list and
explain); options.py declares once what several commands share. Exit codes: 0 ready to launch (warnings
allowed), 1 a check failed, 2 inconclusive (a check could not be evaluated: unreachable node, timeout,
unparseable output), 3 usage or inventory error.
"""
from __future__ import annotations

import logging
import signal
import sys
import threading

import click

from k3doctor import __version__
from k3doctor.cli import info, oncall, recipe, runs
from k3doctor.cli.options import EXIT_USAGE


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="k3doctor")
def cli():
    """Pre-launch doctor for Kimi-K3 on gfx1250 (MI455) wide-EP racks and MI355X TP8 AgentX nodes.

    Runs a registry of checks over SSH on every node and says, before a 25-minute cold
    start, whether the rack is ready to launch - naming the node and GPU at fault.
    """


for _command in (*runs.COMMANDS, *oncall.COMMANDS, recipe.recipe_group, *info.COMMANDS):
    cli.add_command(_command)


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
    raise Terminated(signum)


def main(argv=None):
    """Entry point: click's usage errors exit 3 (not click's 2, which means inconclusive here)."""
    _quiet_logging()
    if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread only
        for stop in STOP_SIGNALS:
            signal.signal(stop, _on_stop_signal)
    try:
        cli.main(args=argv, prog_name="k3doctor", standalone_mode=False)
    except click.UsageError as exc:
        hint = f" (try `{exc.ctx.command_path} --help`)" if exc.ctx else ""
        click.echo(f"k3doctor: {exc.format_message()}{hint}", err=True)
        sys.exit(EXIT_USAGE)
    except click.ClickException as exc:
        click.echo(f"k3doctor: {exc.format_message()}", err=True)
        sys.exit(EXIT_USAGE)
    except click.Abort as exc:  # click turns Ctrl-C (and our SIGTERM) into Abort once the nodes are let go
        if isinstance(exc.__cause__, Terminated):
            signum = exc.__cause__.signum
            click.echo(f"k3doctor: terminated ({signal.Signals(signum).name})", err=True)
            sys.exit(128 + signum)
        click.echo("k3doctor: aborted", err=True)
        sys.exit(130)
    except Exception as exc:  # a bug must still end in one line and an honest "inconclusive"
        click.echo(f"k3doctor: internal error: {type(exc).__name__}: {exc}", err=True)
        sys.exit(2)
    sys.exit(0)


