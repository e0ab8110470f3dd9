"""What both deep probes share: rounds of node-disjoint pairs, node-vs-pair attribution, output tails.

A pair test proves a path between two nodes; a node in two or more pairs that is bad in every
one of them carries the fault itself, a bad pair whose nodes each did better with another peer
points at the path between them (reference §8 coverage strategy, §20 hierarchy). Pure: no I/O.

The probes' blame words, one meaning each: a *carrier* is a node that carries a fault (bad with
every peer, :func:`carriers`); a :class:`Blame` says where one bad pair's fault lies; a
:class:`Finding` is a probe's conclusion about where a fault is, before it becomes verdicts; an
*outcome* is one probe run judged (allreduce-probe's ``Outcome``: one run of a set of ranks;
ualoe-fabric's ``PairOutcome``: one pair). A kernel-log ``SignatureHit`` and a recipe rule's
``Ruling`` are other things and carry other names.
"""
from __future__ import annotations

from dataclasses import dataclass, field


def rounds(pairs: list) -> list:
    """Rounds of node-disjoint pairs, in the given order: pairs sharing a node never run at once."""
    out, left = [], list(pairs)
    while left:
        busy, this, rest = set(), [], []
        for pair in left:
            if busy & set(pair):
                rest.append(pair)
            else:
                this.append(pair)
                busy |= set(pair)
        out.append(this)
        left = rest
    return out


def every_pair(nodes: list) -> list:
    """Every pair once, in circle-method order, so that :func:`rounds` packs them into n-1 (even n) or n rounds."""
    ring = list(nodes) + ([None] if len(nodes) % 2 else [])
    pairs = []
    for _ in range(len(ring) - 1):
        pairs += [tuple(sorted(p, key=nodes.index)) for p in zip(ring[:len(ring) // 2], ring[::-1], strict=False)
                  if None not in p]
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return pairs


def pair_rounds(nodes: list) -> list:
    """Every pair of ``nodes`` once, grouped into rounds of disjoint pairs to run at once."""
    return rounds(every_pair(nodes))


@dataclass(frozen=True)
class Blame:
    """Where one bad pair's fault lies: ``on`` is node (one node carries it), path (each node did better
    with another peer), or pair (cannot tell: both nodes bad everywhere, or a node in only this pair)."""

    on: str
    nodes: tuple  # the carrier (node) or both nodes of the pair
    peers: tuple = ()  # on == node: every peer the carrier was paired with
    untested: bool = False  # on == pair: a node of the pair was in no other pair


def _pairs_of(ranks: dict) -> dict:
    by_node: dict = {}
    for pair in ranks:
        for n in pair:
            by_node.setdefault(n, []).append(pair)
    return by_node


def carriers(ranks: dict) -> dict:
    """{node: its peers} for each node in two or more pairs that are bad (rank > 0) and equally bad in every one."""
    out = {}
    for node, pairs in _pairs_of(ranks).items():
        if len(pairs) >= 2 and ranks[pairs[0]] > 0 and all(ranks[p] == ranks[pairs[0]] for p in pairs):
            out[node] = tuple(sorted({x for p in pairs for x in p} - {node}))
    return out


def blame(ranks: dict) -> dict:
    """{pair: Blame} for every pair ranked above 0 in ``ranks`` ({pair: 0 good, higher worse})."""
    by_node, carrying = _pairs_of(ranks), carriers(ranks)
    out = {}
    for pair, rank in ranks.items():
        if rank <= 0:
            continue
        guilty = [n for n in pair if n in carrying]
        if len(guilty) == 1:
            out[pair] = Blame("node", (guilty[0],), carrying[guilty[0]])
        elif not guilty and all(any(ranks[q] < rank for q in by_node[n] if q != pair) for n in pair):
            out[pair] = Blame("path", tuple(pair))
        else:
            out[pair] = Blame("pair", tuple(pair), untested=not guilty and any(len(by_node[n]) < 2 for n in pair))
    return out


@dataclass
class Finding:
    """A conclusion about where a fault is: ``kind`` names it (node, node-fabric, pair, ...), ``nodes`` carry it."""

    kind: str
    nodes: tuple
    message: str
    evidence: dict = field(default_factory=dict)


def tail(text: str, lines: int = 8) -> str:
    """The last ``lines`` lines of a tool's output (stripped), for evidence and one-line reasons."""
    return "\n".join((text or "").strip().splitlines()[-lines:])
