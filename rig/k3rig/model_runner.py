"""One DP rank's ModelRunner for py-spy to read (reference §20), beside the engine fake (model_server.py
``--runners``): a real Python process titled ``ATOM::DP<n>TP0``, as ATOM's setproctitle names it.

A serving rank waits for its batches in ``as_completed`` (triage's idle class); a rank the control file stalls
(``{"stall": [ranks]}``, the same file as atom_engine.py's) sits in a mori dispatch (mori_ops.py: the wide-EP
all-to-all a hung rank is found in, §20) until the stall is lifted. The runner ends with its engine (it polls
its parent), as ATOM's workers do. Standalone on purpose: run as a script, so its title is its argv[0].

    python3 model_runner.py RANK CONTROL PARENT_PID
"""
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

import mori_ops


def stalled(rank: int, control: str) -> bool:
    try:
        with open(control) as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and rank in doc.get("stall", [])


def wait_for_batch(pool) -> None:
    for _ in as_completed([pool.submit(time.sleep, 0.2)]):
        pass


def main() -> None:
    rank, control, parent = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    with ThreadPoolExecutor(1) as pool:
        while os.getppid() == parent:
            if stalled(rank, control):
                mori_ops.dispatch(lambda: stalled(rank, control) and os.getppid() == parent)
            else:
                wait_for_batch(pool)


if __name__ == "__main__":
    if not sys.orig_argv[0].startswith("ATOM::"):
        os.execv(sys.executable, [f"ATOM::DP{sys.argv[1]}TP0", os.path.abspath(__file__), *sys.argv[1:]])
    main()
