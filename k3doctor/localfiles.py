"""Files k3doctor reads on this machine (ssh config, identity files, copied logs): regular files only.

Opening a FIFO for reading blocks until a writer comes, a device can stream forever, and a directory
has no text: each is named for what it is, before it is opened for reading (a FIFO is opened
non-blocking, so even a race ends at once).
"""
from __future__ import annotations

import os
import stat

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def kind(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words ("a regular file", "a FIFO (named pipe)", ...)."""
    return next((words for test, words in _KINDS if test(mode)), "a regular file")


def not_regular(path: str) -> str | None:
    """Why ``path`` (symlinks followed) is not a regular file to read ("is a directory"), or None;
    FileNotFoundError/OSError from ``os.stat`` pass through."""
    mode = os.stat(path).st_mode
    return None if stat.S_ISREG(mode) else f"is {kind(mode)}, not a regular file"


def why_not_readable(path: str) -> str | None:
    """Why ``path`` is not a regular file another program could be given to read ("no such file", "is a
    FIFO (named pipe), not a regular file", "Permission denied"), or None; never opens it, so a FIFO
    without a writer cannot block the asking (``os.path.isfile`` said "no such file" for a FIFO)."""
    try:
        return not_regular(path)
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return exc.strerror or str(exc)


def read_bytes(path: str) -> bytes:
    """The content of the regular file ``path``; OSError (errno EINVAL, with what it is) for anything else."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(22, f"it is {kind(mode)}, not a regular file", path)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read()
    finally:
        os.close(fd)


def read_text(path: str, errors: str = "strict") -> str:
    """The UTF-8 text of the regular file ``path`` (:func:`read_bytes`); UnicodeDecodeError on other bytes
    unless ``errors`` says how to take them."""
    return read_bytes(path).decode("utf-8", errors)
