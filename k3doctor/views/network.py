"""A node's network as launch checks need it (reference §17, §18): which interfaces exist, which
addresses each one carries, and which TCP ports are taken.

"Carries" is the kernel's own answer: the ``local`` routes of ``ip -4 route show table local``
(an address on ``enp1s0f1`` gives ``local 10.210.11.14 dev enp1s0f1``; ``lo`` carries all of
``127.0.0.0/8``), not a string match on ``ip addr``.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from k3doctor.parsers import ParseError

_LINK = re.compile(r"^\d+:\s+([^:@\s]+)(?:@\S+)?:\s+<([^>]*)>")
_TCP_LISTEN = "0A"
WILDCARDS = (ipaddress.ip_address("0.0.0.0"), ipaddress.ip_address("::"))


def parse_links(text: str) -> dict:
    """``ip -o link show`` -> {interface name: its flags} (``veth1@if5`` -> ``veth1``; flags as iproute2 prints
    them between ``<>``, e.g. ``{"BROADCAST", "MULTICAST", "UP", "LOWER_UP"}``)."""
    links = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _LINK.match(line)
        if not match:
            raise ParseError(f"ip -o link show: unexpected line {line!r:.120}")
        links[match.group(1)] = frozenset(f for f in match.group(2).split(",") if f)
    if not links:
        raise ParseError("ip -o link show: no interfaces at all (not even lo)")
    return links


def is_running(flags) -> bool:
    """UP and RUNNING, as MORI requires of ``MORI_SOCKET_IFNAME`` (reference §29, ``socket_bootstrap.cpp``).
    iproute2 never prints RUNNING itself: it prints ``NO-CARRIER`` for an interface that is UP but not RUNNING."""
    return "UP" in flags and "NO-CARRIER" not in flags


@dataclass(frozen=True)
class LocalRoute:
    network: ipaddress.IPv4Network
    dev: str


def parse_local_routes(text: str) -> list:
    """``ip -4 route show table local`` -> the ``local`` routes (what each interface answers for)."""
    routes = []
    for line in text.splitlines():
        words = line.split()
        if not words or words[0] != "local":
            continue
        try:
            network = ipaddress.ip_network(words[1], strict=False)
            dev = words[words.index("dev") + 1]
        except (IndexError, ValueError):
            raise ParseError(f"ip route show table local: unexpected line {line!r:.120}") from None
        routes.append(LocalRoute(network, dev))
    if not routes:
        raise ParseError("ip route show table local: no local routes at all (not even 127.0.0.0/8 on lo)")
    return routes


# The three interface-name grammars (reference §29, §0.2): NCCL takes a comma list of prefixes (`=name` exact,
# a leading `^` excludes); Gloo takes one literal name; MORI one exact name (else it silently falls back to the
# first non-loopback NIC).
IFNAME_GRAMMARS = {"NCCL_SOCKET_IFNAME": "nccl", "GLOO_SOCKET_IFNAME": "literal", "MORI_SOCKET_IFNAME": "literal"}


def selected_interfaces(grammar: str, value: str, links) -> set:
    """The interfaces a library picks from ``links`` (names) for ``value`` under its ``grammar`` (IFNAME_GRAMMARS)."""
    links = set(links)
    if grammar == "literal":
        return {value} & links
    exclude = value.startswith("^")
    exact = value.lstrip("^").startswith("=")
    words = [w for w in value.lstrip("^").lstrip("=").split(",") if w]
    hits = {i for i in links for w in words if i == w or (not exact and i.startswith(w))}
    return links - hits - {"lo"} if exclude else hits


def routing_interfaces(routes: list, address: str) -> set:
    """Interfaces whose local routes contain ``address`` (the NICs that carry its traffic; not the probes'
    ``kit.carriers``, the nodes that carry a fault)."""
    ip = ipaddress.ip_address(address)
    return {r.dev for r in routes if ip in r.network}


def own_addresses(routes: list) -> set:
    """The node's own single addresses (host routes), e.g. 127.0.0.1 and the data-plane address."""
    return {r.network.network_address for r in routes if r.network.num_addresses == 1}


@dataclass(frozen=True)
class Listener:
    address: ipaddress._BaseAddress
    port: int


def _address(hex_text: str):
    raw = bytes.fromhex(hex_text)
    if len(raw) == 4:
        return ipaddress.IPv4Address(raw[::-1])
    if len(raw) == 16:  # four host-order 32-bit words
        v6 = ipaddress.IPv6Address(b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))
        return v6.ipv4_mapped or v6
    raise ValueError(hex_text)


def parse_proc_net_tcp(text: str) -> list:
    """``/proc/net/tcp`` or ``/proc/net/tcp6`` -> the listening sockets."""
    lines = text.splitlines()
    if not lines or not lines[0].split()[:2] == ["sl", "local_address"]:
        raise ParseError(f"/proc/net/tcp: no header (got {lines[0] if lines else ''!r:.80})")
    out = []
    for line in lines[1:]:
        fields = line.split()
        try:
            local, state = fields[1], fields[3]
            addr, port = local.split(":")
            if state == _TCP_LISTEN:
                out.append(Listener(_address(addr), int(port, 16)))
        except (IndexError, ValueError):
            raise ParseError(f"/proc/net/tcp: unexpected line {line!r:.120}") from None
    return out


def blocking(listeners: list, port: int, addresses: set) -> list:
    """Listeners that keep a server from binding ``port`` on every address: on the port and bound to a
    wildcard or to one of ``addresses`` (the node's own)."""
    return [s for s in listeners if s.port == port and (s.address in WILDCARDS or s.address in addresses)]
