"""Which recorded program is the model server, and the environment it really gets (`recipe diff`).

The server is a process whose *program and module* are an entry point: python (any name python, python3,
python3.12, any path) with ``-m atom.entrypoints...`` / ``-m vllm.entrypoints...`` / ``-m sglang.launch_server``,
``vllm serve``, the ``atom`` console script - directly or behind wrappers. An argv that merely contains the
string (``pkill -f atom.entrypoints``, ``pgrep``, ``watch pgrep -af ...``) is not one.

Wrappers are peeled one by one, each with what it does to the environment: ``docker|podman run`` passes only
``-e``/``--env``/``--env-file`` (NAME alone: the caller's value), ``srun`` exports everything by default,
``--export=NONE`` nothing, ``--export=ALL,A=1`` everything plus A, ``--export=A,B=2`` only those; ``ssh host CMD``
passes nothing (the remote shell's), ``mpirun -x A[=v]`` / ``mpiexec -genv A v`` add; ``env -i A=1``, ``bash -c``
and ``export`` in a command string are read; numactl, taskset, chrt, stdbuf, setsid, torchrun pass everything.
(nohup, timeout and nice run for real in the sandbox and pass everything; env is recorded, so its -i is named.)
A variable the script exported that a wrapper did not pass is *dropped by* that wrapper, and the diff says so.
"""
from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field

PYTHON = re.compile(r"python(?:\d+(?:\.\d+)*)?$")
SERVER_MODULES = ("atom.entrypoints", "vllm.entrypoints", "sglang.launch_server")
CLIENT_PROGRAMS = ("aiperf",)
# Names the caller's shell or the sandbox sets: never a difference of the launch (BASH_FUNC_*%%: exported shell
# functions, Lmod's `module` and `ml`).
SHELL_NAMES = {"PATH", "BASH_ENV", "PWD", "OLDPWD", "SHLVL", "_"}
MAX_DEPTH = 8  # wrappers inside wrappers

# wrapper -> (short options taking a value, long options without one); other long options take a value
# unless written --opt=value
_DOCKER = ("e", "v", "w", "u", "p", "h", "l", "m", "c", "a"), {"--rm", "--detach", "--interactive", "--tty",
                                                              "--privileged", "--init", "--read-only", "--help"}
_SRUN = ("N", "n", "c", "p", "w", "A", "t", "J", "o", "e", "G", "x", "q", "C", "m", "B", "d", "D", "i", "L", "r"), {
    "--exclusive", "--overlap", "--pty", "--label", "--unbuffered", "--container-remap-root", "--quiet",
    "--no-container-remap-root", "--container-mount-home", "--no-container-mount-home", "--container-writable",
    "--container-readonly", "--no-kill", "--verbose", "--no-container-entrypoint", "--container-entrypoint"}
_MPI = ("np", "n", "x", "H", "host", "hostfile", "machinefile", "npernode", "ppn", "genv", "env", "genvlist",
        "wdir", "bind-to", "map-by", "rank-by", "mca", "gmca"), {
    "--allow-run-as-root", "--oversubscribe", "--tag-output", "--timestamp-output", "--report-bindings", "--verbose",
    "--noprefix", "--display-map", "--quiet"}
_PASSING = {"numactl": (("N", "m", "C", "i", "p", "c", "P"), set()), "taskset": ((), set()),
            "chrt": ((), set()), "stdbuf": (("i", "o", "e"), set()), "setsid": ((), {"--fork", "--wait", "--ctty"}),
            "torchrun": ((), {"--standalone", "--no-python", "--no_python", "--run-path", "--run_path"})}


@dataclass
class Launch:
    """One program started by the script: its argv after the entry point, the environment it gets, the
    wrappers it went through, and what they dropped (name -> wrapper)."""

    words: list
    env: dict
    wrappers: list = field(default_factory=list)
    dropped: dict = field(default_factory=dict)
    # (host path, container path) of the container it runs in (docker -v / --mount, srun --container-mounts);
    # None: no container wrapper, its paths are the host's
    mounts: list | None = None


def server_words(argv: list) -> list | None:
    """The words after the entry point when ``argv`` starts a model server itself, else None."""
    if not argv:
        return None
    prog = os.path.basename(argv[0])
    if PYTHON.match(prog):
        i = 1
        while i < len(argv) and argv[i].startswith("-"):
            opt = argv[i]
            if opt == "-m" and i + 1 < len(argv):
                return argv[i + 2:] if argv[i + 1].startswith(SERVER_MODULES) else None
            if opt.startswith("-m") and len(opt) > 2:
                return argv[i + 1:] if opt[2:].startswith(SERVER_MODULES) else None
            if opt == "-c":
                return None
            i += 2 if opt in ("-X", "-W", "-Q") else 1
        return None
    if prog == "vllm" and argv[1:2] == ["serve"]:
        return argv[2:]
    if prog == "atom" and argv[1:2] in (["serve"], ["server"]):
        return argv[2:]
    return None


def client_words(argv: list) -> list | None:
    return argv[1:] if argv and os.path.basename(argv[0]) in CLIENT_PROGRAMS else None


def _skip(words: list, spec: tuple) -> int:
    """Index of the first word after ``words``' options (those of one wrapper, per its spec)."""
    with_value, no_value = spec
    i = 0
    while i < len(words) and words[i].startswith("-") and words[i] != "-":
        w = words[i]
        if w == "--":
            return i + 1
        if w.startswith("--"):
            i += 1 if ("=" in w or w in no_value) else 2
        elif w.lstrip("-") in with_value:
            i += 2
        else:
            i += 1
    return i


def _env_pairs(items, caller: dict) -> dict:
    out = {}
    for item in items:
        name, eq, value = item.partition("=")
        if eq:
            out[name] = value
        elif name in caller:
            out[name] = caller[name]
    return out


def _bind(spec: str, separator: str = ":") -> tuple | None:
    """(host, container) of ``-v HOST:CONTAINER[:opts]`` / ``--container-mounts SRC[:DST[:flags]]``; None for a
    named volume (no host path)."""
    parts = spec.split(separator)
    if not parts[0].startswith("/"):
        return None
    return parts[0], parts[1] if len(parts) > 1 and parts[1].startswith("/") else parts[0]


def _mount(spec: str) -> tuple | None:
    """(host, container) of ``--mount type=bind,source=HOST,target=CONTAINER``."""
    keys = dict(p.partition("=")[::2] for p in spec.split(","))
    source = keys.get("source") or keys.get("src")
    target = keys.get("target") or keys.get("destination") or keys.get("dst")
    return (source, target) if source and source.startswith("/") and target else None


def _docker(words, caller, files) -> tuple:
    """(env the container's process gets from the command line, index of the image, --entrypoint, its mounts)."""
    env, i, entry, mounts = {}, 0, None, []
    while i < len(words) and words[i].startswith("-"):
        w = words[i]
        name, eq, inline = w.partition("=")
        value = inline if eq else (words[i + 1] if i + 1 < len(words) else "")
        takes = not eq and (w.startswith("--") and w not in _DOCKER[1] or w.lstrip("-") in _DOCKER[0])
        if name in ("-e", "--env"):
            env.update(_env_pairs([value], caller))
        elif name == "--env-file":
            text = files.get(value, "")
            env.update(_env_pairs([ln.strip() for ln in text.splitlines()
                                   if ln.strip() and not ln.lstrip().startswith("#")], caller))
        elif name == "--entrypoint":
            entry = value
        elif name in ("-v", "--volume") or name == "--mount":
            mounts += [m for m in [(_mount if name == "--mount" else _bind)(value)] if m]
        i += 2 if takes else 1
    return env, i, entry, mounts


def _srun_mounts(words, mounts):
    """The mounts of a pyxis container (``--container-image``): ``--container-mounts`` SRC[:DST],...; without
    one, srun runs on the host (what it had)."""
    if not any(w.split("=", 1)[0] == "--container-image" for w in words):
        return mounts
    specs = [w.split("=", 1)[1] for w in words if w.startswith("--container-mounts=")]
    specs += [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--container-mounts"]
    return [m for spec in specs for item in spec.split(",") for m in [_bind(item)] if m]


def _srun_env(words, caller) -> dict:
    spec = next((w.split("=", 1)[1] for w in words if w.startswith("--export=")), None)
    if spec is None:
        spec = next((words[i + 1] for i, w in enumerate(words[:-1]) if w == "--export"),
                    caller.get("SLURM_EXPORT_ENV", "ALL"))
    parts = [p for p in spec.split(",") if p]
    base = dict(caller) if "ALL" in parts else {}  # a list without ALL: only those (Slurm's --export)
    return {**base, **_env_pairs([p for p in parts if p not in ("ALL", "NONE", "NIL")], caller)}


def _shell_commands(text: str, env: dict) -> list:
    """The simple commands of a command string (bash -c, ssh's), each (argv, env) after its ``export``s and
    leading assignments; the parse is shlex's, commands split at ; && || | and newlines."""
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return []
    out, current, env = [], [], dict(env)
    for tok in tokens + [";"]:
        if tok and set(tok) <= set(";&|"):
            words = list(current)
            current = []
            local = {}
            while words and re.match(r"[A-Za-z_]\w*=", words[0]):
                name, _, value = words.pop(0).partition("=")
                local[name] = value
            if words[:1] == ["export"]:
                env.update(_env_pairs(words[1:], env))
            elif words:
                out.append((words, {**env, **local}))
            elif local:
                env.update(local)
            continue
        current.append(tok)
    return out


def launches(argv: list, env: dict, files: dict, pick, depth: int = 0, wrappers=(), dropped=None,
             mounts=None) -> list:
    """Every Launch inside ``argv`` for which ``pick(argv)`` gives words, through its wrappers."""
    dropped = dict(dropped or {})
    if not argv or depth > MAX_DEPTH:
        return []
    words = pick(argv)
    if words is not None:
        return [Launch(words, env, list(wrappers), dropped, mounts)]
    prog, rest = os.path.basename(argv[0]), argv[1:]

    def inner(new_argv, new_env, name, new_mounts=mounts):
        lost = {n: dropped.get(n, name) for n in env if n not in new_env}
        return launches(new_argv, new_env, files, pick, depth + 1, (*wrappers, name), {**dropped, **lost},
                        new_mounts)

    if prog in ("docker", "podman") and rest[:1] == ["run"]:
        container_env, i, entry, binds = _docker(rest[1:], env, files)
        command = ([entry] if entry else []) + rest[1 + i + 1:]
        return inner(command, container_env, f"{prog} run", binds)
    if prog == "srun":
        options = rest[:_skip(rest, _SRUN)]
        return inner(rest[len(options):], _srun_env(rest, env), "srun", _srun_mounts(options, mounts))
    if prog in ("mpirun", "mpiexec", "orterun"):
        added, i = {}, 0
        while i < len(rest) and rest[i].startswith("-"):
            if rest[i] == "-x" and i + 1 < len(rest):
                added.update(_env_pairs([rest[i + 1]], env))
            elif rest[i] in ("-genv", "-env") and i + 2 < len(rest):
                added[rest[i + 1]] = rest[i + 2]
                i += 1
            elif rest[i] in ("-mca", "--mca", "-gmca"):
                i += 1
            i += 1 if "=" in rest[i] or rest[i] in _MPI[1] or rest[i].lstrip("-") not in _MPI[0] else 2
        return inner(rest[i:], {**env, **added}, prog)
    if prog == "ssh":
        i = _skip(rest, (tuple("BbcDEeFIiJLlmOopQRSWw"), set()))
        text = " ".join(rest[i + 1:])
        return [launch for words, e in _shell_commands(text, {})
                for launch in inner(words, e, "ssh")]
    if prog in ("bash", "sh", "dash", "zsh") and "-c" in rest:
        text = rest[rest.index("-c") + 1] if rest.index("-c") + 1 < len(rest) else ""
        return [launch for words, e in _shell_commands(text, env) for launch in inner(words, e, f"{prog} -c")]
    if prog == "env":  # a recorded `env` (as docker's command): -i, -u, NAME=value
        i, new = 0, dict(env)
        while i < len(rest) and (rest[i].startswith("-") or "=" in rest[i]):
            if rest[i] in ("-i", "--ignore-environment", "-"):
                new = {}
            elif rest[i] in ("-u", "--unset") and i + 1 < len(rest):
                new.pop(rest[i + 1], None)
                i += 1
            elif "=" in rest[i] and not rest[i].startswith("-"):
                new.update(_env_pairs([rest[i]], env))
            i += 1
        return inner(rest[i:], new, "env")
    if prog in _PASSING or prog in ("nohup", "timeout", "nice"):
        i = _skip(rest, _PASSING.get(prog, ((), set())))
        if prog in ("taskset", "timeout", "chrt"):
            i += 1  # the mask / duration / priority
        if prog == "torchrun":  # it runs python on a script, or on a module with -m/--module
            module = any(w in ("-m", "--module") for w in rest[:i])
            return inner(["python3", *(["-m"] if module else []), *rest[i:]], env, prog)
        return inner(rest[i:], env, prog)
    return []
