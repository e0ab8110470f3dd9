"""``-o FILE``: checked before the run, replaced atomically after it.

A reader that polls the file (node_exporter's textfile collector, a CI job) must never see it
half written or emptied: the text goes to a temporary file in the same directory (a name not
ending in ``.prom``, which the textfile collector ignores) and is renamed over the target.
"""
from __future__ import annotations

import os
import tempfile

import click


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
        directory = os.path.dirname(os.path.abspath(value))
        if os.path.isdir(value):
            self.fail(f"cannot write {value}: it is a directory", param, ctx)
        if not os.path.isdir(directory):
            self.fail(f"cannot write {value}: no directory {directory}", param, ctx)
        if not os.access(directory, os.W_OK | os.X_OK):
            self.fail(f"cannot write {value}: {directory} is not writable", param, ctx)
        return value


def write_output(path: str, text: str, private: bool = True) -> None:
    """Print ``text`` (``-``) or replace ``path`` with it atomically: 0600 when ``private`` (a report can
    hold evidence from the nodes; an existing file is tightened), else keeping the file's mode."""
    if path == "-":
        click.echo(text, nl=not text.endswith("\n"))
        return
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(text if text.endswith("\n") else text + "\n")
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
