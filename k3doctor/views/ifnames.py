"""The three ``*_SOCKET_IFNAME`` grammars judged on a node and across nodes (reference §18, §29, §0.2).

``NCCL_SOCKET_IFNAME`` is a prefix list (``=`` exact, ``^`` excludes): it must select exactly one interface
carrying the data-plane IP (several: WARN, use ``=name``), and the same number of interfaces on every node -
RCCL's ``NCCL_IGNORE_NET_MISMATCH`` defaults to 1, so unequal counts only log ``NCCL INFO Detected mixed local
Net device counts across ranks``. ``GLOO_SOCKET_IFNAME`` and ``MORI_SOCKET_IFNAME`` take one literal name that
must exist, be UP and RUNNING and carry the data-plane IP; on a bad one MORI silently falls back to the first
non-loopback NIC (``socket_bootstrap.cpp``). Verdicts carry the remediation code their caller registered.
"""
from __future__ import annotations

import ipaddress

from k3doctor.views import network
from k3doctor.views.peers import majority
from k3doctor.parsers import ParseError
from k3doctor.results import Status, fail, warn

SOCKET_IFNAMES = ("MORI_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
PREFIX_VAR = "NCCL_SOCKET_IFNAME"
# What a library does with a literal interface name that exists but is down (§29).
_FALLBACK = {"MORI_SOCKET_IFNAME": "MORI logs `interface not found or not up. Falling back to auto-detection` and "
                                   "silently uses the first non-loopback NIC",
             "GLOO_SOCKET_IFNAME": "Gloo reaches its peers only over an interface that is up"}


def _names(values) -> str:
    return ", ".join(sorted(values)) or "none"


def judge_ifnames(env: dict, links: dict, routes: list, data_ip: str, code: str, ignore=()) -> list:
    """[(variable, Verdict)] for one environment. ``links``: {name: flags} as network.parse_links gives."""
    routing = network.routing_interfaces(routes, data_ip)
    out = []
    for var in SOCKET_IFNAMES:
        value = env.get(var)
        if not value or var in ignore:
            continue  # unset: the profile rule names it
        grammar = network.IFNAME_GRAMMARS[var]  # §29 (0.2): three grammars, not one
        matching = network.selected_interfaces(grammar, value, links)
        evidence = {var: value, "data_ip": data_ip, "interfaces carrying it": sorted(routing), "grammar": grammar,
                    "selects": sorted(matching)}
        nic = f"the data-plane NIC carrying {data_ip} is {_names(routing)}"
        if grammar == "literal" and not matching and any(c in value for c in ",^="):
            out.append((var, fail(f"{var}={value}: {var.split('_')[0]} takes one literal interface name, not NCCL's "
                                  f"prefix/exclude syntax (§29; {nic})", remediation=code, evidence=evidence)))
        elif not matching:
            out.append((var, fail(f"{var}={value}: no such interface on this node (it has {_names(links)}); {nic} "
                                  "(§18)", remediation=code, evidence=evidence)))
        elif grammar == "literal" and not network.is_running(links[value]):
            out.append((var, fail(f"{var}={value}: the interface exists but is not UP and RUNNING (flags "
                                  f"<{','.join(sorted(links[value]))}>): {_FALLBACK[var]} (§29; {nic})",
                                  remediation=code, evidence={**evidence, "flags": sorted(links[value])})))
        elif not matching & routing:
            out.append((var, fail(f"{var}={value} does not carry the node's data_ip {data_ip} (carried by "
                                  f"{', '.join(sorted(routing)) or 'no interface'}): the rendezvous goes over another "
                                  "network or hangs (§18)", remediation=code, evidence=evidence)))
        elif len(matching) > 1:
            out.append((var, warn(f"{var}={value} is a prefix that selects {len(matching)} interfaces "
                                  f"({_names(matching)}): RCCL may use any of them; name the data-plane NIC "
                                  f"exactly with ={_names(matching & routing)} (§29)", remediation=code,
                                  evidence=evidence)))
    return out


def prefix_selection(env: dict, links: dict, ignore=()):
    """The interfaces NCCL_SOCKET_IFNAME selects on a node, or None where it is unset or not judged."""
    value = env.get(PREFIX_VAR)
    if not value or PREFIX_VAR in ignore:
        return None
    return frozenset(network.selected_interfaces("nccl", value, links))


def judge_selection_counts(selected: dict, code: str) -> list:
    """§29: NCCL_SOCKET_IFNAME selects the same number of interfaces on every node ({node: selected names});
    the odd node is named against its peers, or, with no majority, one cluster finding names every group. A node
    that selects exactly one interface where its peers select several is not the odd one: their own WARNs say so."""
    counts = {node: len(names) for node, names in selected.items()}
    top, odd = majority(counts)
    if not odd:
        return []
    why = ("RCCL sees mixed local net device counts across ranks and, with NCCL_IGNORE_NET_MISMATCH at its default "
           "1, says so only in an INFO line (`Detected mixed local Net device counts across ranks`, §29)")
    if top is None:
        groups = {}
        for node, n in sorted(counts.items()):
            groups.setdefault(n, []).append(node)
        return [warn(f"{PREFIX_VAR} selects different numbers of interfaces with no majority: " + "; ".join(
            f"{n} on {', '.join(nodes)}" for n, nodes in sorted(groups.items())) + f": {why}", remediation=code,
            evidence={node: sorted(selected[node]) for node in counts})]
    odd = [n for n in odd if counts[n] != 1 or top < 1]  # one NIC is what §29 asks: the peers' own WARNs name it
    peers = [n for n in counts if n not in odd]
    return [warn(f"{PREFIX_VAR} selects {counts[node]} interface(s) here ({_names(selected[node])}), {top} on each "
                 f"of the other {len(peers)} nodes ({', '.join(sorted(peers))}): {why}", node=node, remediation=code,
                 evidence={"selects here": sorted(selected[node]), "count on the peers": top, "peers": sorted(peers)})
            for node in odd]


def fold_into_node_findings(verdicts: list, across: list) -> list:
    """A fault is named once: a cross-node count finding for a node that already has its own finding on
    NCCL_SOCKET_IFNAME is added to that finding (message and evidence); the others are returned."""
    left = []
    for v in across:
        own = next((o for o in verdicts if v.node is not None and o.node == v.node and o.status != Status.PASS
                    and PREFIX_VAR in o.evidence), None)
        if own is None:
            left.append(v)
            continue
        own.message += f"; against its peers: {v.message.removeprefix(PREFIX_VAR + ' ')}"
        own.evidence = {**own.evidence, "peers": v.evidence}
    return left


# `getent hosts $(hostname)` on the node (§29): the hostname first, then what the resolver answers for it.
HOSTNAME_LOOKUP = ("sh", "-c", 'h=$(hostname) || exit 1; echo "$h"; getent hosts "$h"; exit 0')


def judge_hostname(output: str, data_ip: str, code: str) -> list:
    """The node's own hostname must not resolve to a loopback address other
    than its data-plane IP (§29): with GLOO_SOCKET_IFNAME unset, Gloo then says `Using the loopback address as
    fallback` and `connectFullMesh` fails towards 127.0.0.1 (the rendezvous over loopback). A hostname that does
    not resolve is no finding (the reference names no rule for it)."""
    lines = [ln.split() for ln in output.splitlines() if ln.strip()]
    if not lines or len(lines[0]) != 1:
        raise ParseError(f"no hostname in the lookup's output: {output[:80]!r}")
    hostname, addresses = lines[0][0], [words[0] for words in lines[1:]]
    loopback = [a for a in addresses if _is_loopback(a) and a != data_ip]
    if not loopback:
        return []
    return [warn(f"`getent hosts {hostname}` gives {', '.join(loopback)}, a loopback address, not the data-plane IP "
                 f"{data_ip}: with GLOO_SOCKET_IFNAME unset Gloo falls back to loopback and `connectFullMesh` fails "
                 "towards 127.0.0.1 (§29)", remediation=code,
                 evidence={"hostname": hostname, "getent hosts": addresses, "data_ip": data_ip})]


def _is_loopback(text: str) -> bool:
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False
