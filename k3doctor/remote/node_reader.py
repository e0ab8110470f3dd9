"""Every reading of a node's gather script in one process (the script runs this file with the node's
``python3 -I -S -c``; a container's exec runs it with the container's, for its readings, the source then
coming on the exec's stdin: k3doctor/gather/node_script.py ``_READER_FROM_STDIN``): its files and
globs (sysfs holds a few hundred small files) and its commands. The shell spends five processes on each
command around the command itself (a subshell, ``timeout``, ``wc``, ``head``, ``cat``); that was most of a
node's work. This prints the script's frames itself
(k3doctor/gather/node_script.py), one whole frame per write, so a reader killed at the node deadline leaves at most its
last frame cut off.

A command runs as it does in the shell: stdin /dev/null, its output written to scratch files (unlinked from
the start: nothing is left behind) that it cannot grow past the cap (``RLIMIT_FSIZE``, the shell's ``ulimit
-f``), in a process group of its own that is TERMed at its timeout (exit 124), KILLed ``kill_after`` later
(137) and KILLed whole when it ends, so nothing it started outlives it. A TERM, HUP or INT to the reader (the
script's stop at the node deadline or on Ctrl-C) or a client gone (a write to a closed pipe) KILLs every
command in flight with its group, then ends the reader. Up to IN_FLIGHT readings run at once (Commands): the
files and globs one after another, the commands beside them, the frames in the records' order.

Run as ``python3 -c SOURCE NONCE CAP READ_TIMEOUT KILL_AFTER [-jIN_FLIGHT] RECORD...`` (in a container ``-c``
reads SOURCE from stdin; no ``-j``: 1, one reading after another), a RECORD being ``INDEX F PATH``
(a file), ``INDEX G PATTERN`` (a glob), ``INDEX E PATH`` (exists), ``INDEX C TIMEOUT N ARG1..ARGN`` (a
command) or ``INDEX T TIMEOUT N PATH ARG2..ARGN`` (a GPU tool: found here as the shell's FIND_TOOL finds it,
which spares a ``sh`` per tool call). Written for any python3 a node may have (3.6 on; its source ASCII, as 3.6
decodes a C-locale command line): standard library only, and what came after 3.6 (posix_spawn,
set_wakeup_fd's warn_on_full_buffer) only with a fallback.
"""
import _signal  # not `signal`: that imports enum; this file starts on every node at every run
import errno
import os
import resource
import sys
import time

FSIZE_BLOCK = 512  # the shell's `ulimit -f` unit: the cap is enforced in whole blocks, one past it
STOPS = (_signal.SIGTERM, _signal.SIGHUP, _signal.SIGINT)
# What a python3 process ignores that a command must not (as the shell leaves them to it): a command
# writing past the cap dies of SIGXFSZ, as under `ulimit -f`, and one writing to a closed pipe of SIGPIPE
RESTORED = (_signal.SIGPIPE, _signal.SIGXFSZ)
DEFAULTED = STOPS + RESTORED + (_signal.SIGALRM,)  # in a command, whatever this process set them to
STAR, ANY = ord("*"), ord("?")
# One read's size, what `cat` asks for (reference 31.1): far below the 4 MiB at which /proc/sys refuses a
# read, and 65 reads at most for the 4 MiB cap
CHUNK = 64 * 1024


class _TimedOut(Exception):
    pass


_ARMED = [False]  # an alarm raises only inside _bounded's call: one that comes late is dropped
TIMED_OUT = object()
# The read end of the pipe the C signal handler writes each signal's number to as it arrives
# (``set_wakeup_fd``): a stop is seen there even when its Python handler never got to run.
_ARRIVED = [-1]
_ON_STOP = [None]  # the stop signals' handler, which _bounded also calls for a stop that the alarm cut short


def _alarm(signum, frame):
    if _ARMED[0]:
        raise _TimedOut()


def _bounded(call, seconds):
    """``call()``, or TIMED_OUT where it still blocked after ``seconds`` (SIGALRM cut it short).

    A Python signal handler runs between two bytecodes of whatever runs, another handler included: an
    alarm that comes while the stop's handler runs raises inside it, and the stop is lost (the reader
    would go on with its commands). So an alarm that ended a call looks for a stop among the signals
    that came, and stops the reader itself."""
    try:
        try:
            _ARMED[0] = True
            _signal.setitimer(_signal.ITIMER_REAL, max(seconds, 0.001))
            return call()
        finally:
            _ARMED[0] = False
            _signal.setitimer(_signal.ITIMER_REAL, 0)
    except _TimedOut:
        if _stop_arrived():
            _ON_STOP[0](_signal.SIGTERM, None)
        return TIMED_OUT


def _listen(on_stop):
    """Handlers for the alarm and the stops, and the pipe where the signals' numbers arrive. SIGCHLD
    back to its default: ignored (as an ignored signal passes through exec), a wait would never see a
    command's exit; and blocked, so that each exit stays pending until Commands takes it (a command starts
    with no signal blocked)."""
    _ARRIVED[0], told = os.pipe()
    for end in (_ARRIVED[0], told):
        os.set_blocking(end, False)
    try:
        _signal.set_wakeup_fd(told, warn_on_full_buffer=False)
    except TypeError:  # python 3.6; a byte arrives at most per stop and per late alarm: it never fills
        _signal.set_wakeup_fd(told)
    _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
    _signal.pthread_sigmask(_signal.SIG_BLOCK, (_signal.SIGCHLD,))
    _signal.signal(_signal.SIGALRM, _alarm)
    _ON_STOP[0] = on_stop
    for sig in STOPS:
        _signal.signal(sig, on_stop)


def _stop_arrived():
    """Whether a stop signal came since the last look (the pipe is drained)."""
    try:
        arrived = os.read(_ARRIVED[0], 1 << 16)  # a pipe holds 64 KiB: one read drains it
    except OSError:  # empty (EAGAIN)
        return False
    return any(number in STOPS for number in arrived)


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
    try:
        data = _bounded(lambda: _read_up_to(path, cap + 1), read_timeout)
    except OSError as exc:
        return "1", 0, b"", f"{os.fsdecode(path)}: {os.strerror(exc.errno or 5)}\n".encode()
    if data is TIMED_OUT:
        return "124", 0, b"", b""
    return "0", len(data), data[:cap], b""


def _read_up_to(path, limit):
    fd = os.open(path, os.O_RDONLY)
    try:
        return read_fd(fd, limit)
    finally:
        os.close(fd)


def read_fd(fd, limit):
    """Up to ``limit`` bytes from ``fd``, in reads of at most CHUNK (reference 31.1): /proc/sys answers a
    read of KMALLOC_MAX_SIZE (4 MiB) or more with ENOMEM, whatever the file holds, so one read of the whole
    cap + 1 failed on every real kernel (the shell's path reads with ``cat``, in such chunks already).
    Used for the commands' scratch files too, so no read of any kind asks the kernel for the whole cap."""
    parts, size = [], 0
    while size < limit:
        data = os.read(fd, min(CHUNK, limit - size))
        if not data:
            break
        parts.append(data)
        size += len(data)
    return b"".join(parts)


def _matches(name, pattern):
    """``*`` and ``?`` wildcards over one path component (bytes), as fnmatch has them."""
    n = p = 0
    star, mark = -1, 0
    while n < len(name):
        if p < len(pattern) and pattern[p] == STAR:
            star, mark, p = p, n, p + 1
        elif p < len(pattern) and pattern[p] in (ANY, name[n]):
            n, p = n + 1, p + 1
        elif star >= 0:
            mark += 1
            n, p = mark, star + 1
        else:
            return False
    while p < len(pattern) and pattern[p] == STAR:
        p += 1
    return p == len(pattern)


def expand(pattern):
    """The sorted paths an absolute pattern names, as ``sorted(glob.glob(pattern))`` gives them (but a
    ``//`` stays as written, as the shell keeps it, where glob folds it): a wildcard never matches a
    leading dot unless the pattern's own does; a dangling link is named. The
    glob module costs a node more than all its sysfs reads (it imports re), so ``*`` and ``?`` patterns -
    every sysfs pattern - are expanded here; any other is left to it."""
    if not pattern.startswith(b"/") or b"[" in pattern or b"\\" in pattern:
        import glob

        return sorted(glob.glob(pattern))
    paths = [b""]
    for part in pattern.split(b"/")[1:]:
        if STAR not in part and ANY not in part:
            paths = [path + b"/" + part for path in paths]
            continue
        found = []
        for path in paths:
            try:
                names = os.listdir(path or b"/")
            except OSError:
                continue
            found += [path + b"/" + name for name in names
                      if (name[:1] != b"." or part[:1] == b".") and _matches(name, part)]
        paths = found
    return sorted(path for path in paths if os.path.lexists(path))


def _scratch():
    """A file only this process (and the commands it starts) can reach: unlinked before anything is written.
    In $TMPDIR (else /tmp), else in /dev/shm (a container with a read-only root file system)."""
    failure = None
    for where in (os.environ.get("TMPDIR") or "/tmp", "/dev/shm"):
        try:
            return os.open(where, os.O_TMPFILE | os.O_RDWR, 0o600)
        except (AttributeError, OSError):
            pass
        try:
            path = os.path.join(where, f"k3doctor.{os.urandom(8).hex()}")
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
            os.unlink(path)
            return fd
        except OSError as exc:
            failure = exc
    raise failure


def _kill_group(pid, sig):
    try:
        os.killpg(pid, sig)
    except OSError:
        pass


def _exit_status(status):
    """A wait status as a shell reports it: the exit code, or 128 + the signal that killed it."""
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def _spawn(argv, out, err):
    """Start ``argv`` in a process group of its own (stdin /dev/null, stdout/stderr to ``out``/``err``), with
    the signals the command must get set back to default and none blocked; its pid, or the OSError its exec
    raised. The group is what the reader stops; it stays in the reader's session, so that whoever stops
    that session's groups (k3doctor/transport/local.py on Ctrl-C) reaches the command too, even where the
    reader itself was KILLed first. Not the subprocess module: it costs a node more to import than the
    commands it starts.
    posix_spawn (python 3.8 on) does not copy this process as fork does; called with the stop signals
    blocked, so neither way ever runs a handler of this process in the child. Descriptors the reader was
    given open past 2 would pass to the command, as in the shell's path; the script gives it none."""
    if hasattr(os, "posix_spawnp"):
        return os.posix_spawnp(argv[0], argv, os.environ, setpgroup=0, setsigmask=(), setsigdef=DEFAULTED,
                               file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                                             (os.POSIX_SPAWN_DUP2, out, 1), (os.POSIX_SPAWN_DUP2, err, 2)])
    return _fork_exec(argv, out, err)


def _fork_exec(argv, out, err):
    """``_spawn`` for a python before 3.8."""
    said, told = os.pipe()  # close-on-exec: empty when the exec succeeded, the errno when it did not
    parent = os.getpid()
    try:
        pid = os.fork()
        if pid == 0:
            try:
                for sig in DEFAULTED:
                    _signal.signal(sig, _signal.SIG_DFL)
                _signal.pthread_sigmask(_signal.SIG_SETMASK, ())
                os.setpgid(0, 0)
                os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
                os.dup2(out, 1)
                os.dup2(err, 2)
                os.execvp(argv[0], argv)
            except OSError as exc:
                os.write(told, str(exc.errno or errno.ENOEXEC).encode())
            finally:
                os._exit(127)
    except BaseException:
        if os.getpid() != parent:
            os._exit(127)
        os.close(said)
        raise
    finally:
        if os.getpid() == parent:
            os.close(told)
    try:
        failed = os.read(said, 64)
    finally:
        os.close(said)
    if failed:
        os.waitpid(pid, 0)
        code = int(failed)
        raise OSError(code, os.strerror(code))
    return pid


class _Job:
    """One command: its scratch files, and once started its pid (its group's id), what it waits for next
    (``due``: its timeout, then its KILL), and once ended its exit status as a shell reports it."""

    __slots__ = ("argv", "timeout", "out", "err", "pid", "due", "termed", "status", "failure")

    def __init__(self, timeout, argv, failure=None):
        self.timeout, self.argv = timeout, argv
        self.out = self.err = self.pid = self.due = self.status = None
        self.failure, self.termed = failure, False
        if failure is not None:  # a tool not found: never started, exit 127 as FIND_TOOL's
            self.status = 127


class Commands:
    """Runs a node's commands, up to ``in_flight`` readings at once (k3doctor/gather/node_script.py's
    ``reads_in_flight``, reference 31.5: a node's time is otherwise the *sum* of its slow GPU tools). The
    frames still go out in the records' order, so commands only start *ahead* of their turn: while the reader
    reads a file (itself one reading in flight) up to ``in_flight - 1`` of the next commands run, while it
    waits for a command up to ``in_flight``; 1 is the old order, one reading after another. A command ahead
    writes to scratch files of its own and is read back at its turn, so its output costs no memory meanwhile.

    Exits are awaited with SIGCHLD blocked and taken by ``sigtimedwait`` (no handler, so no race between a
    wait an alarm cut short and the status it reaped); each command's timeout and KILL are its own. A stop
    signal is held while a command starts; then it KILLs every command in flight with its group and ends the
    reader, in the handler itself: a stop that unwound the stack first could be cut short by the next
    (`timeout` passes a TERM on to the reader as well as its group)."""

    def __init__(self, cap, kill_after, in_flight, commands):
        self.cap, self.kill_after, self.in_flight = cap, kill_after, max(1, in_flight)
        self.queue, self.next = commands, 0  # [(position, _Job)] in the records' order; the next to start
        self.started, self.running, self.spare = {}, {}, []  # position -> job not yet taken; pid -> job
        self.spare.append((_scratch(), _scratch()))  # no writable scratch place: the reader says so at once

    def ahead(self, reading_files):
        """Start the next commands while a slot is free (one slot is the file being read, if one is)."""
        while self.next < len(self.queue) and len(self.running) < self.in_flight - reading_files:
            position, job = self.queue[self.next]
            self.next += 1
            self._start(job)
            self.started[position] = job

    def take(self, position):
        """(rc, total stdout bytes, stdout up to the cap, stderr up to the cap) of the command at ``position``
        (the next command in the records' order), as the shell's ``emit``: started now if it is not yet."""
        if position not in self.started:  # every command before it was taken: none runs
            self.ahead(False)
        job = self.started.pop(position)
        while job.status is None:
            self._advance()
            self.ahead(False)
        if job.failure is not None:
            result = job.status, 0, b"", job.failure
        else:
            result = job.status, os.fstat(job.out).st_size, self._head(job.out), self._head(job.err)
        if job.out is not None:
            self.spare.append((job.out, job.err))
        return result

    def _start(self, job):
        if job.status is not None:  # ended before it started (a tool not found)
            return
        job.out, job.err = self.spare.pop() if self.spare else (_scratch(), _scratch())
        for fd in (job.out, job.err):
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
        _signal.pthread_sigmask(_signal.SIG_BLOCK, STOPS)
        try:
            job.pid = _spawn(job.argv, job.out, job.err)
        except OSError as exc:  # as `timeout` says it: 127 not found, 126 found but not runnable
            job.status = 127 if exc.errno == errno.ENOENT else 126
            job.failure = f"k3doctor: failed to run command {job.argv[0]!r}: {exc.strerror}\n".encode()
        else:
            job.due = time.monotonic() + job.timeout
            self.running[job.pid] = job
        finally:
            _signal.pthread_sigmask(_signal.SIG_UNBLOCK, STOPS)  # a stop that came meanwhile ends it here

    def _advance(self):
        """Take every exit there is, act on every time that came (TERM and CONT at a command's timeout, as
        `timeout` does; KILL ``kill_after`` later), else sleep until the next exit or time."""
        moved = False
        for job in list(self.running.values()):
            done, status = os.waitpid(job.pid, os.WNOHANG)
            if done:  # ended by its TERM: 124 whatever it answered it with, as under `timeout`
                self._ended(job, 124 if job.termed else _exit_status(status))
                moved = True
        now = time.monotonic()
        for job in list(self.running.values()):
            if job.due > now:
                continue
            moved = True
            if not job.termed:
                _kill_group(job.pid, _signal.SIGTERM)
                _kill_group(job.pid, _signal.SIGCONT)
                job.termed, job.due = True, now + self.kill_after
            else:
                _kill_group(job.pid, _signal.SIGKILL)
                os.waitpid(job.pid, 0)
                self._ended(job, 137)
        if not moved and self.running:
            wait = min(job.due for job in self.running.values()) - now
            _signal.sigtimedwait((_signal.SIGCHLD,), max(wait, 0.001))

    def _ended(self, job, status):
        """KILL whatever of the command's group is left (a child that escaped the TERM, a daemon it left, or
        what is left of it when the command ended at its timeout), then count it ended."""
        _kill_group(job.pid, _signal.SIGKILL)
        job.status = status
        del self.running[job.pid]

    def on_stop(self, signum, frame):
        for pid in list(self.running):
            _kill_group(pid, _signal.SIGKILL)
        os._exit(143)

    def _head(self, fd):
        os.lseek(fd, 0, os.SEEK_SET)
        return read_fd(fd, self.cap)


# dash's PATH where the environment has none (it searches it, and its $PATH says it)
SHELL_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def find_tool(path):
    """(argv[0], None) for the tool configured as ``path``, as k3doctor/readings.py FIND_TOOL finds it in the
    shell (dash, the ``sh`` of Debian and Ubuntu): there if executable, else the first executable regular file of
    its name on PATH (dash's ``command -v`` passes over one that is not executable); else (None, the message
    FIND_TOOL prints, its bytes as the shell has them) - exit 127, the tool not run."""
    if os.access(path, os.X_OK):
        return path, None
    name, search = path.rsplit("/", 1)[-1], os.environ.get("PATH", SHELL_DEFAULT_PATH)
    for folder in search.split(":"):
        candidate = (folder or ".") + "/" + name
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate, None
    said = "k3doctor: %s is neither at %s nor on PATH (%s)\n" % (name, path, search)
    return None, said.encode("utf-8", "surrogateescape")


def _records(words):
    """(index, kind, what) from the RECORD words; ``what`` is a path, or (timeout, argv, failure) for a command
    (``T``: a tool found by :func:`find_tool`, ``C`` after it: ``failure`` the message of one not found)."""
    at = 0
    while at < len(words):
        index, kind = words[at], words[at + 1]
        if kind in ("C", "T"):
            count = int(words[at + 3])
            argv, failure = words[at + 4:at + 4 + count], None
            if kind == "T":
                found, failure = find_tool(argv[0])
                argv = [found or argv[0]] + argv[1:]
            yield index, "C", (float(words[at + 2]), argv, failure)
            at += 4 + count
        else:
            yield index, kind, words[at + 2]
            at += 3


def main(argv):
    nonce, cap, read_timeout, kill_after = argv[0], int(argv[1]), float(argv[2]), float(argv[3])
    in_flight, words = (int(argv[4][2:]), argv[5:]) if argv[4:5] and argv[4].startswith("-j") else (1, argv[4:])
    records = list(_records(words))
    try:
        commands = Commands(cap, kill_after, in_flight, [(at, _Job(*what)) for at, (_, kind, what)
                                                         in enumerate(records) if kind == "C"])
    except OSError:  # as the shell's scratch directory says it (k3doctor/gather/node_script.py)
        sys.stderr.write("k3doctor: no writable temporary directory (read-only root file system?)\n")
        sys.exit(97)
    _listen(commands.on_stop)
    limit = (cap // FSIZE_BLOCK + 1) * FSIZE_BLOCK  # the commands' files; this process writes only to a pipe
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    out = sys.stdout.buffer
    try:
        for at, (index, kind, what) in enumerate(records):
            if kind == "C":
                rc, total, data, err = commands.take(at)
                out.write(_frame(nonce, index, rc, total, data, err, b""))
                out.flush()
                continue
            commands.ahead(True)
            if kind == "E":
                out.write(_frame(nonce, index, 0 if os.path.exists(what) else "M", 0, b"", b"", b""))
            else:
                pattern = os.fsencode(what)
                for one in expand(pattern) if kind == "G" else [pattern]:
                    rc, total, data, err = read_one(one, cap, read_timeout)
                    out.write(_frame(nonce, index, rc, total, data, err, one))
                    out.flush()
                if kind == "G":
                    out.write(_frame(nonce, index, "END", 0, b"", b"", b""))
            out.flush()
    except BrokenPipeError:  # the client is gone: the commands ahead are stopped with the reader
        commands.on_stop(_signal.SIGPIPE, None)


if __name__ == "__main__":
    main(sys.argv[1:])
