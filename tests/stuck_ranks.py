"""Real Python processes stuck where ATOM ranks get stuck (§20), named like ModelRunners (`ATOM::DP<n>TP0`).

``python3 tests/stuck_ranks.py RANK WHERE`` re-executes the interpreter with argv[0] set to the process
title, then blocks in a function of the name py-spy will show. Used by the py-spy tests.
"""
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed


def ncclCommInitRank():  # noqa: N802 -- the name is what is being recognised
    while True:
        time.sleep(0.05)


def init_model_parallel_group():
    ncclCommInitRank()


def wait_for_shards():
    with ThreadPoolExecutor(1) as pool:
        for _ in as_completed([pool.submit(time.sleep, 3600)]):
            pass


WHERE = {"nccl": init_model_parallel_group, "idle": wait_for_shards}

if __name__ == "__main__":
    rank, where = sys.argv[1], sys.argv[2]
    if not sys.orig_argv[0].startswith("ATOM::"):
        os.execv(sys.executable, [f"ATOM::DP{rank}TP0", os.path.abspath(__file__), rank, where])
    WHERE[where]()
