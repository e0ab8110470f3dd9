"""Which host keys a node may present: known_hosts as OpenSSH reads it (``@revoked``, HostKeyAlias, several
files) and the policies for a key not in it. Imported by the first SSH handshake, not at start: it needs
paramiko, and the TCP probe before the handshake does not (CLI start to first connection, issue 12)."""
from __future__ import annotations

import logging
import os

import paramiko

from k3doctor import localfiles

log = logging.getLogger("k3doctor")


class KnownHostsError(ValueError):
    """A known_hosts file that cannot be used."""


class AcceptForThisRun(paramiko.MissingHostKeyPolicy):
    """--accept-unknown-hosts: trust an unknown key for this run only; never save it (a changed key
    is still refused by paramiko before any policy is asked)."""

    def missing_host_key(self, client, hostname, key):
        log.warning("accepting unknown host key of %s for this run only: %s %s", hostname, key.get_name(),
                    key.fingerprint if hasattr(key, "fingerprint") else key.get_base64()[:24])
        client.get_host_keys().add(hostname, key.get_name(), key)


class RevokedHostKey(paramiko.SSHException):
    """The node presented a key that a known_hosts ``@revoked`` line names."""


class RefuseRevoked(paramiko.MissingHostKeyPolicy):
    """Refuse a revoked key before any other policy may accept it. Revoked keys are left out of the
    known keys, so paramiko always asks the policy about them."""

    def __init__(self, revoked: set, policy: paramiko.MissingHostKeyPolicy):
        self.revoked, self.policy = revoked, policy

    def missing_host_key(self, client, hostname, key):
        if (key.get_name(), key.get_base64()) in self.revoked:
            raise RevokedHostKey(f"{hostname} {key.get_name()}")
        return self.policy.missing_host_key(client, hostname, key)


def load_known_hosts(host_keys: paramiko.HostKeys, path: str) -> set:
    """Add a known_hosts file's keys to ``host_keys``; returns its revoked keys as (type, base64).

    OpenSSH markers: a ``@revoked`` key is refused for every host (its host pattern is usually
    ``*``, which paramiko cannot match), and is never trusted even if another line lists it;
    ``@cert-authority`` lines are skipped (paramiko does not verify host certificates)."""
    revoked, entries = set(), []
    for number, line in enumerate(localfiles.read_text(path, errors="replace").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        marker, _, rest = line.partition(" ") if line.startswith("@") else ("", "", line)
        if marker == "@cert-authority":
            continue
        if marker not in ("", "@revoked"):
            raise paramiko.hostkeys.InvalidHostKey(line, ValueError(f"line {number}: unknown marker {marker}"))
        entry = paramiko.hostkeys.HostKeyEntry.from_line(rest.strip(), number)
        if entry is None:  # a key type paramiko does not know: OpenSSH would not use it either
            continue
        if marker:
            revoked.add((entry.key.get_name(), entry.key.get_base64()))
        else:
            entries.append(entry)
    for entry in entries:
        if (entry.key.get_name(), entry.key.get_base64()) not in revoked:
            for name in entry.hostnames:
                host_keys.add(name, entry.key.get_name(), entry.key)
    return revoked


def trust_known_hosts(trusted: paramiko.HostKeys, t) -> set:
    """Put the keys known for ``t`` (an SSHTarget) into ``trusted`` under the name paramiko checks
    ([host]:port), looked up under HostKeyAlias where one is set; returns the revoked keys of every file
    read (never written back)."""
    loaded, revoked = paramiko.HostKeys(), set()
    for path in (f for f in t.known_hosts_files if os.path.exists(f)):
        try:
            revoked |= load_known_hosts(loaded, path)
        except (OSError, paramiko.hostkeys.InvalidHostKey) as exc:
            raise KnownHostsError(f"cannot use known_hosts file {path}: {exc}") from None
    checked = t.host if t.port == 22 else f"[{t.host}]:{t.port}"
    for key_type, key in (loaded.lookup(t.host_key_alias or checked) or {}).items():
        trusted.add(checked, key_type, key)
    return revoked
