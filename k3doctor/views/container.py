"""Our container as the checks see it (reference §13, §16, §17): environment, command and run
options from the Docker API, the live environment of ATOM's rank processes, the launch command.

Container environments hold tokens. The functions that turn a raw reading into a record
(:func:`record_from_inspect`, :func:`launch_from_script`, the node-side filter of
:func:`rank_envs`) keep the values of only the variables a rule names; every other
variable is kept by name alone, before anything is stored, reported or saved.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from k3doctor.parsers import ParseError
from k3doctor.readings import CONTAINER_PID, EngineFactCommand, sh_with_fact
from k3doctor.redaction import REDACTED, SECRET_WORDS
from k3doctor.shell import quote

ROCJITSU_PREFIX = "/app/rjprefix"  # where the B0->A0 translation prefix is copied into the container (§2)
ROCJITSU_HOOK = "lib/libhsa_hotswap_rocjitsu.so"  # HSA_TOOLS_LIB must name this, below the prefix
ROCJITSU_TRANSLATOR_STEM = "librocjitsu_gfx1250_b0_to_a0.so"  # a NEEDED library of the hook, no OnLoad
# Launch-command flags whose value is a credential (--api-key, --hf-token, --password ...).
_SECRET_FLAG = re.compile(rf"^--?[\w-]*{SECRET_WORDS}[\w-]*$", re.I)
# A word that makes a command the model server's launch (§17), or the program and subcommand that do (§30).
_SERVER_WORDS = ("--data-parallel-size", "--data-parallel-rank", "atom.entrypoints", "openai_server",
                 "vllm.entrypoints")
_SERVER_SUBCOMMANDS = (("vllm", "serve"),)
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_REDIRECTION = re.compile(r"^\d*[<>]")
RANK_PREFIX = "ATOM::DP"  # process title of ATOM's engine ranks, e.g. ATOM::DP4TP0 (§16)
_NEWLINE_STANDIN = "\x01"  # newlines inside a value travel as \x01 (records are NUL-separated in environ)


def parse_env(text: str) -> dict:
    """``env`` -> {name: value} (continuation lines of multi-line values are dropped)."""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


# ----------------------------------------------------------------------------- redaction at the reading

def redact_env(entries, keep) -> dict:
    """Docker ``Config.Env`` (``NAME=VALUE`` list) -> {name: value}, value None unless ``keep`` names it."""
    env = {}
    for entry in entries or ():
        name, _, value = str(entry).partition("=")
        env[name] = value if name in keep else None
    return env


def redact_argv(words) -> list:
    """Launch-command words with credential flag values replaced (``--api-key X``, ``--hf-token=X``)."""
    out, hide_next = [], False
    for word in words:
        flag, eq, _ = word.partition("=")
        if hide_next:
            out.append(REDACTED)
        elif eq and flag.startswith("-") and _SECRET_FLAG.match(flag):
            out.append(f"{flag}={REDACTED}")
        else:
            out.append(word)
        hide_next = not eq and bool(_SECRET_FLAG.match(word)) and not hide_next
    return out


def _segments(words):
    """Split shell words into simple commands at ;, &&, ||, | and &."""
    segment = []
    for word in words:
        if word in (";", "&&", "||", "|", "&", ";;"):
            if segment:
                yield segment
            segment = []
        else:
            segment.append(word)
    if segment:
        yield segment


def _server_command(words) -> list | None:
    for segment in _segments(words):
        while segment and _ASSIGNMENT.match(segment[0]):  # FOO=bar python ... : env, not arguments
            segment = segment[1:]
        if segment and segment[0] == "exec":
            segment = segment[1:]
        segment = segment[:next((i for i, w in enumerate(segment) if _REDIRECTION.match(w)), len(segment))]
        if any(any(w.startswith(s) or s in w for s in _SERVER_WORDS) for w in segment) or any(
                (program.rsplit("/", 1)[-1], sub) in _SERVER_SUBCOMMANDS for program, sub in zip(segment, segment[1:])):
            return redact_argv(segment)
    return None


def launch_from_script(text: str) -> list | None:
    """The model server's command line out of a shell script (continuations joined), credentials
    redacted; None when the script starts no server. Nothing else of the script is kept."""
    joined = re.sub(r"\\\r?\n", " ", text)
    for line in joined.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split, lexer.commenters = True, "#"
        try:
            words = list(lexer)
        except ValueError:  # unbalanced quotes on this line: not a command we can read
            continue
        found = _server_command(words)
        if found:
            return found
    return None


def launch_from_argv(argv) -> list | None:
    """The server command of a container's Entrypoint + Cmd (``sh -c 'script'`` included). A word with
    blanks in it outside ``sh -c`` is a script nobody parses here: it is dropped, not kept - unless it is
    a long option's value (``--kv-transfer-config '{"kv_connector": "LMCacheConnectorV1"}'``, or
    ``--opt=...``): quoted JSON has blanks, and dropping it would hide the option (see :func:`launch_options`)."""
    argv = [str(a) for a in argv or ()]
    for i in range(len(argv) - 2):
        if argv[i].rsplit("/", 1)[-1] in ("sh", "bash", "dash") and argv[i + 1] == "-c":
            return launch_from_script(argv[i + 2])
    return _server_command([w for i, w in enumerate(argv) if not re.search(r"\s", w) or _option_value(argv, i)])


def _option_value(argv: list, i: int) -> bool:
    """Whether word ``i`` is a long option's value: ``--opt=value`` or the word after a bare ``--opt``."""
    word = argv[i]
    if word.startswith("--") and "=" in word and not re.search(r"\s", word.partition("=")[0]):
        return True
    return i > 0 and argv[i - 1].startswith("--") and "=" not in argv[i - 1] and not re.search(r"\s", argv[i - 1])


_HOST_KEYS = ("NetworkMode", "IpcMode", "PidMode", "ShmSize", "CapAdd", "SecurityOpt", "GroupAdd", "Privileged")


def record_from_inspect(attrs: dict, keep) -> dict:
    """What launch-config keeps of ``docker inspect``: env (values of ``keep`` names only), the first
    word of the command and the server launch in it (redacted), image, state, run options, mounts."""
    config, host, state = attrs.get("Config") or {}, attrs.get("HostConfig") or {}, attrs.get("State") or {}
    argv = [*(config.get("Entrypoint") or []), *(config.get("Cmd") or [])]
    return {
        "name": str(attrs.get("Name", "")).lstrip("/"),
        "id": attrs.get("Id"),
        "image": config.get("Image"),
        "image_id": attrs.get("Image"),
        "running": bool(state.get("Running")),
        "status": state.get("Status"),
        "env": redact_env(config.get("Env"), keep),
        "program": argv[0].rsplit("/", 1)[-1] if argv else None,
        "launch": launch_from_argv(argv),
        "host": {k: host.get(k) for k in _HOST_KEYS}
        | {"Devices": [d.get("PathInContainer") for d in host.get("Devices") or []]},
        "mounts": [{"destination": m.get("Destination"), "source": m.get("Source"), "rw": m.get("RW")}
                   for m in attrs.get("Mounts") or []],
    }


# ----------------------------------------------------------------------------- the view the judge reads

@dataclass
class ContainerView:
    """A stored container record (see :func:`record_from_inspect`) as attributes."""

    name: str
    id: str | None
    image: str | None
    image_id: str | None
    running: bool
    status: str | None
    env: dict  # name -> value; None: present, value not read (no rule names it)
    program: str | None
    launch: list | None
    host: dict
    mounts: list = field(default_factory=list)

    @classmethod
    def from_record(cls, record: dict) -> ContainerView:
        try:
            return cls(**record)
        except TypeError as exc:
            raise ParseError(f"container record: {exc}") from None


@dataclass(frozen=True)
class RankProcess:
    """One ATOM engine rank (``ATOM::DP<n>TP0``) and its live environment (redacted as above)."""

    pid: int
    title: str
    env: dict

    @property
    def rank(self) -> int | None:
        match = re.match(r"ATOM::DP(\d+)", self.title)
        return int(match.group(1)) if match else None


def environ_filter(keep, source: str) -> str:
    """Shell pipeline printing a NUL-separated environ file (``source``, a shell word) one variable a
    line: ``NAME=VALUE`` for ``keep`` names (newlines in the value as \\x01), ``NAME`` for the rest."""
    names = " " + " ".join(sorted(keep)) + " "
    return (f"tr '\\000\\n' '\\n\\001' < {source} | "
            f"awk -v keep={quote(names)} '{{ n = $0; sub(/=.*/, \"\", n); "
            "if (index(keep, \" \" n \" \")) print; else print n }'")


LOG_RC = "K3DOCTOR-RC="  # the last line of a log_through_awk log: the docker CLI's exit status


def log_through_awk(container: str, tail_lines: int, program: str) -> EngineFactCommand:
    """The last ``tail_lines`` lines of ``container``'s log (``docker logs``, stdout and stderr) through ``awk
    program`` on the node, so that only what the program prints leaves it; the CLI's exit status follows the log
    as a last line ``K3DOCTOR-RC=<status>`` for the program to pass on. Run only where the engine knows the
    container (its ``State.Pid``, from the inspect the gatherer reads anyway, running or not): a node without
    it - before a launch, or one with no Docker at all - starts no ``docker`` CLI (a 42 MB Go binary, the
    largest part of a light node's reads) and the reading is Unavailable, saying why."""
    return sh_with_fact(f"{{ docker logs --tail {int(tail_lines)} -- {quote(container)} 2>&1; echo {LOG_RC}$?; }} "
                        f"| awk {quote(program)}", CONTAINER_PID, container)


def rank_envs(container: str, keep) -> EngineFactCommand:
    """Every ATOM rank process in ``container``'s mount namespace (``--pid=host`` makes them visible
    from the host, §16) with its environment: ``NAME=VALUE`` for ``keep`` names, ``NAME`` alone for
    the rest. The values of other variables never leave the node. The container's PID comes from the
    Docker API (``State.Pid``, 0: not running, read as ``@notrunning``)."""
    return sh_with_fact(_rank_env_script(keep), CONTAINER_PID, container)


def _rank_env_script(keep) -> str:
    """The shell of :func:`rank_envs`: ``$1`` is the container's PID."""
    environ = '"$d/environ"'
    return (
        'p=$1; [ "$p" -gt 0 ] 2>/dev/null || { echo "@notrunning"; exit 0; }; '
        'ns=$(readlink "/proc/$p/ns/mnt") || exit 4; '
        "for d in /proc/[0-9]*; do "
        'read -r c 2>/dev/null < "$d/comm" || continue; '
        f'case "$c" in {RANK_PREFIX}*) ;; *) continue ;; esac; '
        '[ "$(readlink "$d/ns/mnt" 2>/dev/null)" = "$ns" ] || continue; '
        'echo "@rank ${d#/proc/} $c"; '
        f"{environ_filter(keep, environ)}; "
        "done"
    )


def parse_rank_envs(text: str) -> list | None:
    """Output of :func:`rank_envs` -> [RankProcess]; None when the container is not running."""
    ranks, current = [], None
    for line in text.splitlines():
        if line == "@notrunning":
            return None
        if line.startswith("@rank "):
            parts = line.split(" ", 2)
            if len(parts) != 3 or not parts[1].isdigit():
                raise ParseError(f"rank process list: bad header {line!r:.120}")
            current = RankProcess(int(parts[1]), parts[2], {})
            ranks.append(current)
        elif current is None:
            raise ParseError(f"rank process list: environment line before any process: {line[:40]!r}")
        elif line:
            name, eq, value = line.partition("=")
            current.env[name] = value.replace(_NEWLINE_STANDIN, "\n") if eq else None
    return ranks


# ----------------------------------------------------------------------------- launch command

def parse_flags(argv, prefix: str = "-", bare=None, key=str) -> dict:
    """``--flag value`` / ``--flag=value`` / bare ``--flag`` -> {key(flag): value or ``bare``}; last one wins.

    A word is a flag when it starts with ``prefix``: "-" for a command line read as it is (``-m``
    included), "--" where a value may start with one dash (``--x -1``, the recipe diff)."""
    flags, words = {}, list(argv)
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith(prefix) and len(word) > 1:
            name, eq, value = word.partition("=")
            name = key(name)
            if eq:
                flags[name] = value
            elif i + 1 < len(words) and not words[i + 1].startswith(prefix):
                flags[name] = words[i + 1]
                i += 1
            else:
                flags[name] = bare
        i += 1
    return flags


def option_key(name: str) -> str:
    """A long option in the one spelling the rules use: the engines' argument parsers read ``--kv_transfer_config``
    as ``--kv-transfer-config`` (vLLM's FlexibleArgumentParser turns ``_`` into ``-``; ATOM's recipes spell some
    options with ``_``). Short options (``-tp``) are kept as written."""
    return "--" + name[2:].replace("_", "-") if name.startswith("--") else name


def launch_options(argv) -> dict:
    """The options of a server launch as the engine reads them: {option (:func:`option_key`): value}.

    The one lookup every rule that reads a launch uses, so that it finds an option in every spelling the engine
    accepts: ``-`` or ``_`` in its name, ``--opt=value`` or ``--opt value``, a quoted JSON value with blanks (kept
    as one word by :func:`launch_from_argv` and :func:`launch_from_script`); the last one given wins."""
    return parse_flags(argv or (), key=option_key)


def hf_cache_dir(env: dict) -> str | None:
    """The HF hub cache a server started with ``env`` looks its models up in (reference §25, §30): $HF_HUB_CACHE,
    else $HF_HOME/hub; None where neither is set (the default under the user's home is not guessed)."""
    cache = env.get("HF_HUB_CACHE") or (f"{env['HF_HOME'].rstrip('/')}/hub" if env.get("HF_HOME") else None)
    return cache.rstrip("/") or "/" if isinstance(cache, str) and cache.startswith("/") else None


def host_path(path: str, mounts) -> str | None:
    """``path`` inside a container as the host path that holds it: through the deepest of ``mounts`` ((host
    source, container destination) pairs) whose destination is ``path`` or above it; None where none is (a path of
    the container's own layer, which the host does not show before the container runs)."""
    best = None
    for source, destination in mounts:
        if not source or not destination:
            continue
        dest = destination.rstrip("/") or "/"
        if (path == dest or path.startswith(dest.rstrip("/") + "/")) and (best is None or len(dest) > len(best[1])):
            best = (source.rstrip("/") or "/", dest)
    if best is None:
        return None
    rest = path[len(best[1]):].lstrip("/")
    return f"{best[0].rstrip('/')}/{rest}" if rest else best[0]
