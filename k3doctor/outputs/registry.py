"""The output registry: a format name -> how to render a run and which exit code it ends with.

Formats are registered like checks, so ``--format`` choices, rendering and the process exit
code all come from one place. Exit codes differ per consumer (Nagios: 0/1/2/3, Node Problem
Detector: 0/1/other), so the exit-code rule belongs to the format, not to the CLI.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from k3doctor.results import overall


def launch_exit_code(report) -> int:
    """k3doctor's own exit code: 0 ready to launch, 1 do not launch, 2 inconclusive."""
    return overall(report.results).exit_code


@dataclass(frozen=True)
class Output:
    name: str
    help: str
    render: Callable  # (report, checks, verbose) -> text
    exit_code: Callable = launch_exit_code  # (report) -> process exit code
    private: bool = True  # -o file 0600 (evidence); False: readable by a collector running as another user


OUTPUTS: dict = {}


def output(name: str, help: str, exit_code: Callable = launch_exit_code, private: bool = True):
    """Decorator: register ``render(report, checks, verbose) -> str`` as ``--format NAME``."""
    def register(render: Callable) -> Callable:
        if name in OUTPUTS:
            raise ValueError(f"output format {name!r} registered twice")
        OUTPUTS[name] = Output(name, help, render, exit_code, private)
        return render
    return register
