"""Which host keys a node may present: known_hosts as OpenSSH reads it (``@revoked``, HostKeyAlias, several
files) and the policies for a key not in it. Imported by the first SSH handshake, not at start: it needs
paramiko, and the TCP probe before the handshake does not (CLI start to first connection, issue 12)."""
from __future__ import annotations

import hashlib
import hmac
import logging
import os
import threading
from base64 import b64decode

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


def read_known_hosts(path: str) -> tuple:
    """A known_hosts file's host entries (paramiko ``HostKeyEntry``, in file order) and its revoked keys as
    (type, base64); trust_known_hosts leaves out every key revoked in any of the files it reads.

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
        try:
            entry = paramiko.hostkeys.HostKeyEntry.from_line(rest.strip(), number)
        except (paramiko.SSHException, ValueError) as exc:  # base64 of something that is no key of its type
            raise paramiko.hostkeys.InvalidHostKey(line, ValueError(f"line {number}: {exc}")) from None
        if entry is None:  # a key type paramiko does not know: OpenSSH would not use it either
            continue
        if marker:
            revoked.add((entry.key.get_name(), entry.key.get_base64()))
        else:
            entries.append(entry)
    return entries, revoked


class KnownHostsFile:
    """One known_hosts file as read once: its lines that trust a key, each by its host name (plain, or hashed
    ``|1|salt|hash``, checked with the C HMAC), in file order, and its revoked keys. paramiko's ``HostKeys``
    parses every line into a key object: read again for each node, a 256-node run spent ~1 s of client CPU
    re-parsing one 256-line file 256 times."""

    def __init__(self, path: str):
        entries, self.revoked = read_known_hosts(path)
        self._lines: list = []  # (plain name, or None; (salt, digest) of a hashed one, or None; key type; key)
        for entry in entries:
            for name in entry.hostnames:
                if not name.startswith("|1|"):
                    self._lines.append((name, None, entry.key.get_name(), entry.key))
                    continue
                salt, _, digest = name[3:].partition("|")
                try:
                    self._lines.append((None, (b64decode(salt), b64decode(digest)), entry.key.get_name(), entry.key))
                except ValueError:  # not base64: a name no host has (paramiko would never match it either)
                    continue

    def matches(self, name: str) -> list:
        """[(from a plain line, key type, key)] of the lines that name ``name``, in file order."""
        encoded, found = name.encode(), []
        for plain, hashed, key_type, key in self._lines:
            if plain == name or (hashed and hmac.compare_digest(
                    hmac.new(hashed[0], encoded, hashlib.sha1).digest(), hashed[1])):
                found.append((plain is not None, key_type, key))
        return found


_FILES: dict = {}  # path -> ((device, inode, mtime, size), KnownHostsFile): read again only once it changed
_FILES_LOCK = threading.Lock()  # held while a file is read: the nodes connecting at once share the first read


def known_hosts_file(path: str) -> KnownHostsFile:
    """``path`` as read once per version of it (a long ``watch`` sees an edit at its next connection)."""
    with _FILES_LOCK:
        st = os.stat(path)
        version = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
        cached = _FILES.get(path)
        if not cached or cached[0] != version:
            cached = _FILES[path] = (version, KnownHostsFile(path))
        return cached[1]


def trust_known_hosts(trusted: paramiko.HostKeys, t) -> set:
    """Put the keys known for ``t`` (an SSHTarget) into ``trusted`` under the name paramiko checks
    ([host]:port), looked up under HostKeyAlias where one is set; returns the revoked keys of every file
    read (never written back). The first line naming the host, file by file, gives the key of its type, and a
    later plain line of the very name replaces an earlier plain one (paramiko's ``HostKeys``, which read the
    files before); a key ``@revoked`` in any of the files is trusted from none of them, as OpenSSH has it."""
    checked = t.host if t.port == 22 else f"[{t.host}]:{t.port}"
    files = []
    for path in (f for f in t.known_hosts_files if os.path.exists(f)):
        try:
            files.append(known_hosts_file(path))
        except (OSError, paramiko.hostkeys.InvalidHostKey) as exc:
            raise KnownHostsError(f"cannot use known_hosts file {path}: {exc}") from None
    revoked = set().union(*(read.revoked for read in files))
    chosen: dict = {}  # key type -> (key, from a plain line)
    for read in files:
        for plain, key_type, key in read.matches(t.host_key_alias or checked):
            if (key_type, key.get_base64()) in revoked:
                continue
            if key_type not in chosen or (plain and chosen[key_type][1]):
                chosen[key_type] = (key, plain)
    for key_type, (key, _) in chosen.items():
        trusted.add(checked, key_type, key)
    return revoked
