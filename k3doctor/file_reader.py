"""Every File and Glob reading of a node in one process (the gather script runs this file with the node's
``python3 -I -S -c``): sysfs holds a few hundred small files, and one process per file was most of a
node's work. It prints the gather script's frames itself (k3doctor/gather.py), one whole frame per
write, so a reader killed at the node deadline leaves at most its last frame cut off.

Run as ``python3 -c SOURCE NONCE CAP READ_TIMEOUT INDEX KIND PATH ...`` (KIND ``F`` file, ``G`` glob).
Written for any python3 a node may have (3.6 on): standard library only, nothing past 3.6.
"""
import glob
import os
import signal
import sys


class _TimedOut(Exception):
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


def main(argv):
    nonce, cap, read_timeout = argv[0], int(argv[1]), float(argv[2])
    signal.signal(signal.SIGALRM, _alarm)
    out = sys.stdout.buffer
    specs = argv[3:]
    for at in range(0, len(specs) - 2, 3):
        index, kind, path = specs[at], specs[at + 1], os.fsencode(specs[at + 2])
        paths = sorted(glob.glob(path)) if kind == "G" else [path]
        for one in paths:
            rc, total, data, err = read_one(one, cap, read_timeout)
            out.write(_frame(nonce, index, rc, total, data, err, one))
            out.flush()
        if kind == "G":
            out.write(_frame(nonce, index, "END", 0, b"", b"", b""))
            out.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
