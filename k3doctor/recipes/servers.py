"""A running model server read on its node (reference §30: "resolve the server argv ... and the live env
(/proc/<pid>/environ)"), wherever it runs - Docker, Slurm with pyxis/enroot, or bare - since it is read from the
process itself. The shell run on the node and the parse of what it prints, for `recipe diff --nodes` and for
`check`'s launch-config alike (one reading, one judgement: judgement.py).

Only the values of variables the recipe or a rule names leave the node; the others come back as names
(k3doctor.views.container.environ_filter). MemTotal and, for a drafter given as a repo id, whether its
snapshot is in the server's HF cache (seen through /proc/<pid>/root) are read beside it for the rules.
"""
from __future__ import annotations

import shlex

from k3doctor.views.container import environ_filter
from k3doctor.parsers import ParseError
from k3doctor.shell import quote
from k3doctor.recipes import judgement, launches, rules

RULE_NAMES = judgement.RULE_NAMES
_NEWLINE = "\x01"
NOT_READ = judgement.NOT_READ


def kept_names(recipe) -> set:
    return RULE_NAMES | {n for p in recipe.points for n in (*p.env, *p.client_env)} | \
        {n for n in recipe.noops if not n.startswith("-")}


def server_script(recipe) -> str:
    """Shell run on the node: each model server process (its argv, its filtered environment, its HF cache's
    drafter snapshots), then MemTotal."""
    markers = "|".join(judgement.SERVER_ENTRY_POINTS)
    return (
        "for d in /proc/[0-9]*; do "
        'a=$(tr "\\000" " " < "$d/cmdline" 2>/dev/null) || continue; '
        f'echo "$a" | grep -Eq {shlex.quote(markers)} || continue; '
        'echo "$a" | grep -q "grep -Eq" && continue; '
        'p=${d#/proc/}; echo "@server $p"; '
        "tr '\\000\\n' '\\n\\001' < \"$d/cmdline\"; echo; echo '@env'; "
        f'{environ_filter(kept_names(recipe), chr(34) + "$d/environ" + chr(34))}; '
        "echo '@hfcache'; "
        'c=$(tr "\\000" "\\n" < "$d/environ" | sed -n "s/^HF_HUB_CACHE=//p"); '
        '[ -z "$c" ] && h=$(tr "\\000" "\\n" < "$d/environ" | sed -n "s/^HF_HOME=//p") && [ -n "$h" ] && c="$h/hub"; '
        f'[ -n "$c" ] && {complete_repos(chr(34) + "$d/root$c" + chr(34))}; '
        "echo '@end'; done; "
        "echo \"@meminfo $(sed -n 's/^MemTotal: *\\([0-9]*\\) kB/\\1/p' /proc/meminfo)\""
    )


def complete_repos(directory: str) -> str:
    """Shell: the ``models--*`` entries of HF cache ``directory`` (a quoted shell word) complete as `hf download`
    leaves them - a snapshot with something in it, no ``.incomplete`` blob (§30) - one a line. ``@unreadable``
    where this login cannot tell: a directory it cannot list (mode 0700, a root-squashed share) or one behind a
    parent it cannot search; its drafter was not read, never "not in the cache". Nothing for a cache that is
    provably absent (its parent searchable, it not there)."""
    return (f'if [ -d {directory} ]; then if [ -r {directory} ] && [ -x {directory} ]; then '
            f'for m in {directory}/models--*; do '
            '[ -d "$m/snapshots" ] && [ -n "$(ls -A "$m/snapshots" 2>/dev/null)" ] || continue; '
            'ls "$m/blobs" 2>/dev/null | grep -q "\\.incomplete$" && continue; echo "${m##*/}"; done; '
            f'else echo @unreadable; fi; elif ! [ -x "$(dirname {directory})" ]; then echo @unreadable; fi')


MAX_SCRIPT_DIRS = 64  # absolute paths of a launch script looked at as HF caches on the node


def mounted_cache_script() -> str:
    """Shell run on the node with the host path behind a created container's HF cache as $1 (the engine fact
    readings.CONTAINER_HF_CACHE): its complete repos, after a ``@dir`` line."""
    return f'echo "@dir $1"; {complete_repos(chr(34) + "$1" + chr(34))}'


def script_caches_script(path: str) -> str:
    """Shell run on the node: each absolute path the launch script at ``path`` names (a ``-v HOST:CONTAINER``
    source, an exported HF_HUB_CACHE, ...) that is a directory there, and its ``hub``, as an HF cache: a ``@dir``
    line and its complete repos. The script is resolved where k3doctor runs; which of these directories holds the
    server's cache is known only then (judgement.Resolved.cache_host), so every candidate is listed here."""
    return (f"grep -oE '/[A-Za-z0-9._+@%-][A-Za-z0-9._/+@%-]*' {quote(path)} | sort -u | head -{MAX_SCRIPT_DIRS} | "
            'while read -r p; do p=${p%/}; for c in "$p" "$p/hub"; do [ -d "$c" ] || continue; '
            f'echo "@dir $c"; {complete_repos(chr(34) + "$c" + chr(34))}; done; done')


def parse_caches(text: str) -> dict:
    """{HF cache directory on the node: repo ids complete there} from :func:`mounted_cache_script` or
    :func:`script_caches_script`; a line that is neither a ``@dir`` nor a ``models--`` entry is a ParseError."""
    out, current, unread = {}, None, set()
    for line in text.splitlines():
        if line.startswith("@dir /"):
            name = line[len("@dir "):].rstrip("/") or "/"
            current = out.setdefault(name, set())
        elif line == "@unreadable" and current is not None:
            unread.add(name)
        elif line.startswith("models--") and current is not None:
            current.add("/".join(line[len("models--"):].split("--", 1)))
        elif line.strip():
            raise ParseError(f"HF cache listing: unexpected line {line[:80]!r}")
    return {name: repos for name, repos in out.items() if name not in unread}


def parse(text: str) -> tuple:
    """([(pid, argv, env, hf_cache repo ids)], MemTotal bytes or None) from :func:`server_script`'s output."""
    servers, mem_total, current, section = [], None, None, None
    for line in text.split("\n"):
        if line.startswith("@server "):
            current = {"pid": int(line.split()[1]), "argv": [], "env": {}, "cache": set()}
            servers.append(current)
            section = "argv"
        elif line == "@env":
            section = "env"
        elif line == "@hfcache":
            section = "cache"
        elif line == "@end":
            section = None
        elif line.startswith("@meminfo"):
            value = line.split()[1:] and line.split()[1]
            mem_total = int(value) * 1024 if value and value.isdigit() else None
        elif current is not None and section == "argv" and line:
            current["argv"].append(line.replace(_NEWLINE, "\n"))
        elif current is not None and section == "env" and line:
            name, eq, value = line.partition("=")
            current["env"][name] = value.replace(_NEWLINE, "\n") if eq else NOT_READ
        elif current is not None and section == "cache" and line == "@unreadable":
            current["cache"] = None  # the server's cache could not be listed: its drafter is not judged from it
        elif (current is not None and section == "cache" and line.startswith("models--")
              and current["cache"] is not None):
            current["cache"].add("/".join(line[len("models--"):].split("--", 1)))
    # a process whose argv merely names an entry point (pgrep, watch pgrep -af, pkill -f) is no server
    return [(s["pid"], s["argv"], s["env"], s["cache"]) for s in servers
            if launches.server_words(s["argv"]) is not None], mem_total


NO_SERVER = "no model server process (" + " / ".join(judgement.SERVER_ENTRY_POINTS) + ") runs on this node"


def resolved(recipe, argv: list, env: dict, cache: set, mem_total) -> judgement.Resolved:
    """A running server as the diff sees it. The variables it compares for `extra` are those of the families
    the recipe configures (ATOM_*, AITER_*, LMCACHE_*, ...): the process also carries PATH, SLURM_* and
    the like, which no recipe names."""
    words = launches.server_words(argv) or []
    families = {n.split("_", 1)[0] + "_" for n in kept_names(recipe) if "_" in n}
    named = {n for p in recipe.points for n in p.env} | set(recipe.noops)
    # what only the rules read (the HF cache the drafter is looked up in, EVAL_ONLY, ...) is judged by them,
    # never an `extra` of the recipe
    own = {n for n in env if n.startswith(tuple(families)) and (n in named or not judgement.judged_elsewhere(n))}
    launch = rules.Launch(flags=judgement.parse_args(words), env=env, mem_total_bytes=mem_total,
                          hf_cache=cache if cache is not None and any(
                              k.startswith(("HF_HUB_CACHE", "HF_HOME")) for k in env) else None)
    return judgement.Resolved(launch=launch, own_env=own, client_seen=False,
                                placeholder_note="any non-empty interface name (the node's routes are not read)")
