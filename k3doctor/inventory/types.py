"""What an inventory is once read: the nodes, how to reach them, and each node's settings (the
cluster's values with the node's own overrides). ``load`` builds these from YAML; every later stage
reads them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from k3doctor import platforms
from k3doctor.deadline import READS_IN_FLIGHT
from k3doctor.inventory.safeyaml import YAMLInputError

STEPPINGS = ("A0", "B0")
DEFAULT_TOOLS = {
    "amd_smi": "/opt/rocm/bin/amd-smi",
    "rocm_smi": "/opt/rocm/bin/rocm-smi",
    "ubench_dir": "/root/ubench/build",
    "container_python": "python3",
    "python": "python3",  # the host's python, for probes run outside the container (where: host)
    "squeue": "/usr/bin/squeue",  # Slurm's job list (rack-free, reference §30); a node without it runs no Slurm
}


class InventoryError(YAMLInputError):
    """Every problem found, one per line, as ``file:line: key: message``."""


class NodeSourceError(InventoryError):
    """What ``--nodes`` / ``--ansible-inventory`` name cannot be read (node set syntax, Ansible); one line."""


@dataclass
class SSHSettings:
    known_hosts: str | None = None  # None: ~/.ssh/known_hosts and /etc/ssh/ssh_known_hosts
    accept_unknown_hosts: bool = False
    ssh_config: str = "~/.ssh/config"
    connect_timeout_s: float = 10.0
    command_timeout_s: float = 30.0
    node_deadline_s: float = 120.0
    reads_in_flight: int = READS_IN_FLIGHT  # a node's readings at once (k3doctor/remote/node_reader.py)
    docker_socket: str | None = None  # the nodes' engine socket; None: /var/run/docker.sock (docker's default)


@dataclass
class Settings:
    """What the rack should look like, as seen from one node (cluster values + node overrides).

    The numbers that depend on the platform (GPUs per node, HBM per GPU) are its file's
    (k3doctor/platforms/<platform>.yaml) unless the inventory sets them: None here means "the platform's",
    filled in when the settings are made, so no platform's numbers are written in code (issue 34)."""

    cluster: str = "k3"
    container: str = "k3ep16"
    image: str | None = None
    stepping: str | None = None
    hbm_gib_per_gpu: int | None = None  # None: the platform file's (itself None where the SKU decides, §12)
    gpus_per_node: int | None = None  # None: the platform file's
    platform: str = platforms.DEFAULT  # cluster.platform (reference §30: mi355x)
    recipe: str | None = None  # cluster.recipe: a built-in recipe's name or a recipe file's absolute path
    concurrency: int | None = None  # cluster.concurrency: the recipe point launched
    # cluster.launch_script: the script on the nodes that starts the server, judged where nothing runs yet (§30)
    launch_script: str | None = None
    tools: dict = field(default_factory=lambda: dict(DEFAULT_TOOLS))
    checks: dict = field(default_factory=dict)  # check name -> {param: value}
    skip: tuple = ()  # checks a site cannot run here (inventory `skip:`, the cluster's and the node's own)

    def __post_init__(self):
        if self.platform in platforms.names():  # an unknown one is the inventory's problem, said as file:line
            p = platforms.get(self.platform)
            self.gpus_per_node = p.gpus_per_node if self.gpus_per_node is None else self.gpus_per_node
            self.hbm_gib_per_gpu = p.hbm_gib_per_gpu if self.hbm_gib_per_gpu is None else self.hbm_gib_per_gpu

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
    racks: dict = field(default_factory=dict)  # rack name -> node names; {}: the nodes are one rack
    waivers: tuple = ()  # accepted findings (k3doctor/inventory/waivers.py): the inventory's, then --waivers FILE's

    def rack_groups(self) -> list:
        """(rack name, its nodes) for each rack, or (None, every node) without ``racks:``: the cluster checks'
        domain. One rack is one PPOD (§4: 18 trays, 72 GPUs, one PPOD_ID; §7), whose accel ids, fabric
        domain, boards and checkpoint copy are compared among themselves, never with another rack's."""
        if not self.racks:
            return [(None, list(self.nodes))]
        by_name = {n.name: n for n in self.nodes}  # a node's own run (`k3doctor node`) has only its own rack
        groups = [(rack, [by_name[name] for name in names if name in by_name]) for rack, names in self.racks.items()]
        return [(rack, nodes) for rack, nodes in groups if nodes]


# --- schema -----------------------------------------------------------------------------
