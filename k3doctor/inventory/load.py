"""Load and validate the inventory: which nodes, how to reach them, what the rack should be.

Validation walks the YAML node tree so every error names the file, line and key, and
suggests the fix; all errors are reported at once and nothing runs on a bad inventory.
"""
from __future__ import annotations

import difflib
import json
import os

import yaml

from k3doctor.inventory import ansible, nodesets, waivers
from k3doctor.inventory.safeyaml import SchemaReader, YAMLInputError, by_line, compose, load, pairs, plain
from k3doctor.inventory.safeyaml import read_file as read_yaml_file
from k3doctor.inventory.schema import (
    LOGIN_KEYS,
    NODE_KEYS,
    NODE_SET_KEYS,
    TOP_KEYS,
    host_rule,
    node_name_rule,
    tool_rule,
)
from k3doctor.inventory.types import (
    DEFAULT_TOOLS,
    Inventory,
    InventoryError,
    Node,
    NodeSourceError,
    Settings,
    SSHSettings,
)


class _Validator(SchemaReader):
    """The inventory against TOP_KEYS: its nodes and node sets, racks, tools, per-check settings and skips."""

    def __init__(self, path: str, registry=None):
        super().__init__(path)
        self.registry = registry
        self.pending = []  # (YAML node, key, check, {param: value}) checked by check_params

    def named(self, vnode, where: str, rule: str):
        if rule == "nodes":
            return self.nodes(vnode, where)
        if rule == "racks":
            return self.racks(vnode, where)
        if rule == "tools":
            return self.mapping(vnode, where, {k: tool_rule for k in DEFAULT_TOOLS})
        if rule == "checks":
            return self.checks(vnode, where)
        if rule == "skip":
            return self.skip(vnode, where)
        if rule == "waivers":
            return waivers.read(self, vnode, where, waivers.known_codes(self.registry))
        return super().named(vnode, where, rule)

    def nodes(self, node, key: str) -> list:
        if not isinstance(node, yaml.SequenceNode) or not node.value:
            self.problem(node, key, "expected a non-empty list of nodes (- name: ..., host: ...)")
            return []
        out = []
        for i, item in enumerate(node.value):
            where = f"{key}[{i}]"
            if isinstance(item, yaml.MappingNode) and any(k.value == "hosts" for k, _ in pairs(item)):
                out += self.node_set(item, where)
                continue
            entry = self.mapping(item, where, NODE_KEYS)
            entry["_line"] = item.start_mark.line + 1
            entry["_node"] = item
            entry["_given"] = {k.value for k, _ in pairs(item)} if isinstance(item, yaml.MappingNode) else set()
            if "name" not in entry["_given"]:
                self.problem(item, f"{where}.name", "missing; every node needs a unique name")
            out.append(entry)
        return out

    def node_set(self, item, where: str) -> list:
        """``- hosts: NODESET``: one entry per node name, each with the entry's other settings."""
        entry = self.mapping(item, where, NODE_SET_KEYS)
        if "hosts" not in entry:
            return []
        line = item.start_mark.line + 1
        try:
            names = nodesets.expand(entry.pop("hosts"))
        except nodesets.NodeSetError as exc:
            self.problem(item, f"{where}.hosts", str(exc))
            return []
        given = {k.value for k, _ in pairs(item)} - {"hosts"} | {"name", "host"}
        out = []
        for name in names:
            for rule in (node_name_rule, host_rule):
                ok, expected = rule(name)
                if not ok:
                    self.problem(item, f"{where}.hosts", f"{name!r} is not {expected}")
                    return []
            out.append({**entry, "name": name, "host": name, "_line": line, "_node": item, "_given": given})
        return out

    def racks(self, node, key: str) -> dict:
        """``racks: {rack-name: [node, ...]}``: rack name -> [(node name, YAML node)], checked against the
        nodes by :meth:`check_racks`."""
        if not isinstance(node, yaml.MappingNode) or not node.value:
            self.problem(node, key, "expected a mapping of rack-name: [node names]")
            return {}
        out = {}
        for knode, vnode in pairs(node):
            where = f"{key}.{knode.value}"
            ok, expected = node_name_rule(plain(knode))
            if not ok:
                self.problem(knode, where, f"expected {expected} as the rack name")
                continue
            if not isinstance(vnode, yaml.SequenceNode) or not vnode.value:
                self.problem(vnode, where, "expected a non-empty list of node names")
                continue
            out[knode.value] = [(plain(item), item) for item in vnode.value]
        return out

    def check_racks(self, racks: dict, nodes: list) -> dict:
        """Every node in exactly one rack, every name a node: rack -> node names (inventory order)."""
        known, home = {n.name for n in nodes}, {}
        for rack, members in racks.items():
            for name, item in members:
                if name not in known:
                    self.problem(item, f"racks.{rack}", f"{name!r} is not a node of this inventory")
                elif name in home:
                    self.problem(item, f"racks.{rack}", f"{name} is already in rack {home[name]}")
                else:
                    home[name] = rack
        for n in nodes:
            if n.name not in home:
                self.problems.append(f"{self.path}:{n.line}: nodes: {n.name}: in no rack: with `racks:` every node "
                                     "must be in one (the cluster checks judge each rack on its own)")
        return {rack: [n.name for n in nodes if home.get(n.name) == rack] for rack in racks}

    def checks(self, node, key: str) -> dict:
        """``checks: {check-name: {param: value}}`` against the params the checks declare.

        Values are checked once the node names are known (:meth:`check_params`): some rules
        (a fabric pair plan) name nodes."""
        if self.registry is None:
            return plain(node) or {}
        known = self.registry.checks
        if not isinstance(node, yaml.MappingNode):
            self.problem(node, key, "expected a mapping of check-name: {param: value}")
            return {}
        raw = {}
        for knode, vnode in pairs(node):
            name = knode.value
            if name not in known:
                close = difflib.get_close_matches(name, list(known), n=1)
                self.problem(knode, f"{key}.{name}", "no such check" + (f" (did you mean '{close[0]}'?)"
                                                                         if close else "; see `k3doctor list`"))
                continue
            if not known[name].params:
                self.problem(knode, f"{key}.{name}", "this check has no tunable parameters")
                continue
            raw[name] = self.mapping(vnode, f"{key}.{name}", {p: _any for p in known[name].params})
            if isinstance(vnode, yaml.MappingNode):
                self.pending.append((vnode, f"{key}.{name}", known[name], raw[name]))
        return raw

    def skip(self, node, key: str) -> tuple:
        """``skip: [check-name, ...]``: the kill switch for checks a site cannot run (each must exist)."""
        if not isinstance(node, yaml.SequenceNode):
            self.problem(node, key, "expected a list of check names")
            return ()
        names = []
        for item in node.value:
            name = plain(item)
            if self.registry is not None and name not in self.registry.checks:
                close = difflib.get_close_matches(str(name), list(self.registry.checks), n=1)
                self.problem(item, key, f"{name!r}: no such check" + (f" (did you mean '{close[0]}'?)" if close
                                                                       else "; see `k3doctor list`"))
            elif isinstance(name, str):
                names.append(name)
        return tuple(names)

    def check_params(self, nodes: list) -> None:
        """Every check parameter given in the file, against its declaration (type, range, choices)."""
        for vnode, where, chk, params in self.pending:
            lines = {k.value: v for k, v in vnode.value}
            for param, value in list(params.items()):
                wrong = chk.param_problem(param, value, nodes)
                if wrong:
                    self.problem(lines[param], f"{where}.{param}", f"expected {wrong}, got {value!r}")
                    del params[param]


def _any(v):
    return True, ""


def _cluster_line(root, key: str) -> int:
    """The line of ``cluster.<key>`` (1 where it cannot be found)."""
    for k, v in root.value if isinstance(root, yaml.MappingNode) else ():
        if k.value == "cluster" and isinstance(v, yaml.MappingNode):
            return next((ck.start_mark.line + 1 for ck, _ in v.value if ck.value == key), k.start_mark.line + 1)
    return 1


def _check_recipe(v: _Validator, root, cluster: Settings, path: str) -> str | None:
    """cluster.recipe read and validated now (its own problems as its file:line), cluster.concurrency one of
    its points (required when it has several), its platform the cluster's; the spec as the checks will load it
    (a file's absolute path)."""
    from k3doctor import platforms, recipes

    if not cluster.recipe:
        v.problems.append(f"{path}:{_cluster_line(root, 'concurrency')}: cluster.concurrency: needs cluster.recipe "
                          "(the recipe whose point it chooses)")
        return None
    spec = cluster.recipe
    try:
        recipe = recipes.load(spec, relative_to=path)
    except recipes.RecipeError as exc:
        line = _cluster_line(root, "recipe")
        v.problems += [f"{path}:{line}: cluster.recipe: {problem}" if problem.startswith("no recipe") else problem
                       for problem in exc.problems]
        return None
    gfx = platforms.get(cluster.platform).gfx
    if gfx not in recipe.gfx:  # §31.3: a gfx950-only recipe on gfx942 dies at launch (vLLM #51964)
        v.problems.append(f"{path}:{_cluster_line(root, 'recipe')}: cluster.recipe: {recipe.name} runs on "
                          f"{' / '.join(recipe.gfx)} only (a {recipe.platform} recipe); platform {cluster.platform} "
                          f"is {gfx}: its kernels fail there (§31.3) - choose a recipe for {gfx}, or set "
                          "cluster.platform to what the nodes are")
    try:
        recipe.point(cluster.concurrency)
    except ValueError as exc:
        key = "concurrency" if cluster.concurrency else "recipe"
        v.problems.append(f"{path}:{_cluster_line(root, key)}: cluster.{key}: {exc}")
    if recipes.looks_like_path(spec):
        return os.path.abspath(os.path.join(os.path.dirname(path), os.path.expanduser(spec)))
    return spec




def _merge_settings(base: Settings, raw: dict, cluster_name=None) -> Settings:
    tools = {**base.tools, **raw.get("tools", {})}
    checks = {name: dict(params) for name, params in base.checks.items()}
    for name, params in raw.get("checks", {}).items():
        checks.setdefault(name, {}).update(params)
    fields = {k: raw[k] for k in ("container", "image", "stepping", "hbm_gib_per_gpu", "gpus_per_node",
                                  "platform", "recipe", "concurrency", "launch_script") if k in raw}
    skip = tuple(dict.fromkeys((*base.skip, *raw.get("skip", ()))))  # a node's own add to the cluster's
    return Settings(**{**base.__dict__, **fields, "tools": tools, "checks": checks, "skip": skip,
                       "cluster": cluster_name or base.cluster})


def parse_inventory(text: str, path: str = "<inventory>", registry=None, fast: bool = False) -> Inventory:
    try:
        root = compose(text, path, fast)
    except YAMLInputError as exc:
        raise InventoryError(exc.problems) from None
    v = _Validator(path, registry)
    if root is None:
        raise InventoryError([f"{path}:1: the inventory is empty; it needs at least `nodes:`"])
    top = v.mapping(root, "", TOP_KEYS)
    if "nodes" not in top and not v.problems:
        v.problem(root, "nodes", "missing; list the nodes to check (- name: ..., host: ...)")
    raw_cluster = top.get("cluster", {})  # the platform first: its file gives what the inventory does not set
    cluster = _merge_settings(Settings(**{k: raw_cluster[k] for k in ("platform",) if k in raw_cluster}), raw_cluster,
                              raw_cluster.get("name"))
    if cluster.recipe or cluster.concurrency:
        cluster.recipe = _check_recipe(v, root, cluster, path)
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
        if login.get("transport", "ssh") == "ssh" and "host" not in entry["_given"]:
            v.problem(entry["_node"], f"nodes: {name}.host", "missing; an SSH node needs host: (or transport: local)")
        nodes.append(Node(
            name=name, host=entry.get("host"), settings=_merge_settings(cluster, entry),
            data_ip=entry.get("data_ip"), line=entry["_line"], **login))
    v.check_params([n.name for n in nodes])
    racks = v.check_racks(top["racks"], nodes) if top.get("racks") else {}
    if v.problems:
        raise InventoryError(by_line(v.problems, path))
    ssh = SSHSettings(**top.get("ssh", {}))
    return Inventory(path=path, nodes=nodes, ssh=ssh, cluster=cluster, text=text, racks=racks,
                     waivers=tuple(top.get("waivers", ())))


def load_inventory(path: str, registry=None, fast: bool = False) -> Inventory:
    try:
        text = read_yaml_file(path, "inventory")
    except YAMLInputError as exc:
        raise InventoryError(exc.problems) from None
    return parse_inventory(text, path, registry, fast)


def load_nodes(spec: str | None, ansible_inventory: str | None = None, registry=None) -> Inventory:
    """What ``--nodes`` names: a k3doctor inventory file; an Ansible inventory (a directory, an ini file,
    a YAML file in Ansible's layout); or a node set (``ct[13-14,16-17]``, ``@group`` from an Ansible
    inventory). With ``ansible_inventory`` the nodes come from it, ``spec`` (a node set) choosing among them.

    A bare node set has nothing but names: each is its node's SSH host, and everything else about the
    login comes from the ssh config (HostName, User, Port, IdentityFile, ProxyJump, known_hosts files)
    and the defaults, as for ``ssh NAME``."""
    try:
        if ansible_inventory:
            if spec and not nodesets.looks_like_nodeset(spec):
                raise NodeSourceError([f"--nodes {spec} and --ansible-inventory {ansible_inventory}: give one "
                                       "inventory (--nodes may then be a node set choosing among its hosts)"])
            return from_ansible(ansible.read(ansible_inventory), spec, registry)
        if spec is None:
            return localhost_inventory()
        path = os.path.expanduser(spec)
        if os.path.exists(path) and is_ansible_inventory(path):
            return from_ansible(ansible.read(path), None, registry)
        if os.path.exists(path) or not nodesets.looks_like_nodeset(spec):
            return load_inventory(spec, registry)
        if "@" in spec:  # groups: Ansible's own default inventory (ansible.cfg, ANSIBLE_INVENTORY)
            return from_ansible(ansible.read(None), spec, registry)
        nodesets.expand(spec)  # its syntax error as one line of its own, not as a line of the text below
        return parse_inventory(f"nodes:\n  - hosts: {json.dumps(spec)}\n", f"--nodes {spec}", registry)
    except (ansible.AnsibleError, nodesets.NodeSetError) as exc:
        raise NodeSourceError([str(exc)]) from None


def from_ansible(source: ansible.AnsibleInventory, spec: str | None, registry=None) -> Inventory:
    """One node per Ansible host (``spec``: those of a node set, ``@group`` allowed): its name, and the
    login from ansible_host / ansible_port / ansible_user / ansible_ssh_private_key_file; ``ansible_connection:
    local`` is the local transport. The result is a k3doctor inventory text (validated, saved with readings)."""
    names = nodesets.expand(spec, source.groups) if spec else list(source.hosts)
    missing = [n for n in names if n not in source.hosts]
    if missing:
        raise NodeSourceError([f"{missing[0]} is not a host of {source.source}" +
                               (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")])
    if not names:
        raise NodeSourceError([f"{source.source} has no hosts"])
    lines = []
    for name in names:
        h = source.hosts[name]
        entry = {"name": name, "transport": "local"} if h.local else {
            "name": name, "host": h.host or name,
            **{k: v for k, v in (("port", h.port), ("user", h.user), ("identity_file", h.identity_file)) if v}}
        lines.append(f"  - {json.dumps(entry)}\n")
    label = f"{source.source} (read by ansible-inventory)"
    return parse_inventory("nodes:\n" + "".join(lines), label, registry)


def is_ansible_inventory(path: str) -> bool:
    """A directory, or a file that is not a k3doctor inventory: YAML files only when laid out as Ansible's
    (groups with hosts / children / vars), so a broken k3doctor YAML still gets its own line-accurate errors."""
    if os.path.isdir(path):
        return True
    try:
        doc = load(read_yaml_file(path, "inventory"), path)
    except YAMLInputError:
        return not path.endswith((".yaml", ".yml", ".json"))
    if isinstance(doc, dict) and set(doc) & set(TOP_KEYS):
        return False
    if not path.endswith((".yaml", ".yml", ".json")):
        return True
    return isinstance(doc, dict) and ("all" in doc or any(
        isinstance(group, dict) and set(group) & {"hosts", "children", "vars"} for group in doc.values()))


def check_ssh_config(inv: Inventory) -> None:
    """The ssh config as a whole (Include loops and nesting, unparsable lines) before anything runs, as one
    line; what it says about one host (a bad Port) stays that node's ERROR."""
    if any(n.transport == "ssh" for n in inv.nodes):
        from k3doctor.transport import ssh_config as sshconfig  # paramiko: only for SSH nodes

        try:
            sshconfig.load(inv.ssh.ssh_config)
        except sshconfig.SSHConfigError as exc:
            raise NodeSourceError([str(exc)]) from None


def unset_password_variables(inv: Inventory) -> list:
    """``password_env`` variables that are not set: each an error before the run (a login that
    silently drops to key-only auth would read as "authentication refused" much later)."""
    return [f"{inv.path}:{n.line}: nodes: {n.name}.password_env: environment variable {n.password_env} is not set"
            for n in inv.nodes if n.password_env and n.transport == "ssh" and n.password_env not in os.environ]


def localhost_inventory() -> Inventory:
    """The inventory used when none is given: this machine through the local transport."""
    return Inventory(path="<localhost>", ssh=SSHSettings(), cluster=Settings(),
                     nodes=[Node(name=os.uname().nodename, host=None, settings=Settings(), transport="local")])
