"""Where and how to log in to a node: the inventory merged with the ssh config as OpenSSH reads it (HostName,
User, Port, IdentityFile, ProxyJump chains, known_hosts files, HostKeyAlias), before any connection."""
from __future__ import annotations

import os
from dataclasses import dataclass

from k3doctor.transport import ssh_config as sshconfig
from k3doctor.transport.base import TransportError


@dataclass
class SSHTarget:
    """Where and how to log in, after merging the inventory with the ssh config (see sshconfig.py)."""

    node: str
    host: str
    port: int = 22
    user: str | None = None
    identity_file: str | None = None
    password: str | None = None  # from an environment variable named in the inventory
    proxy_jump: str | None = None  # as written (ProxyJump), for messages; ``jumps`` is what is used
    ssh_config_path: str | None = None
    known_hosts: str | None = None  # the inventory's file: then the only one, for every hop
    accept_unknown_hosts: bool = False
    connect_timeout_s: float = 10.0
    jumps: tuple = ()  # SSHTarget per jump host, first hop first
    known_hosts_files: tuple = ()  # files the host key is verified against (missing ones are skipped)
    host_key_alias: str | None = None  # known_hosts name instead of [host]:port (HostKeyAlias)
    use_agent: bool = True  # ssh-agent keys (SSH_AUTH_SOCK) may be tried
    look_for_keys: bool = True  # ~/.ssh/id_* may be tried

    def __repr__(self):  # never show the password
        return f"SSHTarget({self.user}@{self.host}:{self.port})"

    @property
    def first_hop(self) -> tuple:
        """(host, port) this machine opens a TCP connection to: the first jump host, else the node."""
        return (self.jumps[0].host, self.jumps[0].port) if self.jumps else (self.host, self.port)


def resolve_ssh_target(node: str, host: str, *, port=None, user=None, identity_file=None,
                       password=None, known_hosts=None, accept_unknown_hosts=False,
                       connect_timeout_s=10.0, ssh_config_path="~/.ssh/config") -> SSHTarget:
    """Inventory values win; the ssh config fills what the inventory leaves open (HostName, Port, User,
    IdentityFile, ProxyJump chains, known_hosts files, HostKeyAlias), as OpenSSH would read it."""
    path = os.path.expanduser(ssh_config_path) if ssh_config_path else None
    try:
        config = sshconfig.load(path)
        return _resolve(node, host, port, user, identity_file, config, path, jumps=None,
                        common=dict(password=password, known_hosts=os.path.expanduser(known_hosts) if known_hosts
                                    else None, accept_unknown_hosts=accept_unknown_hosts,
                                    connect_timeout_s=connect_timeout_s), seen=())
    except sshconfig.SSHConfigError as exc:
        raise TransportError(f"cannot use ssh config {path} for {host}: {exc}", "NODE-SSH-CONFIG",
                             f"cannot use ssh config {path}: {exc}", "correct the ssh config (ssh.ssh_config in the inventory)") from None


def _resolve(node, host, port, user, identity_file, config, path, *, jumps, common, seen) -> SSHTarget:
    """One login; ``jumps`` given: the chain that reaches it (a hop of an explicit list does not follow its
    own ProxyJump, as in OpenSSH), else the host's own ProxyJump from the config."""
    cfg = sshconfig.lookup(config, host)
    if jumps is None and cfg.proxy_command and not cfg.proxy_jump:
        raise sshconfig.SSHConfigError(f"ProxyCommand is not supported for {host}; use ProxyJump")
    hostname, port = cfg.hostname or host, int(port or cfg.port or 22)
    if (hostname, port) in seen or len(seen) >= sshconfig.MAX_JUMPS:
        raise sshconfig.SSHConfigError(f"ProxyJump loop (or more than {sshconfig.MAX_JUMPS} hops): "
                                       + " -> ".join(f"{h}:{p}" for h, p in (*seen, (hostname, port))))
    seen = (*seen, (hostname, port))
    if jumps is None:  # the host's own ProxyJump: the first hop follows its own, each next is reached through it
        jumps = ()
        for hop_user, hop_host, hop_port in cfg.proxy_jump:
            hop = _resolve(f"{node} (jump host {hop_host})", hop_host, hop_port, hop_user, None, config, path,
                           jumps=jumps or None, common={**common, "password": None},
                           seen=(*seen, *((j.host, j.port) for j in jumps)))
            jumps = (*jumps, hop) if jumps else (*hop.jumps, hop)
    identity = os.path.expanduser(identity_file) if identity_file else (
        cfg.identity_files[0] if cfg.identity_files else None)
    known = (common["known_hosts"],) if common["known_hosts"] else cfg.user_known_hosts + cfg.global_known_hosts
    return SSHTarget(
        node=node, host=hostname, port=port, user=user or cfg.user or "root", identity_file=identity,
        proxy_jump=",".join(h for _, h, _ in cfg.proxy_jump) or None, ssh_config_path=path, jumps=tuple(jumps),
        known_hosts_files=known, host_key_alias=cfg.host_key_alias,
        use_agent=cfg.use_agent and not (identity and cfg.identities_only),
        look_for_keys=identity is None, **common)


def files_said(t: SSHTarget) -> str:
    """The known_hosts files of a message, and the alias the key was looked up under."""
    files = " ".join(t.known_hosts_files) or "no known_hosts file"
    return files + (f", as {t.host_key_alias}" if t.host_key_alias else "")

