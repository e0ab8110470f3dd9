"""Ansible inventories, read by the user's own ``ansible-inventory --list`` (every inventory format and
plugin Ansible knows, group_vars and host_vars included), bounded in time like every other tool we run."""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from dataclasses import dataclass

KILL_GRACE_S = 2.0  # after the kill, how long its output may still take to arrive
ANSIBLE_TIMEOUT_S = 120.0  # a plain ini/yaml inventory reads in ~1 s (12 s on the loaded 2-core CI box)
# An inventory source Ansible cannot parse is only a warning by default: it would read as zero hosts.
STRICT_ENV = {"ANSIBLE_INVENTORY_UNPARSED_FAILED": "true", "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "true",
              "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"}
HOST_VARS = {"host": ("ansible_host", "ansible_ssh_host"), "port": ("ansible_port", "ansible_ssh_port"),
             "user": ("ansible_user", "ansible_ssh_user"),
             "identity_file": ("ansible_ssh_private_key_file", "ansible_private_key_file")}


class AnsibleError(Exception):
    """ansible-inventory is missing, failed or said something we cannot use; one line."""


@dataclass
class AnsibleHost:
    name: str
    host: str | None = None
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    local: bool = False  # ansible_connection: local


@dataclass
class AnsibleInventory:
    source: str  # what was read (the path, or Ansible's default inventory)
    hosts: dict  # name -> AnsibleHost, in Ansible's order
    groups: dict  # group name -> member host names (children's members included)


def read(path: str | None, timeout_s: float = ANSIBLE_TIMEOUT_S) -> AnsibleInventory:
    """``ansible-inventory [-i path] --list``, parsed; without ``path`` Ansible's configured default."""
    import subprocess  # here, not at the top: a k3doctor inventory is loaded before the first connection

    from k3doctor.transport.procs import drain_killed

    source = path or "Ansible's default inventory"
    exe = find_ansible_inventory()
    if exe is None:
        raise AnsibleError(f"cannot read {source}: ansible-inventory is not on PATH (install Ansible, e.g. "
                           "`pip install ansible-core`)")
    argv = [exe, "--list", *(["-i", path] if path else [])]
    what = f"ansible-inventory -i {path}" if path else "ansible-inventory (Ansible's default inventory)"
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, **STRICT_ENV}, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # ansible-inventory and any inventory script it started
        drain_killed(proc, KILL_GRACE_S)  # a script that left the group must not hold us past the deadline
        raise AnsibleError(f"{what} did not finish within {timeout_s:g} s") from None
    if proc.returncode != 0:
        said = [ln.strip() for ln in err.decode("utf-8", "replace").splitlines() if ln.strip()]
        raise AnsibleError(f"{what} failed (exit {proc.returncode}): "
                           f"{said[-1][:300] if said else 'no message'}")
    try:
        return parse_list(json.loads(out), source)
    except (ValueError, TypeError, AttributeError) as exc:
        raise AnsibleError(f"{what}: unexpected output ({exc})") from None


def find_ansible_inventory() -> str | None:
    """The user's ansible-inventory: on PATH, else beside this Python (Ansible installed in k3doctor's own
    virtual environment, e.g. ``pipx inject k3doctor ansible-core``, without it being activated)."""
    return shutil.which("ansible-inventory") or shutil.which(
        "ansible-inventory", path=os.path.dirname(sys.executable))


def parse_list(doc: dict, source: str) -> AnsibleInventory:
    """The JSON of ``ansible-inventory --list`` -> hosts with their login variables, and groups."""
    hostvars = doc.get("_meta", {}).get("hostvars", {})
    direct = {name: group for name, group in doc.items() if name != "_meta" and isinstance(group, dict)}

    def members(name: str, seen: tuple = ()) -> list:
        group = direct.get(name, {})
        found = list(group.get("hosts", []))
        for child in group.get("children", []):
            if child not in seen:
                found += [h for h in members(child, (*seen, name)) if h not in found]
        return found

    groups = {name: members(name) for name in direct}
    order = groups.get("all") or [h for g in groups.values() for h in g]
    hosts = {}
    for name in dict.fromkeys([*order, *hostvars]):
        hosts[name] = _host(name, hostvars.get(name, {}), source)
    return AnsibleInventory(source=source, hosts=hosts, groups=groups)


def _host(name: str, variables: dict, source: str) -> AnsibleHost:
    values = {}
    for field, keys in HOST_VARS.items():
        value = next((variables[k] for k in keys if k in variables), None)
        if isinstance(value, str) and "{{" in value:
            raise AnsibleError(f"{source}: host {name}: {keys[0]} is a template ({value!r}); k3doctor does not "
                               "render Jinja: give the value itself")
        values[field] = value
    port = values["port"]
    if port is not None:
        try:
            port = int(port)
        except (TypeError, ValueError):
            raise AnsibleError(f"{source}: host {name}: ansible_port {port!r} is not a port number") from None
    return AnsibleHost(name=name, host=_text(values["host"]), port=port, user=_text(values["user"]),
                       identity_file=_text(values["identity_file"]),
                       local=variables.get("ansible_connection") == "local")


def _text(value):
    return None if value is None else str(value)
