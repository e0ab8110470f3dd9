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
- the runner (bash -p: the caller's BASH_ENV and exported functions do not touch it) sets the limits (processes,
  file size, CPU time, address space), runs the script under ``timeout``, lets background recorders finish,
  KILLs everything left and streams the records back through one capped file.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Programs that run as themselves: the shell and the text tools a launch script computes with (coreutils, sed,
# awk, grep, bc, jq), and the coreutils wrappers that pass their whole environment on (nohup, timeout, nice, xargs):
# what they start is looked up in the sandbox, so it is recorded with the environment they give it.
ALLOWED = ("bash", "sh", "awk", "sed", "grep", "egrep", "fgrep", "bc", "jq", "cut", "tr", "expr", "basename",
           "dirname", "head", "tail", "wc", "seq", "sort", "uniq", "cat", "date", "numfmt", "nproc", "hostname",
           "uname", "id", "whoami", "printenv", "nohup", "timeout", "nice", "xargs", "mkdir", "rm", "mv", "cp",
           "ln", "touch", "ls", "readlink", "realpath", "tee", "paste", "join", "comm", "tac", "rev", "fold", "od",
           "mktemp", "chmod", "stat", "yes", "printf", "echo", "true", "false", "test", "[", "pwd", "getconf",
           "sha256sum", "md5sum", "base64", "shuf", "find")
RUNNER_TOOLS = ("sleep",)  # the runner's own, bound under /.k3/tools only: to the script `sleep` is the recorder
SYSTEM_BIN = "/usr/bin:/bin"  # where the real tools are taken from (never the caller's PATH: it may shadow them)
BIN_DIRS = ("/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin", "/usr/local/sbin")
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/run", "/scratch")  # /scratch: the working directory
SYSTEM_TOPS = {"", "usr", "etc", "proc", "dev", "sys", "lib", "lib32", "lib64", "libx32", "bin", "sbin", ".k3"}
ETC_FILES = ("/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/localtime", "/etc/ld.so.cache")
K3 = "/.k3"  # the sandbox's own files: tools, recorder, runner, records
NOBODY = 65534
MAX_CALLS = 2000  # records kept; past it the recorder writes an OVERFLOW mark, and the diff is an ERROR
MAX_SCRATCH_DIRS = 16
SCRATCH_BYTES = 16 << 20  # each writable tmpfs
CALLS_BYTES = 32 << 20
LIMITS = {"nproc": 256, "fsize_kb": 32 << 10, "as_kb": 2 << 20}  # CPU: the timeout, rounded up, + 1 s
OUTPUT_BYTES = 64 << 20  # the runner's stream of records (a file: a script that floods it is cut, never read whole)
_PATH_TOKEN = re.compile(r"(?<![\w$}.])(/[A-Za-z0-9_.+@-]+(?:/[A-Za-z0-9_.+@-]+)*)")
_WORD = re.compile(r"(?<![\w./$-])([A-Za-z_][A-Za-z0-9_.+-]{0,63})(?![\w/=])")


class SandboxError(Exception):
    """The script could not be run contained: one line saying what is missing."""


@dataclass
class Call:
    argv: list
    env: dict
    files: dict  # --env-file path -> its text, as the program saw it


@dataclass
class ScriptRun:
    calls: list
    returncode: int | None  # None: ended by the deadline
    base_env: dict
    overflow: bool = False  # more calls than MAX_CALLS (or the record store filled): not all were read
    lost: bool = False  # the runner did not report (the script killed it): nothing it recorded is trusted


_RECORDER = r"""#!/.k3/tools/bash -p
# The recorder: every program that is not an allowed text tool. A `source`d copy (`. /opt/venv/bin/activate`)
# returns at once; run, it writes argv, the environment it got and any --env-file it names, and succeeds.
(return 0 2>/dev/null) && return 0
trap '' TERM INT HUP QUIT
d=/.k3/calls
n=("$d"/*.argv)
if (( ${#n[@]} > __MAX__ )); then : > "$d/OVERFLOW"; exit 0; fi
id=${EPOCHREALTIME//[.,]/}-$$
f=0 prev=
for a in "$@"; do
    p=
    [[ $prev == --env-file ]] && p=$a
    [[ $a == --env-file=* ]] && p=${a#--env-file=}
    if [[ -n $p && -f $p && -r $p ]]; then
        { printf '%s\0' "$p"; /.k3/tools/head -c 65536 -- "$p"; } > "$d/$id.file$f" || : > "$d/OVERFLOW"
        f=$((f + 1))
    fi
    prev=$a
done
/.k3/tools/cat /proc/$$/environ > "$d/$id.env" && printf '%s\0' "$0" "$@" > "$d/$id.argv" || : > "$d/OVERFLOW"
exit 0
"""

_PRELUDE = r"""# BASH_ENV of the script's shell: a name found in no directory is recorded like any other program.
command_not_found_handle() { /.k3/recorder "$@"; }
# Everything the script started is a recorder, ended with the run: `kill $SERVER_PID` at the end of a benchmark
# must not cut a record short, and `kill -0` (still running?) says no.
kill() { [ "$1" = "-0" ] && return 1; return 0; }
"""

_RUNNER = r"""# The runner (bash -p): limits, the script under timeout, its background recorders given the rest of the
# budget, then everything KILLed and the records streamed out. $1 script, $2 budget (s), $3 CPU (s), $4 deadline (us).
T=/.k3/tools
ulimit -u __NPROC__ -f __FSIZE__ -v __AS__ -t "$3" 2>/dev/null || { echo "LIMITS"; exit 0; }
BASH_ENV=/.k3/prelude.sh "$T/timeout" -k 0.2 "$2" "$T/bash" --noprofile --norc "$1" </dev/null >/dev/null 2>&1
rc=$?
others() {
    local d s
    for d in /proc/[0-9]*; do
        [[ ${d#/proc/} == @(1|$$|$BASHPID) ]] && continue
        read -r s 2>/dev/null < "$d/stat" || continue  # a builtin: no fork, so it works under a fork bomb
        [[ $s == *") Z "* ]] || return 0
    done
    return 1
}
while others && (( ${EPOCHREALTIME//[.,]/} < $4 )); do "$T/sleep" 0.02; done
for i in 1 2 3 4 5 6 7 8; do kill -KILL -1 2>/dev/null; done  # again: what a fork bomb forked meanwhile
printf 'X %d\n' "$rc"
[[ -e /.k3/calls/OVERFLOW ]] && printf 'O\n'
files=()
for f in /.k3/calls/*; do [[ -f $f && $f != */OVERFLOW ]] && files+=("$f"); done
if (( ${#files[@]} )); then  # two forks for any number of records: an index of sizes, then the bytes
    "$T/wc" -c -- "${files[@]}" | while read -r size name; do
        [[ $name == /.k3/calls/* ]] && printf 'I %s %d\n' "${name##*/}" "$size"
    done
    printf 'D\n'
    "$T/cat" -- "${files[@]}"
fi
printf '\nEND\n'
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
    for name in (*ALLOWED, *RUNNER_TOOLS):
        found = shutil.which(name, path=SYSTEM_BIN)
        if found:
            out[name] = os.path.realpath(found)
    if "bash" not in out:
        raise SandboxError("bash is needed to resolve a launch script and there is none in /usr/bin or /bin")
    return out


@functools.cache
def _libraries() -> tuple:
    """Every shared object the allowed tools load (ldd's paths and their targets): the only library files bound.
    One ldd for all of them (one per tool cost a second)."""
    try:
        out = subprocess.run(["ldd", *sorted(set(_tools().values()))], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxError(f"ldd could not list the libraries of the sandbox's tools ({exc})") from None
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


def _layout(text: str, env: dict, host: str) -> list:
    """bwrap's arguments for the sandbox's filesystem (see the module docstring); ``host``/bin is filled with the
    symlinks every bin directory shows (bound read-only at each: one mount per directory, not one per name)."""
    tools = _tools()
    paths, words = _mentioned(text)
    caller_path = [d for d in env.get("PATH", "").split(":") if d.startswith("/")]
    commands = {p for p in paths if os.access(p, os.X_OK) and os.path.isfile(p) or "/bin/" in p}
    bin_dirs = list(dict.fromkeys([*BIN_DIRS, *caller_path, *(os.path.dirname(p) for p in commands)]))
    bin_dirs = [d for d in bin_dirs if d.split("/")[1] not in SYSTEM_TOPS - {"usr", "bin", "sbin"}
                and not d.startswith(("/usr/lib", "/usr/share", "/usr/include", K3))]
    names = (_host_names(bin_dirs) | {w for w in words if len(w) > 1} | {os.path.basename(p) for p in commands}) \
        - {".", ".."}
    args = ["--dir", K3, "--dir", f"{K3}/tools"]
    for lib in _libraries():
        args += ["--ro-bind", lib, lib]
    for name, real in tools.items():
        args += ["--ro-bind", real, f"{K3}/tools/{name}"]
    for f in ETC_FILES:
        if os.path.exists(f):
            args += ["--ro-bind", f, f]
    args += ["--proc", "/proc", "--dev", "/dev"]
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
    args += ["--size", str(CALLS_BYTES), "--tmpfs", f"{K3}/calls"]
    return args


def run(script: str, env: dict, timeout_s: float) -> ScriptRun:
    """Run ``script`` contained, ``env`` as its environment, for at most ``timeout_s`` seconds (plus the grace
    that KILLs what is left); what it tried to start comes back as Calls."""
    exe = bwrap()
    script = os.path.abspath(script)
    try:
        text = Path(script).read_text(errors="replace")
    except OSError as exc:
        raise SandboxError(f"--script {script}: {exc.strerror}") from None
    drop = os.geteuid() == 0
    # in memory where there is /dev/shm: the bin directory is ~2,000 symlinks, seconds on some disks
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK | os.X_OK) else None
    with tempfile.TemporaryDirectory(prefix="k3doctor-sandbox-", dir=shm) as host:
        os.chmod(host, 0o755)
        files = {"recorder": (_RECORDER.replace("__MAX__", str(MAX_CALLS)), 0o755), "prelude.sh": (_PRELUDE, 0o644),
                 "runner.sh": (_RUNNER.replace("__NPROC__", str(LIMITS["nproc"]))
                               .replace("__FSIZE__", str(LIMITS["fsize_kb"])).replace("__AS__", str(LIMITS["as_kb"])),
                               0o644), "script": (text, 0o644)}
        for name, (content, mode) in files.items():
            with open(os.path.join(host, name), "w") as fh:
                fh.write(content)
            os.chmod(os.path.join(host, name), mode)
        args = ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
                *_layout(text, env, host),
                "--ro-bind", f"{host}/recorder", f"{K3}/recorder", "--ro-bind", f"{host}/prelude.sh",
                f"{K3}/prelude.sh", "--ro-bind", f"{host}/runner.sh", f"{K3}/runner.sh"]
        if not drop or _open_to_others(os.path.dirname(script)):  # its siblings (`. "$(dirname "$0")/env.sh"`)
            args += ["--ro-bind", os.path.dirname(script), os.path.dirname(script)]
        args += ["--ro-bind", f"{host}/script", script, "--chdir", "/scratch"]
        out_path, err_path = os.path.join(host, "records"), os.path.join(host, "errors")
        budget = f"{timeout_s:.3f}"
        deadline_us = "$(( ${EPOCHREALTIME//[.,]/} + %d ))" % int(timeout_s * 1e6)
        argv = [exe, *args, "--", f"{K3}/tools/bash", "-p", "-c",
                f'exec {K3}/tools/bash -p {K3}/runner.sh "$1" "$2" "$3" {deadline_us}', "runner", script, budget,
                str(int(timeout_s) + 2)]
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    start_new_session=True,
                                    **({"user": NOBODY, "group": NOBODY, "extra_groups": []} if drop else {}))
        try:
            proc.wait(timeout=timeout_s + 5)
        except subprocess.TimeoutExpired:  # the runner was stopped or killed: bwrap's KILL ends them all
            proc.kill()
            proc.wait()
        with open(err_path, "rb") as fh:
            return _read(out_path, proc.returncode, fh.read(4096), env)


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


def parse_records(data: bytes, env: dict) -> ScriptRun:
    """The runner's stream: ``X rc``, ``O`` (overflow), ``F name size`` + bytes per record file, ``END``."""
    pos, rc, overflow, files, index = 0, None, False, {}, []
    lost = True
    while pos < len(data):
        nl = data.find(b"\n", pos)
        if nl < 0:
            break
        head, pos = data[pos:nl].decode("ascii", "replace").split(), nl + 1
        if head[:1] == ["X"] and len(head) == 2 and head[1].isdigit():
            rc = int(head[1])
        elif head == ["O"]:
            overflow = True
        elif head[:1] == ["I"] and len(head) == 3 and head[2].isdigit():
            index.append((head[1], int(head[2])))
        elif head == ["D"]:
            for name, size in index:
                files[name], pos = data[pos:pos + size], pos + size
        elif head == [] and files:
            continue
        elif head == ["END"]:
            lost = False
            break
        else:
            break
    calls = []
    for name in sorted((n for n in files if n.endswith(".argv")), key=_order):
        stem = name[:-len(".argv")]
        if f"{stem}.env" not in files:
            continue
        argv = [w.decode("utf-8", "replace") for w in files[name].split(b"\0")[:-1]]
        call_env = dict(e.decode("utf-8", "replace").split("=", 1) for e in files[f"{stem}.env"].split(b"\0")
                        if b"=" in e)
        attached = {}
        for key in (k for k in files if k.startswith(f"{stem}.file")):
            where, _, content = files[key].partition(b"\0")
            attached[where.decode("utf-8", "replace")] = content.decode("utf-8", "replace")
        calls.append(Call(argv, call_env, attached))
    timed_out = rc in (124, 137) or rc is None
    return ScriptRun(calls=calls[:MAX_CALLS], returncode=None if timed_out else rc, base_env=dict(env),
                     overflow=overflow or len(calls) > MAX_CALLS, lost=lost)


def _order(name: str) -> tuple:
    stamp, _, pid = name.split(".", 1)[0].partition("-")
    return (int(stamp) if stamp.isdigit() else 0, int(pid) if pid.isdigit() else 0)
