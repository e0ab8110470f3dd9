"""Saved readings that can be shared: every host-identifying value replaced by a stable pseudonym (issue 32 §5).

Secrets never leave the node (redaction.py: each reading keeps only what its ``saved`` policy names); a file to
attach to a bug report must not name the site either. :func:`pseudonymize` replaces, everywhere in a saved
readings document (the inventory, the ``--set`` values, every reading and every reading's spec, the node names),
host names, IP and MAC addresses, serial numbers and unique ids, UUIDs and user names, and runs the secret
shapes of redaction.py over all text as a last guard. Each distinct value gets one pseudonym *of its own
shape*, the same in every reading and on every node of the file: an IPv4 address stays an IPv4 address of the
same kind (loopback, private, link-local, public: what the hostname-to-loopback rule of reference §29 judges),
a MAC a MAC, a decimal serial a decimal, ``0x`` hex stays hex; a unique id is mapped by its *number*, so kfd's
decimal ``unique_id`` and rocm-smi's hex ``Unique ID`` of the same GPU still agree; an address in
``/proc/net/tcp``'s hex is the same pseudonym as in ``ip route``. So the checks that compare nodes, or one
source with another, judge the pseudonyms as they judged the originals. The mapping itself is never written.

What is kept, because the verdicts need it and it names no site: GPU models, device ids, BDFs, firmware, driver,
ROCm and library versions, kernel log text (its addresses and ids replaced), container names and images,
interface names, ports, paths (a home directory's user name replaced), the UALink PPOD/VPOD ids (a fabric
domain, compared across sources in two spellings; the all-zero and all-nines sentinels mean "unset").
"""
from __future__ import annotations

import ipaddress
import re

import yaml

from k3doctor import redaction
from k3doctor.inventory import nodesets
from k3doctor.views.ifnames import HOSTNAME_LOOKUP

KINDS = ("host names", "IP addresses", "MAC addresses", "serial numbers and unique ids", "UUIDs", "user names",
         "secrets")
# Names nobody can be found by; short names (`vm`, `n1`) are words of kernel logs too ("vm size is ..."): they
# are replaced where a host names itself (node keys, the inventory, hostname readings), never in free text.
_ANONYMOUS_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback", "root"}
_MIN_FREE_TEXT_NAME = 4
# Inventory values that only log in (the judge never does) are dropped whole: paths to keys and SSH files.
_LOGIN_PATHS = ("identity_file", "known_hosts", "ssh_config")

_IPV4 = re.compile(r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
                   r"(?!\w|\.\d)")
_MAC = re.compile(r"(?i)(?<![\w:])[0-9a-f]{2}(?::[0-9a-f]{2}){5}(?:(?::[0-9a-f]{2}){14})?(?![\w:])")
_IPV6 = re.compile(r"(?i)(?<![\w:.])(?=[0-9a-f]{0,4}:[0-9a-f]{0,4}:)[0-9a-f:]{2,39}(?![\w:.])")
_UUID = re.compile(r"(?i)(ppod[_ ]?id\W{0,6})?(?<![\w-])([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
                   r"(?![\w-])")
# A value named a serial or unique id (amd-smi SERIAL / ASIC_SERIAL, rocm-smi "Unique ID", kfd unique_id and
# hive_id, sysfs serial_number): 0x hex, long hex or a decimal of 5+ digits, after `:`, `=`, `,` or spaces (JSON
# quotes allowed); not a driver's name ("Serial: 8250/16550 driver" in every boot log).
_ID_WORDS = ("serial", "unique", "hive", "uuid", "guid")
_KEYED_ID = re.compile(r"(?i)((?<![a-z])(?:serial(?:_?number)?|unique[ _]?id|hive[ _]?id|uuid|guid)\b[\"']?"
                       r"\s{0,8}[:=,]?\s{0,8}[\"']?)(0x[0-9a-f]{4,32}|[0-9a-f]{8,32}|\d{5,32})(?![\w/-])")
_SELF_LINE = re.compile(r"(?m)^(@host )(\S++)")
_SELF_FILES = ("/etc/hostname", "/proc/sys/kernel/hostname")
_FABRIC_IDS = ("/ppod_id", "/vpod_id")  # sysfs files of the UALink fabric domain (kept: see the module's doc)
_TCP_HEX = re.compile(r"(?<![0-9A-Fa-f])([0-9A-F]{8}|[0-9A-F]{32}):([0-9A-F]{4})(?![0-9A-Fa-f])")
_HOME = re.compile(r"(?<![\w.-])(/home/|/Users/)([A-Za-z0-9_][A-Za-z0-9_.-]{0,63})")
_KEPT_IPS = {ipaddress.ip_address(a) for a in ("0.0.0.0", "127.0.0.1", "127.0.1.1", "127.0.0.0", "127.255.255.255",
                                               "255.255.255.255", "::", "::1")}
# The pseudonym ranges, one per kind of address (the kind is what a rule may judge): RFC 5737/2544/3849 test
# and documentation ranges where one exists, so no pseudonym is a routable address of somebody else.
_V4_RANGES = (("is_loopback", "127.200.0.0"), ("is_link_local", "169.254.200.0"), ("is_private", "10.200.0.0"),
              ("is_multicast", None), ("", "198.18.0.0"))
_V6_RANGES = (("is_link_local", "fe80::"), ("is_private", "fd00::"), ("is_multicast", None), ("", "2001:db8::"))


class Pseudonyms:
    """One file's mapping: original -> pseudonym, per kind; counts what it replaced (never the originals)."""

    def __init__(self, node_names=(), host_names=(), users=()):
        self.maps = {kind: {} for kind in KINDS}
        self.secrets = 0
        originals = set(node_names) | set(host_names) | set(users)
        for prefix, names in (("node", node_names), ("host", host_names), ("user", users)):
            kind = "user names" if prefix == "user" else "host names"
            for name in names:
                if name not in self.maps[kind] and name not in _ANONYMOUS_NAMES:
                    self.maps[kind][name] = self._fresh(prefix, kind, originals)
        names = sorted(self.maps["host names"], key=len, reverse=True)
        self._names = _words(names)
        self._free_names = _words([n for n in names if len(n) >= _MIN_FREE_TEXT_NAME])
        self._users = _words(sorted(self.maps["user names"], key=len, reverse=True))

    def _fresh(self, prefix: str, kind: str, taken: set) -> str:
        n = sum(1 for v in self.maps[kind].values() if v.startswith(prefix)) + 1
        while f"{prefix}{n}" in taken:
            n += 1
        return f"{prefix}{n}"

    def replaced(self) -> dict:
        """How many distinct values of each kind the file had replaced (secrets: how many occurrences)."""
        counts = {kind: len(m) for kind, m in self.maps.items()} | {"secrets": self.secrets}
        return {kind: n for kind, n in counts.items() if n}

    # --- one value of each kind ------------------------------------------------------------------------------

    def ip(self, text: str) -> str:
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            return text
        return str(self.address(address))

    def address(self, address):
        """An address's pseudonym of the same kind (an IPv4-mapped IPv6 address keeps its form)."""
        mapped = getattr(address, "ipv4_mapped", None)
        if mapped is not None:
            return ipaddress.IPv6Address(f"::ffff:{self.address(mapped)}")
        if address in _KEPT_IPS or (address.version == 4 and address.packed[0] == 0):
            return address  # 0.x.y.z is "this network" (and the shape of many a version string): no host
        seen = self.maps["IP addresses"]
        if address not in seen:
            ranges = _V4_RANGES if address.version == 4 else _V6_RANGES
            base = _base(address, ranges)
            if base is None:  # a multicast group names no host
                return address
            same_kind = sum(1 for a in seen if a.version == address.version and _base(a, ranges) == base)
            seen[address] = ipaddress.ip_address(base) + same_kind + 1
        return seen[address]

    def mac(self, text: str) -> str:
        if set(text.lower()) <= {"0", ":"} or set(text.lower()) <= {"f", ":"}:
            return text
        seen = self.maps["MAC addresses"]
        n = seen.setdefault(text.lower(), len(seen) + 1)
        octets = len(text.split(":"))
        return ":".join(f"{b:02x}" for b in (0x02, *(0,) * (octets - 3), n >> 8 & 0xff, n & 0xff))

    def uuid(self, text: str) -> str:
        if len(set(text.replace("-", "").lower())) == 1:  # all zero, all nines, all f: a sentinel, not an id
            return text
        seen = self.maps["UUIDs"]
        n = seen.setdefault(text.lower(), len(seen) + 1)
        return f"00000000-0000-4000-8000-{n:012x}"

    def serial(self, text: str) -> str:
        hexadecimal = text.lower().startswith("0x") or not text.isdigit()
        value = int(text, 16) if hexadecimal else int(text)
        if value == 0 or set(text.lower().removeprefix("0x")) == {"f"}:
            return text
        seen = self.maps["serial numbers and unique ids"]
        n = seen.setdefault(value, len(seen) + 1)
        digits = text[2:] if text.lower().startswith("0x") else text
        shown = f"{n:0{len(digits)}x}" if hexadecimal else f"{n:0{len(digits)}d}"
        shown = shown.upper() if digits.isupper() else shown
        return text[:2] + shown if text.lower().startswith("0x") else shown

    # --- text -----------------------------------------------------------------------------------------------

    def text(self, text: str, names_anywhere: bool = False) -> str:
        """``text`` with every identifying value replaced (``names_anywhere``: short host names too)."""
        text, found = redaction.redact_secrets_counted(text)
        self.secrets += found
        text = _MAC.sub(lambda m: self.mac(m[0]), text)
        text = _IPV6.sub(lambda m: self.ip(m[0]), text)
        text = _IPV4.sub(lambda m: self.ip(m[0]), text)
        text = _UUID.sub(lambda m: m[0] if m[1] else self.uuid(m[2]), text)
        if any(word in text.lower() for word in _ID_WORDS):
            text = _KEYED_ID.sub(lambda m: m[1] + self.serial(m[2]), text)
        names = self._names if names_anywhere else self._free_names
        if names is not None:
            text = names.sub(lambda m: self.maps["host names"][m[0]], text)
        if "@host " in text:  # a container says its host's name (aiter-jit-locks), short or not
            text = _SELF_LINE.sub(lambda m: m[1] + self.maps["host names"].get(m[2], m[2]), text)
        if "/home/" in text or "/Users/" in text:
            text = _HOME.sub(lambda m: m[1] + self.user(m[2]), text)
        if self._users is not None:
            text = self._users.sub(lambda m: self.maps["user names"][m[0]], text)
        return text

    def user(self, name: str) -> str:
        seen = self.maps["user names"]
        if name not in seen and name not in _ANONYMOUS_NAMES:
            seen[name] = self._fresh("user", "user names", set(seen))
        return seen.get(name, name)

    def proc_net_tcp(self, text: str) -> str:
        """``/proc/net/tcp{,6}`` with its hex addresses replaced as their dotted forms are elsewhere."""
        return _TCP_HEX.sub(lambda m: _tcp_hex(self.address(_from_tcp_hex(m[1]))) + ":" + m[2], text)


def _base(address, ranges):
    """The first address of the pseudonym range of ``address``'s kind (None: a multicast group, kept)."""
    return next(start for kind, start in ranges if not kind or getattr(address, kind))


def _words(names: list):
    """One pattern for whole-word ``names`` (longest first: ``ct13.example.com`` before ``ct13``), or None."""
    if not names:
        return None
    return re.compile(r"(?<![\w.-])(?:" + "|".join(map(re.escape, names)) + r")(?![\w-])")


def _from_tcp_hex(hex_text: str):
    raw = bytes.fromhex(hex_text)
    if len(raw) == 4:
        return ipaddress.IPv4Address(raw[::-1])
    return ipaddress.IPv6Address(b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))


def _tcp_hex(address) -> str:
    if address.version == 4:
        return address.packed[::-1].hex().upper()
    raw = address.packed
    return b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)).hex().upper()


# --- the document ---------------------------------------------------------------------------------------------

def _inventory_names(inventory: dict) -> tuple:
    """(node names, other host names, user names) an inventory holds; node sets expanded."""
    nodes, hosts, users = [], [], []
    for section in (inventory.get("defaults"), *(inventory.get("nodes") or [])):
        if not isinstance(section, dict):
            continue
        if isinstance(section.get("hosts"), str):
            nodes += nodesets.expand(section["hosts"])
        for key, into in (("name", nodes), ("host", hosts), ("user", users)):
            if isinstance(section.get(key), str):
                into.append(section[key])
    return nodes, [h for h in hosts if not _is_ip(h)], users


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def _expanded(inventory: dict) -> dict:
    """The inventory with ``hosts:`` node sets written out (a pseudonym replaces a name, not a pattern) and the
    login-only paths dropped."""
    out = dict(inventory)
    nodes = []
    for entry in inventory.get("nodes") or []:
        if isinstance(entry, dict) and isinstance(entry.get("hosts"), str):
            rest = {k: v for k, v in entry.items() if k != "hosts"}
            nodes += [{"name": name, "host": name, **rest} for name in nodesets.expand(entry["hosts"])]
        else:
            nodes.append(entry)
    if "nodes" in inventory:
        out["nodes"] = nodes
    return _without_login_paths(out)


def _without_login_paths(value):
    if isinstance(value, dict):
        return {k: _without_login_paths(v) for k, v in value.items() if k not in _LOGIN_PATHS}
    if isinstance(value, list):
        return [_without_login_paths(v) for v in value]
    return value


def _self_names(doc: dict) -> list:
    """Host names the nodes said of themselves: the hostname lookup's output, a container's ``@host`` line,
    /etc/hostname."""
    names = []
    for entries in doc.get("nodes", {}).values():
        for entry in entries:
            spec, reading = entry.get("spec", {}), entry.get("reading", {})
            text = reading.get("stdout") or reading.get("content") or ""
            if not isinstance(text, str):
                continue
            if tuple(spec.get("argv") or ()) == HOSTNAME_LOOKUP:
                lines = text.split()
                names += [w for w in lines if not _is_ip(w)]
            elif spec.get("path") in _SELF_FILES:
                names += text.split()[:1]
            names += [m[2] for m in _SELF_LINE.finditer(text)]
    return names


def pseudonymize(doc: dict) -> tuple:
    """(a copy of the saved readings document ``doc`` with identifying values replaced, {kind: how many})."""
    inventory = _expanded(yaml.safe_load(doc["inventory"]) or {}) if doc.get("inventory") else {}
    nodes, hosts, users = _inventory_names(inventory)
    node_keys = [*doc.get("nodes", {}), *(doc.get("unreachable") or {})]
    names = Pseudonyms(node_names=list(dict.fromkeys(nodes + node_keys)), host_names=hosts + _self_names(doc),
                       users=users)

    def walk(value, anywhere=False):
        if isinstance(value, str):
            return names.text(value, anywhere)
        if isinstance(value, list):
            return [walk(v, anywhere) for v in value]
        if isinstance(value, dict):
            return {walk(k, anywhere): walk(v, anywhere) for k, v in value.items()}
        return value

    def entry(e: dict) -> dict:
        reading = dict(e["reading"])
        if e["spec"].get("path", "").startswith("/proc/net/tcp") and isinstance(reading.get("content"), str):
            reading["content"] = names.proc_net_tcp(reading["content"])
        # the hostname lookup, and k3doctor's own words ("Docker engine on vm not readable"), name the node
        own = tuple(e["spec"].get("argv") or ()) == HOSTNAME_LOOKUP or e["spec"].get("path") in _SELF_FILES \
            or reading.get("kind") == "Unavailable"
        out = walk(reading, own)
        if reading.get("kind") == "Glob":  # a sysfs ppod_id is a UUID the path names, not its text: kept
            out["value"] = {p: reading["value"][p] if p.endswith(_FABRIC_IDS) else v for p, v in out["value"].items()}
        return {"spec": walk(e["spec"], True), "reading": out}

    out = dict(doc)
    out["inventory"] = yaml.safe_dump(walk(inventory, True), sort_keys=False) if inventory else ""
    out["overrides"] = walk(doc.get("overrides", []), True)  # `--set` values name nodes as the inventory does
    out["unreachable"] = walk(doc.get("unreachable", {}), True)
    out["nodes"] = {walk(node, True): [entry(e) for e in entries] for node, entries in doc.get("nodes", {}).items()}
    return out, names.replaced()


KEPT = ("GPU models, device ids and BDFs; firmware, driver, ROCm and library versions; kernel log lines; container "
        "names, images and states; interface names, ports and paths; UALink PPOD/VPOD ids; the inventory's "
        "settings and check parameters (not its login paths)")
NEVER = "secrets: no environment value or credential a rule does not need ever left the node"
SHAPES = ("node1.., host1.., user1..; addresses of the same kind (10.200.0.x private, 198.18.0.x public, "
          "127.200.0.x loopback); MACs 02:00:00:00:00:xx; serials and ids 1, 2.. in their own width and base")


def summary(doc: dict) -> str:
    """One line: shareable (what was replaced) or not."""
    marked = doc.get("identifiers") if isinstance(doc, dict) else None
    if not isinstance(marked, dict):
        return ("identifiers KEPT as read (host names, IP and MAC addresses, serial numbers, user names): for your "
                "own use; `k3doctor readings redact FILE -o SHARED.json` writes a copy to share")
    replaced = marked.get("pseudonyms") or {}
    said = ", ".join(f"{n} {kind}" for kind, n in replaced.items()) or "nothing identifying found"
    return f"shareable: identifiers replaced by pseudonyms ({said})"


def describe(doc: dict) -> list:
    """What a saved readings file holds, in lines for a person deciding whether to attach it to a report."""
    if not isinstance(doc.get("identifiers"), dict):
        return [summary(doc), "kept: everything each reading's policy keeps, as read", f"never saved: {NEVER}"]
    return [summary(doc), f"pseudonyms: {SHAPES}, the same on every node of the file", f"kept: {KEPT}",
            f"never saved: {NEVER}"]
