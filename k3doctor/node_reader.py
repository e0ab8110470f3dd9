"""Every reading of a node's gather script in one process (the script runs this file with the node's
``python3 -I -S -c``): its files and globs (sysfs holds a few hundred small files) and its commands. The
shell spends five processes on each command around the command itself (a subshell, ``timeout``, ``wc``,
``head``, ``cat``); that was most of a node's work. This prints the script's frames itself
(k3doctor/gather.py), one whole frame per write, so a reader killed at the node deadline leaves at most its
last frame cut off.

A command runs as it does in the shell: stdin /dev/null, its output written to scratch files (unlinked from
the start: nothing is left behind) that it cannot grow past the cap (``RLIMIT_FSIZE``, the shell's ``ulimit
-f``), in a process group of its own that is TERMed at its timeout (exit 124), KILLed ``kill_after`` later
(137) and KILLed whole when it ends, so nothing it started outlives it. A TERM, HUP or INT to the reader (the
script's stop at the node deadline or on Ctrl-C) or a client gone (a write to a closed pipe) KILLs the
command in flight with its group, then ends the reader.

Run as ``python3 -c SOURCE NONCE CAP READ_TIMEOUT KILL_AFTER RECORD...``, a RECORD being ``INDEX F PATH``
(a file), ``INDEX G PATTERN`` (a glob), ``INDEX E PATH`` (exists) or ``INDEX C TIMEOUT N ARG1..ARGN`` (a
command). Written for any python3 a node may have (3.6 on): standard library only, nothing past 3.6.
"""
import errno
import glob
import os
import resource
import signal
import subprocess
import sys
import time

FSIZE_BLOCK = 512  # the shell's `ulimit -f` unit: the cap is enforced in whole blocks, one past it


class _TimedOut(Exception):
    pass


class _Stopped(Exception):
    pass


def _alarm(signum, frame):
    raise _TimedOut()


def _frame(nonce, index, rc, total, out, err, path):
    head = f"@@{nonce} {index} {rc} {total} {len(out)} {len(err)} {len(path)}\n"
    return head.encode() + path + out + err


def read_one(path, cap, read_timeout):
    """(rc, total bytes read up to cap + 1, out, err) as the shell's ``readf`` gives them: ``M`` missing,
    ``D`` a directory, ``124`` a read that blocked past ``read_timeout``, ``1`` an error (its message)."""
    if os.path.isdir(path):
        return "D", 0, b"", b""
    if not os.path.exists(path):  # a dangling link reads as missing, as in the shell
        return "M", 0, b"", b""
    signal.setitimer(signal.ITIMER_REAL, read_timeout)
    try:
        with open(path, "rb", buffering=0) as fh:
            parts, size = [], 0
            while size <= cap:
                data = fh.read(cap + 1 - size)
                if not data:
                    break
                parts.append(data)
                size += len(data)
    except _TimedOut:
        return "124", 0, b"", b""
    except OSError as exc:
        return "1", 0, b"", f"{os.fsdecode(path)}: {os.strerror(exc.errno or 5)}\n".encode()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    data = b"".join(parts)
    return "0", len(data), data[:cap], b""


def _scratch():
    """A file only this process (and the commands it starts) can reach: unlinked before anything is written."""
    where = os.environ.get("TMPDIR") or "/tmp"
    try:
        return os.open(where, os.O_TMPFILE | os.O_RDWR, 0o600)
    except (AttributeError, OSError):
        path = os.path.join(where, f"k3doctor.{os.urandom(8).hex()}")
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        os.unlink(path)
        return fd


def _kill_group(pid, sig):
    try:
        os.killpg(pid, sig)
    except OSError:
        pass


def _wait(child, seconds):
    """The child's exit status, or None if it still runs after ``seconds``."""
    end = time.monotonic() + seconds
    while True:
        try:
            return child.wait(max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            return None


class Commands:
    """Runs commands one at a time. A stop signal raises _Stopped once the command in flight is known (it is
    then KILLed with its group), never between its start and that moment."""

    def __init__(self, cap, kill_after):
        self.cap, self.kill_after, self.child = cap, kill_after, None
        self.starting = self.stop_asked = False
        self.out, self.err = _scratch(), _scratch()

    def on_signal(self, signum, frame):
        self.stop_asked = True
        if not self.starting:
            raise _Stopped()

    def run(self, argv, timeout):
        """(rc, total stdout bytes, stdout up to the cap, stderr up to the cap), as the shell's ``emit``."""
        for fd in (self.out, self.err):
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
        self.starting = True
        try:
            self.child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.out, stderr=self.err,
                                          start_new_session=True)
        except OSError as exc:  # as `timeout` says it: 127 not found, 126 found but not runnable
            self.starting = False
            if self.stop_asked:  # the stop that came while it was being started
                raise _Stopped() from None
            rc = 127 if exc.errno == errno.ENOENT else 126
            return rc, 0, b"", f"k3doctor: failed to run command {argv[0]!r}: {exc.strerror}\n".encode()
        self.starting = False
        try:
            if self.stop_asked:
                raise _Stopped()
            status = _wait(self.child, timeout)
            if status is None:
                _kill_group(self.child.pid, signal.SIGTERM)
                status = 124 if _wait(self.child, self.kill_after) is not None else None
                if status is None:
                    _kill_group(self.child.pid, signal.SIGKILL)
                    self.child.wait()
                    status = 137
            elif status < 0:
                status = 128 - status  # killed by a signal: as a shell reports it
        finally:
            self.reap()
        total = os.fstat(self.out).st_size
        return status, total, self._head(self.out), self._head(self.err)

    def _head(self, fd):
        os.lseek(fd, 0, os.SEEK_SET)
        parts, size = [], 0
        while size < self.cap:
            data = os.read(fd, self.cap - size)
            if not data:
                break
            parts.append(data)
            size += len(data)
        return b"".join(parts)

    def reap(self):
        """KILL whatever of the command's group is left: a child that escaped the TERM, a daemon it left,
        or all of it when the reader is stopped while it runs."""
        if self.child is not None:
            _kill_group(self.child.pid, signal.SIGKILL)
            self.child = None


def _records(words):
    """(index, kind, what) from the RECORD words; ``what`` is a path, or (timeout, argv) for a command."""
    at = 0
    while at < len(words):
        index, kind = words[at], words[at + 1]
        if kind == "C":
            count = int(words[at + 3])
            yield index, kind, (float(words[at + 2]), words[at + 4:at + 4 + count])
            at += 4 + count
        else:
            yield index, kind, words[at + 2]
            at += 3


def main(argv):
    nonce, cap, read_timeout, kill_after = argv[0], int(argv[1]), float(argv[2]), float(argv[3])
    commands = Commands(cap, kill_after)
    signal.signal(signal.SIGALRM, _alarm)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, commands.on_signal)
    limit = (cap // FSIZE_BLOCK + 1) * FSIZE_BLOCK  # the commands' files; this process writes only to a pipe
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    out = sys.stdout.buffer
    try:
        for index, kind, what in _records(argv[4:]):
            if kind == "C":
                rc, total, data, err = commands.run(what[1], what[0])
                out.write(_frame(nonce, index, rc, total, data, err, b""))
            elif kind == "E":
                out.write(_frame(nonce, index, 0 if os.path.exists(what) else "M", 0, b"", b"", b""))
            else:
                pattern = os.fsencode(what)
                for one in sorted(glob.glob(pattern)) if kind == "G" else [pattern]:
                    rc, total, data, err = read_one(one, cap, read_timeout)
                    out.write(_frame(nonce, index, rc, total, data, err, one))
                    out.flush()
                if kind == "G":
                    out.write(_frame(nonce, index, "END", 0, b"", b"", b""))
            out.flush()
    except (_Stopped, BrokenPipeError):  # the command in flight, if any, was KILLed on the way out
        os._exit(143)


if __name__ == "__main__":
    main(sys.argv[1:])
