"""The probe kit both deep probes share: rounds of node-disjoint pairs, node-vs-pair blame, tails."""
from itertools import combinations

import pytest

from k3doctor.probes.kit import Blame, blame, carriers, every_pair, pair_rounds, rounds, tail


def disjoint(rnd) -> bool:
    members = [n for p in rnd for n in p]
    return len(members) == len(set(members))


def test_rounds_keep_plan_order_and_never_share_a_node():
    ring = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")]
    assert rounds(ring) == [[("a", "b"), ("c", "d")], [("b", "c"), ("d", "a")]]
    assert rounds([]) == []
    assert rounds([("a", "b"), ("a", "c"), ("a", "d")]) == [[("a", "b")], [("a", "c")], [("a", "d")]]


@pytest.mark.parametrize("n", range(2, 10))
def test_every_pair_once_in_the_fewest_rounds(n):
    nodes = [f"n{i}" for i in range(n)]
    assert sorted(every_pair(nodes)) == sorted(combinations(nodes, 2))
    got = pair_rounds(nodes)
    assert all(disjoint(r) for r in got)
    assert len(got) == (n - 1 if n % 2 == 0 else n)  # a perfect schedule: no round idles a node it could use


def test_a_node_bad_with_every_peer_carries_the_fault():
    ranks = {("a", "b"): 0, ("b", "c"): 2, ("c", "d"): 2, ("d", "a"): 0}
    assert carriers(ranks) == {"c": ("b", "d")}
    on_c = Blame("node", ("c",), ("b", "d"))
    assert blame(ranks) == {("b", "c"): on_c, ("c", "d"): on_c}


def test_a_bad_pair_between_nodes_good_elsewhere_is_the_path():
    ranks = {("a", "b"): 0, ("b", "c"): 2, ("c", "d"): 0, ("d", "a"): 0}
    assert carriers(ranks) == {}
    assert blame(ranks) == {("b", "c"): Blame("path", ("b", "c"))}


def test_slow_everywhere_is_a_rank_of_its_own_and_mixed_ranks_carry_nothing():
    slow = {("a", "b"): 0, ("b", "c"): 0, ("c", "d"): 1, ("d", "a"): 1}
    assert carriers(slow) == {"d": ("a", "c")}
    mixed = {("a", "b"): 0, ("b", "c"): 2, ("c", "d"): 1, ("d", "a"): 0}
    assert carriers(mixed) == {}
    assert blame(mixed)[("b", "c")] == Blame("path", ("b", "c"))  # b and c each did better with another peer


def test_a_lone_pair_cannot_be_pinned_and_two_carriers_share_it():
    assert blame({("a", "b"): 2}) == {("a", "b"): Blame("pair", ("a", "b"), untested=True)}
    triangle = {("a", "b"): 2, ("b", "c"): 2, ("a", "c"): 2}
    assert set(carriers(triangle)) == {"a", "b", "c"}
    assert {b.on for b in blame(triangle).values()} == {"pair"}
    assert not any(b.untested for b in blame(triangle).values())


def test_tail_keeps_the_last_lines_of_stripped_output():
    assert tail("\n one\ntwo\nthree\n\n", 2) == "two\nthree"
    assert tail("", 3) == "" and tail(None) == ""
