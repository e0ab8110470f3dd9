"""Running a launch script's shell logic where the machine is out of its reach (`recipe diff --script`).

Mechanism: bubblewrap (``bwrap``, Debian/Ubuntu/RHEL package ``bubblewrap``), the sandbox Flatpak is built on. It
needs no daemon and no privilege: it runs from user namespaces on a login node and as root on a CI runner, which
is where `recipe diff` runs; util-linux ``unshare`` would need the mount plumbing written by hand (and root for
most of it), systemd-run's sandboxing needs a systemd user session and the Docker engine a daemon and an image.
Without bwrap, or where user namespaces are off, the script is not run (exit 3, one line naming what is missing).

Inside (everything private to the run, gone with it):
- its own user, mount, PID, network, IPC, UTS and cgroup namespaces (``--unshare-all``): no network, and every
  process it starts dies with the run (the PID namespace ends when the runner does; ``--die-with-parent``);
- as root, k3doctor first becomes uid/gid 65534 (nobody) on the host, so nothing inside holds a privilege the
  kernel honours, and RLIMIT_NPROC counts (root is exempt from it);
- the filesystem is a fresh root holding only: the shared libraries the allowed tools load (read-only), a few
  /etc files, /proc and a minimal /dev, the script (and its directory, read-only), and size-capped tmpfs
  scratch at /tmp, /var/tmp, /run, $HOME, the working directory and each top-level directory the script names
  (/data, /workspace, ...): writes land there and vanish;
- every bin directory (/usr/bin, /bin, the caller's PATH, the directory of every absolute command path in the
  script's text) is a tmpfs of symlinks: the ALLOWED text tools point at the real programs, every other name a
  host bin directory has or the script mentions points at the recorder, which writes its argv and environment
  and exits 0 (so ``until curl .../health`` ends at once); a name found nowhere reaches bash's
  ``command_not_found_handle``, which records it too;
- the root, /dev and every directory bwrap made are read-only (--remount-ro): nothing is written outside the
  size-capped tmpfs mounts, /dev/shm included;
- the recorder is O(1) and never forks: it writes one record file per call with bash builtins (mapfile of its
  /proc/PID/environ, read -N of an --env-file) on a size-capped tmpfs; the records are counted by k3doctor;
- the runner is the sandbox's PID 1 (--as-pid-1: nothing inside can signal it; when it ends, the kernel KILLs
  everything left) and bash -p (the caller's BASH_ENV and exported functions do not touch it): it sets the limits
  (processes, file size, CPU time, address space), runs the script under ``timeout`` with its stderr in a capped
  file, lets background recorders finish, KILLs everything left and copies the records and the stderr's head out
  with builtins only - under a fork bomb nothing can fork, and nothing of that needs to.
The runner's stream is read back by k3doctor/recipes/records.py.
The script's shell traces every command it runs, expanded (``set -x`` to a file of the sandbox's own, never to the
script's output); k3doctor reads from the trace only the absolute paths run as programs. One the sandbox did not
have (a path built at run time, ``p=/opt/venv; $p/bin/python3``, in a directory the script's text never names) is
recorded by running the script once more with that directory made a bin directory of the recorder; one that
cannot be made (under /lib, /etc, ...) is an ERROR naming it. The stderr's head is read only for bash's own
messages of a bound the script ran into (process limit, file size, CPU time), never shown.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import stat
import struct
import subprocess
import tempfile
from pathlib import Path

from k3doctor.recipes.records import CALLS_BYTES, LIMITS, ScriptRun, parse_records

# Programs that run as themselves: the shell and the text tools a launch script computes with (coreutils, sed,
# awk, grep, bc, jq), and the coreutils wrappers that pass their whole environment on (nohup, timeout, nice, xargs):
# what they start is looked up in the sandbox, so it is recorded with the environment they give it.
ALLOWED = ("bash", "sh", "awk", "sed", "grep", "egrep", "fgrep", "bc", "jq", "cut", "tr", "expr", "basename",
           "dirname", "head", "tail", "wc", "seq", "sort", "uniq", "cat", "date", "numfmt", "nproc", "hostname",
           "uname", "id", "whoami", "printenv", "nohup", "timeout", "nice", "xargs", "mkdir", "rm", "mv", "cp",
           "ln", "touch", "ls", "readlink", "realpath", "tee", "paste", "join", "comm", "tac", "rev", "fold", "od",
           "mktemp", "chmod", "stat", "yes", "printf", "echo", "true", "false", "test", "[", "pwd", "getconf",
           "sha256sum", "md5sum", "base64", "shuf", "find")
SYSTEM_BIN = "/usr/bin:/bin"  # where the real tools are taken from (never the caller's PATH: it may shadow them)
BIN_DIRS = ("/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin", "/usr/local/sbin")
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/run", "/scratch")  # /scratch: the working directory
SYSTEM_TOPS = {"", "usr", "etc", "proc", "dev", "sys", "lib", "lib32", "lib64", "libx32", "bin", "sbin", ".k3"}
ETC_FILES = ("/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/localtime", "/etc/ld.so.cache")
K3 = "/.k3"  # the sandbox's own files: tools, recorder, runner, records
NOBODY = 65534
MAX_SCRATCH_DIRS = 16
SCRATCH_BYTES = 16 << 20  # each writable tmpfs
STDERR_BYTES, STDERR_HEAD = 1 << 20, 65536  # the script's stderr (read for bash's messages of a bound)
TRACE_BYTES, TRACE_HEAD = 4 << 20, 1 << 20  # its shell's trace (read for the programs it ran): apart, so that a
# trace that fills its store cannot keep a bound's message out of the stderr's
MAX_RERUN_DIRS = 16  # directories of absolute paths the script could not run, made bin directories on a rerun
OUTPUT_BYTES = 64 << 20  # the runner's stream of records (a file: a script that floods it is cut, never read whole)
_PATH_TOKEN = re.compile(r"(?<![\w$}.])(/[A-Za-z0-9_.+@-]+(?:/[A-Za-z0-9_.+@-]+)*)")
_WORD = re.compile(r"(?<![\w./$-])([A-Za-z_][A-Za-z0-9_.+-]{0,63})(?![\w/=])")


class SandboxError(Exception):
    """The script could not be run contained: one line saying what is missing."""


_RECORDER = r"""#!/.k3/tools/bash -p
# The recorder: every program that is not an allowed text tool. A `source`d copy (`. /opt/venv/bin/activate`)
# returns at once; run, it writes argv, the environment it got and any --env-file it names as one record file, and
# succeeds. Builtins only and no count of the records: one fork per call (the caller's), whatever came before.
return 0 2>/dev/null
trap '' TERM INT HUP QUIT XFSZ
if [[ $0 == /.k3/recorder ]]; then argv=("$@"); else argv=("$0" "$@"); fi  # via command_not_found_handle
files=() prev=
for a in "$@"; do
    p=
    [[ $prev == --env-file ]] && p=$a
    [[ $a == --env-file=* ]] && p=${a#--env-file=}
    if [[ -n $p && -f $p && -r $p ]]; then
        text=
        IFS= read -r -d '' -N 65536 text < "$p"
        files+=("$p" "$text")
    fi
    prev=$a
done
mapfile -d '' -t env < /proc/$$/environ
printf '%s\0' K3REC "${#argv[@]}" "${argv[@]}" "${#env[@]}" "${env[@]}" "$(( ${#files[@]} / 2 ))" "${files[@]}" \
    END > "/.k3/calls/${EPOCHREALTIME//[.,]/}-$$.rec" 2>/dev/null || : > /.k3/calls/OVERFLOW
exit 0
"""

_PRELUDE = r"""# BASH_ENV of the script's shell: a name found in no directory is recorded like any other program; every
# command is traced, expanded, to the sandbox's own file (an absolute path the sandbox lacks is found there).
command_not_found_handle() { /.k3/recorder "$@"; }
if exec 99>>/.k3/trace/trace; then BASH_XTRACEFD=99; set -x; fi 2>/dev/null
# Everything the script started is a recorder, ended with the run: `kill $SERVER_PID` at the end of a benchmark
# must not cut a record short, and `kill -0` (still running?) says no.
kill() { [ "$1" = "-0" ] && return 1; return 0; }
"""

_RUNNER = r"""# The runner (bash -p, PID 1): limits, the script under timeout, its background recorders given the rest of the
# budget, then everything KILLed and the records copied out - no fork after the script: a fork bomb leaves none.
# $1 script, $2 budget (s), $3 CPU (s), $4 deadline (us); stdin: k3doctor's pipe, never written (read -t waits on it)
T=/.k3/tools
ulimit -u __NPROC__ -f __FSIZE__ -v __AS__ -t "$3" 2>/dev/null || { echo "LIMITS"; exit 0; }
BASH_ENV=/.k3/prelude.sh "$T/timeout" -k 0.2 "$2" "$T/bash" --noprofile --norc "$1" </dev/null >/dev/null \
    2>/.k3/err/stderr
rc=$?
others() {
    local d s
    for d in /proc/[0-9]*; do
        [[ ${d#/proc/} == @(1|$$|$BASHPID) ]] && continue
        read -r s 2>/dev/null < "$d/stat" || continue
        [[ $s == *") Z "* ]] || return 0
    done
    return 1
}
while others && (( ${EPOCHREALTIME//[.,]/} < $4 )); do read -r -t 0.02 -u 0; done
for i in 1 2 3 4 5 6 7 8; do kill -KILL -1 2>/dev/null; done  # again: what a fork bomb forked meanwhile
printf 'X %d\n' "$rc"
[[ -e /.k3/calls/OVERFLOW ]] && printf 'O\n'
err=
IFS= read -r -d '' -N __HEAD__ err < /.k3/err/stderr
printf 'E\n%s\0' "$err"
trace=
IFS= read -r -d '' -N __TRACE__ trace < /.k3/trace/trace
printf 'T\n%s\0' "$trace"
for f in /.k3/calls/*.rec; do
    [[ -f $f ]] || continue
    r=()
    mapfile -d '' -t r < "$f"
    printf 'R %s %d\n' "${f##*/}" "${#r[@]}"
    (( ${#r[@]} )) && printf '%s\0' "${r[@]}"
done
printf 'END\n'
"""


def bwrap() -> str:
    path = shutil.which("bwrap")
    if not path:
        raise SandboxError("`recipe diff --script` runs the script in a bubblewrap sandbox and `bwrap` is not "
                           "installed (apt-get install bubblewrap / dnf install bubblewrap)")
    return path


@functools.cache
def _tools() -> dict:
    """{name: real path} of the allowed tools this machine has."""
    out = {}
    for name in ALLOWED:
        found = shutil.which(name, path=SYSTEM_BIN)
        if found:
            out[name] = os.path.realpath(found)
    if "bash" not in out:
        raise SandboxError("bash is needed to resolve a launch script and there is none in /usr/bin or /bin")
    return out


def _interpreter(path: str) -> str | None:
    """The ELF program interpreter (PT_INTERP) of a 64-bit little-endian executable, else None."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
            if len(head) < 64 or head[:6] != b"\x7fELF\x02\x01":
                return None
            (phoff,), (phentsize, phnum) = struct.unpack_from("<Q", head, 32), struct.unpack_from("<HH", head, 54)
            fh.seek(phoff)
            table = fh.read(phentsize * phnum)
            for i in range(0, len(table) - 55, phentsize):
                if struct.unpack_from("<I", table, i)[0] == 3:  # PT_INTERP
                    offset, size = struct.unpack_from("<Q", table, i + 8)[0], struct.unpack_from("<Q", table, i + 32)[0]
                    fh.seek(offset)
                    return fh.read(min(size, 4096)).rstrip(b"\0").decode("utf-8", "replace")
    except (OSError, struct.error):
        return None
    return None


@functools.cache
def _libraries() -> tuple:
    """Every shared object the allowed tools load (their paths and targets): the only library files bound. Listed by
    each tool's own program interpreter (``ld.so --list``, one exec a tool, ~0.1 s for all); ldd, which runs each
    twice through a shell, took ~0.5 s of every `recipe diff --script` - still the fallback where a tool has no
    readable interpreter."""
    tools = sorted(set(_tools().values()))
    loaders = {t: _interpreter(t) for t in tools}
    try:
        if all(loaders.values()):
            out = "".join(subprocess.run([loaders[t], "--list", t], capture_output=True, text=True, timeout=30).stdout
                          for t in tools)
        else:
            out = subprocess.run(["ldd", *tools], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxError(f"the libraries of the sandbox's tools could not be listed ({exc})") from None
    found = set()
    for line in out.splitlines():
        words = line.split()
        lib = words[2] if len(words) > 2 and words[1] == "=>" else words[0] if words else ""
        if lib.startswith("/") and not lib.endswith(":") and os.path.exists(lib):
            found.update({lib, os.path.realpath(lib)})
    return tuple(sorted(found))


def _mentioned(text: str) -> tuple:
    """(absolute paths, bare words) in the script's text: where a command may be looked for besides PATH."""
    return set(_PATH_TOKEN.findall(text)), set(_WORD.findall(text))


def _host_names(dirs) -> set:
    names = set()
    for d in dirs:
        try:
            names.update(e.name for e in os.scandir(d) if "/" not in e.name)
        except OSError:
            continue
    return names


def _layout(text: str, env: dict, host: str, extra: tuple = ()) -> tuple:
    """bwrap's arguments for the sandbox's filesystem (see the module docstring); ``host``/bin is filled with the
    symlinks every bin directory shows (bound read-only at each: one mount per directory, not one per name).
    ``extra``: absolute paths a first run could not run (their directories become bin directories too).
    Returns (the arguments, a test of whether an absolute path the script ran existed as a program in it)."""
    tools = _tools()
    paths, words = _mentioned(text)
    caller_path = [d for d in env.get("PATH", "").split(":") if d.startswith("/")]
    commands = {p for p in paths if os.access(p, os.X_OK) and os.path.isfile(p) or "/bin/" in p} | set(extra)
    bin_dirs = list(dict.fromkeys([*BIN_DIRS, *caller_path, *(os.path.dirname(p) for p in sorted(commands))]))
    bin_dirs = [d for d in bin_dirs if _may_be_bin(d)]
    names = (_host_names(bin_dirs) | {w for w in words if len(w) > 1} | {os.path.basename(p) for p in commands}) \
        - {".", "..", ""}
    args = ["--dir", K3, "--dir", f"{K3}/tools"]
    for lib in _libraries():
        args += ["--ro-bind", lib, lib]
    for name, real in tools.items():
        args += ["--ro-bind", real, f"{K3}/tools/{name}"]
    for f in ETC_FILES:
        if os.path.exists(f):
            args += ["--ro-bind", f, f]
    args += ["--proc", "/proc", "--dev", "/dev", "--size", str(SCRATCH_BYTES), "--tmpfs", "/dev/shm",
             "--remount-ro", "/dev"]
    home = env.get("HOME", "")
    tops = [f"/{p.split('/')[1]}" for p in sorted(paths) if p.split("/")[1] not in SYSTEM_TOPS]
    scratch = list(dict.fromkeys([*SCRATCH_DIRS, *([home] if home.startswith("/") and home != "/" else []), *tops]))
    for d in scratch[:MAX_SCRATCH_DIRS]:
        args += ["--size", str(SCRATCH_BYTES), "--tmpfs", d]
    links = os.path.join(host, "bin")
    os.mkdir(links)
    for name in names:
        real = name in ALLOWED and name in tools
        os.symlink(f"{K3}/tools/{name}" if real else f"{K3}/recorder", os.path.join(links, name))
    for d in bin_dirs:
        args += ["--ro-bind", links, d]
    args += ["--size", str(CALLS_BYTES), "--tmpfs", f"{K3}/calls", "--size", str(STDERR_BYTES), "--tmpfs", f"{K3}/err",
             "--size", str(TRACE_BYTES), "--tmpfs", f"{K3}/trace"]
    made = tuple(scratch[:MAX_SCRATCH_DIRS])  # the script may have made a program there itself

    def had(path: str) -> bool:
        where = os.path.dirname(path)
        return (where in bin_dirs and os.path.basename(path) in names) or path.startswith((f"{K3}/", "/proc/")) \
            or any(path.startswith(d + "/") for d in made)
    return args, had


def run(script: str, env: dict, timeout_s: float) -> ScriptRun:
    """Run ``script`` contained, ``env`` as its environment, for at most ``timeout_s`` seconds (plus the grace
    that KILLs what is left); what it tried to start comes back as Calls. A script that tried to run absolute
    paths the sandbox did not have (built at run time) is run once more with their directories made bin
    directories (so up to twice ``timeout_s``); a path still missing is named in ``missing`` and ``errors``."""
    exe = bwrap()
    script = os.path.abspath(script)
    try:
        text = Path(script).read_text(errors="replace")
    except OSError as exc:
        raise SandboxError(f"--script {script}: {exc.strerror}") from None
    ran = _run_once(exe, script, text, env, timeout_s, ())
    rerun = tuple(p for p in ran.missing if _may_be_bin(os.path.dirname(p)))[:MAX_RERUN_DIRS]
    if rerun:
        ran = _run_once(exe, script, text, env, timeout_s, rerun)
    if ran.missing:
        ran.errors.append("the script tried to run a program that does not exist inside the sandbox: " +
                          ", ".join(ran.missing[:8]) + " (what it would have started is not recorded)")
    return ran


def _may_be_bin(directory: str) -> bool:
    """Whether a directory may be made a bin directory of the recorder: never / itself, the sandbox's own files,
    /etc, /proc, /dev, /sys or the library trees the allowed tools load from (they are bound as they are)."""
    top = directory.split("/")[1] if directory.startswith("/") and directory != "/" else ""
    return bool(top) and top not in SYSTEM_TOPS - {"usr", "bin", "sbin"} and \
        not directory.startswith(("/usr/lib", "/usr/share", "/usr/include", K3))


def _run_once(exe: str, script: str, text: str, env: dict, timeout_s: float, extra: tuple) -> ScriptRun:
    drop = os.geteuid() == 0
    # in memory where there is /dev/shm: the bin directory is ~2,000 symlinks, seconds on some disks
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK | os.X_OK) else None
    with tempfile.TemporaryDirectory(prefix="k3doctor-sandbox-", dir=shm) as host:
        os.chmod(host, 0o755)
        runner = _RUNNER.replace("__NPROC__", str(LIMITS["nproc"])).replace("__FSIZE__", str(LIMITS["fsize_kb"])) \
            .replace("__AS__", str(LIMITS["as_kb"])).replace("__HEAD__", str(STDERR_HEAD)) \
            .replace("__TRACE__", str(TRACE_HEAD))
        layout, had = _layout(text, env, host, extra)
        files = {"recorder": (_RECORDER, 0o755), "prelude.sh": (_PRELUDE, 0o644), "runner.sh": (runner, 0o644),
                 "script": (text, 0o644)}
        for name, (content, mode) in files.items():
            with open(os.path.join(host, name), "w") as fh:
                fh.write(content)
            os.chmod(os.path.join(host, name), mode)
        args = ["--unshare-all", "--die-with-parent", "--new-session", "--as-pid-1", "--cap-drop", "ALL",
                *layout,
                "--ro-bind", f"{host}/recorder", f"{K3}/recorder", "--ro-bind", f"{host}/prelude.sh",
                f"{K3}/prelude.sh", "--ro-bind", f"{host}/runner.sh", f"{K3}/runner.sh"]
        if not drop or _open_to_others(os.path.dirname(script)):  # its siblings (`. "$(dirname "$0")/env.sh"`)
            args += ["--ro-bind", os.path.dirname(script), os.path.dirname(script)]
        args += ["--ro-bind", f"{host}/script", script, "--remount-ro", "/", "--chdir", "/scratch"]
        out_path, err_path = os.path.join(host, "records"), os.path.join(host, "errors")
        budget = f"{timeout_s:.3f}"
        deadline_us = "$(( ${EPOCHREALTIME//[.,]/} + %d ))" % int(timeout_s * 1e6)
        argv = [exe, *args, "--", f"{K3}/tools/bash", "-p", "-c",
                f'exec {K3}/tools/bash -p {K3}/runner.sh "$1" "$2" "$3" {deadline_us}', "runner", script, budget,
                str(int(timeout_s) + 2)]
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=out, stderr=err,
                                    start_new_session=True,
                                    **({"user": NOBODY, "group": NOBODY, "extra_groups": []} if drop else {}))
        try:  # stdin stays open and unwritten: the runner waits on it (read -t), a builtin, never a fork
            proc.wait(timeout=timeout_s + 5)
        except subprocess.TimeoutExpired:  # the runner was stopped: bwrap's KILL ends them all
            proc.kill()
            proc.wait()
        finally:
            proc.stdin.close()
        with open(err_path, "rb") as fh:
            ran = _read(out_path, proc.returncode, fh.read(4096), env)
    script_dir = os.path.dirname(script) + "/"
    ran.missing = [p for p in ran.traced if not had(p) and not p.startswith(script_dir)]
    return ran


def _open_to_others(path: str) -> bool:
    """Whether uid nobody may list ``path`` (bwrap, run as nobody when k3doctor is root, binds it as nobody)."""
    parts = os.path.abspath(path).split("/")
    try:
        for i in range(1, len(parts) + 1):
            mode = os.stat("/".join(parts[:i]) or "/").st_mode
            if not mode & stat.S_IXOTH:
                return False
        return bool(mode & stat.S_IROTH)
    except OSError:
        return False


def _read(path: str, bwrap_rc: int, err: bytes, env: dict) -> ScriptRun:
    with open(path, "rb") as fh:
        data = fh.read(OUTPUT_BYTES + 1)
    if not data and bwrap_rc != 0 and err.startswith(b"bwrap:"):
        line = next((ln for ln in err.decode("utf-8", "replace").splitlines() if ln.strip()), f"exit {bwrap_rc}")
        raise SandboxError(f"the bubblewrap sandbox could not start ({line[:200]}); user namespaces may be off "
                           "(sysctl kernel.unprivileged_userns_clone / user.max_user_namespaces, AppArmor's "
                           "apparmor_restrict_unprivileged_userns)")
    if data.startswith(b"LIMITS"):
        raise SandboxError("the sandbox could not set its resource limits (ulimit -u/-f/-v/-t)")
    return parse_records(data, env)
