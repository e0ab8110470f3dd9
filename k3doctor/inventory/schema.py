"""The inventory's schema: every key it may hold and the grammar of its value, as tables
(``TOP_KEYS`` down to ``NODE_KEYS``). A rule returns (ok, what was expected); ``load`` walks the YAML
tree with them so that every error names the file, line and key. Names that reach a command line or
a report (containers, nodes, hosts, users, tools) have a strict grammar: never an option, no odd
characters.
"""
from __future__ import annotations

import re

from k3doctor.deadline import MAX_GPUS_PER_NODE, MAX_SECONDS
from k3doctor.inventory.types import STEPPINGS


def _str(v):
    return isinstance(v, str) and v.strip() != "" and not any(c in v for c in "\n\t"), \
        "a non-empty one-line string"


def _bool(v):
    return isinstance(v, bool), "true or false"


def _port(v):
    return isinstance(v, int) and not isinstance(v, bool) and 0 < v < 65536, "an integer between 1 and 65535"


MAX_HBM_GIB = 4096  # per GPU: boards have 288 or 432 GiB (reference §12)
MAX_CONCURRENCY = 4096  # a recipe point's concurrent requests (AgentX: 1 to 10, reference §30)


def _bounded(high: int, unit: str):
    """Rule for a size the hardware bounds: a positive integer up to ``high`` (a typo of 10**7 GPUs would
    otherwise cost gigabytes in the judges that enumerate them)."""
    return lambda v: (isinstance(v, int) and not isinstance(v, bool) and 0 < v <= high,
                      f"a positive integer up to {high} {unit}")


def _seconds(v):
    return (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= MAX_SECONDS,
            f"a positive number of seconds, at most {MAX_SECONDS:g}")


def _word(pattern: str, what: str):
    """Rule for a name that reaches a command line or a report: never an option, no odd characters."""
    regex = re.compile(pattern)
    return lambda v: (isinstance(v, str) and regex.fullmatch(v) is not None, what)


# Docker's own rule for container names; a name starting with `-` would reach docker as an option.
_container = _word(r"[A-Za-z0-9][A-Za-z0-9_.-]*", "a Docker container name ([A-Za-z0-9][A-Za-z0-9_.-]*)")
node_name_rule = _word(r"[A-Za-z0-9][A-Za-z0-9_.:@+-]*",
                       "a node name (letters, digits, . _ : @ + -; not starting with -)")
host_rule = _word(r"[A-Za-z0-9_:\[][A-Za-z0-9_.:%\[\]-]*", "a host name or IP address")
_user = _word(r"[A-Za-z0-9_][A-Za-z0-9_.@$-]*", "a user name (not starting with -)")
tool_rule = _word(r"[^-\s][^\s]*", "a tool path or command name (no spaces, not starting with -)")
_env_name = _word(r"[A-Za-z_][A-Za-z0-9_]*", "an environment variable name")


def node_name_problem(name) -> str | None:
    """What is wrong with ``name`` as a node name (``--name``, a bundle's layout), or None: the inventory's rule."""
    ok, expected = node_name_rule(name)
    return None if ok else f"{name!r} is not {expected}"


def _socket_path(v):
    return (isinstance(v, str) and v.startswith("/") and len(v.encode()) < 108
            and not any(c in v for c in "\n\t\0") and v.strip() == v,
            "an absolute path of a unix socket on the nodes (one line, under 108 bytes)")


def _stepping(v):
    return v in STEPPINGS, "A0 or B0 (the silicon stepping; it cannot be read from the board, §1)"


def _transport(v):
    return v in ("ssh", "local"), "ssh or local"


SETTINGS_KEYS = {"container": _container, "image": _str, "stepping": _stepping,
                 "hbm_gib_per_gpu": _bounded(MAX_HBM_GIB, "GiB"), "gpus_per_node": _bounded(MAX_GPUS_PER_NODE, "GPUs"),
                 "tools": "tools", "checks": "checks", "skip": "skip"}


def _platform(v):
    from k3doctor import platforms

    return v in platforms.names(), f"one of {', '.join(platforms.names())} (k3doctor/platforms/*.yaml)"


def _launch_script(v):
    return (isinstance(v, str) and v.startswith("/") and v.strip() == v and not any(c in v for c in "\n\t\0"),
            "the absolute path, on the nodes, of the script that starts the model server (one line)")


def _recipe_spec(v):
    return (isinstance(v, str) and v.strip() == v and v != "" and "\n" not in v,
            "a built-in recipe's name or a recipe file's path (see `k3doctor recipe list`)")


CLUSTER_KEYS = {"name": _str, "platform": _platform, "recipe": _recipe_spec,
                "concurrency": _bounded(MAX_CONCURRENCY, "concurrent requests"),
                "launch_script": _launch_script, **SETTINGS_KEYS}
SSH_KEYS = {"known_hosts": _str, "accept_unknown_hosts": _bool, "ssh_config": _str,
            "connect_timeout_s": _seconds, "command_timeout_s": _seconds, "node_deadline_s": _seconds,
            "docker_socket": _socket_path}
LOGIN_KEYS = {"port": _port, "user": _user, "identity_file": _str, "password_env": _env_name, "sudo": _bool,
              "transport": _transport}
NODE_KEYS = {"name": node_name_rule, "host": host_rule, "data_ip": host_rule, **LOGIN_KEYS, **SETTINGS_KEYS}
# `- hosts: ct[13-17]`: one node per name of the node set (name and SSH host), the entry's other keys for each
NODE_SET_KEYS = {"hosts": _str, **LOGIN_KEYS, **SETTINGS_KEYS}
TOP_KEYS = {"cluster": CLUSTER_KEYS, "ssh": SSH_KEYS, "defaults": LOGIN_KEYS, "nodes": "nodes", "racks": "racks",
            "waivers": "waivers"}  # k3doctor/inventory/waivers.py
