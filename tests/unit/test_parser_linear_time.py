"""One long garbled line costs every parser linear time (it cost seconds with backtracking regexes:
a 40 kB line took 44 s in amd-smi's key pattern, 47 s in rocm-smi's, 19 s in torch's rank tag).

The inputs here are 400 kB, ten times that: quadratic patterns would need minutes, linear ones take
milliseconds, so the generous bound below only trips on a quadratic regression, never on a slow box.
"""
import time

import pytest
from k3doctor.checks.shm import stale_entries

from k3doctor.parsers import ParseError
from k3doctor.parsers.amdsmi import parse_fabric, parse_static_vram
from k3doctor.parsers.nccl_tests import parse_perf
from k3doctor.parsers.rocmsmi import parse_showmemuse, parse_showpids
from k3doctor.parsers.torch_errors import classify

N = 400_000
BOUND_S = 10.0  # a quadratic pattern on 400 kB runs for minutes to hours


@pytest.mark.parametrize("parse, text", [
    (lambda t: parse_showmemuse(t, 1), "GPU[0] : a: b" + " " * N + "x\n"),
    (lambda t: parse_showmemuse(t, 1), "=" + " " * N + "x=\n"),
    (parse_showpids, "PID " + "PROCESS NAME " * (N // 13) + "\n"),
    (parse_static_vram, "GPU: 0\n    VRAM: a" + " " * N + "b\n"),
    (parse_fabric, "GPU: 0\n    FABRIC_INFO:\n        PPOD_ID:" + " \t" * (N // 2) + "x\n"),
    (parse_static_vram, "[\n" * (N // 2)),
    (parse_perf, "#  Rank  " + "1" * N + "\n"),
    (parse_perf, "#       size         count\n" + "1" * N + "\n"),
    (classify, "[PG 1 " * (N // 6) + "\n"),
    (classify, "[Rank 0] " * (N // 9) + "\n"),
    (classify, "[Rank 0] last enqueued work: 1, " * (N // 32) + "\n"),
    (classify, "Call to recv from " + "x" * N + "\n"),
    (stale_entries, "4096\tpsm_" + "\t" * N + "\0"),
], ids=["rocm-field", "rocm-spacer", "rocm-pids", "amd-static-key", "amd-fabric-key", "amd-json-nesting",
        "nccl-rank", "nccl-row", "torch-pg-tag", "torch-rank-tag", "torch-progress", "torch-recv", "shm"])
def test_a_long_line_costs_linear_time(parse, text):
    started = time.monotonic()
    try:
        parse(text)
    except ParseError:
        pass
    assert time.monotonic() - started < BOUND_S
