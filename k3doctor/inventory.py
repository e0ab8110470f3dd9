"""Load and validate the inventory: which nodes, how to reach them, what the rack should be.

Validation walks the YAML node tree so every error names the file, line and key, and
suggests the fix; all errors are reported at once and nothing runs on a bad inventory.
"""
from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field

import yaml

STEPPINGS = ("A0", "B0")
DEFAULT_TOOLS = {
    "amd_smi": "/opt/rocm/bin/amd-smi",
    "rocm_smi": "/opt/rocm/bin/rocm-smi",
    "ubench_dir": "/root/ubench/build",
    "container_python": "python3",
    "python": "python3",  # the host's python, for probes run outside the container (where: host)
}


class InventoryError(Exception):
    """Every problem found, one per line, as ``file:line: key: message``."""

    def __init__(self, problems: list):
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass
class SSHSettings:
    known_hosts: str | None = None  # None: ~/.ssh/known_hosts and /etc/ssh/ssh_known_hosts
    accept_unknown_hosts: bool = False
    ssh_config: str = "~/.ssh/config"
    connect_timeout_s: float = 10.0
    command_timeout_s: float = 30.0
    node_deadline_s: float = 120.0


@dataclass
class Settings:
    """What the rack should look like, as seen from one node (cluster values + node overrides)."""

    cluster: str = "k3"
    container: str = "k3ep16"
    image: str | None = None
    stepping: str | None = None
    hbm_gib_per_gpu: int | None = None
    gpus_per_node: int = 4
    tools: dict = field(default_factory=lambda: dict(DEFAULT_TOOLS))
    checks: dict = field(default_factory=dict)  # check name -> {param: value}

    def param(self, chk, name: str):
        """A check's tunable: the inventory's value, else the check's documented default."""
        return self.checks.get(chk.name, {}).get(name, chk.params[name])


@dataclass
class Node:
    name: str
    host: str | None
    settings: Settings
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    password_env: str | None = None
    data_ip: str | None = None
    sudo: bool = False
    transport: str = "ssh"
    line: int = 0

    @property
    def address(self) -> str:
        """Data-plane address that peers (ubench, RCCL) must use (§4: it is also the SSH address)."""
        return self.data_ip or self.host or "127.0.0.1"


@dataclass
class Inventory:
    path: str
    nodes: list
    ssh: SSHSettings
    cluster: Settings
    text: str = ""  # as loaded: saved with the readings, so `k3doctor judge` re-judges what was checked


# --- schema -----------------------------------------------------------------------------

def _str(v):
    return isinstance(v, str) and v != "", "a non-empty string"


def _bool(v):
    return isinstance(v, bool), "true or false"


def _port(v):
    return isinstance(v, int) and not isinstance(v, bool) and 0 < v < 65536, "an integer between 1 and 65535"


def _posint(v):
    return isinstance(v, int) and not isinstance(v, bool) and v > 0, "a positive integer"


def _seconds(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0, "a positive number of seconds"


def _stepping(v):
    return v in STEPPINGS, "A0 or B0 (the silicon stepping; it cannot be read from the board, §1)"


def _transport(v):
    return v in ("ssh", "local"), "ssh or local"


SETTINGS_KEYS = {"container": _str, "image": _str, "stepping": _stepping, "hbm_gib_per_gpu": _posint,
                 "gpus_per_node": _posint, "tools": "tools", "checks": "checks"}
CLUSTER_KEYS = {"name": _str, **SETTINGS_KEYS}
SSH_KEYS = {"known_hosts": _str, "accept_unknown_hosts": _bool, "ssh_config": _str,
            "connect_timeout_s": _seconds, "command_timeout_s": _seconds, "node_deadline_s": _seconds}
LOGIN_KEYS = {"port": _port, "user": _str, "identity_file": _str, "password_env": _str, "sudo": _bool,
              "transport": _transport}
NODE_KEYS = {"name": _str, "host": _str, "data_ip": _str, **LOGIN_KEYS, **SETTINGS_KEYS}
TOP_KEYS = {"cluster": CLUSTER_KEYS, "ssh": SSH_KEYS, "defaults": LOGIN_KEYS, "nodes": "nodes"}


class _Validator:
    def __init__(self, path: str, registry=None):
        self.path, self.registry, self.problems = path, registry, []

    def problem(self, node, key: str, message: str):
        line = node.start_mark.line + 1 if node is not None else 1
        self.problems.append(f"{self.path}:{line}: {key}: {message}")

    def mapping(self, node, key: str, schema: dict) -> dict:
        """Validated plain dict of a YAML mapping; bad entries are reported and dropped."""
        if not isinstance(node, yaml.MappingNode):
            self.problem(node, key or "(top level)", "expected a mapping of key: value")
            return {}
        out = {}
        for knode, vnode in node.value:
            if not isinstance(knode, yaml.ScalarNode):
                self.problem(knode, key or "(top level)", "keys must be plain names")
                continue
            name = knode.value
            where = f"{key}.{name}" if key else name
            if name not in schema:
                close = difflib.get_close_matches(name, list(schema), n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else f"; known keys: {', '.join(schema)}"
                self.problem(knode, where, f"unknown key{hint}")
                continue
            rule = schema[name]
            if isinstance(rule, dict):
                out[name] = self.mapping(vnode, where, rule)
            elif rule == "nodes":
                out[name] = self.nodes(vnode, where)
            elif rule == "tools":
                out[name] = self.mapping(vnode, where, {k: _str for k in DEFAULT_TOOLS})
            elif rule == "checks":
                out[name] = self.checks(vnode, where)
            else:
                value = yaml.safe_load(yaml.serialize(vnode))
                ok, expected = rule(value)
                if not ok:
                    self.problem(vnode, where, f"expected {expected}, got {value!r}")
                    continue
                out[name] = value
        return out

    def nodes(self, node, key: str) -> list:
        if not isinstance(node, yaml.SequenceNode) or not node.value:
            self.problem(node, key, "expected a non-empty list of nodes (- name: ..., host: ...)")
            return []
        out = []
        for i, item in enumerate(node.value):
            where = f"{key}[{i}]"
            entry = self.mapping(item, where, NODE_KEYS)
            entry["_line"] = item.start_mark.line + 1
            entry["_node"] = item
            if "name" not in entry:
                self.problem(item, f"{where}.name", "missing; every node needs a unique name")
            out.append(entry)
        return out

    def checks(self, node, key: str) -> dict:
        """``checks: {check-name: {param: value}}`` against the params the checks declare."""
        if self.registry is None:
            return yaml.safe_load(yaml.serialize(node)) or {}
        raw = {}
        known = self.registry.checks
        schema = {name: {p: like(default) for p, default in chk.params.items()}
                  for name, chk in known.items()}
        if not isinstance(node, yaml.MappingNode):
            self.problem(node, key, "expected a mapping of check-name: {param: value}")
            return raw
        for knode, vnode in node.value:
            name = knode.value
            if name not in known:
                close = difflib.get_close_matches(name, list(known), n=1)
                self.problem(knode, f"{key}.{name}", "no such check" + (f" (did you mean '{close[0]}'?)"
                                                                         if close else "; see `k3doctor list`"))
                continue
            if not schema[name]:
                self.problem(knode, f"{key}.{name}", "this check has no tunable parameters")
                continue
            raw[name] = self.mapping(vnode, f"{key}.{name}", schema[name])
        return raw


def like(default):
    """Validator accepting values of the same kind as a parameter's default."""
    if isinstance(default, bool):
        return _bool
    if isinstance(default, (int, float)):
        return lambda v: (isinstance(v, (int, float)) and not isinstance(v, bool),
                          f"a number like the default {default!r}")
    if isinstance(default, (list, tuple)):
        return lambda v: (isinstance(v, list), f"a list like the default {list(default)!r}")
    if isinstance(default, dict):
        return lambda v: (isinstance(v, dict), "a mapping")
    if default is None:  # "not pinned" by default: any scalar pins it
        return lambda v: (v is None or isinstance(v, (str, int, float)), "a string or number")
    return lambda v: (v is None or isinstance(v, str), "a string")


def _merge_settings(base: Settings, raw: dict, cluster_name=None) -> Settings:
    tools = {**base.tools, **raw.get("tools", {})}
    checks = {name: dict(params) for name, params in base.checks.items()}
    for name, params in raw.get("checks", {}).items():
        checks.setdefault(name, {}).update(params)
    fields = {k: raw[k] for k in ("container", "image", "stepping", "hbm_gib_per_gpu", "gpus_per_node")
              if k in raw}
    return Settings(**{**base.__dict__, **fields, "tools": tools, "checks": checks,
                       "cluster": cluster_name or base.cluster})


def parse_inventory(text: str, path: str = "<inventory>", registry=None) -> Inventory:
    try:
        root = yaml.compose(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f"{mark.line + 1}:{mark.column + 1}" if mark else "1"
        raise InventoryError([f"{path}:{line}: YAML syntax error: {exc.problem or exc}"]) from None
    except yaml.YAMLError as exc:
        raise InventoryError([f"{path}:1: YAML error: {exc}"]) from None
    v = _Validator(path, registry)
    if root is None:
        raise InventoryError([f"{path}:1: the inventory is empty; it needs at least `nodes:`"])
    top = v.mapping(root, "", TOP_KEYS)
    if "nodes" not in top and not v.problems:
        v.problem(root, "nodes", "missing; list the nodes to check (- name: ..., host: ...)")
    cluster = _merge_settings(Settings(), top.get("cluster", {}), top.get("cluster", {}).get("name"))
    defaults = top.get("defaults", {})
    nodes, seen = [], {}
    for entry in top.get("nodes", []):
        name = entry.get("name")
        if name is None:
            continue
        if name in seen:
            v.problem(entry["_node"], f"nodes: {name}", f"duplicate node name (first at line {seen[name]})")
        seen[name] = entry["_line"]
        login = {**defaults, **{k: entry[k] for k in LOGIN_KEYS if k in entry}}
        if login.get("transport", "ssh") == "ssh" and "host" not in entry:
            v.problem(entry["_node"], f"nodes: {name}.host", "missing; an SSH node needs host: (or transport: local)")
        nodes.append(Node(
            name=name, host=entry.get("host"), settings=_merge_settings(cluster, entry),
            data_ip=entry.get("data_ip"), line=entry["_line"], **login))
    if v.problems:
        raise InventoryError(v.problems)
    ssh = SSHSettings(**top.get("ssh", {}))
    return Inventory(path=path, nodes=nodes, ssh=ssh, cluster=cluster, text=text)


def load_inventory(path: str, registry=None) -> Inventory:
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise InventoryError([f"{path}: cannot read inventory: {exc.strerror}"]) from None
    return parse_inventory(text, path, registry)


def localhost_inventory() -> Inventory:
    """The inventory used when none is given: this machine through the local transport."""
    return Inventory(path="<localhost>", ssh=SSHSettings(), cluster=Settings(),
                     nodes=[Node(name=os.uname().nodename, host=None, settings=Settings(), transport="local")])
