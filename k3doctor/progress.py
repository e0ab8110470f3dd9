"""Progress of a long run (nodes read, probe stages, fabric pairs) on stderr, where a person watches it.

The runner and the probes report here without knowing who, if anyone, shows it: ``note`` for a
line, ``task`` for a counted stage. Nothing is shown unless the CLI opened a display with
:func:`shown`, which it does only when stderr is a terminal and ``--quiet`` was not given, so a
pipe, a CI log or a monitor's output never carries progress. The display is rich's: it redraws
in place from the probes' threads, and honours ``NO_COLOR`` (no colour at all when it is set and
not empty, https://no-color.org). rich is imported only when something is shown.
"""
from __future__ import annotations

import os
import sys
import threading
from contextlib import contextmanager

_display = None  # the live display while shown() is open; None: progress goes nowhere
_lock = threading.Lock()


def wanted(quiet: bool = False, stream=None) -> bool:
    """Whether progress should be shown: not asked to be quiet and the stream is a terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return not quiet and stream.isatty()
    except (AttributeError, ValueError):  # a closed or fake stream
        return False


def no_color() -> bool:
    return os.environ.get("NO_COLOR", "") != ""


def note(message: str) -> None:
    """One line above the live display (``k3doctor: <message>``); dropped when nothing is shown."""
    display = _display
    if display is not None:
        display.console.print(f"k3doctor: {message}", markup=False, highlight=False, soft_wrap=True)


class Counter:
    """A stage on the display: a counter of ``total`` steps or, without a total, a spinner and its elapsed time.

    ``step(label)`` marks one step done (``label`` says which: a node, a pair), from any thread;
    ``close()`` takes the stage off the display. Without a display both do nothing.
    """

    def __init__(self, description: str, total: int | None = None):
        self.display = _display
        self.handle = None if self.display is None else self.display.add_task(description, total=total, label="")

    def step(self, label: str | None = None) -> None:
        if self.handle is not None:
            with _lock:
                self.display.update(self.handle, advance=1, label=label or "")
                self.display.refresh()  # every step is drawn, also the last one before the stage closes

    def close(self) -> None:
        if self.handle is not None:
            self.display.remove_task(self.handle)
            self.handle = None


@contextmanager
def task(description: str, total: int | None = None):
    """A :class:`Counter` for the block; yields its ``step``."""
    counter = Counter(description, total)
    try:
        yield counter.step
    finally:
        counter.close()


@contextmanager
def shown(quiet: bool = False):
    """Show progress on stderr for the duration of the block if :func:`wanted`; else a no-op."""
    global _display
    if not wanted(quiet) or _display is not None:
        yield
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = Console(stderr=True, no_color=no_color(), highlight=False)
    display = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=24),
                       MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.fields[label]}"),
                       console=console, transient=True)
    with display:
        _display = display
        try:
            yield
        finally:
            _display = None


# Phase marks for timing a run from outside (bench/side_by_side.py): with K3DOCTOR_PHASES=FILE set, each
# mark appends ``NAME MONOTONIC_SECONDS`` to FILE (CLOCK_MONOTONIC is one clock for every process of the
# machine, so the bench subtracts its own start). Unset, a mark is one test of a module global.
_PHASES = os.environ.get("K3DOCTOR_PHASES") or None


def mark(phase: str) -> None:
    """Note that ``phase`` happened now (``connect``: a node's first TCP connection starts; ``read``: a
    node's readings are in; ``judged``: every judge ran), where timing was asked for; else nothing."""
    if _PHASES is None:
        return
    import time

    line = f"{phase} {time.monotonic():.6f}\n".encode()
    fd = os.open(_PHASES, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)  # one write of one short line with O_APPEND: threads' marks never interleave
    finally:
        os.close(fd)
