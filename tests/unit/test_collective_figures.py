"""Collective arithmetic (nccl-tests' algbw/busbw), EP-dispatch sizes, the worker's all-to-all splits."""
from __future__ import annotations

import pytest

from k3doctor.parsers.nccl_tests import parse_perf
from k3doctor.probes.collective_figures import (
    ALL_REDUCE,
    ALL_TO_ALL,
    WIRE_BYTES_PER_TOKEN,
    bus_factor,
    busbw_gbs,
    byte_sizes,
    ep_dispatch_sizes,
    figures,
    geometric,
    side_by_side,
)
from k3doctor.remote.allreduce_worker import a2a_code, split_units
from k3doctor.results import human_bytes as human
from tests.corpus import load


@pytest.mark.parametrize("world, all_reduce, all_to_all", [(1, 0.0, 0.0), (2, 1.0, 0.5), (4, 1.5, 0.75),
                                                           (16, 1.875, 0.9375)])
def test_bus_factors_are_nccl_tests(world, all_reduce, all_to_all):
    assert bus_factor(ALL_REDUCE, world) == all_reduce
    assert bus_factor(ALL_TO_ALL, world) == all_to_all


def test_bus_factor_rejects_nonsense():
    with pytest.raises(ValueError):
        bus_factor(ALL_REDUCE, 0)
    with pytest.raises(ValueError):
        bus_factor("broadcast", 2)
    with pytest.raises(ValueError):
        busbw_gbs(ALL_REDUCE, 1 << 20, 0.0, 2)


def test_figures_reproduce_an_nccl_tests_row():
    # corpus: 4 ranks (2 nodes x 2 H100), 8 GiB in place in 87098 us: nccl-tests printed algbw 98.62, busbw 147.94
    result = parse_perf(load("nccl-tests-allreduce-h100-2node.txt"))
    row = result.row(8 << 30).in_place
    got = figures(ALL_REDUCE, 8 << 30, row.time_us, 4)
    assert got["algbw_gbs"] == pytest.approx(row.algbw, abs=0.01)
    assert got["busbw_gbs"] == pytest.approx(row.busbw, abs=0.01)
    a2a = figures(ALL_TO_ALL, 1 << 30, 10_000.0, 8)  # 1 GiB per rank in 10 ms: algbw 107.37, x 7/8
    assert (a2a["time_us"], a2a["algbw_gbs"], a2a["busbw_gbs"]) == (10_000.0, 107.374, 93.952)


def test_ep_dispatch_sizes_use_the_wire_bytes_of_section_19():
    assert WIRE_BYTES_PER_TOKEN == {"bf16": 14336, "fp8": 7424, "fp4": 3840}
    sizes = ep_dispatch_sizes(16, 64, 2, ["fp4", "bf16"])
    assert sizes == ((16 * 3840, 3840, "16 tok fp4"), (32 * 3840, 3840, "32 tok fp4"), (64 * 3840, 3840, "64 tok fp4"),
                     (16 * 14336, 14336, "16 tok bf16"), (32 * 14336, 14336, "32 tok bf16"),
                     (64 * 14336, 14336, "64 tok bf16"))
    with pytest.raises(ValueError, match="unknown wire format 'fp6'"):
        ep_dispatch_sizes(1, 2, 2, ["fp6"])
    assert byte_sizes(64 << 10, 256 << 10, 2) == ((64 << 10, 1, ""), (128 << 10, 1, ""), (256 << 10, 1, ""))
    assert geometric(3, 3, 2) == (3,) and geometric(4, 3, 2) == ()
    with pytest.raises(ValueError):
        geometric(0, 8, 2)
    assert (human(64 << 10), human(4 << 30), human(3840)) == ("64 KiB", "4 GiB", "3840 B")


@pytest.mark.parametrize("world", [1, 2, 3, 4, 16])
@pytest.mark.parametrize("uneven", [False, True])
@pytest.mark.parametrize("total", [0, 1, 7, 16, 1000])
def test_splits_sum_to_the_payload_and_every_rank_agrees_on_them(world, uneven, total):
    rows = [split_units(total, world, src, uneven) for src in range(world)]
    assert all(len(r) == world and sum(r) == total and min(r) >= 0 for r in rows)
    received = [sum(rows[src][dst] for src in range(world)) for dst in range(world)]
    assert sum(received) == total * world
    assert max(received) < 2 * max(total, 1)  # what the worker's receive buffer (2 x payload) can hold
    if not uneven:
        assert max(max(r) for r in rows) - min(min(r) for r in rows) <= 1


def test_uneven_splits_differ_by_peer_like_routed_tokens():
    row = split_units(1000, 4, 0, uneven=True)
    assert row == [100, 200, 300, 400]
    assert split_units(1000, 4, 1, uneven=True) == [200, 300, 400, 100]
    assert split_units(10, 4, 0, uneven=False) == [3, 3, 2, 2]


def test_a2a_codes_tell_every_sender_receiver_pair_apart_and_are_never_zero():
    codes = {(s, d): a2a_code(s, d, 16) for s in range(16) for d in range(16)}
    assert 0 not in codes.values() and max(codes.values()) <= 255
    assert len(set(codes.values())) == 255  # 256 pairs on 255 byte values: one pair repeats, never a neighbour
    assert all(codes[(s, d)] != codes[(s, d + 1)] and codes[(s, d)] != codes[(s + 1, d)]
               for s in range(15) for d in range(15))


def test_side_by_side_ratio_is_time_ratio_at_common_sizes():
    ref = {1 << 20: (16.6, 63.0), 2 << 20: (30.0, 70.0)}
    rows = [{"bytes": 1 << 20, "time_us": 20.0, "busbw_gbs": 52.4}, {"bytes": 4 << 20, "time_us": 1.0, "busbw_gbs": 1}]
    assert side_by_side(ref, rows) == [(1 << 20, 16.6, 63.0, 52.4, 0.83)]
