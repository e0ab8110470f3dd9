"""Real `py-spy dump` of real Python processes stuck in known functions, classified (§20)."""
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from k3doctor.parsers import ParseError
from k3doctor.parsers.pyspy import parse_dump
from k3doctor.triage.rank_logs import Layout
from k3doctor.triage.stacks import classify, judge_stacks, rank_of

PY_SPY = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
STUCK = Path(__file__).resolve().parents[1] / "stuck_ranks.py"
pytestmark = pytest.mark.skipif(not Path(PY_SPY).exists(), reason="py-spy is not installed")


def dump_of(rank: int, where: str) -> str:
    proc = subprocess.Popen(["/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable,
                             str(STUCK), str(rank), where])
    try:
        deadline = time.monotonic() + 60
        while True:  # until py-spy sees the stuck frame (the interpreter needs a moment to get there)
            out = subprocess.run([PY_SPY, "dump", "--pid", str(proc.pid)], capture_output=True, text=True,
                                 timeout=30).stdout
            if ("ncclCommInitRank" in out or "as_completed" in out) or time.monotonic() > deadline \
                    or proc.poll() is not None:
                return out
            time.sleep(0.5)
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_rank_stuck_in_ncclCommInitRank_is_a_collective_hang():
    (proc,) = parse_dump(dump_of(5, "nccl"))
    assert rank_of(proc.command) == 5
    assert classify(proc) == "collective-init"
    assert proc.threads[0].frames[0][0] == "ncclCommInitRank"


def test_a_rank_idle_in_as_completed_is_healthy_and_an_odd_one_is_named():
    idle, stuck = parse_dump(dump_of(0, "idle"))[0], parse_dump(dump_of(1, "nccl"))[0]
    assert classify(idle) == "idle-as-completed"
    import copy
    procs = [idle] + [copy.deepcopy(idle) for _ in range(2)] + [stuck]
    for i, p in enumerate(procs):
        p.command = f"ATOM::DP{i}TP0"
    verdicts = judge_stacks(procs, Layout(("ct13",)))
    assert [(v.status.value, v.evidence["rank"], v.remediation) for _, v in verdicts] == [
        ("FAIL", 3, "TRIAGE-COLLECTIVE-HANG")]


@pytest.mark.parametrize("text", ["", "garbage", "Process 12: ATOM::DP0TP0\nPython v3.11\n",
                                  "Thread 1 (idle)\n    f (a.py:1)\n"])
def test_dumps_without_a_stack_are_parse_errors(text):
    with pytest.raises(ParseError):
        parse_dump(text)
