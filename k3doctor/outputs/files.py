"""``-o FILE``: checked before the run, replaced atomically after it.

A reader that polls the file (node_exporter's textfile collector, a CI job) must never see it
half written or emptied: the text goes to a temporary file in the same directory (a name not
ending in ``.prom``, which the textfile collector ignores) and is renamed over the target.

A symlink is followed (its target is replaced, the link stays). What is not a regular file - a
device (``/dev/null``, ``/dev/stdout`` on a terminal), a pipe (``-o >(gzip)``) - is written
through, never replaced: renaming a file over ``/dev/null`` as root would capture every other
program's writes to it. Kernel interface files (``/proc``, ``/sys``) are no place for a report and
are refused before the run, like any other path that cannot be written.
"""
from __future__ import annotations

import os
import stat
import tempfile

import click

KERNEL_TREES = ("/proc", "/sys")  # pseudo-filesystems: a write there is a kernel request, not a file


class OutputPath(click.ParamType):
    """A file k3doctor can create or replace (``-`` is stdout); refused at parse time, not after the run."""

    name = "file"

    def __init__(self, stdout: bool = True):
        self.stdout = stdout  # False for files that are data, not a report (saved readings, a baseline)

    def convert(self, value, param, ctx):
        value = os.fsdecode(value)
        if value == "-":
            if self.stdout:
                return value
            self.fail("needs a file name: - (standard output) carries the report", param, ctx)
        problem = output_problem(value)
        if problem:
            self.fail(problem, param, ctx)
        return value


def _existing(path: str):
    """``os.stat`` of ``path`` (symlinks followed), None when nothing is there."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def _under_kernel_tree(path: str) -> bool:
    return any(path == tree or path.startswith(tree + "/") for tree in KERNEL_TREES)


def output_problem(value: str) -> str | None:
    """Why ``value`` cannot take a report (one line), or None."""
    if not value:
        return "needs a file name (got an empty one)"
    try:
        st = _existing(value)
    except OSError as exc:
        return f"cannot write {value}: {exc.strerror}"
    if st is not None and stat.S_ISDIR(st.st_mode):
        return f"cannot write {value}: it is a directory"
    if st is not None and not stat.S_ISREG(st.st_mode):  # a device or a pipe: written through
        if stat.S_ISSOCK(st.st_mode):
            return f"cannot write {value}: it is a socket"
        if not os.access(value, os.W_OK):
            return f"cannot write {value}: not writable"
        return None
    target = os.path.realpath(value)
    if _under_kernel_tree(target):
        return f"cannot write {value}: {target} is a kernel interface file, not a place for a report"
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        return f"cannot write {value}: no directory {directory}"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"cannot write {value}: {directory} is not writable"
    return None


def write_output(path: str, text: str, private: bool = True) -> None:
    """Print ``text`` (``-``), or write it to ``path`` as :func:`write_file` does."""
    if path == "-":
        click.echo(text, nl=not text.endswith("\n"))
        return
    text = text if text.endswith("\n") else text + "\n"
    write_file(path, text.encode("utf-8", "backslashreplace"), private)


def write_file(path: str, data: bytes, private: bool = True) -> None:
    """Write ``data`` through an existing device or pipe, or replace the file ``path`` (a symlink's target)
    atomically: 0600 when ``private`` (a report can hold evidence from the nodes; an existing file is
    tightened), else keeping the file's mode. A write that fails is one line (click.ClickException)."""
    try:
        st = _existing(path)
        if st is not None and not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
            _write_through(path, data)
        else:
            _replace(os.path.realpath(path), data, private)
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {exc.strerror or exc}") from None


def _write_through(path: str, data: bytes) -> None:
    """Into an existing device or pipe, as a shell redirection would (no create, no truncate, no rename)."""
    fd = os.open(path, os.O_WRONLY | os.O_NOCTTY)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _replace(path: str, data: bytes, private: bool) -> None:
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if not private:
            os.chmod(tmp, _mode_for(path))  # mkstemp makes 0600; node_exporter reads as another user
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _mode_for(path: str) -> int:
    try:
        return os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
