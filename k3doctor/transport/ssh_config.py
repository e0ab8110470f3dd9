"""ssh_config as OpenSSH reads it: paramiko's ``SSHConfig`` for Host / Match blocks and the keywords,
plus what paramiko lacks - ``Include`` (with OpenSSH's nesting limit and loop detection), ``ProxyJump``
lists (``a,b`` or ``ssh://user@host:port``), ``UserKnownHostsFile`` / ``GlobalKnownHostsFile`` with their
``%`` tokens and OpenSSH's defaults, ``HostKeyAlias``, ``IdentitiesOnly`` and ``IdentityAgent none``.

Everything here is pure (files in, values out); transport.py turns the answers into logins.
"""
from __future__ import annotations

import glob
import os
import re
import shlex
from dataclasses import dataclass

import paramiko

from k3doctor import localfiles

MAX_INCLUDE_DEPTH = 16  # OpenSSH's READCONF_MAX_DEPTH: deeper nesting is an error there too
MAX_JUMPS = 8  # hops in one chain (jump hosts' own ProxyJump included): more is a loop in the config
USER_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")  # OpenSSH's defaults
GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
_KEYWORD = re.compile(r"\s*(\w+)(?:\s*=\s*|\s+)(.*?)\s*$")


class SSHConfigError(Exception):
    """The ssh config cannot be used as written; the message names the file and what is wrong."""


@dataclass(frozen=True)
class HostConfig:
    """What the ssh config says about one host (``None``/empty: not said)."""

    hostname: str | None = None
    port: int | None = None
    user: str | None = None
    identity_files: tuple = ()
    proxy_jump: tuple = ()  # hop specs, first hop first; () also for ``ProxyJump none``
    proxy_command: str | None = None
    user_known_hosts: tuple = USER_KNOWN_HOSTS
    global_known_hosts: tuple = GLOBAL_KNOWN_HOSTS
    host_key_alias: str | None = None
    identities_only: bool = False
    use_agent: bool = True


def flatten(path: str) -> str:
    """The config with every ``Include`` replaced by what it names, as one text paramiko can parse.

    OpenSSH's rules: an Include is a list of globs (relative ones below the directory of the top file,
    ~/.ssh for the user's config), files that match nothing are skipped, and an Include inside a Host or
    Match block applies the included file only where that block applies - here by putting the block's
    condition in front of each included block (``Host x`` becomes ``Match originalhost <outer> originalhost x``)
    and repeating the outer header after the included text."""
    top = os.path.abspath(os.path.expanduser(path))
    return "".join(_flatten(top, os.path.dirname(top), (), [], None))


def _flatten(path: str, base: str, outer: tuple, stack: list, header: str | None):
    real = os.path.realpath(path)
    if real in stack:
        chain = " -> ".join([*stack, real])
        raise SSHConfigError(f"ssh config Include loop: {chain}")
    if len(stack) >= MAX_INCLUDE_DEPTH:
        raise SSHConfigError(f"ssh config Include nested deeper than {MAX_INCLUDE_DEPTH} at {path}")
    try:
        lines = localfiles.read_bytes(path).decode("utf-8", "replace").splitlines()
    except OSError as exc:
        raise SSHConfigError(f"cannot read ssh config {path}: {exc.strerror}") from None
    stack = [*stack, real]
    condition = outer  # criteria of the block we are in (outer ones first)
    for number, line in enumerate(lines, 1):
        match = _KEYWORD.match(line)
        if not line.strip() or line.lstrip().startswith("#") or not match:
            yield line + "\n"
            continue
        key, value = match.group(1).lower(), match.group(2)
        if key == "host":
            condition = (*outer, "originalhost " + ",".join(_words(value, path, number)))
            header = f"Match {' '.join(condition)}\n" if outer else line + "\n"
            yield header
        elif key == "match":
            own = () if value.strip().lower() == "all" and outer else (value,)
            condition = (*outer, *own)
            header = f"Match {' '.join(condition)}\n"
            yield header
        elif key == "include":
            for pattern in _words(value, path, number):
                pattern = os.path.expanduser(pattern)
                for found in sorted(glob.glob(pattern if os.path.isabs(pattern) else os.path.join(base, pattern))):
                    yield from _flatten(found, base, condition, stack, header)
                    yield header or "Host *\n"  # back in the block that held the Include
        else:
            yield line + "\n"


def _words(value: str, path: str, number: int) -> list:
    try:
        words = shlex.split(value)
    except ValueError as exc:
        raise SSHConfigError(f"{path}:{number}: cannot parse {value!r}: {exc}") from None
    if not words:
        raise SSHConfigError(f"{path}:{number}: expected a value")
    return words


def load(path: str | None) -> paramiko.SSHConfig | None:
    """The parsed config at ``path`` (Includes resolved), or ``None`` where there is no such file."""
    if not path or not os.path.exists(os.path.expanduser(path)):
        return None
    try:
        return paramiko.SSHConfig.from_text(flatten(path))
    except paramiko.ssh_exception.ConfigParseError as exc:
        raise SSHConfigError(f"cannot parse ssh config {path}: {exc}") from None


def lookup(config: paramiko.SSHConfig | None, host: str) -> HostConfig:
    """OpenSSH's answer for ``host`` (first value wins, Match host sees HostName); tokens expanded."""
    if config is None:  # OpenSSH's defaults, for this user
        return HostConfig(user_known_hosts=_files(None, USER_KNOWN_HOSTS, {}),
                          global_known_hosts=_files(None, GLOBAL_KNOWN_HOSTS, {}))
    try:
        raw = config.lookup(host)
        port = int(raw["port"]) if "port" in raw else None
        if port is not None and not 0 < port < 65536:
            raise ValueError(f"port {port} is out of range")
    except (ValueError, paramiko.ssh_exception.ConfigParseError) as exc:
        raise SSHConfigError(f"cannot use ssh config for {host}: {exc}") from None
    hostname = raw.get("hostname", host)
    user = raw.get("user")
    tokens = {"%h": hostname, "%p": str(port or 22), "%r": user or "root", "%n": host,
              "%u": _local_user(), "%d": os.path.expanduser("~"), "%%": "%"}
    jump = raw.get("proxyjump")
    return HostConfig(
        hostname=raw.get("hostname"), port=port, user=user,
        identity_files=tuple(os.path.expanduser(f) for f in raw.get("identityfile") or ()),
        proxy_jump=() if jump is None or jump.strip().lower() == "none" else parse_jump_list(jump),
        proxy_command=raw.get("proxycommand"),
        user_known_hosts=_files(raw.get("userknownhostsfile"), USER_KNOWN_HOSTS, tokens),
        global_known_hosts=_files(raw.get("globalknownhostsfile"), GLOBAL_KNOWN_HOSTS, tokens),
        host_key_alias=raw.get("hostkeyalias"),
        identities_only=raw.get("identitiesonly", "no").lower() == "yes",
        use_agent=raw.get("identityagent", "").lower() != "none",
    )


def _files(value: str | None, default: tuple, tokens: dict) -> tuple:
    """A known-hosts keyword's files: whitespace-separated, ~ and % tokens expanded; ``none``: no file."""
    if value is None:
        return tuple(os.path.expanduser(f) for f in default)
    if value.strip().lower() == "none":
        return ()
    expand = re.compile("|".join(re.escape(t) for t in tokens))
    return tuple(os.path.expanduser(expand.sub(lambda m: tokens[m.group(0)], f)) for f in value.split())


def _local_user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


_JUMP = re.compile(r"(?:ssh://)?(?:(?P<user>[^@/\s]+)@)?(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^:@/\s\[\]]+))"
                   r"(?::(?P<port>\d+))?/?")


def parse_jump_list(value: str) -> tuple:
    """``ProxyJump`` value -> ((user, host, port), ...), first hop first (``[user@]host[:port]``,
    ``ssh://[user@]host[:port]``, ``[v6]:port``)."""
    hops = []
    for spec in (s.strip() for s in value.split(",")):
        match = _JUMP.fullmatch(spec)
        port = int(match.group("port")) if match and match.group("port") else None
        if not match or (port is not None and not 0 < port < 65536):
            raise SSHConfigError(f"ProxyJump {value!r}: cannot read hop {spec!r} (expected [user@]host[:port])")
        hops.append((match.group("user"), match.group("v6") or match.group("host"), port))
    return tuple(hops)
