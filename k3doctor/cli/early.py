"""``k3doctor check``'s connections, opened before the rest of the command line is imported.

The nodes' TCP connects and SSH handshakes take the network's and the nodes' time, not this machine's: they
start here, first thing, and the checks, probes and renderers load while they are in flight. This reads the
few options the connections depend on straight from the arguments (click, and what it would import, come
later); anything it does not know for sure - another command, help, an option it does not know, short
options run together - leaves the connections to the run. The run uses them only when click read the same
values and the inventory loads to the same logins (k3doctor/judging/connections.py ``Ahead.matches``).
"""
from __future__ import annotations

# check's options: those that take a value, and the flags (as declared in k3doctor/cli/runs.py)
VALUED = {"--nodes", "--ansible-inventory", "--only", "--skip", "--tier", "--parallel", "--timeout",
          "--connect-timeout", "--node-deadline", "--baseline", "--set", "--pairs", "--save-readings", "--format",
          "-o", "--output"}
FLAGS = {"--accept-unknown-hosts", "--fix", "-v", "--verbose", "-q", "--quiet"}
DEFAULT_PARALLEL = 64  # check's --parallel default


def check_logins(args: list) -> tuple | None:
    """(inventory, ansible inventory, parallel, connect timeout, accept unknown hosts) as ``check`` will
    read them from ``args``, or None where that is not certain (then nothing is opened ahead)."""
    if not args or args[0] != "check":
        return None
    got = {"--nodes": None, "--ansible-inventory": None, "--parallel": None, "--connect-timeout": None}
    accept, words = False, iter(args[1:])
    for word in words:
        name, eq, value = word.partition("=") if word.startswith("--") else (word, "", "")
        if name in FLAGS and not eq:
            accept = accept or name == "--accept-unknown-hosts"
        elif name in VALUED:
            value = value if eq else next(words, None)
            if value is None:
                return None
            if name in got:
                got[name] = value
        else:  # a positional word, help, an unknown option: click decides
            return None
    try:
        parallel = int(got["--parallel"]) if got["--parallel"] is not None else DEFAULT_PARALLEL
        timeout = float(got["--connect-timeout"]) if got["--connect-timeout"] is not None else None
    except ValueError:
        return None
    return got["--nodes"], got["--ansible-inventory"], parallel, timeout, accept


def start(args: list):
    """The connections ``check`` will use, already connecting; None where none are opened ahead."""
    key = check_logins(args)
    if key is None or not 1 <= key[2] <= 1024:
        return None
    from k3doctor.judging.connections import Logins, connect_ahead

    try:
        return connect_ahead(key[0], key[1], parallel=key[2], key=key,
                             logins=Logins(accept_unknown_hosts=key[4], connect_timeout_s=key[3]))
    except Exception:  # noqa: BLE001 -- threads refused (ulimit), anything else: the run connects itself
        return None
